"""Input checks of the API (prefix, regex, page size) and the Overview alerts."""

from __future__ import annotations

import pytest
from fastapi import HTTPException

from mooncake_core.telemetry import (
    ClusterView,
    NicView,
    NodeView,
    SchedulerView,
    SegmentView,
    StoreView,
)
from mooncake_web.alerts import alerts
from mooncake_web.api.errors import check_limit, check_prefix, compile_regex, node_of
from mooncake_web.options import WebOptions


def test_prefix_checks() -> None:
    assert check_prefix("web/a b") == "web/a b"
    with pytest.raises(HTTPException) as e:
        check_prefix("a\tb")
    assert e.value.status_code == 422 and "'\\t'" in str(e.value.detail)
    with pytest.raises(HTTPException, match="1025 characters; at most 1024"):
        check_prefix("x" * 1025)


def test_regex_and_limit() -> None:
    assert compile_regex("^a.*b$").search("axb")
    with pytest.raises(HTTPException) as e:
        compile_regex("a(")
    assert e.value.status_code == 422 and "malformed regex 'a('" in str(e.value.detail)
    assert check_limit(100, 100) == 100
    with pytest.raises(HTTPException, match="limit 101 is over the cap of 100 per page"):
        check_limit(101, 100)
    with pytest.raises(HTTPException, match="limit must be >= 1, got 0"):
        check_limit(0, 100)


def test_node_of_segment() -> None:
    assert node_of("store-0") == "store-0"
    assert node_of("store-0/ssd") == "store-0"


def test_options_validated() -> None:
    with pytest.raises(ValueError, match="interval_s must be > 0"):
        WebOptions(interval_s=0)
    with pytest.raises(ValueError, match="page_cap must be >= 1"):
        WebOptions(page_cap=0)


def _view(*, up: bool = True, paused: bool = False, used: int = 10) -> ClusterView:
    node = NodeView(
        "store-0",
        "store",
        "http://x",
        up,
        None,
        None if up else "refused",
        "",
        None,
        None,
        "",
        "health",
        None,
    )
    nic = NicView(
        "te", "10.0.0.1", "eth0", 1.0, 1.0, None, None, None, 0, 0, None, paused, False, ()
    )
    seg = SegmentView("store-0", "store-0-1", "dram", "MOUNTED", 100, used, 1)
    store = StoreView(True, 100, used, 1, 0, 1, 0, 0, 0, None, None, (seg,), (("dram", 100, used),))
    sched = SchedulerView(False, "none", "", "", None, None, None, None, (), None, None, (), ())
    return ClusterView(0.0, 10.0, (node,), (nic,), (), store, sched)


def test_alerts() -> None:
    assert alerts(_view()) == []
    got = alerts(_view(up=False, paused=True, used=95))
    assert [(a.level, a.subject) for a in got] == [
        ("critical", "store-0"),
        ("critical", "te/10.0.0.1"),
        ("warning", "store-0"),
    ]
    assert "refused" in got[0].text and "95%" in got[2].text
