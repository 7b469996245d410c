"""Exact unit tests of ``mooncake_client``'s flags, the dummy client's pool and the
tensor-parallel split."""

from __future__ import annotations

import pytest
import torch

from mooncake._dummy import MemPool
from mooncake._tensors import _shards, tp_key
from mooncake.client_main import ClientFlags, parse_flags
from mooncake.master import FlagError


def test_client_flags_upstream_defaults_and_spellings() -> None:
    f = parse_flags([])
    assert (f.host, f.master, f.port, f.global_segment_size) == (
        "127.0.0.1",
        "127.0.0.1:50051",
        50052,
        4 << 30,
    )
    f = parse_flags(
        [
            "--host=0.0.0.0",
            "--port",
            "6000",
            "--global_segment_size=1.5 GB",
            "--master_server_address=10.0.0.1:7000",
            "--threads=4",
        ]
    )
    assert f == ClientFlags(
        "127.0.0.1",
        "10.0.0.1:7000",
        "tcp",
        6000,
        int(1.5 * (1 << 30)),
        0,
        ["--threads is not used here; ignored"],
    )
    assert parse_flags(["--enable_offload=false", "--tenant_id=default"]).warnings == []


@pytest.mark.parametrize(
    ("argv", "msg"),
    [
        (["--lease-ttl=5"], "unknown flag --lease-ttl"),
        (["--global_segment_size=50%"], "--global_segment_size: expected a size"),
        (["--global_segment_size=0"], "must be > 0"),
        (["--port=0"], "--port: 0 is not a port"),
        (["--enable_offload=true"], "--enable_offload is not supported"),
        (["--tenant_id=t1"], "--tenant_id is not supported"),
    ],
)
def test_client_flags_refused_in_one_line(argv: list[str], msg: str) -> None:
    with pytest.raises(FlagError, match=msg) as e:
        parse_flags(argv)
    assert "\n" not in str(e.value)


def test_mem_pool_bump_allocation_is_aligned_and_bounded() -> None:
    p = MemPool(1024)
    a = p.alloc(10)
    b = p.alloc(10)
    assert a % 64 == 0 and b - a == 64
    assert p.alloc(1024) == 0  # does not fit after the first two
    assert p.alloc(0) == 0
    c = p.alloc(1024 - 128)
    assert c - a == 128
    assert p.alloc(1) == 0
    with pytest.raises(Exception, match="mem_pool_size"):
        MemPool(0)


def test_tp_shards_match_torch_chunk_and_refuse_bad_splits() -> None:
    t = torch.arange(12.0).reshape(3, 4)
    parts = _shards(t, 2, 1)
    assert isinstance(parts, list) and [tuple(p.shape) for p in parts] == [(3, 2), (3, 2)]
    assert all(p.is_contiguous() for p in parts)
    z = torch.empty((2, 0, 3))
    zp = _shards(z, 2, 0)
    assert isinstance(zp, list) and [tuple(p.shape) for p in zp] == [(1, 0, 3), (1, 0, 3)]
    assert _shards(t, 4, 0) == -600  # 3 rows cannot make 4 shards
    assert _shards(t, 2, 2) == -600
    assert _shards(torch.tensor(1.0), 2, 0) == -600
    assert _shards(b"x", 2, 0) == -600
    assert tp_key("k", 3) == "k_tp_3"
