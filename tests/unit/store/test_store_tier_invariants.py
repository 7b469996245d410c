"""Random operation sequences with the SSD tier; metadata and journal invariants checked
after each step. Deterministic (seeded), so a failure reproduces with its seed."""

from __future__ import annotations

import itertools
import random
from collections import Counter, defaultdict

import pytest

from mooncake_core.config.models import MasterConfig
from mooncake_core.store import MasterState, ReplicateConfig, StoreError
from mooncake_core.store import events as ev
from mooncake_core.store.ha.image import MetadataImage, records_from_events
from mooncake_core.store.ha.rebuild import build_state
from mooncake_core.store.segment import SegmentSnapshot


def check(m: MasterState, now: float) -> None:
    snap = m.snapshot()
    entries = m.list_keys(limit=100_000).entries
    used: dict[str, int] = defaultdict(int)
    ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    ssd_on: dict[str, set[str]] = defaultdict(set)
    ssd_only = 0
    stages = m.tier.stages
    for e in entries:
        info = m.stat(e.key, now)
        pending = stages.get(e.key)
        # Every object has a DRAM replica, an SSD copy, or is being written.
        assert info.replicas or info.ssd_segments or info.state.name == "PROCESSING", e.key
        if info.state.name == "COMPLETE" and not info.replicas:
            ssd_only += 1
            assert info.ssd_segments, e.key
        if pending is not None:
            assert not info.replicas and pending.segment in info.ssd_segments
        for name in info.ssd_segments:
            ssd_on[name].add(e.key)
        reps = list(info.replicas) + ([pending.replica] if pending else [])
        for replica in reps:
            assert sum(s.length for s in replica) == info.size
            for s in replica:
                used[s.segment] += -(-s.length // 64) * 64
                ranges[s.segment].append((s.offset, s.offset + s.length))
    assert snap.ssd_only_count == ssd_only
    for name, off, length, _ in m.held_ranges():  # stages timed out: held for the node
        used[name] += -(-length // 64) * 64
        ranges[name].append((off, off + length))
    names = {s.name for s in snap.segments}
    for seg in snap.segments:
        assert seg.used == used[seg.name], seg.name
        assert seg.ssd_keys == len(ssd_on[seg.name]), seg.name
        rs = sorted(ranges[seg.name])
        for (_, end), (start, _) in itertools.pairwise(rs):
            assert end <= start, f"overlap in {seg.name}"
    assert set(ssd_on) <= names


@pytest.mark.parametrize("seed", range(6))
def test_random_tier_operations_keep_metadata_and_journal_consistent(seed: int) -> None:
    rng = random.Random(seed)
    cfg = MasterConfig(
        client_ttl_s=5.0,
        put_timeout_s=3.0,
        lease_ttl_s=1.0,
        unmount_grace_s=0.5,
        eviction_high_watermark=0.8,
        eviction_ratio=0.2,
        offload_watermark=0.3,
        offload_retry_s=1.0,
        stage_timeout_s=1.0,
        promote_after=rng.choice([1, 2, 3]),
    )
    m = MasterState(cfg, rng=random.Random(seed), alignment=64)
    image = MetadataImage()

    def info(name: str) -> SegmentSnapshot | None:
        return next((s for s in m.snapshot().segments if s.name == name), None)

    offers: list[ev.OffloadRequested] = []
    stages: list[ev.StageRequested] = []
    now = 0.0
    nseg = 0
    owner: dict[str, str] = {}
    clients = ["c0", "c1", "c2"]
    kinds: Counter[str] = Counter()
    for _ in range(700):
        now += rng.choice([0.0, 0.01, 0.1, 0.4])
        key = f"k{rng.randrange(30)}"
        op = rng.random()
        try:
            if op < 0.03 or nseg < 2:
                owner[f"s{nseg}"] = client = rng.choice(clients)
                m.mount_segment(
                    f"s{nseg}", client, 12000, now, ssd_capacity=rng.choice([0, 1 << 20, 1 << 20])
                )
                nseg += 1
            elif op < 0.30:
                rcfg = ReplicateConfig(
                    replica_num=rng.choice([1, 1, 2]), soft_pin=rng.random() < 0.1
                )
                m.put_start(key, rng.choice([100, 3000, 6000]), "w", now, rcfg)
                m.put_end(key, now)
            elif op < 0.40 and offers:
                o = offers.pop(rng.randrange(len(offers)))
                m.tier_offload_done(
                    owner[o.segment], o.key, o.segment, o.token, rng.random() < 0.9, now
                )
            elif op < 0.50 and stages:
                s = stages.pop(rng.randrange(len(stages)))
                m.tier_stage_done(
                    owner[s.segment], s.key, s.segment, s.request_id, rng.random() < 0.85, now
                )
            elif op < 0.62:
                m.read(key, now)
            elif op < 0.66 and nseg:
                seg = f"s{rng.randrange(nseg)}"
                m.tier_dropped(owner[seg], seg, [key], now)
            elif op < 0.70:
                m.remove(key, now, force=rng.random() < 0.5)
            elif op < 0.72:
                m.pin(key, now, hard=rng.random() < 0.5)
            elif op < 0.75 and nseg:
                m.unmount_segment(f"s{rng.randrange(nseg)}", now)
            elif op < 0.85:
                for c in clients:
                    if rng.random() < 0.9:
                        m.heartbeat(c, now)
            else:
                m.tick(now)
        except StoreError:
            pass
        events = m.take_events()
        offers += [e for e in events if isinstance(e, ev.OffloadRequested)]
        stages += [e for e in events if isinstance(e, ev.StageRequested)]
        # Nodes answer most requests soon (in random order), some late or never.
        for pending, answer in ((offers, 0.6), (stages, 0.5)):
            if pending and rng.random() < answer:
                r = pending.pop(rng.randrange(len(pending)))
                try:
                    if isinstance(r, ev.OffloadRequested):
                        ok = rng.random() < 0.9
                        m.tier_offload_done(owner[r.segment], r.key, r.segment, r.token, ok, now)
                    else:
                        ok = rng.random() < 0.85
                        m.tier_stage_done(owner[r.segment], r.key, r.segment, r.request_id, ok, now)
                except StoreError:
                    pass  # STALE / gone: the node deletes its file
                more = m.take_events()
                events += more
                offers += [e for e in more if isinstance(e, ev.OffloadRequested)]
                stages += [e for e in more if isinstance(e, ev.StageRequested)]
        image.apply_all(records_from_events(events, 0.0, info))
        check(m, now)
        kinds.update(type(e).__name__ for e in events)
    for kind in ("OffloadRequested", "SsdCopyAdded", "StageRequested", "SsdCopyDropped"):
        assert kinds[kind] > 3, kinds
    # The journal image rebuilds the same objects, replicas and SSD sets.
    assert sorted(image.segments) == sorted(s.name for s in m.snapshot().segments)
    new = build_state(image, cfg, now, now)
    keys = [e.key for e in m.list_keys(limit=100_000).entries if e.state.name == "COMPLETE"]
    got = [e.key for e in new.list_keys(limit=100_000).entries if e.state.name == "COMPLETE"]
    assert got == keys
    for k in keys:
        want = m.stat(k, now)
        have = new.stat(k, now)
        assert (have.replicas, have.ssd_segments) == (want.replicas, want.ssd_segments), k
