"""SSD tier durability: SSD copies and SSD-only objects survive journal -> image -> rebuild,
and an image snapshot carries them too."""

from __future__ import annotations

import random

from mooncake_core.config.models import MasterConfig
from mooncake_core.store import MasterState, ReplicateConfig
from mooncake_core.store import events as ev
from mooncake_core.store.ha.image import MetadataImage, records_from_events
from mooncake_core.store.ha.rebuild import build_state
from mooncake_core.store.master import StagePending
from mooncake_core.store.segment import SegmentSnapshot

WALL_MINUS_MONO = 1_000_000.0


def _journal(st: MasterState, image: MetadataImage) -> list[ev.Event]:
    def info(name: str) -> SegmentSnapshot | None:
        return next((s for s in st.snapshot().segments if s.name == name), None)

    events = st.take_events()
    image.apply_all(records_from_events(events, WALL_MINUS_MONO, info))
    return events


def _view(st: MasterState, now: float) -> dict[str, object]:
    keys = [e.key for e in st.list_keys("", "", 1000).entries]
    snap = st.snapshot()
    return {
        "objects": {k: (st.stat(k, now).replicas, st.stat(k, now).ssd_segments) for k in keys},
        "segments": {
            s.name: (s.capacity, s.used, s.ssd_capacity, s.ssd_keys) for s in snap.segments
        },
        "ssd_only": snap.ssd_only_count,
    }


def _offload(st: MasterState, key: str, seg: str, client: str, now: float) -> None:
    st.tier_offload_done(client, key, seg, st.objects[key].token, True, now)


def _busy() -> tuple[MasterState, MetadataImage]:
    cfg = MasterConfig(unmount_grace_s=0, eviction_ratio=0.01, client_ttl_s=1000)
    st = MasterState(cfg, rng=random.Random(3))  # alignment as build_state uses
    image = MetadataImage()
    st.mount_segment("a", "ca", 1000, 0.0, ssd_capacity=1 << 20)
    st.mount_segment("b", "cb", 1000, 0.0, ssd_capacity=1 << 20)
    st.mount_segment("c", "cc", 1000, 0.0)
    _journal(st, image)
    for i, seg in enumerate(["a", "a", "b", "b", "c"]):
        st.put_start(f"k{i}", 300, "w", 1.0 + i, ReplicateConfig(preferred_segments=(seg,)))
        st.put_end(f"k{i}", 1.0 + i)
    _offload(st, "k0", "a", "ca", 6.0)
    _offload(st, "k1", "a", "ca", 6.0)
    _offload(st, "k2", "b", "cb", 6.0)
    # Fill every segment: k0, k1 and k2 (offloaded) lose their DRAM and stay SSD-only.
    for i in range(3):
        st.put_start(f"f{i}", 700, "w", 7.0, ReplicateConfig(preferred_segments=("abc"[i],)))
        st.put_end(f"f{i}", 7.0)
    st.tier_dropped("cb", "b", ["k2"], 8.0)  # k2's only copy: gone (ssd_lost)
    # k1 staged back into DRAM (a stage copy, a replica like any other for the journal).
    st.remove("f0", 8.5)
    r = st.read("k1", 9.0)
    assert isinstance(r, StagePending)
    st.tier_stage_done("ca", "k1", "a", r.request_id, True, 9.5)
    _journal(st, image)
    return st, image


def test_ssd_only_objects_rebuild_identically() -> None:
    st, image = _busy()
    want = _view(st, 10.0)
    assert want["objects"]["k0"] == ((), ("a",))  # type: ignore[index]
    assert "k2" not in want["objects"]  # type: ignore[operator]
    assert want["ssd_only"] == 1
    new = build_state(image, st.config, 500.0, 10.0 + WALL_MINUS_MONO)
    assert new.take_events() == []
    assert _view(new, 500.0) == want
    # The rebuilt core stages SSD-only objects and accepts confirmations with its tokens.
    r = new.read("k0", 501.0)
    assert isinstance(r, StagePending) and r.segment == "a"
    new.tier_stage_done("ca", "k0", "a", r.request_id, True, 502.0)
    assert len(new.stat("k0", 502.0).replicas) == 1


def test_image_snapshot_records_carry_ssd_copies_and_mount_ssd() -> None:
    _, image = _busy()
    recs = list(image.records())
    assert {"t": "ssd_added", "key": "k0", "seg": "a"} in recs
    mounts = {r["seg"]: r.get("ssd", 0) for r in recs if r["t"] == "mount"}
    assert mounts == {"a": 1 << 20, "b": 1 << 20, "c": 0}
    again = MetadataImage()
    again.apply_all(recs)
    assert again.objects == image.objects and again.ssd == image.ssd
    assert again.ignored == 0


def test_unmount_record_drops_ssd_copies_of_that_segment() -> None:
    st, image = _busy()
    st.expire_clients(2000.0)  # every client silent: all segments go
    _journal(st, image)
    assert image.objects == {} and image.ssd == {} and image.segments == {}


def test_a_new_version_forgets_the_old_ssd_copies() -> None:
    st, image = _busy()
    st.upsert_start("k0", 100, "w", 11.0, ReplicateConfig(preferred_segments=("c",)))
    st.put_end("k0", 11.0)
    _journal(st, image)
    assert "k0" not in image.ssd
    assert build_state(image, st.config, 0.0, WALL_MINUS_MONO).stat("k0", 0.0).ssd_segments == ()
