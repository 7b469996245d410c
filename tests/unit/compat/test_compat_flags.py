"""Exact unit tests of the adapter's pure parts: master flags, sizes, codes, ranges."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

from mooncake._codes import to_code
from mooncake._ranges import Registry, ranged_reads, scatter
from mooncake._sizes import parse_duration_ms, parse_size
from mooncake.master import FlagError, _config, parse_flags
from mooncake_core.store.errors import ErrorCode, UnavailableError, error_from_code


def test_master_flags_upstream_syntax() -> None:
    f = parse_flags(["--default_kv_lease_ttl=500", "--rpc_port", "50099", "-metrics_port=9111"])
    assert (f.lease_ttl_ms, f.port, f.metrics_port) == (500.0, 50099, 9111)
    f = parse_flags(["--default_kv_lease_ttl=5s", "--enable_http_metadata_server"])
    assert (f.lease_ttl_ms, f.http_metadata) == (5000.0, True)
    f = parse_flags(
        ["--eviction_high_watermark_ratio=0.8", "--eviction_ratio=0.1", "--rpc_thread_num=8"]
    )
    assert (f.high_watermark, f.eviction_ratio) == (0.8, 0.1)
    assert f.warnings == ["--rpc_thread_num tunes upstream's internals; ignored"]
    assert (
        parse_flags(["--enable_ha=false", "--noenable_http_metadata_server"]).http_metadata is False
    )
    f = parse_flags(["--put_start_discard_timeout_sec=20", "--put_start_release_timeout_sec=90"])
    cfg = _config(f)
    assert (cfg.put_timeout_s, cfg.put_release_s) == (20.0, 90.0)  # type: ignore[attr-defined]
    with pytest.raises(FlagError, match=r"--put_start_release_timeout_sec \(10\) must be at least"):
        _config(parse_flags(["--put_start_release_timeout_sec=10"]))


@pytest.mark.parametrize(
    ("argv", "msg"),
    [
        (["--enable_ha=true"], "--enable_ha is not supported here: HA masters"),
        (["--lease-ttl=3"], "unknown flag --lease-ttl"),
        (["--default_kv_lease_ttl=soon"], "--default_kv_lease_ttl: expected a duration"),
        (["--port=x"], "--port: expected a number"),
    ],
)
def test_master_flags_refused_with_one_line(argv: list[str], msg: str) -> None:
    with pytest.raises(FlagError, match=msg):
        parse_flags(argv)


def test_master_refusal_is_one_line_without_traceback() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "mooncake.master", "--lease-ttl=3"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "mooncake_master: unknown flag --lease-ttl (see mooncake_master --help)"
    ]


def test_sizes_and_durations() -> None:
    assert [parse_size(v) for v in ("16MB", "16 MB", "1.5 GB", "1048576", "2k", 7)] == [
        16 << 20, 16 << 20, 3 << 29, 1 << 20, 2048, 7
    ]  # fmt: skip
    assert [parse_size(v) for v in ("50%", "-1", "lots", "", True)] == [None] * 5
    assert [parse_duration_ms(v) for v in ("500", "500ms", "2s", "1m", "1h", "x")] == [
        500.0, 500.0, 2000.0, 60000.0, 3600000.0, None
    ]  # fmt: skip


def test_error_codes_are_upstreams() -> None:
    assert to_code(error_from_code(ErrorCode.OBJECT_NOT_FOUND, "x")) == -704
    assert to_code(error_from_code(ErrorCode.OBJECT_ALREADY_EXISTS, "x")) == -705
    assert to_code(error_from_code(ErrorCode.OBJECT_LEASED, "x")) == -706
    assert to_code(error_from_code(ErrorCode.STORE_FULL, "x")) == -200
    assert to_code(error_from_code(ErrorCode.INVALID_KEY, "x")) == -400
    assert to_code(UnavailableError(None, "get 'k': none of 1 replicas readable")) == -800
    assert to_code(UnavailableError(None, "master 127.0.0.1:1 unreachable")) == -900


def test_ranged_reads_and_scatter_exact() -> None:
    buf = (ctypes.c_ubyte * 16)()
    ptr = ctypes.addressof(buf)
    reg = Registry()
    reg.add(ptr, 16)
    assert (reg.capacity(ptr + 4), reg.capacity(ptr + 16), reg.capacity(ptr - 1)) == (12, 0, 0)
    values: dict[str, bytes | int] = {"a": b"abcdefgh", "m": -704}
    res = ranged_reads(
        reg, values.__getitem__, [ptr], [["a", "m"]], [[[0, 8, 14], [2]]], [[[1, 6, 0], [0]]],
        [[[3, 2, 4], [1]]],
    )  # fmt: skip
    assert res == [[[3, 2, -600], [-704]]]
    assert bytes(buf[0:3]) == b"bcd" and bytes(buf[8:10]) == b"gh"
    assert ranged_reads(reg, values.__getitem__, [ptr], [["a"]], [[[0], []]], [[[0]]], [[[1]]]) == [
        [[-600]]
    ]
    out = (ctypes.c_ubyte * 8)()
    o = ctypes.addressof(out)
    assert scatter(b"123456", [o, o + 5], [3, 3]) == 6 and bytes(out) == b"123\x00\x00456"
    assert scatter(b"123456", [o], [5]) == -600


def test_config_path_json_and_env(tmp_path: Path) -> None:
    from mooncake.config import ConfigError, load_setup_dict

    f = tmp_path / "mooncake.json"
    f.write_text(
        '{"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE", '
        '"global_segment_size": "64MB", "protocol": "tcp", "device_name": "", '
        '"master_server_address": "127.0.0.1:50051", "transfer_timeout": 1}'
    )
    assert load_setup_dict({"MOONCAKE_CONFIG_PATH": str(f)}) == {
        "local_hostname": "localhost",
        "metadata_server": "P2PHANDSHAKE",
        "global_segment_size": "64MB",
        "protocol": "tcp",
        "rdma_devices": "",
        "master_server_addr": "127.0.0.1:50051",
    }
    assert load_setup_dict({"MOONCAKE_MASTER": "10.0.0.1:50051", "MOONCAKE_PROTOCOL": "tcp"}) == {
        "master_server_addr": "10.0.0.1:50051",
        "protocol": "tcp",
        "local_hostname": "localhost",
        "metadata_server": "P2PHANDSHAKE",
    }
    f.write_text('{"master_server_address": "x:1", "ipc_socket_path": "/tmp/s"}')
    with pytest.raises(ConfigError, match="field 'ipc_socket_path' is not supported"):
        load_setup_dict({"MOONCAKE_CONFIG_PATH": str(f)})
    f.write_text('{"master_server_address": "x:1", "colour": "blue"}')
    with pytest.raises(ConfigError, match="unknown field 'colour'"):
        load_setup_dict({"MOONCAKE_CONFIG_PATH": str(f)})
    with pytest.raises(ConfigError, match="set MOONCAKE_CONFIG_PATH or MOONCAKE_MASTER"):
        load_setup_dict({})
