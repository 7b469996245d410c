"""The dashboard app factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from importlib import resources

from fastapi import FastAPI, Request, Response
from fastapi.staticfiles import StaticFiles

from mooncake_core import __version__
from mooncake_core.config import ClusterConfig

from .api import ROUTERS
from .auth import SessionStore
from .backend import Backend, read_token
from .deps import WebState
from .drains import DrainJobs
from .hosts import HostCheck, allowed_hosts
from .options import WebOptions
from .pages import router as pages_router

__all__ = ["create_app"]

_SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    # Everything is served by this app: no CDN, no inline script.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'",
}


def create_app(config: ClusterConfig, options: WebOptions | None = None) -> FastAPI:
    """Build the dashboard: JSON API under ``/api/`` (OpenAPI at ``/docs``), pages,
    static assets and the SSE stream, over a live cluster.

    Nothing is contacted until the app starts (its lifespan opens the collector thread
    and the master client on the serving event loop).

    Args:
        config: The cluster config (master address, targets, audit URL, secret path,
            ``dashboard.anonymous_read``).
        options: Dashboard options (defaults: :class:`WebOptions`).

    Returns:
        The app.

    Raises:
        ValueError: Bad options or targets, or an empty secret file.
        OSError: The secret file exists but cannot be read.
    """
    opts = options or WebOptions()
    backend = Backend(config, opts)
    token = read_token(backend.secret_path)
    anonymous = (
        config.dashboard.anonymous_read if opts.anonymous_read is None else opts.anonymous_read
    )
    state = WebState(
        backend=backend,
        sessions=SessionStore(token, opts.session_ttl_s),
        drains=DrainJobs(backend.replica_copier, refresh=backend.poll_once),
        anonymous_read=anonymous,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        backend.open()
        try:
            yield
        finally:
            await state.drains.close()
            await backend.close()

    app = FastAPI(
        title="Mooncake dashboard",
        version=__version__,
        description="Live cluster views (telemetry read-model, store, scheduler audit) and "
        "operator actions (pin, drain, undrain). Actions need a session opened with the cluster "
        "token and the session's CSRF token in the X-CSRF-Token header.",
        lifespan=lifespan,
    )
    app.state.web = state
    for r in ROUTERS:
        app.include_router(r)
    app.include_router(pages_router)
    static = resources.files("mooncake_web").joinpath("static")
    app.mount("/static", StaticFiles(directory=str(static)), name="static")
    favicon = static.joinpath("favicon.svg").read_bytes()

    @app.get("/favicon.ico", include_in_schema=False)
    async def _favicon() -> Response:
        # Browsers ask for it on every page; an SVG icon (they take it at this path too).
        return Response(favicon, media_type="image/svg+xml")

    app.add_middleware(HostCheck, allowed=_host_names(config, opts))

    @app.middleware("http")
    async def security_headers(request: Request, call_next):
        response: Response = await call_next(request)
        for k, v in _SECURITY_HEADERS.items():
            # The OpenAPI page (/docs) loads Swagger UI from a CDN; leave it its defaults.
            if k == "Content-Security-Policy" and request.url.path in ("/docs", "/redoc"):
                continue
            response.headers.setdefault(k, v)
        return response

    return app


def _host_names(config: ClusterConfig, opts: WebOptions) -> frozenset[str]:
    extra = [*config.dashboard.allowed_hosts, *opts.allowed_hosts]
    with suppress(KeyError):
        extra.append(config.host(config.dashboard.host).address)
    return allowed_hosts(opts.bind_host, extra)
