"""SortedKeys: ordered iteration, prefixes, chunk splits."""

from __future__ import annotations

import random

from mooncake_core.store.keyindex import SortedKeys


def test_order_prefix_and_exclusive_start() -> None:
    s = SortedKeys()
    for k in ["b/2", "a", "b/1", "c", "b/10"]:
        s.add(k)
    assert list(s.iter_from()) == ["a", "b/1", "b/10", "b/2", "c"]
    assert list(s.iter_prefix("b/")) == ["b/1", "b/10", "b/2"]
    assert list(s.iter_from("b/10", exclusive=True)) == ["b/2", "c"]
    s.discard("b/10")
    s.discard("zzz")
    assert list(s.iter_prefix("b/")) == ["b/1", "b/2"]
    assert len(s) == 4


def test_many_keys_match_sorted() -> None:
    rng = random.Random(1)
    s = SortedKeys()
    keys = {f"k{rng.randrange(10**9):09d}" for _ in range(6000)}
    for k in keys:
        s.add(k)
    drop = set(rng.sample(sorted(keys), 2500))
    for k in drop:
        s.discard(k)
    want = sorted(keys - drop)
    assert list(s.iter_from()) == want
    assert len(s) == len(want)
    mid = want[1700]
    assert list(s.iter_from(mid, exclusive=True))[:3] == want[1701:1704]
