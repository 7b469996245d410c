"""Dashboard sessions: login with the cluster token, per-session CSRF tokens.

The operator types the control token (``mooncake web --print-token``), which is
``HMAC-SHA256(secret, "mooncake-control")``, the same bearer token the master accepts.
The server compares it in constant time and opens a session: a random id in an
HttpOnly, SameSite=Strict cookie and a second random value, the CSRF token, that pages
read from ``/api/auth/session`` and send back in the ``X-CSRF-Token`` header of every
POST and DELETE. A cross-site page can make the browser send the cookie (not with
SameSite=Strict, but defence in depth) yet cannot read the CSRF token.

Sans-IO: the store holds no clock; callers pass ``now``.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

__all__ = ["COOKIE", "CSRF_HEADER", "Session", "SessionStore"]

COOKIE = "mooncake_session"
"""Name of the session cookie."""
CSRF_HEADER = "X-CSRF-Token"
"""Header carrying the session's CSRF token on state-changing requests."""


@dataclass(frozen=True, slots=True)
class Session:
    """One logged-in browser.

    Attributes:
        sid: Session id (the cookie value).
        csrf: CSRF token of this session.
        expires_at: Wall time after which the session is gone.
    """

    sid: str
    csrf: str
    expires_at: float


class SessionStore:
    """Checks the cluster token and keeps the sessions it opened.

    Args:
        token: Expected control token (``None``: no secret configured, login impossible).
        ttl_s: Session lifetime.
        max_sessions: Oldest sessions are dropped beyond this many.

    Raises:
        ValueError: ``ttl_s`` not positive.
    """

    def __init__(self, token: str | None, ttl_s: float, max_sessions: int = 256) -> None:
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s}")
        self._token = token.encode() if token is not None else None
        self._ttl = ttl_s
        self._max = max_sessions
        self._sessions: dict[str, Session] = {}

    @property
    def enabled(self) -> bool:
        """Whether a cluster secret exists (so a login can succeed)."""
        return self._token is not None

    def login(self, token: str, now: float) -> Session | None:
        """Open a session when ``token`` is the cluster token.

        Returns:
            The new session, or ``None`` for a wrong token or no secret.
        """
        if self._token is None:
            return None
        if not hmac.compare_digest(token.strip().encode(), self._token):
            return None
        self._expire(now)
        while len(self._sessions) >= self._max:
            del self._sessions[next(iter(self._sessions))]
        s = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), now + self._ttl)
        self._sessions[s.sid] = s
        return s

    def get(self, sid: str | None, now: float) -> Session | None:
        """The live session with id ``sid`` (``None``: unknown or expired)."""
        if not sid:
            return None
        s = self._sessions.get(sid)
        if s is None or s.expires_at <= now:
            self._sessions.pop(sid, None)
            return None
        return s

    def check_csrf(self, session: Session, sent: str | None) -> bool:
        """Whether ``sent`` is ``session``'s CSRF token (constant-time compare)."""
        return sent is not None and hmac.compare_digest(sent.encode(), session.csrf.encode())

    def logout(self, sid: str | None) -> None:
        """Forget session ``sid`` (no error when unknown)."""
        if sid:
            self._sessions.pop(sid, None)

    def _expire(self, now: float) -> None:
        for sid in [k for k, s in self._sessions.items() if s.expires_at <= now]:
            del self._sessions[sid]
