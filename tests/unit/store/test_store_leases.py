"""Leases: granted and renewed by reads, not by probes; they block removal until expiry."""

from __future__ import annotations

import pytest
from store_unit_support import MakeMaster

from mooncake_core.store import ConflictError, ErrorCode, MasterState


def stored(make_master: MakeMaster, **cfg: float) -> MasterState:
    m = make_master([("s", "c1", 1000)], lease_ttl_s=10.0, **cfg)
    m.put_start("k", 100, "c1", 0.0)
    m.put_end("k", 0.0)
    return m


def test_get_grants_a_lease_that_blocks_remove_until_expiry(make_master: MakeMaster) -> None:
    m = stored(make_master)
    assert m.get_replica_list("k", 1.0).lease_ttl_s == 10.0
    with pytest.raises(ConflictError) as ei:
        m.remove("k", 10.999)
    assert ei.value.code == ErrorCode.OBJECT_LEASED
    assert "leased for 0.001 s more" in ei.value.message
    m.remove("k", 11.0)
    assert not m.exist("k", 11.0)


def test_reads_renew_the_lease(make_master: MakeMaster) -> None:
    m = stored(make_master)
    m.get_replica_list("k", 0.0)
    r = m.get_replica_list("k", 6.0)
    assert r.lease_ttl_s == 10.0
    with pytest.raises(ConflictError):
        m.remove("k", 15.0)
    m.remove("k", 16.0)


def test_exist_does_not_renew(make_master: MakeMaster) -> None:
    m = stored(make_master)
    m.get_replica_list("k", 0.0)
    assert m.exist("k", 9.0)
    assert m.stat("k", 9.0).lease_remaining_s == 1.0
    m.remove("k", 10.0)


def test_force_removes_a_leased_object(make_master: MakeMaster) -> None:
    m = stored(make_master)
    m.get_replica_list("k", 0.0)
    m.remove("k", 1.0, force=True)
    assert not m.exist("k", 1.0)
    # The reader's bytes stay put until its lease ends (test_store_held_ranges.py).
    assert m.snapshot().allocated_bytes == 100
    m.heartbeat("c1", 9.0)
    m.tick(10.0)
    assert m.snapshot().allocated_bytes == 0


def test_bulk_removal_skips_leased_and_writing(make_master: MakeMaster) -> None:
    m = stored(make_master)
    m.put_start("k2", 100, "c1", 0.0)
    m.put_end("k2", 0.0)
    m.put_start("k3", 100, "c1", 0.0)  # still being written
    m.get_replica_list("k", 0.0)
    r = m.remove_by_prefix("k", 1.0)
    assert (r.removed, r.skipped) == (1, 2)
    assert [e.key for e in m.list_keys().entries] == ["k", "k3"]
    assert m.remove_all(11.0).removed == 1  # k's lease is over; k3 still writing
    assert m.remove_all(11.0, force=True).removed == 1
    assert m.snapshot().key_count == 0


def test_upsert_refused_while_leased(make_master: MakeMaster) -> None:
    m = stored(make_master)
    m.get_replica_list("k", 0.0)
    with pytest.raises(ConflictError) as ei:
        m.upsert_start("k", 50, "c1", 5.0)
    assert ei.value.code == ErrorCode.OBJECT_LEASED
    assert m.get_replica_list("k", 5.0).size == 100
