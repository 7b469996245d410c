"""Exact eviction orders of the endpoint pool policies."""

from __future__ import annotations

import pytest

from mooncake_core.transfer.sieve import Fifo, Sieve, make_policy


def _run(policy):
    evicted = []
    for key in "ABC":
        assert policy.insert(key) is None
    policy.access("A")
    evicted.append(policy.insert("D"))
    evicted.append(policy.insert("E"))
    policy.access("A")
    policy.access("D")
    evicted.append(policy.insert("F"))
    evicted.append(policy.insert("G"))
    return evicted


def test_sieve_eviction_order():
    s = Sieve(3)
    assert _run(s) == ["B", "C", "E", "D"]
    assert s.keys() == ["A", "F", "G"]


def test_fifo_eviction_order():
    f = Fifo(3)
    assert _run(f) == ["A", "B", "C", "D"]
    assert f.keys() == ["E", "F", "G"]


def test_sieve_keeps_a_hot_key_fifo_does_not():
    s, f = Sieve(2), Fifo(2)
    for p in (s, f):
        p.insert("hot")
        for i in range(5):
            p.access("hot")
            p.insert(f"cold{i}")
    assert "hot" in s and "hot" not in f


def test_remove_and_reinsert():
    s = Sieve(2)
    s.insert("a")
    s.insert("b")
    s.remove("a")
    s.remove("missing")
    assert s.keys() == ["b"] and len(s) == 1
    assert s.insert("c") is None
    assert s.insert("a") == "b"
    assert s.insert("a") is None  # present: a hit, not an insert


def test_hand_removed_while_pointing_at_it():
    s = Sieve(3)
    for k in "abc":
        s.insert(k)
    s.access("a")
    assert s.insert("d") == "b"  # hand now at c
    s.remove("c")
    assert s.insert("e") is None  # room after the removal
    assert s.insert("f") == "d"  # a was visited (cleared in the first walk); d is next


def test_registry_and_bad_input():
    assert isinstance(make_policy("sieve", 4), Sieve)
    assert isinstance(make_policy("fifo", 4), Fifo)
    with pytest.raises(ValueError, match="lru"):
        make_policy("lru", 4)
    with pytest.raises(ValueError, match="capacity"):
        Sieve(0)
