"""Store client pieces without a master: buffers, slice plans, local copies, tensors, options."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import typer

from mooncake_cli.store_cmd import parse_duration, parse_size
from mooncake_core.config.models import TransferConfig
from mooncake_core.store.client.batch import chunks
from mooncake_core.store.client.data import Buffers, DataPath, plan
from mooncake_core.store.client.options import ClientOptions, SegmentSpec
from mooncake_core.store.client.tensor import decode, encode
from mooncake_core.store.errors import ErrorCode, InvalidArgumentError
from mooncake_core.store.objects import Slice
from mooncake_core.transfer import OpCode, Region, TransferEngine


@pytest.fixture
def engine() -> Iterator[TransferEngine]:
    eng = TransferEngine(TransferConfig())  # not started: registration only
    yield eng
    eng.close()


def test_plan_walks_slices_in_object_order(engine: TransferEngine) -> None:
    r = engine.register_memory(bytearray(100))
    ops = plan(OpCode.WRITE, r, 10, (Slice("a", 0, 30), Slice("b", 64, 20)))
    assert [(o.offset, o.segment, o.seg_offset, o.length) for o in ops] == [
        (10, "a", 0, 30),
        (40, "b", 64, 20),
    ]


def test_buffers_find_checks_bounds(engine: TransferEngine) -> None:
    bufs = Buffers()
    r1 = engine.register_memory(bytearray(4096))
    r2 = engine.register_memory(bytearray(100))
    bufs.add(r1)
    bufs.add(r2)
    assert bufs.find(r1.address + 96, 4000) == (r1, 96)
    assert bufs.find(r2.address, 100) == (r2, 0)
    for addr, n in ((r1.address + 1, 4096), (r2.address + 50, 51), (1, 4), (0, 1)):
        with pytest.raises(InvalidArgumentError) as ei:
            bufs.find(addr, n)
        assert ei.value.code == ErrorCode.INVALID_PARAMS
    with pytest.raises(InvalidArgumentError, match="already registered"):
        bufs.add(r1)
    assert bufs.remove(r2.address) is r2
    with pytest.raises(InvalidArgumentError, match="no buffer registered"):
        bufs.remove(r2.address)


def test_buffers_find_many_answers_as_find_does_range_by_range(engine: TransferEngine) -> None:
    # A batch looks its ranges up under one lock: each answer (region and offset, or the
    # error and its message) is find's, overlapping registrations and odd types included.
    bufs = Buffers()
    outer = engine.register_memory(bytearray(8192))
    bufs.add(outer)
    inner = Region(outer.address + 4096, 1024, "cpu:0", "inner", None)  # inside outer
    bufs.add(inner)
    base = outer.address
    ranges = [
        (base, 4096),
        (base + 4096, 1024),  # the later start wins, as in find
        (base + 5000, 200),  # past inner's end: find refuses it too
        (base + 100, 0),
        (base - 1, 1),
        (0, 1),
        (True, 1),
        (base, True),
        (float(base), 1),
        (base, -1),
        (base + 8191, 2),
    ]
    got = bufs.find_many([a for a, _ in ranges], [n for _, n in ranges])
    for (a, n), g in zip(ranges, got, strict=True):
        try:
            want: object = bufs.find(a, n)  # type: ignore[arg-type]
        except InvalidArgumentError as exc:
            assert isinstance(g, InvalidArgumentError) and g.message == exc.message
        else:
            assert g == want
    assert got[1] == (inner, 0) and got[0] == (outer, 0)
    assert sum(isinstance(g, InvalidArgumentError) for g in got) == 8


def test_local_segment_copies_and_unknown_segment_fails_its_group(engine: TransferEngine) -> None:
    seg = engine.register_memory(bytearray(64))
    src = bytearray(b"0123456789abcdef")
    dst = bytearray(16)
    rs, rd = engine.register_memory(src), engine.register_memory(dst)

    def directory() -> dict[str, tuple[str, str]]:
        return {}  # the master knows no remote segment

    dp = DataPath(engine, {"own": seg}, directory, 1.0)
    put = plan(OpCode.WRITE, rs, 0, (Slice("own", 8, 10), Slice("own", 40, 6)))
    missing = plan(OpCode.WRITE, rs, 0, (Slice("gone", 0, 16),))
    assert dp.run([put, missing]) == [
        None,
        "segment gone: segment 'gone' is not mounted at the master",
    ]
    assert bytes(seg.view()[8:18]) == b"0123456789" and bytes(seg.view()[40:46]) == b"abcdef"
    get = plan(OpCode.READ, rd, 0, (Slice("own", 8, 10), Slice("own", 40, 6)))
    assert dp.run([get]) == [None]
    assert dst == src
    assert dp.transport_of("own") == "local" and dp.transport_of("gone") == "unknown"
    bad = plan(OpCode.READ, rd, 0, (Slice("own", 60, 16),))
    assert dp.run([bad]) == ["slice own@60+16 outside segment"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_tensor_encoding_round_trips(dtype: torch.dtype) -> None:
    t = (torch.arange(24) % 3).to(dtype).reshape(2, 3, 4)
    back = decode("k", encode(t))
    assert back.dtype == dtype and back.shape == t.shape and torch.equal(back, t)
    assert decode("k", encode(torch.empty(0, 5))).shape == (0, 5)
    with pytest.raises(InvalidArgumentError, match="not a tensor stored by put_tensor"):
        decode("k", b"plain bytes")
    with pytest.raises(InvalidArgumentError, match=r"CPU torch\.Tensor"):
        encode([1, 2])  # type: ignore[arg-type]


def test_options_refuse_bad_segments_and_transport() -> None:
    with pytest.raises(InvalidArgumentError, match="without '/'"):
        ClientOptions(segments=(SegmentSpec("a/b", 10),))
    with pytest.raises(InvalidArgumentError, match="repeat"):
        ClientOptions(segments=(SegmentSpec("a", 10), SegmentSpec("a", 10)))
    with pytest.raises(InvalidArgumentError, match="size must be > 0"):
        ClientOptions(segments=(SegmentSpec("a", 0),))
    with pytest.raises(InvalidArgumentError, match="transport"):
        ClientOptions(transport="rdma")  # type: ignore[arg-type]
    assert ClientOptions(transport="tcp").engine_config().protocol == "tcp"


def test_cli_size_and_duration_parsing() -> None:
    assert parse_size("256MiB") == 256 << 20
    assert parse_size("1g") == 1 << 30
    assert parse_size("4096") == 4096
    assert parse_size("2MB") == 2_000_000
    assert parse_duration("30m") == 1800.0
    assert parse_duration("1.5") == 1.5
    assert parse_duration("2h") == 7200.0
    with pytest.raises(typer.BadParameter, match="bad size"):
        parse_size("12 parsecs")
    for bad in ("", "-5m", "5 weeks"):
        with pytest.raises(typer.BadParameter, match="bad duration"):
            parse_duration(bad)


def test_batch_chunks_split_big_batches_only() -> None:
    KiB, MiB = 1 << 10, 1 << 20
    assert chunks(list(range(64)), [4 * KiB] * 64) == [list(range(64))]
    assert chunks([], []) == []
    big = chunks(list(range(64)), [MiB] * 64)
    assert [len(c) for c in big] == [16, 16, 16, 16]
    assert [i for c in big for i in c] == list(range(64))
    assert chunks([0, 1, 2], [64 * MiB] * 3) == [[0], [1], [2]]
    assert chunks([5, 7], [0, 0, 0, 0, 0, 6 * MiB, 0, 1 * MiB]) == [[5, 7]]
