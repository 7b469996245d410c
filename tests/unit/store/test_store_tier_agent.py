"""Store node SSD tier agent: master events -> offload / stage / forget, on a real directory.

Segment memory is a bytearray; files are real (tmp_path). The worker tests use a
recording stand-in for the master's three tier RPCs (the master side has its own tests).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from mooncake_core.cluster import plan
from mooncake_core.config import ClusterConfig
from mooncake_core.store import events as ev
from mooncake_core.store.client.async_master import WatchedEvent
from mooncake_core.store.errors import ConflictError, ErrorCode
from mooncake_core.store.objects import Slice
from mooncake_core.store.tier.agent import (
    Forget,
    ForgetAll,
    Offload,
    Stage,
    TierAgent,
    TierOutcome,
    wipe_tier_dir,
)
from mooncake_core.store.tier.ssd import HEADER_SIZE, SsdTier, SsdTierOptions
from mooncake_core.store.tier.worker import TierWorker

SEG = "n0"


def _agent(tmp_path: Path, capacity: int = 1 << 20, mem: int = 4096) -> TierAgent:
    tier = SsdTier(SsdTierOptions(tmp_path / "ssd", capacity))
    memory = bytearray(i % 251 for i in range(mem))
    return TierAgent(SEG, tier, memoryview(memory))


def _rep(*slices: tuple[int, int], seg: str = SEG) -> tuple[Slice, ...]:
    return tuple(Slice(seg, o, n) for o, n in slices)


# ----------------------------------------------------------------------- decide
def test_decide_maps_own_segment_requests_and_removals_of_held_files(tmp_path: Path) -> None:
    a = _agent(tmp_path)
    r = _rep((0, 100))
    assert a.decide(ev.OffloadRequested(0.0, "k", SEG, r, 100, 7)) == Offload("k", r, 100, 7)
    assert a.decide(ev.StageRequested(5.0, "k", SEG, r, 100, 3)) == Stage("k", r, 100, 3, 5.0)
    other = _rep((0, 100), seg="n1")
    assert a.decide(ev.OffloadRequested(0.0, "k", "n1", other, 100, 7)) is None
    assert a.decide(ev.StageRequested(0.0, "k", "n1", other, 100, 3)) is None
    removed = ev.ObjectRemoved(0.0, "k", ev.RemoveReason.EVICTED, True)
    assert a.decide(removed) is None  # no file of k here
    a.tier.put("k", b"x")
    assert a.decide(removed) == Forget("k")
    assert a.decide(ev.ObjectStored(0.0, "k", 1, (_rep((0, 1)),))) is None
    assert a.decide(ev.ReplicaDropped(0.0, "k", SEG, 0)) is None  # file stays


# ---------------------------------------------------------------------- offload
def test_offload_writes_the_replica_bytes_in_slice_order(tmp_path: Path) -> None:
    a = _agent(tmp_path)
    mem = bytes(a.memory)
    out = a.offload(Offload("k", _rep((1000, 300), (10, 200)), 500, 1))
    assert out == TierOutcome(True)
    got = a.tier.get("k")
    assert got is not None and got.data == mem[1000:1300] + mem[10:210]
    s = a.snapshot()
    assert (s.offloads, s.offload_failures, s.files) == (1, 0, 1)


@pytest.mark.parametrize(
    ("replica", "size", "why"),
    [
        (_rep((0, 100), seg="n1"), 100, "slice on 'n1'"),
        (_rep((4000, 200)), 200, "outside the 4096-byte segment"),
        (_rep((-1, 10)), 10, "outside"),
        (_rep((0, 100)), 101, "slices hold 100 bytes, object has 101"),
    ],
)
def test_offload_refuses_ranges_that_are_not_its_own(
    tmp_path: Path, replica: tuple[Slice, ...], size: int, why: str
) -> None:
    a = _agent(tmp_path)
    out = a.offload(Offload("k", replica, size, 1))
    assert not out.ok and out.reason.startswith("bad_range") and why in out.reason
    assert not a.tier.contains("k")
    assert a.snapshot().offload_failures == 1


def test_offload_reports_the_keys_the_disk_evicted(tmp_path: Path) -> None:
    # Each file is HEADER + 2-byte key + 100 bytes = 134; capacity 600 holds four
    # (high 0.95 -> 570); the fifth evicts down to 0.85 * 600 - 134 = 376: two go.
    a = _agent(tmp_path, capacity=600)
    for i in range(4):
        assert a.offload(Offload(f"k{i}", _rep((i * 100, 100)), 100, i)).evicted == ()
    assert HEADER_SIZE + 2 + 100 == 134
    out = a.offload(Offload("k4", _rep((400, 100)), 100, 4))
    assert out == TierOutcome(True, "", ("k0", "k1"))
    assert sorted(a.tier.keys()) == ["k2", "k3", "k4"]
    assert a.snapshot().evictions == 2


def test_offload_of_an_object_larger_than_the_disk_is_refused(tmp_path: Path) -> None:
    a = _agent(tmp_path, capacity=200)
    out = a.offload(Offload("k", _rep((0, 1000)), 1000, 1))
    assert (out.ok, out.reason) == (False, "too_large")
    assert not a.tier.contains("k")


# ------------------------------------------------------------------------ stage
def test_stage_copies_verified_bytes_into_the_replica(tmp_path: Path) -> None:
    a = _agent(tmp_path)
    value = bytes(range(200)) + b"z" * 100
    a.tier.put("k", value)
    out = a.stage(Stage("k", _rep((3000, 100), (500, 200)), 300, 9))
    assert out == TierOutcome(True)
    assert bytes(a.memory[3000:3100]) == value[:100]
    assert bytes(a.memory[500:700]) == value[100:]
    assert a.snapshot().stages == 1


def test_stage_miss_leaves_memory_alone(tmp_path: Path) -> None:
    a = _agent(tmp_path)
    before = bytes(a.memory)
    assert a.stage(Stage("nope", _rep((0, 10)), 10, 1)) == TierOutcome(False, "miss")
    assert bytes(a.memory) == before
    s = a.snapshot()
    assert (s.stage_failures, s.misses, s.corrupt) == (1, 1, 0)


def test_stage_of_a_corrupt_file_is_a_counted_miss_never_wrong_bytes(tmp_path: Path) -> None:
    a = _agent(tmp_path)
    a.tier.put("k", b"A" * 100)
    path = a.tier.path_of("k")
    blob = bytearray(path.read_bytes())
    blob[-1] ^= 0x01  # one flipped bit in the data
    path.write_bytes(bytes(blob))
    before = bytes(a.memory)
    assert a.stage(Stage("k", _rep((0, 100)), 100, 1)) == TierOutcome(False, "corrupt")
    assert bytes(a.memory) == before
    assert not path.exists() and not a.tier.contains("k")
    s = a.snapshot()
    assert (s.corrupt, s.stage_failures, s.files) == (1, 1, 0)


def test_stage_of_a_file_of_another_size_is_refused_and_deleted(tmp_path: Path) -> None:
    a = _agent(tmp_path)
    a.tier.put("k", b"A" * 50)
    before = bytes(a.memory)
    out = a.stage(Stage("k", _rep((0, 100)), 100, 1))
    assert not out.ok and out.reason.startswith("size_mismatch")
    assert bytes(a.memory) == before and not a.tier.contains("k")


def test_a_late_stage_never_writes_memory(tmp_path: Path) -> None:
    # The master may have given up on the stage and reused the range.
    tier = SsdTier(SsdTierOptions(tmp_path / "ssd", 1 << 20))
    memory = bytearray(1000)
    a = TierAgent(SEG, tier, memoryview(memory), stage_deadline_s=5.0, clock=lambda: 106.0)
    tier.put("k", b"v" * 100)
    out = a.stage(Stage("k", _rep((0, 100)), 100, 1, at=100.0))
    assert not out.ok and out.reason.startswith("late: requested 6.0 s ago")
    assert memory == bytearray(1000)
    assert a.stage(Stage("k", _rep((0, 100)), 100, 2, at=101.5)).ok
    assert memory[:100] == b"v" * 100


def test_forget_and_stale_delete_the_file(tmp_path: Path) -> None:
    a = _agent(tmp_path)
    a.tier.put("k", b"x")
    a.tier.put("j", b"y")
    assert a.forget("k") and not a.forget("k")
    a.note_stale("j")
    s = a.snapshot()
    assert (s.files, s.removed, s.stale) == (0, 1, 1)


def test_wipe_deletes_only_tier_files(tmp_path: Path) -> None:
    a = _agent(tmp_path)
    a.tier.put("k", b"x")
    a.tier.put("j", b"y")
    d = tmp_path / "ssd"
    (d / "notes.txt").write_text("keep")
    (d / "zz").mkdir()
    (d / "zz" / "other").write_text("keep")
    assert wipe_tier_dir(d) == 2
    assert sorted(p.name for p in d.iterdir()) == ["notes.txt", "zz"]
    assert wipe_tier_dir(tmp_path / "missing") == 0


# ----------------------------------------------------------------------- worker
class _Master:
    """Records the tier RPCs; refuses offload confirmations of keys in ``stale``."""

    def __init__(self, stale: Sequence[str] = ()) -> None:
        self.calls: list[tuple[object, ...]] = []
        self.stale = set(stale)
        self.events: list[ev.Event] = []

    async def tier_offload_done(
        self, key: str, segment: str, token: int, ok: bool, reason: str = ""
    ) -> None:
        self.calls.append(("offload_done", key, token, ok, reason))
        if key in self.stale:
            raise ConflictError(ErrorCode.STALE, f"{key}: token {token} is not current")

    async def tier_stage_done(
        self, key: str, segment: str, request_id: int, ok: bool, reason: str = ""
    ) -> None:
        self.calls.append(("stage_done", key, request_id, ok, reason))

    async def tier_dropped(self, segment: str, keys: Sequence[str]) -> int:
        self.calls.append(("dropped", tuple(keys)))
        return 0

    async def watch_events(
        self, started: asyncio.Event | None = None
    ) -> AsyncIterator[WatchedEvent]:
        if started is not None:
            started.set()
        for i, e in enumerate(self.events):
            yield WatchedEvent(i, e)


async def test_worker_confirms_in_event_order_per_key(tmp_path: Path) -> None:
    a = _agent(tmp_path, capacity=600)
    m = _Master(stale=["s"])
    w = TierWorker(a, m)
    for i in range(4):  # one by one: disk LRU order k0..k3
        w.dispatch(ev.OffloadRequested(0.0, f"k{i}", SEG, _rep((i * 100, 100)), 100, i))
        await w.drain()
    # k4 evicts k0 and k1; then k0 is removed: its Forget waits for the TierDropped.
    w.dispatch(ev.OffloadRequested(0.0, "k4", SEG, _rep((400, 100)), 100, 4))
    await w.drain()
    w.dispatch(ev.StageRequested(0.0, "k2", SEG, _rep((1000, 100)), 100, 77))
    w.dispatch(ev.OffloadRequested(0.0, "s", SEG, _rep((0, 10)), 10, 5))
    await w.drain()
    assert ("dropped", ("k0", "k1")) in m.calls
    assert ("stage_done", "k2", 77, True, "") in m.calls
    assert ("offload_done", "s", 5, True, "") in m.calls
    assert bytes(a.memory[1000:1100]) == bytes(a.memory[200:300])
    assert not a.tier.contains("s")  # refused as STALE: deleted
    assert a.snapshot().stale == 1 and w.errors == 0
    # k0's eviction is reported only after its own confirmation.
    assert m.calls.index(("dropped", ("k0", "k1"))) > m.calls.index(
        ("offload_done", "k1", 1, True, "")
    )


async def test_eviction_is_reported_after_the_evicted_files_own_confirmation(
    tmp_path: Path,
) -> None:
    a = _agent(tmp_path, capacity=600)
    m = _Master()
    hold = asyncio.Event()
    plain = m.tier_offload_done

    async def slow(key: str, segment: str, token: int, ok: bool, reason: str = "") -> None:
        if key == "k1":
            await hold.wait()  # k1's confirmation is still on its way to the master
        await plain(key, segment, token, ok, reason)

    m.tier_offload_done = slow  # type: ignore[method-assign]
    w = TierWorker(a, m)
    for i in range(4):
        w.dispatch(ev.OffloadRequested(0.0, f"k{i}", SEG, _rep((i * 100, 100)), 100, i))
        while not a.tier.contains(f"k{i}"):  # written one by one: LRU order k0..k3
            await asyncio.sleep(0.001)
    w.dispatch(ev.OffloadRequested(0.0, "k4", SEG, _rep((400, 100)), 100, 4))
    while ("offload_done", "k4", 4, True, "") not in m.calls:
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.05)
    assert not any(c[0] == "dropped" for c in m.calls)  # waits for k1's confirmation
    hold.set()
    await w.drain()
    assert m.calls[-2:] == [("offload_done", "k1", 1, True, ""), ("dropped", ("k0", "k1"))]


async def test_worker_runs_a_removal_after_the_offload_of_the_same_key(tmp_path: Path) -> None:
    a = _agent(tmp_path)
    m = _Master()
    w = TierWorker(a, m)
    w.dispatch(ev.OffloadRequested(0.0, "k", SEG, _rep((0, 100)), 100, 1))
    # Not yet written, so decide() sees no file: the master's removal of an object
    # whose offload is still running is handled by the STALE refusal instead.
    assert w.dispatch(ev.ObjectRemoved(0.0, "k", ev.RemoveReason.REMOVED, True)) is None
    await w.drain()
    assert w.dispatch(ev.ObjectRemoved(0.0, "k", ev.RemoveReason.REMOVED, True)) == Forget("k")
    w.dispatch(ev.OffloadRequested(0.0, "k", SEG, _rep((0, 100)), 100, 2))
    await w.drain()
    assert a.tier.contains("k")  # the new version's file survived the old removal
    assert [c[:3] for c in m.calls] == [("offload_done", "k", 1), ("offload_done", "k", 2)]


async def test_unmount_or_remount_of_its_segment_forgets_every_file(tmp_path: Path) -> None:
    a = _agent(tmp_path)
    m = _Master()
    w = TierWorker(a, m)
    for i in range(3):
        w.dispatch(ev.OffloadRequested(0.0, f"k{i}", SEG, _rep((i * 100, 100)), 100, i))
    await w.drain()
    gone = ev.SegmentUnmounted(0.0, "n1", ev.UnmountReason.CLIENT_EXPIRED)
    assert w.dispatch(gone) is None  # another node's segment
    again = ev.SegmentMounted(0.0, SEG, "n0-2", 4096)
    assert w.dispatch(again) == ForgetAll("segment mounted again")
    # A new offload right after the remount is queued behind the old file's deletion.
    w.dispatch(ev.OffloadRequested(0.0, "k1", SEG, _rep((100, 100)), 100, 9))
    await w.drain()
    assert a.tier.keys() == ["k1"]
    s = a.snapshot()
    assert (s.files, s.removed) == (1, 3)
    mine = ev.SegmentUnmounted(0.0, SEG, ev.UnmountReason.UNMOUNTED)
    assert w.dispatch(mine) == ForgetAll("segment unmounted (unmounted)")
    await w.drain()
    assert a.snapshot().files == 0


async def test_worker_follows_the_event_stream(tmp_path: Path) -> None:
    a = _agent(tmp_path)
    m = _Master()
    m.events = [
        ev.OffloadRequested(0.0, "k", SEG, _rep((0, 100)), 100, 1),
        ev.OffloadRequested(0.0, "x", "n1", _rep((0, 100), seg="n1"), 100, 1),
    ]
    w = TierWorker(a, m)
    task = asyncio.create_task(w.follow(retry_s=0.01, max_retry_s=0.01))
    while w.resubscribes < 2:  # the stand-in's stream ends after its events
        await asyncio.sleep(0.01)
    task.cancel()
    await w.drain()
    # Only this segment's request, once per subscription (n1's is not ours).
    assert {c[:2] for c in m.calls} == {("offload_done", "k")} and len(m.calls) >= 2


def test_tier_knows_keys_of_files_found_at_start(tmp_path: Path) -> None:
    # A restarted tier reads keys from the headers, so its evictions can be reported.
    first = SsdTier(SsdTierOptions(tmp_path / "ssd", 600))
    for i in range(4):
        first.put(f"k{i}", b"v" * 100)
    again = SsdTier(SsdTierOptions(tmp_path / "ssd", 600))
    assert sorted(again.keys()) == ["k0", "k1", "k2", "k3"]
    again.put("k4", b"v" * 100)
    assert len(again.take_evicted()) == 2 and again.take_evicted() == []


def test_cluster_up_passes_the_ssd_tier_of_a_store_node() -> None:
    cfg = ClusterConfig.model_validate(
        {
            "store_nodes": [
                {"name": "s0", "ssd_dir": "/var/tmp/s0", "ssd_size": "1GiB"},
                {"name": "s1", "data_port": 17002, "metrics_port": 9102},
            ]
        }
    )
    specs = {s.name: s for s in plan(cfg, Path("c.yaml"), Path("k"), {("store", "node")})}
    argv = specs["s0"].argv
    i = argv.index("--ssd-dir")
    assert argv[i : i + 4] == ("--ssd-dir", "/var/tmp/s0", "--ssd-size", str(1 << 30))
    assert "--ssd-dir" not in specs["s1"].argv


def test_client_options_refuse_a_negative_ssd_capacity() -> None:
    from mooncake_core.store.client.options import ClientOptions, SegmentSpec
    from mooncake_core.store.errors import InvalidArgumentError

    assert ClientOptions(segments=(SegmentSpec("n0", 1 << 20, ssd_capacity=1 << 30),))
    with pytest.raises(InvalidArgumentError, match="'n0': ssd_capacity must be >= 0, got -1"):
        ClientOptions(segments=(SegmentSpec("n0", 1 << 20, ssd_capacity=-1),))
