"""Random operation sequences against the core; metadata invariants checked after each.

Deterministic (seeded), so a failure reproduces with its seed.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter, defaultdict

import pytest

from mooncake_core.store import MasterState, ReplicateConfig, StoreError


def check_invariants(m: MasterState, now: float) -> None:
    snap = m.snapshot()
    entries = m.list_keys(limit=100_000).entries
    assert len(entries) == snap.key_count
    used: dict[str, int] = defaultdict(int)
    keys_on: dict[str, set[str]] = defaultdict(set)
    ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for e in entries:
        info = m.stat(e.key, now)
        seg_sets = []
        for replica in info.replicas:
            assert sum(s.length for s in replica) == info.size
            seg_sets.append({s.segment for s in replica})
            for s in replica:
                used[s.segment] += -(-s.length // 64) * 64  # alignment 64
                keys_on[s.segment].add(e.key)
                ranges[s.segment].append((s.offset, s.offset + s.length))
        for i, a in enumerate(seg_sets):  # replicas never share a segment
            for b in seg_sets[i + 1 :]:
                assert not a & b
    # Freed, kept for readers (one lease at most) or for a writer whose write was
    # discarded unfinished (put_release_s from its start at most).
    longest = max(m.config.lease_ttl_s, m.config.put_release_s)
    for name, off, length in m.granted_ranges():  # space of writers' next puts
        used[name] += -(-length // 64) * 64
        ranges[name].append((off, off + length))
    assert snap.granted_bytes == sum(length for _, _, length in m.granted_ranges())
    for name, off, length, free_at in m.held_ranges():
        assert free_at <= now + longest
        used[name] += -(-length // 64) * 64
        ranges[name].append((off, off + length))
    for seg in snap.segments:
        assert seg.used == used[seg.name], seg.name
        assert seg.keys == len(keys_on[seg.name]), seg.name
        rs = sorted(ranges[seg.name])
        for (_, end), (start, _) in itertools.pairwise(rs):
            assert end <= start, f"overlap in {seg.name}"
        assert all(a >= 0 and b <= seg.capacity for a, b in rs)
    assert snap.allocated_bytes == sum(used.values())


@pytest.mark.parametrize("seed", range(8))
def test_random_operations_keep_metadata_consistent(seed: int) -> None:
    from mooncake_core.config.models import MasterConfig

    rng = random.Random(seed)
    m = MasterState(
        MasterConfig(
            max_slice_size=4096,
            client_ttl_s=5.0,
            put_timeout_s=3.0,
            lease_ttl_s=1.0,
            unmount_grace_s=1.0,
            eviction_high_watermark=0.8,
            eviction_ratio=0.2,
            allocation_strategy=rng.choice(["random", "free_ratio_first", "local_first"]),
        ),
        rng=random.Random(seed),
        alignment=64,
    )
    now = 0.0
    clients = ["c0", "c1", "c2", "c3"]
    nseg = 0
    grants: list[tuple[str, int, int]] = []  # (client, grant id, size) handed out
    committed = 0
    for _ in range(600):
        now += rng.choice([0.0, 0.01, 0.1, 0.5])
        key = f"k{rng.randrange(40)}"
        op = rng.random()
        try:
            if rng.random() < 0.15:  # grants: ahead, committed, given back
                g = rng.random()
                if g < 0.5 or not grants:
                    client, size = rng.choice(clients), rng.choice([100, 4096, 5000, 12000])
                    cfg = ReplicateConfig(replica_num=rng.choice([1, 1, 2]))
                    got = m.grant_put(client, size, cfg, now)
                    if got is not None:
                        grants.append((client, got[0], size))
                elif g < 0.85:
                    client, gid, size = grants.pop(rng.randrange(len(grants)))
                    m.put_commit(client, key, gid, size, now)
                    committed += 1
                else:
                    client, gid, _ = grants.pop(rng.randrange(len(grants)))
                    m.release_grant(client, gid)
            elif op < 0.08:
                m.mount_segment(
                    f"s{nseg}", rng.choice(clients), rng.choice([8192, 20000, 65536]), now
                )
                nseg += 1
            elif op < 0.40:
                size = rng.choice([1, 100, 4096, 5000, 12000])
                cfg = ReplicateConfig(
                    replica_num=rng.choice([1, 1, 2, 3]),
                    soft_pin=rng.random() < 0.1,
                    local_first=rng.random() < 0.3,
                )
                put = m.upsert_start if rng.random() < 0.2 else m.put_start
                put(key, size, rng.choice(clients), now, cfg)
                if rng.random() < 0.7:  # most writes finish at once
                    m.put_end(key, now)
            elif op < 0.60:
                m.put_end(key, now)
            elif op < 0.65:
                m.put_revoke(key, now)
            elif op < 0.75:
                m.get_replica_list(key, now)
            elif op < 0.80:
                m.remove(key, now, force=rng.random() < 0.3)
            elif op < 0.83:
                m.pin(key, now, hard=rng.random() < 0.5)
            elif op < 0.85:
                m.remove_by_prefix(f"k{rng.randrange(4)}", now)
            elif op < 0.88 and nseg:
                name, what = f"s{rng.randrange(nseg)}", rng.random()
                if what < 0.5:
                    m.unmount_segment(name, now)
                elif what < 0.75:
                    m.drain_segment(name, now)
                else:
                    m.undrain_segment(name, now)
            elif op < 0.93:
                m.heartbeat(rng.choice(clients), now)
            else:
                m.tick(now)
        except StoreError:
            pass
        check_invariants(m, now)
    # The run must have exercised the interesting paths, not just failed calls.
    kinds = Counter(type(e).__name__ for e in m.take_events())
    assert kinds["ObjectStored"] > 20 and kinds["ObjectRemoved"] > 10, kinds
    assert committed > 3, committed
