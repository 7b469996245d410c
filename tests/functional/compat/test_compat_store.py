"""Upstream's ``mooncake.store`` surface against a real ``mooncake_master`` (no mocks).

Each test is one behaviour upstream's integrations rely on: return codes, put of an
existing key, the two ``setup`` forms, ``get_hostname``, soft-pin actions, ranged and
multi-buffer batch reads/writes (vLLM's store connector), ``/get_all_segments``
(SGLang's check) and mounting a closed client's segment name again at once.
"""

from __future__ import annotations

import ctypes
import time
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
from compat_master import LEASE_MS, UpstreamMaster

from mooncake.store import MooncakeDistributedStore, ReplicateConfig, SoftPinAction

pytestmark = pytest.mark.integration
SEG = 64 << 20
BUF = 16 << 20


def _setup(master: UpstreamMaster, hostname: str = "localhost") -> MooncakeDistributedStore:
    s = MooncakeDistributedStore()
    rc = s.setup(hostname, "P2PHANDSHAKE", SEG, BUF, "tcp", "", master.address)
    assert rc == 0
    return s


@pytest.fixture
def store(master: UpstreamMaster) -> Iterator[MooncakeDistributedStore]:
    s = _setup(master)
    yield s
    s.close()


def test_return_codes_and_put_of_existing_key(store: MooncakeDistributedStore) -> None:
    assert store.put("rc/a", b"first") == 0
    assert store.put("rc/a", b"second") == 0  # upstream: success, object kept
    assert store.get("rc/a") == b"first"
    assert store.upsert("rc/a", b"third!") == -706  # the get holds a read lease
    time.sleep(LEASE_MS / 1000 + 0.3)
    assert store.upsert("rc/a", b"third!") == 0
    assert store.get("rc/a") == b"third!"
    assert store.get_size("rc/a") == 6
    assert store.is_exist("rc/a") == 1
    assert store.is_exist("rc/missing") == 0
    assert store.batch_is_exist(["rc/a", "rc/missing"]) == [1, 0]
    assert store.get("rc/missing") == b""
    assert store.get_size("rc/missing") == -704
    assert store.remove("rc/a") == -706  # the get above holds a lease
    time.sleep(LEASE_MS / 1000 + 0.3)
    assert store.remove("rc/a") == 0
    assert store.remove("rc/a") == -704
    assert store.put("", b"x") == -400
    assert store.put("rc/empty", b"") == -600
    assert store.health_check() == 0


def test_setup_forms_hostname_and_refusals(master: UpstreamMaster) -> None:
    s = MooncakeDistributedStore()
    assert s.health_check() == 1
    cfg = {
        "local_hostname": "localhost",
        "metadata_server": "P2PHANDSHAKE",
        "global_segment_size": "16 MB",
        "local_buffer_size": "1MB",
        "protocol": "tcp",
        "master_server_addr": master.address,
    }
    assert s.setup(cfg) == 0
    host, port = s.get_hostname().split(":")
    assert host == "localhost" and 12300 <= int(port) <= 14300
    assert s.put("setup/k", b"v" * 1000) == 0
    assert s.put("setup/big", b"v" * (2 << 20)) == -600  # larger than local_buffer_size
    assert s.is_exist("setup/big") == 0
    assert s.close() == 0
    bad = MooncakeDistributedStore()
    assert bad.setup({**cfg, "global_segment_size": "50%"}) == -600
    assert bad.setup({**cfg, "local_hostname": ""}) == -600
    assert bad.setup("localhost", "P2PHANDSHAKE", SEG, BUF, "ascend", "", master.address) == -600
    assert bad.close() == 0


def test_replicate_config_and_soft_pin_actions(store: MooncakeDistributedStore) -> None:
    cfg = ReplicateConfig()
    assert (cfg.replica_num, cfg.soft_pin_action, cfg.soft_pin_ttl_ms) == (
        1,
        SoftPinAction.PRESERVE,
        None,
    )
    cfg.replica_num = 3
    assert "3" in str(cfg)
    with pytest.raises(TypeError):
        cfg.soft_pin_ttl_ms = -1
    with pytest.raises(TypeError):
        cfg.replica_num = "2"  # type: ignore[assignment]

    ttl_only = ReplicateConfig()
    ttl_only.soft_pin_ttl_ms = 1000
    assert store.put("pin/k", b"v", ttl_only) == -600  # a TTL needs ENABLE (upstream)
    enable = ReplicateConfig()
    enable.soft_pin_action = SoftPinAction.ENABLE
    enable.soft_pin_ttl_ms = 60_000
    assert store.put("pin/k", b"v", enable) == 0
    assert "pin/k" in {p.target for p in store.core.list_pins()}
    disable = ReplicateConfig()
    disable.soft_pin_action = SoftPinAction.DISABLE
    assert store.upsert("pin/k", b"w", disable) == 0
    assert "pin/k" not in {p.target for p in store.core.list_pins()}
    assert store.get("pin/k") == b"w"


def test_get_into_ranges_exact(store: MooncakeDistributedStore) -> None:
    d1, d2 = bytes(range(48, 84)), bytes(range(97, 133))
    assert store.put("rng/1", d1) == 0 and store.put("rng/2", d2) == 0
    buf = (ctypes.c_ubyte * 32)()
    ptr = ctypes.addressof(buf)
    assert store.register_buffer(ptr, 32) == 0
    ctypes.memset(buf, ord("_"), 32)
    res = store.get_into_ranges(
        [ptr], [["rng/1", "rng/2", "rng/none"]], [[[0, 10], [20], [28]]], [[[1, 30], [2], [0]]],
        [[[4, 3], [5], [4]]],
    )  # fmt: skip
    assert res[0][0] == [4, 3] and res[0][1] == [5] and res[0][2][0] == -704
    assert bytes(buf[0:4]) == d1[1:5] and bytes(buf[10:13]) == d1[30:33]
    assert bytes(buf[20:25]) == d2[2:7] and bytes(buf[4:10]) == b"_" * 6
    over = store.get_into_ranges([ptr], [["rng/1"]], [[[30]]], [[[0]]], [[[4]]])
    assert over[0][0][0] < 0 and bytes(buf[30:32]) == b"__"
    assert store.unregister_buffer(ptr) == 0


def test_multi_buffer_batches_vllm_store_connector(store: MooncakeDistributedStore) -> None:
    # vLLM's MooncakeStoreConnector: each key is several KV blocks of one registered pool
    rng = np.random.default_rng(7)
    src = rng.integers(0, 256, 1 << 20, dtype=np.uint8)
    dst = np.zeros(1 << 20, dtype=np.uint8)
    sp, dp = src.ctypes.data, dst.ctypes.data
    assert store.register_buffer(sp, src.nbytes) == 0
    assert store.register_buffer(dp, dst.nbytes) == 0
    keys = [f"vllm/{i}" for i in range(4)]
    ptrs = [[sp + i * 65536, sp + 500_000 + i * 4096] for i in range(4)]
    sizes = [[65536, 4096] for _ in range(4)]
    assert store.batch_put_from_multi_buffers(keys, ptrs, sizes) == [0, 0, 0, 0]
    assert store.batch_put_from_multi_buffers(keys, ptrs, sizes) == [0, 0, 0, 0]  # existing
    out = [[dp + i * 100_000, dp + i * 100_000 + 70_000] for i in range(4)]
    assert store.batch_get_into_multi_buffers(keys, out, sizes) == [69632] * 4
    for i in range(4):
        want = np.concatenate([src[i * 65536 : (i + 1) * 65536], src[500_000 + i * 4096 :][:4096]])
        got = np.concatenate([dst[i * 100_000 :][:65536], dst[i * 100_000 + 70_000 :][:4096]])
        assert np.array_equal(want, got)
    assert store.batch_get_into_multi_buffers(keys[:2], out, sizes) == [-600, -600]
    assert store.batch_get_into_multi_buffers(["vllm/none"], out[:1], sizes[:1]) == [-704]
    assert store.batch_get_into_multi_buffers(keys[:1], out[:1], [[1024, 1024]]) == [-600]


def test_get_all_segments_lists_mounted_clients(
    master: UpstreamMaster, store: MooncakeDistributedStore
) -> None:
    with urllib.request.urlopen(f"http://{master.metrics}/get_all_segments", timeout=10) as r:
        names = r.read().decode().splitlines()
    assert store.get_hostname() in names


def test_closed_segment_name_mounts_again_at_once(master: UpstreamMaster) -> None:
    from store_client_procs import free_port

    name = f"localhost:{free_port()}"
    a = _setup(master, name)
    assert a.get_hostname() == name
    assert a.put("remount/k", b"old") == 0
    assert a.close() == 0
    t0 = time.monotonic()
    b = _setup(master, name)  # same host:port at once (upstream has no unmount grace)
    took = time.monotonic() - t0
    try:
        assert b.get("remount/k") == b""  # the closed client's objects went with it
        assert b.put("remount/k", b"new") == 0
        assert b.get("remount/k") == b"new"
    finally:
        b.close()
    print(f"remount of {name} after close: setup took {took * 1000:.0f} ms")
    assert took < 5.0


@pytest.mark.parametrize(("force", "want"), [("", "shm"), ("1", "tcp")])
def test_mc_force_tcp_sends_same_host_traffic_over_tcp(
    master: UpstreamMaster, monkeypatch: pytest.MonkeyPatch, force: str, want: str
) -> None:
    """Protocol ``tcp`` reaches a same-host segment over shm, unless upstream's
    ``MC_FORCE_TCP`` asks for tcp everywhere (as upstream then uses its TCP transport)."""
    host = _setup(master, "localhost")
    monkeypatch.setenv("MC_FORCE_TCP", force)
    reader = MooncakeDistributedStore()
    assert reader.setup("localhost", "P2PHANDSHAKE", 0, BUF, "tcp", "", master.address) == 0
    try:
        assert host.put("force/a", b"x" * 4096) == 0
        assert reader.get("force/a") == b"x" * 4096
        snap = reader._client.transfer_snapshot()  # type: ignore[union-attr]
        moved = {t: snap.transport(t).bytes for t in ("shm", "tcp")}
        assert moved[want] == 4096 and sum(moved.values()) == 4096, moved
    finally:
        reader.close()
        host.close()
