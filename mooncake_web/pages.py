"""HTML pages: one shell (``static/page.html``) filled with the page's name and title.

The pages hold no data; their script reads the JSON API and the SSE stream. Without
``anonymous_read`` a page request without a session is sent to the login page.
"""

from __future__ import annotations

from html import escape
from importlib import resources

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from .auth import COOKIE

__all__ = ["PAGES", "router"]

PAGES: dict[str, str] = {
    "overview": "Overview",
    "store": "Store",
    "network": "Network",
    "scheduler": "Scheduler",
    "audit": "Audit explorer",
    "nodes": "Nodes",
    "login": "Log in",
}
"""Page name -> title; the name is also the script ``static/js/<name>.js``."""

router = APIRouter(include_in_schema=False)


def _shell() -> str:
    return resources.files("mooncake_web").joinpath("static/page.html").read_text()


def _render(page: str) -> HTMLResponse:
    nav = "".join(
        f'<a href="{"/" if p == "overview" else "/" + p}"'
        f'{" class=active" if p == page else ""} data-page="{p}">{escape(t)}</a>'
        for p, t in PAGES.items()
        if p != "login"
    )
    html = (
        _shell()
        .replace("{{page}}", page)
        .replace("{{title}}", escape(PAGES[page]))
        .replace("{{nav}}", nav)
    )
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})


def _page(page: str):
    async def handler(request: Request) -> Response:
        web = request.app.state.web
        sid = request.cookies.get(COOKIE)
        if (
            page != "login"
            and not web.anonymous_read
            and web.sessions.get(sid, web.backend.now()) is None
        ):
            return RedirectResponse(f"/login?next={request.url.path}", status_code=303)
        return _render(page)

    handler.__name__ = f"page_{page}"
    return handler


for _name in PAGES:
    router.add_api_route("/" if _name == "overview" else f"/{_name}", _page(_name), methods=["GET"])


@router.get("/health")
async def health() -> dict[str, str]:
    """Readiness probe of ``mooncake cluster up``."""
    return {"status": "ok"}
