"""Suspect segments: out of new placements within a heartbeat, long before expiry."""

from __future__ import annotations

import itertools

import pytest
from store_unit_support import MakeMaster

from mooncake_core.store import MasterState, ReplicateConfig
from mooncake_core.store.errors import CapacityError

NODES = [("a", "c1", 10_000), ("b", "c2", 10_000), ("c", "c3", 10_000)]


def _suspects(m: MasterState) -> list[str]:
    return [s.name for s in m.snapshot().segments if s.suspect]


_keys = itertools.count()


def _placed(m: MasterState, n: int, now: float, writer: str = "w", **cfg: object) -> set[str]:
    segs: set[str] = set()
    for _ in range(n):
        reps = m.put_start(f"k{next(_keys)}", 10, writer, now, ReplicateConfig(**cfg))  # type: ignore[arg-type]
        segs |= {sl.segment for r in reps for sl in r}
    return segs


def _beat(m: MasterState, clients: tuple[str, ...], now: float) -> None:
    for c in clients:
        m.heartbeat(c, now)
    m.tick(now)


def test_missed_heartbeat_makes_a_segment_suspect_then_a_heartbeat_clears_it(
    make_master: MakeMaster,
) -> None:
    m = make_master(NODES, heartbeat_interval_s=1.0, client_ttl_s=10.0)
    _beat(m, ("c1", "c2", "c3"), 1.0)
    _beat(m, ("c1", "c3"), 2.0)
    assert _suspects(m) == []  # c2 silent 1.0 s: not yet
    _beat(m, ("c1", "c3"), 2.5)
    assert _suspects(m) == []  # silent 1.5 s: not over 1.5 x heartbeat yet
    _beat(m, ("c1", "c3"), 2.51)
    assert _suspects(m) == ["b"]
    assert _placed(m, 30, 2.6) == {"a", "c"}
    assert [s.name for s in m.snapshot().segments] == ["a", "b", "c"]  # not expired
    m.heartbeat("c2", 3.0)
    assert _suspects(m) == []
    assert _placed(m, 30, 3.0) == {"a", "b", "c"}


def test_suspects_used_only_when_too_few_healthy_segments(make_master: MakeMaster) -> None:
    m = make_master(NODES, heartbeat_interval_s=1.0, client_ttl_s=10.0)
    _beat(m, ("c1",), 2.0)
    assert _suspects(m) == ["b", "c"]
    assert _placed(m, 10, 2.0) == {"a"}
    # Two replicas need two segments: a suspect one is used rather than failing.
    assert len(_placed(m, 5, 2.0, replica_num=2)) >= 2


def test_writer_own_and_preferred_segments_stay_placeable(make_master: MakeMaster) -> None:
    m = make_master(NODES, heartbeat_interval_s=1.0, client_ttl_s=10.0)
    _beat(m, ("c1",), 2.0)
    assert _placed(m, 5, 2.0, preferred_segments=("b",)) == {"b"}
    assert _placed(m, 5, 2.0, writer="c3", local_first=True) == {"c"}


def test_avoid_places_elsewhere_and_marks_the_node_suspect_until_it_heartbeats(
    make_master: MakeMaster,
) -> None:
    m = make_master(NODES, heartbeat_interval_s=1.0, client_ttl_s=10.0)
    _beat(m, ("c1", "c2", "c3"), 1.0)
    reps = m.put_start("x", 10, "w", 1.0, ReplicateConfig(preferred_segments=("b",)), avoid=("b",))
    assert reps[0][0].segment != "b"  # even though preferred
    assert _suspects(m) == ["b"]
    assert _placed(m, 30, 1.0) == {"a", "c"}
    m.heartbeat("c2", 1.5)  # already on its way when the report came: not proof enough
    assert _suspects(m) == ["b"]
    _beat(m, ("c1", "c2", "c3"), 1.9)
    assert _suspects(m) == ["b"]
    m.heartbeat("c2", 2.0)  # one heartbeat interval after the report
    assert _suspects(m) == []
    m.put_revoke("x", 2.0)


def test_avoid_every_segment_fails_cleanly(make_master: MakeMaster) -> None:
    m = make_master([("a", "c1", 1000)])
    with pytest.raises(CapacityError):
        m.put_start("x", 10, "w", 0.0, avoid=("a",))
    assert m.snapshot().key_count == 0
    m.put_start("y", 10, "w", 0.0, avoid=("no-such-segment",))
    assert m.snapshot().key_count == 1


def test_upsert_avoids_too(make_master: MakeMaster) -> None:
    m = make_master(NODES[:2])
    m.put_start("k", 10, "w", 0.0, ReplicateConfig(preferred_segments=("a",)))
    m.put_end("k", 0.0)
    reps = m.upsert_start("k", 10, "w", 0.1, avoid=("a",))
    assert {sl.segment for r in reps for sl in r} == {"b"}


def test_suspect_flag_crosses_the_wire(make_master: MakeMaster) -> None:
    from mooncake_core.store.convert import segment_from_pb, segment_to_pb

    m = make_master(NODES[:2])
    m.put_start("x", 10, "w", 0.0, avoid=("a",))
    snaps = m.snapshot().segments
    assert [s.suspect for s in snaps] == [True, False]
    assert [segment_from_pb(segment_to_pb(s)) for s in snaps] == list(snaps)
