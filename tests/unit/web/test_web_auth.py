"""SessionStore: the token check, sessions, expiry and CSRF (no clock, no IO)."""

from __future__ import annotations

import pytest

from mooncake_core.store.auth import control_token
from mooncake_web.auth import SessionStore

TOKEN = control_token(b"s3cret")


def test_login_needs_the_exact_token() -> None:
    st = SessionStore(TOKEN, ttl_s=60)
    assert st.enabled
    assert st.login("nope", now=0) is None
    assert st.login(TOKEN[:-1], now=0) is None
    s = st.login(f"  {TOKEN}\n", now=0)  # pasted with whitespace
    assert s is not None and s.expires_at == 60
    assert st.get(s.sid, now=59.9) == s


def test_no_secret_means_no_session() -> None:
    st = SessionStore(None, ttl_s=60)
    assert not st.enabled
    assert st.login(TOKEN, now=0) is None


def test_session_expires_and_logout() -> None:
    st = SessionStore(TOKEN, ttl_s=10)
    a = st.login(TOKEN, now=0)
    b = st.login(TOKEN, now=5)
    assert a is not None and b is not None and a.sid != b.sid and a.csrf != b.csrf
    assert st.get(a.sid, now=10) is None  # expired exactly at expires_at
    assert st.get(b.sid, now=10) == b
    st.logout(b.sid)
    assert st.get(b.sid, now=10) is None
    st.logout("unknown")  # no error
    assert st.get(None, now=0) is None and st.get("", now=0) is None


def test_csrf_is_per_session() -> None:
    st = SessionStore(TOKEN, ttl_s=60)
    a = st.login(TOKEN, now=0)
    b = st.login(TOKEN, now=0)
    assert a is not None and b is not None
    assert st.check_csrf(a, a.csrf)
    assert not st.check_csrf(a, b.csrf)
    assert not st.check_csrf(a, None)
    assert not st.check_csrf(a, "")


def test_oldest_sessions_dropped_beyond_cap() -> None:
    st = SessionStore(TOKEN, ttl_s=60, max_sessions=2)
    s = [st.login(TOKEN, now=i) for i in range(3)]
    assert all(x is not None for x in s)
    assert [st.get(x.sid, now=3) is not None for x in s if x] == [False, True, True]


def test_ttl_must_be_positive() -> None:
    with pytest.raises(ValueError, match="ttl_s must be > 0, got 0"):
        SessionStore(TOKEN, ttl_s=0)
