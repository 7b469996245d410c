"""Connector call sequences through the ``mooncake`` package, against a real
``mooncake_master`` (and a real ``mooncake_client`` for dummy clients), CPU buffers.

- SGLang HiCache's Mooncake backend (default path): 7-argument ``setup``, the
  ``/get_all_segments`` server check, a 4 KB put/is_exist/get warm-up, host KV pool
  registered with ``register_buffer``, ``batch_set`` = ``batch_is_exist`` then
  ``batch_put_from`` of the pages not yet stored (MHA pages as ``{hash}_{rank}_k`` and
  ``_v``), ``batch_get`` = ``batch_get_into``, prefix hits = leading ones of
  ``batch_is_exist``.
- LMCache's Mooncake backend: ``put_parts`` (metadata header + KV bytes),
  ``get_buffer`` read back, ``is_exist``/``batch_is_exist``, and its zero-copy path
  (``register_buffer``, ``batch_put_from`` with a ``ReplicateConfig`` preferring the
  local segment, ``batch_get_into``), ``remove``.
- Dummy clients (``setup_dummy``) attached to a ``mooncake_client``: their objects live
  in the standalone client's segment and other clients see them.

Every check is byte-identical data and upstream's return codes.
"""

from __future__ import annotations

import ctypes
import os
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
from compat_master import LEASE_MS, UpstreamMaster
from store_client_procs import free_port

from mooncake.store import MooncakeDistributedStore, ReplicateConfig
from mooncake_core.store.objects import replica_segments

pytestmark = pytest.mark.integration
SEG = 64 << 20
BUF = 16 << 20
PAGE = 4096  # bytes of one page's K (or V) of one layer set, as the host pool lays it out


def _store(master: UpstreamMaster) -> MooncakeDistributedStore:
    s = MooncakeDistributedStore()
    assert s.setup("localhost", "P2PHANDSHAKE", SEG, BUF, "tcp", "", master.address) == 0
    return s


@pytest.fixture
def two_stores(master: UpstreamMaster) -> Iterator[tuple[MooncakeDistributedStore, ...]]:
    a, b = _store(master), _store(master)
    yield a, b
    a.close()
    b.close()


def _segments(master: UpstreamMaster) -> list[str]:
    with urllib.request.urlopen(f"http://{master.metrics}/get_all_segments", timeout=10) as r:
        return r.read().decode().split()


def test_sglang_hicache_default_path(
    master: UpstreamMaster, two_stores: tuple[MooncakeDistributedStore, ...]
) -> None:
    writer, reader = two_stores
    # server check: the master lists this client's segment
    assert writer.get_hostname() in _segments(master)
    # warm-up
    warm = os.urandom(4096)
    assert writer.put("sglang_mooncake_store_warmup_key", warm) == 0
    assert writer.is_exist("sglang_mooncake_store_warmup_key") == 1
    assert writer.get("sglang_mooncake_store_warmup_key") == warm

    # host KV pool: 8 pages x (K, V), registered once
    pages = 8
    pool = np.frombuffer(os.urandom(pages * 2 * PAGE), dtype=np.uint8).copy()
    base = pool.ctypes.data
    assert writer.register_buffer(base, pool.nbytes) == 0
    hashes = [f"h{i:04d}" for i in range(pages)]
    keys = [f"{h}_0_{kv}" for h in hashes for kv in ("k", "v")]
    ptrs = [base + i * PAGE for i in range(2 * pages)]
    sizes = [PAGE] * (2 * pages)

    # batch_set: skip what exists, zero-copy put of the rest (first half, then all)
    exist = writer.batch_is_exist(keys[:8])
    assert exist == [0] * 8
    assert writer.batch_put_from(keys[:8], ptrs[:8], sizes[:8]) == [0] * 8
    exist = writer.batch_is_exist(keys)
    todo = [i for i, e in enumerate(exist) if e != 1]
    assert todo == list(range(8, 16))
    res = writer.batch_put_from(
        [keys[i] for i in todo], [ptrs[i] for i in todo], [sizes[i] for i in todo]
    )
    assert res == [0] * 8
    # a repeated batch_set of stored pages: upstream returns 0 for each
    assert writer.batch_put_from(keys[:2], ptrs[:2], sizes[:2]) == [0, 0]

    # prefix hit count on another instance: leading ones of batch_is_exist
    probe = [*keys[:6], "h9999_0_k", *keys[6:8]]
    got = reader.batch_is_exist(probe)
    hits = next((i for i, e in enumerate(got) if e != 1), len(got))
    assert hits == 6

    # batch_get into the reader's own host pool
    dst = np.zeros(pages * 2 * PAGE, dtype=np.uint8)
    dbase = dst.ctypes.data
    assert reader.register_buffer(dbase, dst.nbytes) == 0
    dptrs = [dbase + i * PAGE for i in range(2 * pages)]
    assert reader.batch_get_into(keys, dptrs, sizes) == [PAGE] * (2 * pages)
    assert dst.tobytes() == pool.tobytes()
    # a miss is upstream's OBJECT_NOT_FOUND in its slot, the others still land
    r = reader.batch_get_into(["h9999_0_k", keys[0]], dptrs[:2], sizes[:2])
    assert r == [-704, PAGE]
    assert reader.unregister_buffer(dbase) == 0
    assert writer.unregister_buffer(base) == 0


def test_lmcache_backend_sequence(
    master: UpstreamMaster, two_stores: tuple[MooncakeDistributedStore, ...]
) -> None:
    local, remote = two_stores
    kv = os.urandom(256 << 10)
    meta = struct.pack("<iiii", 1, 2, 256, 0)  # LMCache's RemoteMetadata-like header
    key = "lmcache@model@1@0@abcdef"
    assert local.is_exist(key) == 0
    assert local.put_parts(key, meta, kv) == 0
    assert remote.is_exist(key) == 1
    assert remote.get_size(key) == len(meta) + len(kv)
    buf = remote.get_buffer(key)
    assert buf is not None and buf.size() == len(meta) + len(kv)
    assert bytes(buf[: len(meta)]) == meta and bytes(buf[len(meta) :]) == kv
    assert remote.get_buffer("lmcache@missing") is None

    # zero-copy path: registered chunk pool, local segment preferred
    chunks = 4
    pool = (ctypes.c_ubyte * (chunks * 64 << 10))()
    ptr = ctypes.addressof(pool)
    ctypes.memmove(ptr, os.urandom(len(pool)), len(pool))
    assert local.register_buffer(ptr, len(pool)) == 0
    cfg = ReplicateConfig()
    cfg.replica_num = 1
    cfg.preferred_segment = local.get_hostname()
    ckeys = [f"lmcache@model@1@0@chunk{i}" for i in range(chunks)]
    cptrs = [ptr + i * (64 << 10) for i in range(chunks)]
    csizes = [64 << 10] * chunks
    assert local.batch_put_from(ckeys, cptrs, csizes, cfg) == [0] * chunks
    assert remote.batch_is_exist([*ckeys, "lmcache@x"]) == [1] * chunks + [0]
    out = (ctypes.c_ubyte * len(pool))()
    optr = ctypes.addressof(out)
    assert remote.register_buffer(optr, len(out)) == 0
    got = remote.batch_get_into(ckeys, [optr + i * (64 << 10) for i in range(chunks)], csizes)
    assert got == csizes
    assert bytes(out) == bytes(pool)
    # the preferred segment held the replicas
    for k in ckeys:
        held = set().union(*(replica_segments(r) for r in local.core.stat(k).replicas))
        assert held == {local.get_hostname()}
    time.sleep(LEASE_MS / 1000 + 0.3)
    assert [local.remove(k) for k in [key, *ckeys]] == [0] * (chunks + 1)
    assert remote.is_exist(key) == 0
    assert local.unregister_buffer(ptr) == 0
    assert remote.unregister_buffer(optr) == 0


def _start_standalone(master: UpstreamMaster, port: int) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "mooncake.client_main",
        f"--master_server_address={master.address}",
        f"--port={port}",
        "--global_segment_size=64MB",
    ]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert proc.stderr is not None
    line = proc.stderr.readline().decode()
    assert "serving dummy clients" in line, line
    return proc


def test_dummy_clients_live_in_the_standalone_clients_segment(master: UpstreamMaster) -> None:
    port = free_port()
    proc = _start_standalone(master, port)
    a = MooncakeDistributedStore()
    b = MooncakeDistributedStore()
    try:
        assert a.setup_dummy(256 << 20, 16 << 20, f"127.0.0.1:{port}") == 0
        assert b.setup_dummy(256 << 20, 16 << 20, f"127.0.0.1:{port}") == 0
        segs = _segments(master)
        assert a.get_hostname() not in segs  # a dummy hosts nothing
        data = os.urandom(100_000)
        assert a.put("dummy/x", data) == 0
        assert b.get("dummy/x") == data
        (rep,) = a.core.stat("dummy/x").replicas
        assert replica_segments(rep) <= set(segs)  # the standalone client's segment
        ptr = a.alloc_from_mem_pool(1 << 20)
        assert ptr != 0 and ptr % 64 == 0
        assert a.alloc_from_mem_pool(512 << 20) == 0  # past the pool
        assert a.register_buffer(ptr, 1 << 20) == 0
        assert a.get_into("dummy/x", ptr, 1 << 20) == len(data)
        assert ctypes.string_at(ptr, len(data)) == data
        assert a.put_from("dummy/y", ptr, len(data)) == 0
        assert b.get("dummy/y") == data
        assert MooncakeDistributedStore().alloc_from_mem_pool(10) == 0  # not a dummy
    finally:
        a.close()
        b.close()
        proc.terminate()
        proc.wait(15)
    # nothing answers there any more: upstream's RPC_FAIL, one log line
    assert MooncakeDistributedStore().setup_dummy(1 << 20, 1 << 20, f"127.0.0.1:{port}") == -900
