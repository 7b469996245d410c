"""Upstream's ``mooncake.engine.TransferEngine`` between two real processes (no mocks).

The peer is a separate Python process running ``mooncake.engine`` (P2PHANDSHAKE, as
SGLang's PD and vLLM's P2P connectors start it) with numpy KV buffers registered by
address; it answers line commands on stdin (dump a range, unregister, counters) so the
test can check on the peer's side what arrived. Each test is one connector's call
sequence with CPU buffers, byte-identical, or a refusal of a raw address outside the
peer's registered memory.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from mooncake.engine import TransferEngine, TransferOpcode

pytestmark = pytest.mark.integration

PEER = r"""
import json, sys
import numpy as np
from mooncake.engine import TransferEngine

eng = TransferEngine()
assert eng.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0
layers = [np.zeros(n, dtype=np.uint8) for n in json.loads(sys.argv[1])]
ptrs = [int(a.ctypes.data) for a in layers]
lens = [int(a.nbytes) for a in layers]
assert eng.batch_register_memory(ptrs, lens) == 0
print(json.dumps({"session": f"127.0.0.1:{eng.get_rpc_port()}", "bufs": list(zip(ptrs, lens))}),
      flush=True)
by_addr = {p: a for p, a in zip(ptrs, layers)}
for line in sys.stdin:
    cmd = json.loads(line)
    op = cmd["op"]
    if op == "dump":
        arr = by_addr[cmd["base"]]
        print(json.dumps({"hex": arr.tobytes().hex()}), flush=True)
    elif op == "unregister":
        print(json.dumps({"rc": eng.unregister_memory(cmd["base"])}), flush=True)
    elif op == "stats":
        nic = eng.get_engine().snapshot().nics[0]
        print(json.dumps({"bounds_errors": nic.bounds_errors}), flush=True)
    elif op == "quit":
        break
"""


class Peer:
    """The peer process: its session id, registered buffers and line commands."""

    def __init__(self, sizes: list[int]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PEER, json.dumps(sizes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        hello = self._line()
        self.session: str = hello["session"]
        self.bufs: list[tuple[int, int]] = [tuple(b) for b in hello["bufs"]]

    def _line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"peer exited: {err[-2000:]}")
        return dict(json.loads(line))

    def call(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._line()

    def dump(self, base: int) -> bytes:
        return bytes.fromhex(self.call(op="dump", base=base)["hex"])

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(AssertionError, OSError):
                self.call(op="quit")
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def peer() -> Iterator[Peer]:
    p = Peer([1 << 20, 256 << 10, 64 << 10])
    yield p
    p.close()


@pytest.fixture
def engine() -> Iterator[TransferEngine]:
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == 0
    yield e
    e.close()


def _local(engine: TransferEngine, n: int, seed: int) -> tuple[np.ndarray, int]:
    arr = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)
    ptr = int(arr.ctypes.data)
    assert engine.register_memory(ptr, n) == 0
    return arr, ptr


def test_sglang_pd_transfer_engine_sequence(engine: TransferEngine, peer: Peer) -> None:
    """SGLang PD: prefill writes KV pages into decode's registered buffers by address."""
    session = f"127.0.0.1:{engine.get_rpc_port()}"  # SGLang's get_session_id()
    assert session.endswith(str(engine.get_rpc_port())) and engine.get_rpc_port() > 0
    (dst, dst_len), (aux, aux_len) = peer.bufs[0], peer.bufs[2]
    kv, kv_ptr = _local(engine, dst_len, seed=1)
    meta, meta_ptr = _local(engine, aux_len, seed=2)
    # transfer_sync: one contiguous page range; batch_transfer_sync: scattered pages.
    assert engine.transfer_sync_write(peer.session, kv_ptr, dst, 4096 * 16) == 0
    page = 4096
    idx = list(range(16, dst_len // page, 3))
    src = [kv_ptr + i * page for i in idx]
    dsts = [dst + i * page for i in idx]
    assert engine.batch_transfer_sync_write(peer.session, src, dsts, [page] * len(idx)) == 0
    assert engine.transfer_sync(peer.session, meta_ptr, aux, aux_len, TransferOpcode.Write) == 0
    expect = np.zeros(dst_len, dtype=np.uint8)
    expect[: 16 * page] = kv[: 16 * page]
    for i in idx:
        expect[i * page : (i + 1) * page] = kv[i * page : (i + 1) * page]
    assert peer.dump(dst) == expect.tobytes()
    assert peer.dump(aux) == meta.tobytes()
    assert engine.unregister_memory(kv_ptr) == 0  # SGLang's deregister
    assert engine.unregister_memory(kv_ptr) == -1  # not registered any more


def test_vllm_p2p_address_based_batch_writes(engine: TransferEngine, peer: Peer) -> None:
    """vLLM MooncakeConnector: batch_register_memory of the KV layers, then one
    batch_transfer_sync_write per request of (src block, dst block) pairs; read back."""
    layers = [
        np.random.default_rng(10 + i).integers(0, 256, n, dtype=np.uint8)
        for i, (_, n) in enumerate(peer.bufs[:2])
    ]
    ptrs = [int(a.ctypes.data) for a in layers]
    assert engine.batch_register_memory(ptrs, [a.nbytes for a in layers]) == 0
    block = 16 << 10
    src, dst, lens = [], [], []
    for (base, n), lptr in zip(peer.bufs[:2], ptrs, strict=True):
        blocks = n // block
        for b in range(blocks):  # reversed placement: block b -> block blocks-1-b
            src.append(lptr + b * block)
            dst.append(base + (blocks - 1 - b) * block)
            lens.append(block)
    assert engine.batch_transfer_sync_write(peer.session, src, dst, lens) == 0
    for (base, _n), arr in zip(peer.bufs[:2], layers, strict=True):
        got = np.frombuffer(peer.dump(base), dtype=np.uint8).reshape(-1, block)
        assert got[::-1].tobytes() == arr.tobytes()
    # Read back into a managed buffer through the async path: the original order.
    total = len(src) * block
    back_ptr = engine.allocate_managed_buffer(total)
    assert back_ptr != 0
    outs = [back_ptr + i * block for i in range(len(src))]
    bid = engine.batch_transfer_async_read(peer.session, outs, dst, lens)
    assert bid != 0
    assert engine.get_batch_transfer_status([bid]) == 0
    assert engine.read_bytes_from_buffer(back_ptr, total) == b"".join(a.tobytes() for a in layers)
    assert engine.free_managed_buffer(back_ptr, total) == 0
    assert engine.get_first_buffer_address(peer.session) == peer.bufs[0][0]
    assert engine.send_probe(peer.session) == 0


def test_out_of_range_remote_addresses_refused(engine: TransferEngine, peer: Peer) -> None:
    """Every (address, length) not inside one of the peer's registered regions is refused
    by the peer (-1 here, counted there); nothing around the regions is read or written."""
    marker = np.full(1 << 16, 0xAB, dtype=np.uint8)
    mptr = int(marker.ctypes.data)
    assert engine.register_memory(mptr, marker.nbytes) == 0
    (b0, n0), (b1, n1), (b2, n2) = peer.bufs
    before = peer.call(op="stats")["bounds_errors"]
    bad = [
        (b0 + n0 - 8, 16),  # runs past the end of a region
        (b0 - 4096, 16),  # just before a region
        (b2 + n2, 1),  # first byte after the last region
        (8, 16),  # low memory
        ((1 << 64) - 4096, 16),  # the top of the address space
        (min(b0, b1, b2) + (1 << 40), 64),  # unmapped, far away
    ]
    for addr, n in bad:
        assert engine.transfer_sync_write(peer.session, mptr, addr, n) == -1, hex(addr)
        assert engine.transfer_sync_read(peer.session, mptr, addr, n) == -1, hex(addr)
    # A batch with one bad item fails as a whole (upstream: -1), the good item lands.
    assert (
        engine.batch_transfer_sync_write(peer.session, [mptr, mptr], [b1, b1 + n1], [64, 64]) == -1
    )
    assert marker.tobytes() == b"\xab" * marker.nbytes  # no read brought bytes back
    after = peer.call(op="stats")["bounds_errors"]
    assert after - before == 2 * len(bad) + 1
    assert peer.dump(b1)[:64] == b"\xab" * 64 and peer.dump(b1)[64:] == bytes(n1 - 64)
    # An unregistered region is unreachable at once; the peer keeps serving the others.
    assert peer.call(op="unregister", base=b2)["rc"] == 0
    assert engine.transfer_sync_write(peer.session, mptr, b2, 16) == -1
    assert engine.transfer_sync_write(peer.session, mptr, b0, 16) == 0
    # Local side: an address outside this engine's registered memory is refused here.
    assert engine.transfer_sync_write(peer.session, mptr + marker.nbytes, b0, 16) == -1
    assert engine.batch_transfer_async_write("unreachable_peer:9", [mptr], [b0], [16]) == 0
    assert engine.send_probe("127.0.0.1:9") == -1
    assert peer.proc.poll() is None


def test_gpu_like_and_unmapped_pointers_refused(engine: TransferEngine) -> None:
    """register_memory of memory this process cannot read and write (a CUDA device pointer
    lies in such a reservation) is -1; never registered, never copied."""
    from mooncake_core.transfer._c import native

    reserved = mmap.mmap(-1, 1 << 16, prot=0)  # PROT_NONE: reserved, no access
    addr = int(native.buffer_address(reserved)[0])
    assert engine.register_memory(addr, 1 << 16) == -1
    assert engine.register_memory(addr, 1 << 16, "cuda:0") == -1
    assert engine.write_bytes_to_buffer(addr, b"x" * 16, 16) == -1
    assert engine.read_bytes_from_buffer(addr, 16) == b""
    reserved.close()
