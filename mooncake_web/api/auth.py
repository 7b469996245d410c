"""``/api/auth``: log in with the cluster token, log out, read the session."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, Response
from pydantic import BaseModel, Field

from ..auth import COOKIE, CSRF_HEADER
from ..deps import BackendDep, SessionDep, SessionsDep, WriteAccess

router = APIRouter(prefix="/api/auth", tags=["auth"])


class LoginBody(BaseModel):
    """The cluster control token (``mooncake web --print-token``)."""

    token: str = Field(min_length=1, max_length=512)


class SessionInfo(BaseModel):
    """Whether the caller is logged in, and the CSRF token to send with actions."""

    logged_in: bool
    csrf: str | None = None
    csrf_header: str = CSRF_HEADER
    anonymous_read: bool
    login_possible: bool
    expires_at: float | None = None


@router.post("/login", response_model=SessionInfo)
async def login(
    body: LoginBody,
    request: Request,
    response: Response,
    sessions: SessionsDep,
    backend: BackendDep,
) -> SessionInfo:
    """Open a session: sets an HttpOnly, SameSite=Strict cookie and returns the CSRF token.

    401 for a wrong token; 503 when the cluster has no secret (nobody can log in).
    """
    if not sessions.enabled:
        raise HTTPException(
            503, f"no cluster secret at {backend.secret_path}: actions are disabled"
        )
    s = sessions.login(body.token, backend.now())
    if s is None:
        raise HTTPException(401, "wrong cluster token")
    response.set_cookie(
        COOKIE,
        s.sid,
        max_age=int(s.expires_at - backend.now()),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return SessionInfo(
        logged_in=True,
        csrf=s.csrf,
        anonymous_read=request.app.state.web.anonymous_read,
        login_possible=True,
        expires_at=s.expires_at,
    )


@router.post("/logout", status_code=204, response_model=None)
async def logout(session: WriteAccess, sessions: SessionsDep, response: Response) -> None:
    """Close the session (needs the CSRF token like every action)."""
    sessions.logout(session.sid)
    response.delete_cookie(COOKIE, path="/")


@router.get("/session", response_model=SessionInfo)
async def session_info(request: Request, session: SessionDep, sessions: SessionsDep) -> SessionInfo:
    """The caller's session (never 401: the login page reads it)."""
    return SessionInfo(
        logged_in=session is not None,
        csrf=session.csrf if session else None,
        anonymous_read=request.app.state.web.anonymous_read,
        login_possible=sessions.enabled,
        expires_at=session.expires_at if session else None,
    )
