"""Readers never see reclaimed bytes: ranges a reader may still read are held, not freed.

A forced remove of a leased object keeps its ranges allocated until the lease ends (freed
by ``tick``); a master rebuilt from its journal (leases lost) holds every free for
``lease_ttl_s``; a held range is released only into the segment it was taken from.
"""

from __future__ import annotations

from store_unit_support import MakeMaster

from mooncake_core.config.models import MasterConfig
from mooncake_core.store import MasterState, ReplicateConfig
from mooncake_core.store import events as ev
from mooncake_core.store.ha.image import (
    MetadataImage,
    records_from_events,
    started_record,
    writer_hold_records,
)
from mooncake_core.store.ha.rebuild import build_state
from mooncake_core.store.objects import Slice


def leased(make_master: MakeMaster) -> MasterState:
    m = make_master([("s", "c1", 1000)], lease_ttl_s=10.0)
    m.put_start("k", 100, "c1", 0.0)
    m.put_end("k", 0.0)
    m.get_replica_list("k", 1.0)  # leased until 11.0
    return m


def test_forced_remove_holds_the_range_until_the_lease_ends(make_master: MakeMaster) -> None:
    m = leased(make_master)
    m.remove("k", 2.0, force=True)
    assert not m.exist("k", 2.0)
    assert m.snapshot().allocated_bytes == 100
    assert m.held_ranges() == [("s", 0, 100, 11.0)]
    m.put_start("k2", 100, "c1", 3.0)  # same size: must not land on the held range
    assert m.stat("k2", 3.0).replicas[0][0].offset == 100
    m.heartbeat("c1", 10.0)
    m.tick(10.999)
    assert m.held_ranges() == [("s", 0, 100, 11.0)]
    m.tick(11.0)
    assert m.held_ranges() == []
    assert m.snapshot().allocated_bytes == 100  # only k2


def test_unleased_remove_frees_at_once(make_master: MakeMaster) -> None:
    m = make_master([("s", "c1", 1000)], lease_ttl_s=10.0)
    m.put_start("k", 100, "c1", 0.0)
    m.put_end("k", 0.0)
    m.remove("k", 1.0, force=True)
    assert m.held_ranges() == []
    assert m.snapshot().allocated_bytes == 0


def test_held_range_of_a_remounted_segment_is_not_released_into_the_new_one(
    make_master: MakeMaster,
) -> None:
    m = leased(make_master)
    m.remove("k", 2.0, force=True)
    m.unmount_segment("s", 2.0)
    m.tick(2.0 + m.config.unmount_grace_s)  # the segment is gone
    m.mount_segment("s", "c1", 1000, 5.0)  # same name, a new segment
    m.put_start("n", 100, "c1", 5.0)
    m.put_end("n", 5.0)
    assert m.stat("n", 5.0).replicas[0][0].offset == 0
    m.heartbeat("c1", 10.0)
    m.tick(11.0)  # the old hold ends: nothing is released into the new segment
    assert m.snapshot().allocated_bytes == 100
    m.put_start("n2", 100, "c1", 11.0)
    assert m.stat("n2", 11.0).replicas[0][0].offset == 100


def test_forced_remove_keeps_a_deferred_replica_drop_held(make_master: MakeMaster) -> None:
    m = make_master([("a", "c1", 1000), ("b", "c2", 1000)], lease_ttl_s=10.0)
    m.put_start("k", 100, "c1", 0.0)
    m.put_end("k", 0.0)
    m.add_replica_start("k", 0.0)
    m.add_replica_end("k", 0.0)
    m.get_replica_list("k", 1.0)  # both replicas handed out, lease to 11.0
    assert m.drop_replica("k", "b", 2.0) is False  # deferred
    m.remove("k", 3.0, force=True)
    assert sorted(m.held_ranges()) == [("a", 0, 100, 11.0), ("b", 0, 100, 11.0)]
    m.heartbeat("c1", 10.0)
    m.heartbeat("c2", 10.0)
    m.tick(11.0)
    assert m.snapshot().allocated_bytes == 0


def test_a_rebuilt_master_holds_every_free_for_lease_ttl() -> None:
    m = MasterState(MasterConfig(lease_ttl_s=10.0), alignment=64)
    m.mount_segment("s", "c1", 1000, 0.0)
    m.put_start("k", 100, "c1", 0.0)
    m.put_end("k", 0.0)
    snaps = {s.name: s for s in m.snapshot().segments}
    image = MetadataImage()
    image.apply_all(records_from_events(m.take_events(), 0.0, snaps.get))
    st = build_state(image, m.config, 50.0, 1000.0)
    assert st.stat("k", 50.0).lease_remaining_s == 0.0  # restored without a lease
    st.remove("k", 51.0)  # not leased here: allowed ...
    assert st.held_ranges() == [("s", 0, 100, 60.0)]  # ... but an old reader may read on
    st.put_start("k2", 100, "c1", 52.0)
    st.put_end("k2", 52.0)
    assert st.stat("k2", 52.0).replicas[0][0].offset == 128
    st.heartbeat("c1", 59.0)
    st.tick(60.0)
    assert st.held_ranges() == []
    st.remove("k2", 61.0, force=True)  # after the hold: freed at once
    assert st.snapshot().allocated_bytes == 0


def test_undo_of_a_forced_remove_takes_the_held_range_back_with_its_lease(
    make_master: MakeMaster,
) -> None:
    from mooncake_core.store.master import restore

    m = leased(make_master)
    replicas = m.stat("k", 1.0).replicas
    m.remove("k", 2.0, force=True)
    restore.reconcile(m, {"k": ("k", 100, replicas, True)}, {}, 2.0)
    assert m.held_ranges() == []
    assert m.stat("k", 2.0).replicas == replicas
    assert m.stat("k", 2.0).lease_remaining_s == 9.0  # the reader's lease is kept
    m.remove("k", 3.0, force=True)
    assert m.held_ranges() == [("s", 0, 100, 11.0)]


def test_a_rebuilt_master_evicts_new_objects_but_not_restored_ones_for_a_lease() -> None:
    m = MasterState(MasterConfig(lease_ttl_s=10.0), alignment=64)
    m.mount_segment("s", "c1", 1024, 0.0)
    for k in ("a", "b", "c", "d"):
        m.put_start(k, 128, "c1", 0.0)
        m.put_end(k, 0.0)
    snaps = {s.name: s for s in m.snapshot().segments}
    image = MetadataImage()
    image.apply_all(records_from_events(m.take_events(), 0.0, snaps.get))
    st = build_state(image, m.config, 50.0, 1000.0)
    for k in ("n1", "n2", "n3", "n4"):  # fills the segment: 8 x 128
        st.put_start(k, 128, "c1", 51.0)
        st.put_end(k, 51.0)
    st.put_start("n5", 128, "c1", 52.0)  # evicts least recently used *new* objects
    assert all(st.exist(k, 52.0) for k in ("a", "b", "c", "d"))
    assert not st.exist("n1", 52.0)
    assert st.held_ranges() == []  # nothing evicted was read under an old lease
    st.heartbeat("c1", 59.0)
    st.tick(60.0)
    st.put_start("n6", 256, "c1", 60.0)  # the hold is over: restored objects go first
    assert not st.exist("a", 60.0)


def _journaled(m: MasterState, image: MetadataImage) -> None:
    snaps = {s.name: s for s in m.snapshot().segments}
    image.apply_all(records_from_events(m.take_events(), 0.0, snaps.get))


def test_a_rebuilt_master_holds_again_what_a_forced_remove_held() -> None:
    # The previous master held k's range for a reader when it was removed; the records
    # have it free. A master restored inside that lease must not hand it out.
    m = MasterState(MasterConfig(lease_ttl_s=10.0), alignment=64)
    image = MetadataImage()
    m.mount_segment("s", "c1", 1000, 0.0)
    m.put_start("k", 100, "c1", 0.0)
    m.put_end("k", 0.0)
    m.get_replica_list("k", 1.0)
    _journaled(m, image)
    m.remove("k", 2.0, force=True)
    _journaled(m, image)
    assert image.held_ranges() == [("s", 0, 100)]
    st = build_state(image, m.config, 50.0, 1000.0)
    assert st.held_ranges() == [("s", 0, 100, 60.0)]
    st.put_start("k2", 100, "c1", 51.0)
    assert st.stat("k2", 51.0).replicas[0][0].offset == 128
    st.heartbeat("c1", 59.0)
    st.tick(60.0)
    assert st.held_ranges() == []
    st.put_start("k3", 100, "c1", 60.0)
    assert st.stat("k3", 60.0).replicas[0][0].offset == 0


def test_a_rebuilt_master_holds_a_discarded_write_for_its_writer_not_one_lease() -> None:
    # The previous master discarded an unfinished write (its writer stalled past
    # put_timeout_s) and held its range for put_release_s. The records say so ("w"),
    # from the log and through a snapshot; a restored master holds it for put_release_s
    # again, not for one read lease.
    cfg = MasterConfig(lease_ttl_s=10.0, put_timeout_s=5.0, put_release_s=300.0)
    m = MasterState(cfg, alignment=64)
    image = MetadataImage()
    m.mount_segment("s", "c1", 1000, 0.0)
    m.put_start("z", 100, "c1", 0.0)
    m.put_start("k", 100, "c1", 0.0)
    m.put_end("k", 0.0)
    m.get_replica_list("k", 1.0)
    m.remove("k", 2.0, force=True)  # held for its reader
    m.heartbeat("c1", 5.0)
    m.tick(5.0)  # z discarded: held for its writer
    assert m.held_ranges() == [("s", 0, 100, 300.0), ("s", 128, 100, 11.0)]
    snaps = {s.name: s for s in m.snapshot().segments}
    records = records_from_events(m.take_events(), 0.0, snaps.get)
    assert [r.get("w") for r in records if r["t"] == "removed"] == [None, True]
    image.apply_all(records)
    again = MetadataImage()
    again.apply_all(list(image.records()))  # a snapshot of it
    for img in (image, again):
        assert img.held_ranges(for_writer=True) == [("s", 0, 100)]
        assert img.held_ranges(for_writer=False) == [("s", 128, 100)]
        st = build_state(img, cfg, 50.0, 1000.0)
        assert st.held_ranges() == [("s", 0, 100, 350.0), ("s", 128, 100, 60.0)]


def test_a_rebuilt_master_holds_a_pending_replica_addition_for_its_copier() -> None:
    # A replica being added (the master service journals its range as a writer hold)
    # is invisible to the records of objects; a master restored while the copier may
    # still write must not place anything there for put_release_s. Once the addition
    # ends, its replica_added record shows the range taken: no hold left.
    cfg = MasterConfig(lease_ttl_s=10.0, put_release_s=300.0)
    m = MasterState(cfg, alignment=64)
    image = MetadataImage()
    m.mount_segment("a", "c1", 1000, 0.0)
    m.mount_segment("b", "c2", 1000, 0.0)
    m.put_start("k", 100, "c1", 0.0, ReplicateConfig(preferred_segments=("a",)))
    m.put_end("k", 0.0)
    _journaled(m, image)
    rep = m.add_replica_start("k", 1.0, target_segment="b")
    image.apply_all(writer_hold_records(rep))
    assert image.held_ranges(for_writer=True) == [("b", 0, 100)]
    st = build_state(image, cfg, 50.0, 1000.0)
    assert st.held_ranges() == [("b", 0, 100, 350.0)]
    st.put_start("n", 100, "c2", 51.0, ReplicateConfig(preferred_segments=("b",)))
    assert st.stat("n", 51.0).replicas[0][0].offset == 128  # not the copier's range
    m.add_replica_end("k", 2.0)
    _journaled(m, image)
    assert image.held_ranges() == []


def test_an_ssd_stage_is_journaled_as_a_writer_hold() -> None:
    rep = (Slice("a", 640, 300),)
    records = records_from_events([ev.StageRequested(1.0, "k", "a", rep, 300, 7)], 0.0, dict().get)
    assert records == [{"t": "hold", "seg": "a", "off": 640, "len": 300, "w": True}]


def test_the_image_forgets_a_hold_once_a_write_takes_the_range() -> None:
    m = MasterState(MasterConfig(lease_ttl_s=10.0), alignment=64)
    image = MetadataImage()
    m.mount_segment("s", "c1", 1000, 0.0)
    m.mount_segment("t", "c2", 1000, 0.0)
    for key, seg in (("k", "s"), ("j", "t")):
        m.put_start(key, 100, "c1", 0.0, ReplicateConfig(preferred_segments=(seg,)))
        m.put_end(key, 0.0)
        m.get_replica_list(key, 1.0)
        m.remove(key, 2.0, force=True)
    _journaled(m, image)
    assert image.held_ranges() == [("s", 0, 100), ("t", 0, 100)]
    # a snapshot of the image carries the holds
    again = MetadataImage()
    again.apply_all(image.records())
    assert again.held_ranges() == image.held_ranges()
    m.heartbeat("c1", 11.0)
    m.heartbeat("c2", 11.0)
    m.tick(11.0)  # the live master releases both; a write then takes s's range
    reps = m.put_start("n", 64, "c1", 11.0, ReplicateConfig(preferred_segments=("s",)))
    assert reps[0][0] == ("s", 0, 64)
    _journaled(m, image)
    image.apply(started_record("n", 64, reps))  # what the service journals with it
    assert image.held_ranges() == [("t", 0, 100)]
    m.unmount_segment("t", 12.0)
    m.tick(12.0 + m.config.unmount_grace_s)
    _journaled(m, image)
    assert image.held_ranges() == []


def test_a_deferred_replica_drop_held_by_a_forced_remove_is_journaled() -> None:
    m = MasterState(MasterConfig(lease_ttl_s=10.0), alignment=64)
    image = MetadataImage()
    m.mount_segment("a", "c1", 1000, 0.0)
    m.mount_segment("b", "c2", 1000, 0.0)
    m.put_start("k", 100, "c1", 0.0, ReplicateConfig(preferred_segments=("a",)))
    m.put_end("k", 0.0)
    m.add_replica_start("k", 0.0)
    m.add_replica_end("k", 0.0)
    m.get_replica_list("k", 1.0)
    assert m.drop_replica("k", "b", 2.0) is False  # deferred: a reader may use b
    m.remove("k", 3.0, force=True)
    _journaled(m, image)
    assert image.held_ranges() == [("a", 0, 100), ("b", 0, 100)]
    st = build_state(image, m.config, 50.0, 1000.0)
    assert [r[:3] for r in st.held_ranges()] == [("a", 0, 100), ("b", 0, 100)]


def test_the_image_keeps_the_longer_writer_hold_and_forgets_it_with_the_range() -> None:
    image = MetadataImage()
    image.apply({"t": "mount", "seg": "s", "client": "c1", "cap": 1000})
    image.apply({"t": "hold", "seg": "s", "off": 0, "len": 100, "w": True})
    # The same range in a reader's hold (its object removed under a lease) afterwards:
    # still a writer's, the longer of the two.
    image.apply({"t": "removed", "key": "k", "held": [[["s", 0, 100]]]})
    assert image.held_ranges(for_writer=True) == [("s", 0, 100)]
    # A write placed there: no hold, and a later reader's hold there is a reader's.
    image.apply(started_record("n", 100, ((Slice("s", 0, 100),),)))
    assert image.held_ranges() == []
    image.apply({"t": "removed", "key": "n", "held": [[["s", 0, 100]]]})
    assert image.held_ranges(for_writer=False) == [("s", 0, 100)]
