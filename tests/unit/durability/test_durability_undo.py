"""master.undo: a change the journal refused is taken back exactly (sans-IO)."""

from __future__ import annotations

from mooncake_core.config.models import MasterConfig
from mooncake_core.store import MasterState, ReplicateConfig
from mooncake_core.store.allocator import OffsetAllocator
from mooncake_core.store.ha.image import (
    MetadataImage,
    records_from_events,
    started_record,
    writer_hold_records,
)
from mooncake_core.store.ha.rebuild import build_state
from mooncake_core.store.master.undo import undo

CFG = ReplicateConfig()


class Journaled:
    """A core plus the image of what reached the journal (records applied only on ok)."""

    def __init__(self) -> None:
        self.st = MasterState(MasterConfig())
        self.st.mount_segment("s", "c", 1 << 20, 0.0)
        self.image = MetadataImage()
        self.commit()

    def records(self, extra: list[dict[str, object]] | None = None) -> list[dict[str, object]]:
        def info(name: str):  # type: ignore[no-untyped-def]
            return next((s for s in self.st.snapshot().segments if s.name == name), None)

        return records_from_events(self.st.take_events(), 0.0, info) + (extra or [])

    def commit(self, extra: list[dict[str, object]] | None = None) -> None:
        self.image.apply_all(self.records(extra))

    def put(self, key: str, size: int = 4096) -> None:
        reps = self.st.put_start(key, size, "c", 1.0, CFG)
        self.commit([started_record(key, size, reps)])
        self.st.put_end(key, 1.0)
        self.commit()

    def used(self) -> int:
        return self.st.snapshot().segments[0].used


def test_refused_remove_puts_the_object_back_at_its_range() -> None:
    j = Journaled()
    j.put("a")
    where = j.st.get_replica_list("a", 2.0).replicas
    j.st.remove("a", 100.0)  # lease of the read above has ended
    done = undo(j.st, j.image, j.records(), [], 100.0, 100.0, rebuild=build_state)
    assert done.refused and not done.rebuilt and done.owed == []
    assert j.st.exist("a", 100.0) and j.st.get_replica_list("a", 100.0).replicas == where
    assert j.used() == 4096
    # The freed range was not handed out meanwhile: a new object goes elsewhere.
    reps = j.st.put_start("b", 4096, "c", 100.0, CFG)
    assert reps != where


def test_refused_put_start_releases_its_space() -> None:
    j = Journaled()
    j.put("a")
    reps = j.st.put_start("b", 8192, "c", 2.0, CFG)
    done = undo(
        j.st,
        j.image,
        j.records([started_record("b", 8192, reps)]),
        [],
        2.0,
        2.0,
        rebuild=build_state,
    )
    assert done.refused and not j.st.has_object("b") and j.used() == 4096


def test_refused_put_end_revokes_the_write_and_owes_its_record() -> None:
    j = Journaled()
    reps = j.st.put_start("a", 4096, "c", 1.0, CFG)
    j.commit([started_record("a", 4096, reps)])
    j.st.put_end("a", 2.0)
    done = undo(j.st, j.image, j.records(), [], 2.0, 2.0, rebuild=build_state)
    assert done.refused and not j.st.has_object("a") and j.used() == 0
    assert done.owed == [{"t": "removed", "key": "a"}]


def test_revoke_while_refused_is_kept_and_owed() -> None:
    j = Journaled()
    reps = j.st.put_start("a", 4096, "c", 1.0, CFG)
    j.commit([started_record("a", 4096, reps)])
    j.st.put_revoke("a", 2.0)
    failed = j.records()
    done = undo(j.st, j.image, failed, [], 2.0, 2.0, rebuild=build_state)
    assert not done.refused and not j.st.has_object("a") and j.used() == 0
    assert [r["t"] for r in done.owed] == ["removed"]


def test_refused_commit_with_a_new_grant_undoes_both_without_a_rebuild() -> None:
    # PutCommit ends "a" and grants the next put: neither reached the journal. The write
    # is revoked (as a refused PutEnd), the grant forgotten and freed; the core is the
    # same object (a whole rebuild would hold every range for a lease).
    j = Journaled()
    reps = j.st.put_start("a", 4096, "c", 1.0, CFG)
    j.commit([started_record("a", 4096, reps)])
    j.st.put_end("a", 2.0)
    got = j.st.grant_put("c", 4096, CFG, 2.0)
    assert got is not None and j.used() == 8192
    failed = j.records([h for r in got[1] for h in writer_hold_records(r)])
    done = undo(j.st, j.image, failed, [], 2.0, 2.0, rebuild=build_state)
    assert done.refused and not done.rebuilt and done.state is j.st
    assert not j.st.has_object("a") and j.st.grant_count() == 0 and j.used() == 0
    assert done.owed == [{"t": "removed", "key": "a"}]


def test_allocate_at_takes_exactly_a_free_range() -> None:
    a = OffsetAllocator(1024, 64)
    assert a.allocate_at(128, 100) and a.used == 128
    assert a.free_list() == [(0, 128), (256, 768)]
    assert not a.allocate_at(192, 64)  # taken
    assert not a.allocate_at(1000, 64)  # past the end
    assert not a.allocate_at(10, 64)  # unaligned
    assert a.allocate(128) == 0  # best fit still works around it
    a.release(128, 100)
    assert a.free_list() == [(128, 896)]
