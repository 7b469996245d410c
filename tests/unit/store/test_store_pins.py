"""Pins by key and prefix, at any time; soft TTLs; precedence; put-time pins."""

from __future__ import annotations

import pytest
from store_unit_support import MakeMaster

from mooncake_core.store import (
    ErrorCode,
    InvalidArgumentError,
    MasterState,
    NotFoundError,
    ObjectPinned,
    ObjectUnpinned,
    Pin,
    PinLevel,
    ReplicateConfig,
)


def with_keys(make_master: MakeMaster, *keys: str) -> MasterState:
    m = make_master([("s", "c1", 10_000)], soft_pin_ttl_s=100.0)
    for k in keys:
        m.put_start(k, 10, "c1", 0.0)
        m.put_end(k, 0.0)
    m.take_events()
    return m


def test_key_pin_after_write_and_ttl(make_master: MakeMaster) -> None:
    m = with_keys(make_master, "a")
    assert m.pin_level("a", 0.0) == PinLevel.NONE
    pin = m.pin("a", 1.0, ttl_s=5.0)
    assert pin == Pin("a", False, False, 6.0)
    assert m.pin_level("a", 5.999) == PinLevel.SOFT
    assert m.pin_level("a", 6.0) == PinLevel.NONE
    assert m.expire_pins(6.0) == [pin]
    assert m.take_events() == [
        ObjectPinned(1.0, "a", False, False, 6.0),
        ObjectUnpinned(6.0, "a", False, expired=True),
    ]


def test_default_soft_ttl_from_config(make_master: MakeMaster) -> None:
    m = with_keys(make_master, "a")
    assert m.pin("a", 2.0).expires_at == 102.0


def test_prefix_pin_covers_later_writes(make_master: MakeMaster) -> None:
    m = with_keys(make_master, "sys/0", "user/0")
    m.pin("sys/", 1.0, prefix=True, hard=True)
    m.put_start("sys/1", 10, "c1", 2.0)
    m.put_end("sys/1", 2.0)
    assert m.pin_level("sys/0", 3.0) == PinLevel.HARD
    assert m.pin_level("sys/1", 3.0) == PinLevel.HARD
    assert m.pin_level("user/0", 3.0) == PinLevel.NONE
    m.unpin("sys/", 4.0, prefix=True)
    assert m.pin_level("sys/1", 4.0) == PinLevel.NONE


def test_strongest_covering_pin_wins(make_master: MakeMaster) -> None:
    m = with_keys(make_master, "p/a")
    m.pin("p/a", 0.0, ttl_s=10.0)
    m.pin("p/", 0.0, prefix=True, hard=True)
    assert m.pin_level("p/a", 1.0) == PinLevel.HARD
    m.unpin("p/", 1.0, prefix=True)
    assert m.pin_level("p/a", 1.0) == PinLevel.SOFT
    m.pin("p", 1.0, prefix=True, ttl_s=50.0)
    assert m.stat("p/a", 2.0).pin_remaining_s == 49.0  # longest soft pin counts
    m.unpin("p/a", 2.0)
    assert m.pin_level("p/a", 2.0) == PinLevel.SOFT  # the prefix still covers it


def test_pin_errors_leave_nothing(make_master: MakeMaster) -> None:
    m = with_keys(make_master, "a")
    with pytest.raises(NotFoundError) as ei:
        m.pin("missing", 0.0)
    assert ei.value.code == ErrorCode.OBJECT_NOT_FOUND
    with pytest.raises(InvalidArgumentError, match="hard pin has no TTL"):
        m.pin("a", 0.0, hard=True, ttl_s=5.0)
    with pytest.raises(InvalidArgumentError, match="positive"):
        m.pin("a", 0.0, ttl_s=0.0)
    with pytest.raises(InvalidArgumentError, match="empty prefix"):
        m.pin("", 0.0, prefix=True)
    with pytest.raises(NotFoundError) as ei:
        m.unpin("a", 0.0)
    assert ei.value.code == ErrorCode.PIN_NOT_FOUND
    assert m.list_pins(0.0) == [] and m.take_events() == []


def test_put_time_pins(make_master: MakeMaster) -> None:
    m = with_keys(make_master)
    m.put_start("h", 10, "c1", 0.0, ReplicateConfig(hard_pin=True))
    m.put_start("s", 10, "c1", 0.0, ReplicateConfig(soft_pin=True))
    m.put_start("t", 10, "c1", 0.0, ReplicateConfig(soft_pin=True, soft_pin_ttl_s=7.0))
    assert m.list_pins(1.0) == [
        Pin("h", False, True, None),
        Pin("s", False, False, 100.0),
        Pin("t", False, False, 7.0),
    ]
    with pytest.raises(InvalidArgumentError, match="exclusive"):
        m.put_start("x", 10, "c1", 0.0, ReplicateConfig(soft_pin=True, hard_pin=True))
    m.put_revoke("t", 1.0)  # a pin belongs to its object
    assert [p.target for p in m.list_pins(1.0)] == ["h", "s"]


def test_list_pins_order_and_counts(make_master: MakeMaster) -> None:
    m = with_keys(make_master, "b", "a")
    m.pin("z/", 0.0, prefix=True)
    m.pin("b", 0.0, hard=True)
    m.pin("a", 0.0)
    assert [(p.target, p.is_prefix) for p in m.list_pins(0.0)] == [
        ("a", False),
        ("b", False),
        ("z/", True),
    ]
    snap = m.snapshot()
    assert (snap.key_pins, snap.prefix_pins) == (2, 1)
    m.remove("b", 1.0)
    assert m.snapshot().key_pins == 1
