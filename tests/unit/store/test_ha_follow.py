"""The leader-following policy both master clients use (sans-IO, exact)."""

from __future__ import annotations

import json

import pytest

from mooncake_core.store.ha.follow import Failover, leader_address, leader_hint


def test_backoff_doubles_to_half_a_second_until_the_timeout() -> None:
    f = Failover(2.0, can_resolve=True)
    waits = [f.after_unavailable(None, t) for t in (10.0, 10.1, 10.3, 10.7, 11.2, 11.9)]
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.5, 0.5]
    assert f.after_unavailable(None, 12.0) is None  # 2 s after the first failure


def test_without_etcd_only_a_refusal_that_names_the_leader_is_followed() -> None:
    assert Failover(5.0, can_resolve=False).after_unavailable(None, 0.0) is None
    assert Failover(5.0, can_resolve=False).after_unavailable("10.0.0.2:50051", 0.0) == 0.05


def test_the_hint_comes_from_the_refusals_trailing_metadata() -> None:
    assert leader_hint((("other", "x"), ("mooncake-leader", "127.0.0.1:5"))) == "127.0.0.1:5"
    assert leader_hint((("mooncake-leader", b"127.0.0.1:6"),)) == "127.0.0.1:6"
    assert leader_hint((("mooncake-leader", ""),)) is None
    assert leader_hint(None) is None


def test_the_leader_record_in_etcd_names_its_address() -> None:
    rec = json.dumps({"id": "m1", "address": "127.0.0.1:7", "metrics": 0})
    assert leader_address(rec.encode()) == "127.0.0.1:7"
    for bad in (b"not json", b"{}", b'{"address": ""}', b"[1]"):
        with pytest.raises(ValueError, match="leader record"):
            leader_address(bad)
