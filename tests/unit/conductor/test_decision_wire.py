"""A decision packed into bytes (what the audit's writer process receives) makes the same
audit records as the decision itself."""

from __future__ import annotations

from mooncake_core.conductor import (
    BlockStored,
    Conductor,
    ConductorOptions,
    NetworkModel,
    PrefillTimeModel,
    ScheduleRequest,
    Tier,
)
from mooncake_core.conductor.candidates import pack_decision, unpack_decision
from mooncake_core.config.models import ConductorConfig, HashingConfig


def conductor(admission: str = "none") -> Conductor:
    return Conductor(
        ConductorConfig(policy="kvcache_centric", admission=admission, ttft_slo_s=1.0),  # type: ignore[arg-type]
        ["p0", "p1", "p2"],
        {"d0": 4, "d1": 4},
        hashing=HashingConfig(block_size=10),
        prefill_model=PrefillTimeModel((0.0, 0.001, 0.0, 0.0)),
        network=NetworkModel(default_bandwidth_bps=1e6),
        options=ConductorOptions(bytes_per_token=100),
    )


def through_the_pipe(d: object) -> object:
    return unpack_decision(pack_decision(d))  # type: ignore[arg-type]


def test_a_migration_and_every_candidate_survive_the_trip() -> None:
    c = conductor()
    keys = tuple(range(1, 201))
    c.apply(BlockStored("store-0", Tier.DRAM, keys))
    c.apply(BlockStored("p1", Tier.HBM, keys[:20]))
    d = c.schedule(ScheduleRequest("a", keys, 2_010, 5), 0.0)
    assert d.migration is not None and len(d.candidates) == 5
    assert d.candidates.inputs is not None  # nothing read the rows yet: inputs travel
    back = through_the_pipe(d)
    assert back.to_record() == d.to_record()  # type: ignore[attr-defined]


def test_a_rejection_and_a_table_already_read_survive_the_trip() -> None:
    c = conductor(admission="early_reject")
    for i in range(40):
        d = c.schedule(ScheduleRequest(f"r{i}", (10_000 + i,), 500, 5), 0.0)
        if not d.admitted:
            break
    assert not d.admitted and d.reason
    rows = d.candidates.rows()  # read before the trip: the inputs still travel
    back = through_the_pipe(d)
    assert back.to_record() == d.to_record()  # type: ignore[attr-defined]
    assert tuple(back.candidates) == rows  # type: ignore[attr-defined]


def test_a_table_made_from_rows_travels_as_rows() -> None:
    import dataclasses

    from mooncake_core.conductor.decision import CandidateTable

    c = conductor()
    d = c.schedule(ScheduleRequest("a", (1, 2), 30, 5), 0.0)
    plain = dataclasses.replace(d, candidates=CandidateTable(d.candidates.rows()))
    assert plain.candidates.inputs is None
    back = through_the_pipe(plain)
    assert back.to_record() == d.to_record()  # type: ignore[attr-defined]


def test_bytes_that_are_not_a_packed_decision_are_refused_by_name() -> None:
    import pytest

    from mooncake_core import _flat

    with pytest.raises(ValueError, match="truncated"):
        unpack_decision(
            pack_decision(conductor().schedule(ScheduleRequest("a", (1,), 30, 5), 0.0))[:-1]
        )
    with pytest.raises(ValueError, match="not a packed decision"):
        unpack_decision(_flat.pack((1, 2, 3)))
