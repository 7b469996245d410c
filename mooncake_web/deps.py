"""FastAPI dependencies of the dashboard, as ``Annotated`` aliases.

``ReadAccess`` guards every read endpoint (open when ``anonymous_read``, else a session),
``WriteAccess`` every state-changing one (a session and its CSRF token, always).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from .auth import COOKIE, CSRF_HEADER, Session, SessionStore
from .backend import Backend
from .drains import DrainJobs

__all__ = [
    "BackendDep",
    "DrainsDep",
    "ReadAccess",
    "SessionDep",
    "SessionsDep",
    "WebState",
    "WriteAccess",
]


@dataclass
class WebState:
    """What the app factory puts on ``app.state.web``."""

    backend: Backend
    sessions: SessionStore
    drains: DrainJobs
    anonymous_read: bool


def _state(request: Request) -> WebState:
    st: WebState = request.app.state.web
    return st


def _backend(request: Request) -> Backend:
    return _state(request).backend


def _sessions(request: Request) -> SessionStore:
    return _state(request).sessions


def _drains(request: Request) -> DrainJobs:
    return _state(request).drains


def _session(request: Request) -> Session | None:
    st = _state(request)
    return st.sessions.get(request.cookies.get(COOKIE), st.backend.now())


def _read(request: Request) -> Session | None:
    s = _session(request)
    if s is None and not _state(request).anonymous_read:
        raise HTTPException(401, "login required: this dashboard has anonymous_read off")
    return s


def _write(request: Request) -> Session:
    st = _state(request)
    s = _session(request)
    if s is None:
        raise HTTPException(401, "login required: actions need the cluster token")
    if not st.sessions.check_csrf(s, request.headers.get(CSRF_HEADER)):
        raise HTTPException(403, f"missing or wrong CSRF token (header {CSRF_HEADER})")
    return s


BackendDep = Annotated[Backend, Depends(_backend)]
"""The backend (view, master client, audit URL)."""
SessionsDep = Annotated[SessionStore, Depends(_sessions)]
"""The session store."""
DrainsDep = Annotated[DrainJobs, Depends(_drains)]
"""Drains started from this dashboard."""
SessionDep = Annotated[Session | None, Depends(_session)]
"""The caller's session, if logged in."""
ReadAccess = Annotated[Session | None, Depends(_read)]
"""Guard of read endpoints."""
WriteAccess = Annotated[Session, Depends(_write)]
"""Guard of state-changing endpoints (session + CSRF)."""
