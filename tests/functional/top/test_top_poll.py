"""poll_target over real loopback sockets: fallbacks and the reasons a poll fails."""

from __future__ import annotations

import socket
import time

from mooncake_core.telemetry import (
    ComponentInfo,
    Target,
    TelemetryRegistry,
    poll_target,
    serve_telemetry,
)


def _registry() -> TelemetryRegistry:
    return TelemetryRegistry(ComponentInfo("x", "transfer"), os_counters=None)


def test_telemetry_then_health_fallback():
    reg = _registry()
    with serve_telemetry(reg) as srv:
        r = poll_target(Target("x", "transfer", srv.url), 2.0)
        assert r.ok and r.telemetry is not None and r.telemetry["component"]["name"] == "x"
    # A server without /telemetry (404) is still up through /health.
    no_tel = {"/telemetry": lambda: (404, "text/plain", b"no")}
    with serve_telemetry(reg, extra_routes=no_tel) as srv:
        r = poll_target(Target("x", "store", srv.url), 2.0)
        assert (
            r.ok
            and r.telemetry is None
            and r.health == {"status": "ok", "name": "x", "role": "transfer"}
        )


def test_refused_and_http_error_and_bad_schema():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = poll_target(Target("gone", "store", f"http://127.0.0.1:{port}"), 1.0)
    assert not r.ok and r.error == "refused"
    broken = {"/telemetry": lambda: (503, "text/plain", b"busy")}
    with serve_telemetry(_registry(), extra_routes=broken) as srv:
        assert poll_target(Target("b", "transfer", srv.url), 2.0).error == "HTTP 503"
    wrong = {"/telemetry": lambda: (200, "application/json", b'{"schema": "other/9"}')}
    with serve_telemetry(_registry(), extra_routes=wrong) as srv:
        r = poll_target(Target("w", "transfer", srv.url), 2.0)
        assert not r.ok and "unsupported telemetry schema" in (r.error or "")


def test_hung_component_times_out_within_the_timeout():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)  # accepts (kernel backlog) but never answers
        port = s.getsockname()[1]
        start = time.monotonic()
        r = poll_target(Target("hung", "store", f"http://127.0.0.1:{port}"), 0.3)
        elapsed = time.monotonic() - start
    assert not r.ok and r.error == "timed out"
    assert elapsed < 5


def test_http_server_without_telemetry_or_health_is_up():
    nothing = {
        "/telemetry": lambda: (404, "text/plain", b""),
        "/health": lambda: (404, "text/plain", b""),
    }
    with serve_telemetry(_registry(), extra_routes=nothing) as srv:
        r = poll_target(Target("web", "dashboard", srv.url), 2.0)
    assert r.ok and r.health is None and r.telemetry is None


async def test_a_view_that_arrives_after_exit_is_dropped() -> None:
    # The poll worker can post its last ViewUpdated while the app shuts down; handling it
    # with no screen on the stack raised ScreenStackError (seen in a pilot test).
    from typing import cast

    from mooncake_cli.top import TopApp
    from mooncake_cli.top.messages import ViewUpdated
    from mooncake_core.telemetry import ClusterView, Collector

    app = TopApp(Collector([], timeout_s=0.5), interval_s=60.0)
    async with app.run_test(size=(80, 24)):
        pass
    assert not app.screen_stack
    app.on_view_updated(ViewUpdated(cast(ClusterView, object())))
