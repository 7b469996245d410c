"""Events -> records -> image -> rebuilt core: the restored master equals the original."""

from __future__ import annotations

import random

import pytest

from mooncake_core.config.models import MasterConfig
from mooncake_core.store import MasterState, ReplicateConfig
from mooncake_core.store.ha.image import MetadataImage, records_from_events, started_record
from mooncake_core.store.ha.rebuild import RebuildError, build_state
from mooncake_core.store.objects import Slice

WALL_MINUS_MONO = 1_000_000.0  # wall clock = monotonic + this, in these tests


def _journal(st: MasterState, image: MetadataImage) -> None:
    def info(name: str):  # type: ignore[no-untyped-def]
        return next((s for s in st.snapshot().segments if s.name == name), None)

    image.apply_all(records_from_events(st.take_events(), WALL_MINUS_MONO, info))


def _view(st: MasterState, now: float) -> dict[str, object]:
    keys = st.list_keys("", "", 1000).entries
    return {
        "objects": {e.key: st.stat(e.key, now).replicas for e in keys},  # incl. PROCESSING
        "sizes": {e.key: st.stat(e.key, now).size for e in keys},
        "segments": {
            s.name: (s.client_id, s.capacity, s.used, s.state.name, s.transport_address, s.location)
            for s in st.snapshot().segments
        },
        "pins": [(p.target, p.is_prefix, p.hard) for p in st.list_pins(now)],
    }


@pytest.fixture
def busy() -> tuple[MasterState, MetadataImage]:
    cfg = MasterConfig(unmount_grace_s=0)
    st = MasterState(cfg, rng=random.Random(1))
    image = MetadataImage()
    st.mount_segment("a", "c1", 1 << 20, 0.0, transport_address="127.0.0.1:1", location="cpu:0")
    st.mount_segment("b", "c2", 1 << 20, 0.0, transport_address="127.0.0.1:2", location="cpu:1")
    st.mount_segment("c", "c3", 1 << 20, 0.0)
    for i in range(30):
        size = 1000 + 37 * i
        reps = st.put_start(f"k{i:02d}", size, "w", 1.0, ReplicateConfig(replica_num=2))
        _journal(st, image)
        image.apply(started_record(f"k{i:02d}", size, reps))  # what the service adds
        if i % 7 != 3:
            st.put_end(f"k{i:02d}", 1.0)  # k03, k10, k17, k24 stay PROCESSING
        _journal(st, image)
    st.remove("k05", 2.0)
    st.upsert_start("k06", 5000, "w", 2.0, ReplicateConfig(replica_num=1))
    st.put_end("k06", 2.0)
    st.pin("k07", 2.0, hard=True)
    st.pin("k08", 2.0, ttl_s=100.0)
    st.pin("k1", 2.0, prefix=True, ttl_s=50.0)
    reps = st.put_start("k99", 100, "w", 2.0, ReplicateConfig(soft_pin=True))
    _journal(st, image)
    image.apply(started_record("k99", 100, reps))
    st.put_revoke("k99", 2.0)
    st.drain_segment("b", 2.0)
    st.unmount_segment("c", 3.0)  # grace 0: gone now, its replicas dropped
    _journal(st, image)
    return st, image


def test_rebuilt_core_equals_the_original(busy: tuple[MasterState, MetadataImage]) -> None:
    st, image = busy
    # A new process whose monotonic clock reads 500 when the wall clock is 3 s later.
    new = build_state(image, st.config, 500.0, 6.0 + WALL_MINUS_MONO)
    assert new.take_events() == []  # restoring is not news
    want, got = _view(st, 3.0), _view(new, 500.0)
    # Writes in progress come back as PROCESSING, with the replicas the core kept.
    assert got["objects"] == want["objects"]
    assert "k05" not in got["objects"] and "k99" not in got["objects"]  # type: ignore[operator]
    for k in ("k03", "k10", "k17", "k24"):
        assert new.stat(k, 500.0).state.name == "PROCESSING"
        new.put_end(k, 500.0)  # the writer can finish after the restart
    for name, (client, cap, used, state, addr, loc) in got["segments"].items():  # type: ignore[attr-defined]
        w = want["segments"][name]  # type: ignore[index]
        assert (client, cap, state, addr, loc) == (w[0], w[1], w[3], w[4], w[5])
        assert used == w[2]
    assert set(got["segments"]) == {"a", "b"}  # type: ignore[arg-type]
    assert got["pins"] == [("k07", False, True), ("k08", False, False), ("k1", True, False)]


def test_soft_pin_keeps_its_remaining_time_across_clocks(
    busy: tuple[MasterState, MetadataImage],
) -> None:
    st, image = busy
    # k08 was pinned at mono 2.0 for 100 s -> wall expiry 102 + offset. 40 s later:
    new = build_state(image, st.config, 7.0, 42.0 + WALL_MINUS_MONO)
    info = new.stat("k08", 7.0)
    assert info.pin_remaining_s == pytest.approx(60.0)
    # After the wall-clock expiry, the soft pins are not restored.
    late = build_state(image, st.config, 7.0, 200.0 + WALL_MINUS_MONO)
    assert [(p.target, p.hard) for p in late.list_pins(7.0)] == [("k07", True)]


def test_restored_ranges_are_never_handed_out_again(
    busy: tuple[MasterState, MetadataImage],
) -> None:
    st, image = busy
    new = build_state(image, st.config, 10.0, 10.0 + WALL_MINUS_MONO)
    taken = {
        (s.segment, s.offset, s.length)
        for k in new.list_keys("", "", 1000).entries
        for r in new.stat(k.key, 10.0).replicas
        for s in r
    }
    for i in range(40):
        for r in new.put_start(f"n{i}", 2000, "w", 10.0):
            for s in r:
                for seg, off, length in taken:
                    if seg == s.segment:
                        assert s.offset + s.length <= off or off + length <= s.offset
    # Removing everything returns every byte: the allocator state was consistent. (A
    # rebuilt master holds what it frees for one lease: readers of the old one; and a
    # write it discards unfinished for put_release_s: its writer may have stalled.)
    new.remove_all(11.0, force=True)
    assert new.held_ranges()
    until = 10.0 + max(st.config.lease_ttl_s, st.config.put_release_s)
    for snap in new.snapshot().segments:
        new.heartbeat(snap.client_id, until - 1.0)
    new.tick(until)
    assert all(snap.used == 0 for snap in new.snapshot().segments)


def test_image_snapshot_records_rebuild_the_same_image(
    busy: tuple[MasterState, MetadataImage],
) -> None:
    _, image = busy
    copy = MetadataImage()
    copy.apply_all(list(image.records()))
    assert copy.objects == image.objects
    assert copy.processing == image.processing
    assert copy.segments == image.segments
    assert copy.pins == image.pins


def test_overlapping_ranges_are_refused() -> None:
    image = MetadataImage()
    image.apply({"t": "mount", "seg": "a", "client": "c", "cap": 4096, "addr": "", "loc": ""})
    image.apply({"t": "stored", "key": "x", "size": 128, "replicas": [[["a", 0, 128]]]})
    image.apply({"t": "stored", "key": "y", "size": 128, "replicas": [[["a", 64, 128]]]})
    with pytest.raises(RebuildError, match="overlaps"):
        build_state(image, MasterConfig(), 0.0, 0.0)


def test_objects_on_vanished_segments_are_not_restored() -> None:
    image = MetadataImage()
    image.apply({"t": "mount", "seg": "a", "client": "c", "cap": 4096, "addr": "", "loc": ""})
    image.apply({"t": "stored", "key": "x", "size": 10, "replicas": [[["gone", 0, 10]]]})
    image.apply({"t": "stored", "key": "y", "size": 10, "replicas": [[["a", 0, 10]]]})
    st = build_state(image, MasterConfig(), 0.0, 0.0)
    assert [e.key for e in st.list_keys("", "", 10).entries] == ["y"]
    assert st.stat("y", 0.0).replicas == ((Slice("a", 0, 10),),)


def test_unknown_record_type_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown journal record type 'zap'"):
        MetadataImage().apply({"t": "zap", "s": 4})


def test_upsert_in_progress_restores_without_the_old_version() -> None:
    # The old version's ranges are free in memory once the upsert started; its restore
    # would point at bytes another write may have put there. Its removal is journaled
    # with the start, so a restart in that window restores no old version.
    st = MasterState(MasterConfig(), rng=random.Random(1))
    image = MetadataImage()
    st.mount_segment("a", "c1", 1 << 20, 0.0)
    st.put_start("k", 4096, "w", 1.0, ReplicateConfig())
    st.put_end("k", 1.0)
    _journal(st, image)
    new = st.upsert_start("k", 8192, "w", 2.0, ReplicateConfig())
    records = records_from_events(st.take_events(), WALL_MINUS_MONO, lambda _: None)
    assert [r["t"] for r in records] == ["removed"]
    image.apply_all([*records, started_record("k", 8192, new)])
    assert "k" not in image.objects
    assert image.processing["k"] == (8192, new)
