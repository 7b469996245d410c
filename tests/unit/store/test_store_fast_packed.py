"""The fast channel's packed replies (sans-IO): exact layout, round trips, bad bytes."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest

from mooncake_core.store.errors import ConflictError, ErrorCode, NotFoundError, StoreError
from mooncake_core.store.fast_packed import (
    ReadRun,
    pack_batch_commit,
    pack_commit,
    pack_errors,
    pack_placements,
    pack_read_batch,
    pack_read_versioned,
    pack_reads,
    unpack_batch_commit,
    unpack_commit,
    unpack_errors,
    unpack_placements,
    unpack_read_batch,
    unpack_read_versioned,
    unpack_reads,
)
from mooncake_core.store.objects import Slice
from mooncake_core.store.results import GetResult, ReadRow

A0 = Slice("seg-a", 0, 4096)


def test_one_read_is_the_documented_layout_byte_for_byte() -> None:
    got = pack_reads([(4096, ((A0,),), 5.0, 7)])
    want = (
        struct.pack("<IHH", 1, 1, 5) + b"seg-a"  # one result, one segment name
        + struct.pack("<BQdB", 0, 4096, 5.0, 1)  # ok, size, lease, one replica
        + struct.pack("<HHQQ", 1, 0, 0, 4096)  # one slice: segment 0, offset, length
    )  # fmt: skip
    assert got == want


def test_a_versioned_read_is_the_read_then_run_id_and_version() -> None:
    row: ReadRow = (4096, ((A0,),), 5.0, 7)
    got = pack_read_versioned(row, 0xABC)
    assert got == pack_reads([row]) + struct.pack("<QQ", 0xABC, 7)
    back = unpack_read_versioned("k", got)
    assert back == GetResult("k", 4096, ((A0,),), 5.0, 0xABC << 64 | 7)
    # An error carries no version; a version of 0 (not known) stays 0.
    err = unpack_read_versioned("k", pack_read_versioned(NotFoundError(None, "no"), 0xABC))
    assert isinstance(err, NotFoundError) and err.message == "no"
    assert unpack_read_versioned("k", pack_read_versioned((*row[:3], 0), 0xABC)) == (
        GetResult("k", 4096, ((A0,),), 5.0, 0)
    )
    with pytest.raises(ValueError, match="versioned reply of 15 bytes"):
        unpack_read_versioned("k", bytes(15))
    with pytest.raises(ValueError, match="after the last item"):
        unpack_read_versioned("k", got[:-16] + b"x" + got[-16:])


def test_an_error_is_its_code_and_message() -> None:
    got = pack_reads([NotFoundError(None, "no 'k'")])
    assert got == struct.pack("<IHBI", 1, 0, ErrorCode.OBJECT_NOT_FOUND, 6) + b"no 'k'"


def test_reads_round_trip_with_errors_many_replicas_and_slices() -> None:
    two = (
        (Slice("seg-a", 8192, 100), Slice("seg-b", 0, 28)),
        (Slice("ség-ü", 1 << 40, 128),),
    )
    results: list[ReadRow | StoreError] = [
        (4096, ((A0,),), 5.0, 7),
        NotFoundError(None, "no 'y'"),
        (128, two, 0.25, 8),
        ConflictError(None, ""),
    ]
    back = unpack_reads(["x", "y", "z", "w"], pack_reads(results))
    # The batch reply carries no version: 0, "not known".
    assert back[0] == GetResult("x", 4096, ((A0,),), 5.0)
    assert back[2] == GetResult("z", 128, two, 0.25)
    assert isinstance(back[1], NotFoundError) and back[1].message == "no 'y'"
    assert isinstance(back[3], ConflictError) and back[3].message == ""
    # The key is the caller's: a result is named after the request's key at its place.
    assert [r.key for r in back if isinstance(r, GetResult)] == ["x", "z"]


def test_placements_round_trip() -> None:
    two = ((A0,), (Slice("seg-b", 4096, 10), Slice("seg-a", 4096, 20)))
    results: list[tuple[tuple[Slice, ...], ...] | StoreError] = [
        ((A0,),),
        two,
        ConflictError(None, "exists"),
        (),
    ]
    back = unpack_placements(4, pack_placements(results))
    assert back[:2] == results[:2] and back[3] == ()
    assert isinstance(back[2], ConflictError) and back[2].message == "exists"


@pytest.mark.parametrize(
    ("mangle", "words"),
    [
        (lambda b: b[:-1], "truncated"),
        (lambda b: b + b"\0", "1 bytes after the last item"),
        (lambda b: struct.pack("<I", 3) + b[4:], "3 results for 2 keys"),
        # The slice of the second item names segment 9 of a table of 1.
        (
            lambda b: b.replace(struct.pack("<HQQ", 0, 8192, 1), struct.pack("<HQQ", 9, 8192, 1)),
            "segment index 9 of 1",
        ),
        (lambda b: b.replace(b"seg-a", b"seg-\xff"), "not UTF-8"),
    ],
)
def test_a_reply_that_does_not_parse_raises_naming_the_fault(
    mangle: Callable[[bytes], bytes], words: str
) -> None:
    b = pack_reads(
        [
            (4096, ((A0,),), 5.0, 7),
            (1, ((Slice("seg-a", 8192, 1), Slice("seg-a", 0, 0)),), 5.0, 9),
        ]
    )
    assert len(unpack_reads(["x", "y"], b)) == 2
    with pytest.raises(ValueError, match=words):
        unpack_reads(["x", "y"], mangle(b))


def test_an_unknown_error_code_is_refused() -> None:
    b = struct.pack("<IHBI", 1, 0, 200, 0)
    with pytest.raises(ValueError, match="unknown error code 200"):
        unpack_placements(1, b)


def test_a_huge_count_costs_nothing_before_it_is_refused() -> None:
    with pytest.raises(ValueError, match="4294967295 results for 1 keys"):
        unpack_reads(["x"], struct.pack("<IH", 0xFFFFFFFF, 0))


def test_outcomes_are_one_zero_byte_each_and_errors_round_trip() -> None:
    assert pack_errors([None, None]) == struct.pack("<IH", 2, 0) + b"\0\0"
    assert unpack_errors(2, pack_errors([None, None])) == [None, None]
    mixed: list[StoreError | None] = [
        None,
        ConflictError(ErrorCode.INVALID_STATE, "object 'b' is already complete"),
        None,
    ]
    got = unpack_errors(3, pack_errors(mixed))
    assert got[0] is None and got[2] is None
    assert isinstance(got[1], ConflictError) and got[1].code == ErrorCode.INVALID_STATE
    assert got[1].message == "object 'b' is already complete"
    with pytest.raises(ValueError, match="2 results for 3 keys"):
        unpack_errors(3, pack_errors([None, None]))
    with pytest.raises(ValueError, match="1 bytes after the last item"):
        unpack_errors(2, pack_errors([None, mixed[1]]) + b"\0")
    with pytest.raises(ValueError, match="truncated"):
        unpack_errors(2, pack_errors([None, mixed[1]])[:-3])


def test_a_commit_reply_is_the_grant_id_then_its_placement_or_the_error() -> None:
    assert pack_commit(None) == struct.pack("<Q", 0)
    assert pack_commit((9, ((A0,),))) == struct.pack("<Q", 9) + pack_placements([((A0,),)])
    err = ConflictError(ErrorCode.STALE, "grant 9 is gone")
    assert pack_commit(err) == struct.pack("<Q", 0) + pack_placements([err])
    assert unpack_commit(pack_commit(None)) is None
    assert unpack_commit(pack_commit((9, ((A0,),)))) == (9, ((A0,),))
    back = unpack_commit(pack_commit(err))
    assert isinstance(back, ConflictError) and back.code == ErrorCode.STALE
    for bad in (
        b"\x01",  # truncated
        struct.pack("<Q", 9),  # a grant without replicas
        struct.pack("<Q", 0) + pack_placements([((A0,),)]),  # replicas without a grant
        struct.pack("<Q", 9) + pack_placements([err]),  # a grant with an error
    ):
        with pytest.raises(ValueError):
            unpack_commit(bad)


def test_a_batch_commit_reply_packs_a_run_of_grants_in_one_record() -> None:
    run = [(70 + k, ((Slice("seg-a", 8192 + 4096 * k, 4000),),)) for k in range(3)]
    got = pack_batch_commit([None, None], run)
    outcomes = pack_errors([None, None])
    want = (
        struct.pack("<I", len(outcomes)) + outcomes
        + struct.pack("<IB", 3, 1)  # three grants, form 1: a run
        + struct.pack("<QQQQ", 70, 8192, 4096, 4000)  # first id, start, step, size
        + struct.pack("<H", 5) + b"seg-a"
    )  # fmt: skip
    assert got == want
    assert unpack_batch_commit(2, got) == ([None, None], run)
    assert unpack_batch_commit(2, pack_batch_commit([None, None], [])) == ([None, None], [])
    one = run[:1]
    assert unpack_batch_commit(0, pack_batch_commit([], one)) == ([], one)


@pytest.mark.parametrize(
    "grants",
    [
        # not consecutive ids; another segment; an uneven step; two replicas; going down
        [(1, ((A0,),)), (3, ((Slice("seg-a", 4096, 4096),),))],
        [(1, ((A0,),)), (2, ((Slice("seg-b", 4096, 4096),),))],
        [
            (1, ((A0,),)),
            (2, ((Slice("seg-a", 4096, 4096),),)),
            (3, ((Slice("seg-a", 9000, 4096),),)),
        ],
        [(1, ((A0,), (Slice("seg-b", 0, 4096),))), (2, ((Slice("seg-a", 4096, 4096),),))],
        [(1, ((Slice("seg-a", 4096, 4096),),)), (2, ((A0,),))],
        [(1, ((A0, Slice("seg-a", 4096, 1)),))],
    ],
)
def test_batch_commit_grants_that_are_no_run_go_one_by_one(
    grants: list[tuple[int, tuple[tuple[Slice, ...], ...]]],
) -> None:
    err = ConflictError(ErrorCode.STALE, "grant 4 is gone")
    b = pack_batch_commit([err, None], grants)
    outcomes = pack_errors([err, None])
    assert b[4 + len(outcomes) : 4 + len(outcomes) + 5] == struct.pack("<IB", len(grants), 0)
    errors, back = unpack_batch_commit(2, b)
    assert back == grants and errors[1] is None
    assert isinstance(errors[0], ConflictError) and errors[0].message == "grant 4 is gone"


def test_a_batch_commit_reply_that_does_not_parse_is_refused() -> None:
    run = [(70 + k, ((Slice("seg-a", 4096 * k, 4000),),)) for k in range(3)]
    good = pack_batch_commit([None], run)
    loose = pack_batch_commit([None], [run[0], (99, ((A0,),))])
    n = len(pack_errors([None]))
    for bad, words in (
        (good[:-1], "truncated"),
        (good + b"\0", "after the last item"),
        (good[:2], "truncated"),
        (struct.pack("<I", 999) + good[4:], "outcomes of 999"),
        (good[: 4 + n + 4] + b"\x07" + good[4 + n + 5 :], "form 7"),
        (loose[: 4 + n + 5 + 8] + struct.pack("<Q", 0) + loose[4 + n + 5 + 16 :], "grant 0"),
        (loose[:-3], "truncated"),
    ):
        with pytest.raises(ValueError, match=words):
            unpack_batch_commit(1, bad)
    with pytest.raises(ValueError, match="1 results for 2 keys"):
        unpack_batch_commit(2, good)


def test_a_batch_read_written_through_grants_is_one_run_record() -> None:
    rows: list[ReadRow | StoreError] = [
        (4000, ((Slice("seg-a", 8192 + 4096 * k, 4000),),), 5.0, 30 + k) for k in range(3)
    ]
    got = pack_read_batch(rows)
    want = (
        struct.pack("<B", 1)  # form 1: a run
        + struct.pack("<QdQQ", 4000, 5.0, 8192, 4096)  # size, lease, start, step
        + struct.pack("<H", 5) + b"seg-a"
    )  # fmt: skip
    assert got == want
    back = unpack_read_batch(["x", "y", "z"], got)
    assert isinstance(back, ReadRun)
    assert (back.size, back.lease_ttl_s, back.segment, back.start, back.step) == (
        4000,
        5.0,
        "seg-a",
        8192,
        4096,
    )
    assert back[-1] == back[2] and back[1:] == [back[1], back[2]] and len(back) == 3
    with pytest.raises(IndexError):
        back[3]
    assert unpack_read_batch(["x", "y", "z"], got) == [
        GetResult(k, 4000, ((Slice("seg-a", 8192 + 4096 * n, 4000),),), 5.0)
        for n, k in enumerate(["x", "y", "z"])
    ]


@pytest.mark.parametrize(
    "rows",
    [
        # an error; another lease; another size; an uneven step; two segments; two
        # replicas; two slices; going down
        [(10, ((A0,),), 5.0, 1), NotFoundError(ErrorCode.OBJECT_NOT_FOUND, "no 'y'")],
        [(4096, ((A0,),), 5.0, 1), (4096, ((Slice("seg-a", 4096, 4096),),), 6.0, 2)],
        [(4096, ((A0,),), 5.0, 1), (4000, ((Slice("seg-a", 4096, 4000),),), 5.0, 2)],
        [
            (4096, ((A0,),), 5.0, 1),
            (4096, ((Slice("seg-a", 4096, 4096),),), 5.0, 2),
            (4096, ((Slice("seg-a", 9000, 4096),),), 5.0, 3),
        ],
        [(4096, ((A0,),), 5.0, 1), (4096, ((Slice("seg-b", 4096, 4096),),), 5.0, 2)],
        [(4096, ((A0,), (Slice("seg-b", 0, 4096),)), 5.0, 1)],
        [(4096, ((Slice("seg-a", 0, 2048), Slice("seg-a", 2048, 2048)),), 5.0, 1)],
        [(4096, ((Slice("seg-a", 4096, 4096),),), 5.0, 1), (4096, ((A0,),), 5.0, 2)],
        [(10, ((A0,),), 5.0, 1)],  # the slice is not the object's size
    ],
)
def test_a_batch_read_that_is_no_run_is_the_plain_reply(rows: list[ReadRow | StoreError]) -> None:
    got = pack_read_batch(rows)
    assert got == b"\0" + pack_reads(rows)
    keys = [f"k{n}" for n in range(len(rows))]
    back = unpack_read_batch(keys, got)
    want = unpack_reads(keys, pack_reads(rows))
    assert [repr(x) for x in back] == [repr(x) for x in want]


def test_a_batch_read_reply_that_does_not_parse_is_refused() -> None:
    run = pack_read_batch([(4096, ((A0,),), 5.0, 1)])
    for bad, words in (
        (b"", "empty"),
        (b"\x02" + run[1:], "form 2"),
        (run[:-1], "truncated"),
        (run + b"x", "after the last item"),
        (b"\0" + pack_reads([(4096, ((A0,),), 5.0, 1)]), "1 results for 2 keys"),
    ):
        with pytest.raises(ValueError, match=words):
            unpack_read_batch(["x", "y"], bad)
