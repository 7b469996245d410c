"""Failure handling with real processes: dead paths, killed targets, small pools."""

from __future__ import annotations

import dataclasses
import socket
import time

import pytest
from transfer_target_proc import pattern

from mooncake_core.transfer import (
    OpCode,
    PeerDirectory,
    TransferRequest,
    TransferState,
)

pytestmark = pytest.mark.integration

MiB = 1 << 20


def _dead_address() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connects are refused
    return f"127.0.0.1:{port}"


class _Directory:
    def __init__(self, info):
        self.info = info

    def resolve(self, name):
        return self.info


def test_dead_path_is_retried_elsewhere_and_paused(start_target, make_engine):
    target = start_target(size=8 * MiB)
    live = PeerDirectory().resolve(target.name)
    dead = _dead_address()
    info = dataclasses.replace(live, nics=(live.nics[0], dead))
    eng = make_engine(
        directory=_Directory(info),
        config={"nic_failure_threshold": 1, "nic_pause_s": 30, "max_retries": 3},
    )
    seg = eng.open_segment(target.name)
    local = eng.register_memory(bytearray(8 * MiB))
    eng.read(local, 0, seg, 0, 8 * MiB)  # striped over both remote servers
    assert bytes(local.view()) == pattern(8 * MiB)
    snap = eng.snapshot()
    nic = snap.nic("127.0.0.1")
    assert nic.errors > 0 and nic.retries > 0
    assert dead in snap.paused_remotes
    # While paused, the dead server is not tried again: no new errors.
    eng.read(local, 0, seg, 0, 8 * MiB)
    assert eng.snapshot().nic("127.0.0.1").errors == nic.errors


def test_killed_target_fails_requests_with_reason_in_time(start_target, make_engine):
    target = start_target(size=64 * MiB)
    timeout = 5.0
    eng = make_engine(config={"request_timeout_s": timeout, "max_retries": 2})
    seg = eng.open_segment(target.name)
    local = eng.register_memory(bytearray(64 * MiB))
    eng.read(local, 0, seg, 0, MiB)  # pooled connections now exist
    batch = eng.allocate_batch(16)
    reqs = [
        TransferRequest(OpCode.READ, local, i * 4 * MiB, seg, i * 4 * MiB, 4 * MiB)
        for i in range(16)
    ]
    start = time.monotonic()
    eng.submit(batch, reqs)
    target.kill()
    statuses = eng.wait(batch, timeout=timeout + 5)
    elapsed = time.monotonic() - start
    assert elapsed < timeout + 1
    assert all(s.state is not TransferState.WAITING for s in statuses)
    assert all(s.reason for s in statuses if s.state is TransferState.FAILED)
    eng.free_batch(batch)

    # Submitted after the kill: refused connections end it, with the reason.
    batch = eng.allocate_batch(1)
    eng.submit(batch, [TransferRequest(OpCode.READ, local, 0, seg, 0, MiB)])
    (status,) = eng.wait(batch, timeout=timeout + 5)
    assert status.state is TransferState.FAILED
    assert "refused" in (status.reason or "") or "reset" in (status.reason or ""), status.reason
    assert time.monotonic() - start < 2 * timeout + 2


def test_tiny_pool_evicts_and_still_completes(start_target, make_engine):
    nics = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
    target = start_target(size=16 * MiB, nics=nics)
    eng = make_engine(nics=nics, config={"endpoint_pool_cap": 1, "slice_size": 1 << 20})
    seg = eng.open_segment(target.name)
    local = eng.register_memory(bytearray(16 * MiB))
    for _ in range(3):
        eng.read(local, 0, seg, 0, 16 * MiB)
        assert bytes(local.view()) == pattern(16 * MiB)
    assert eng.snapshot().endpoints == 1
    assert eng._tcp.pool.evictions > 0


def test_close_ends_every_request(start_target, make_engine):
    target = start_target(size=64 * MiB)
    eng = make_engine()
    seg = eng.open_segment(target.name)
    local = eng.register_memory(bytearray(64 * MiB))
    batch = eng.allocate_batch(64)
    eng.submit(
        batch,
        [TransferRequest(OpCode.READ, local, i * MiB, seg, i * MiB, MiB) for i in range(64)],
    )
    eng.close()
    statuses = eng.wait(batch, timeout=10)
    assert all(s.state is not TransferState.WAITING for s in statuses)
    failed = [s for s in statuses if s.state is TransferState.FAILED]
    assert all("closed" in (s.reason or "") or "reset" in (s.reason or "") for s in failed)


def test_failed_endpoint_is_recreated_after_target_restart(start_target, make_engine):
    first = start_target(size=4 * MiB)
    port = int(first.segment_name.rsplit(":", 1)[1])
    # One connection: with two, the first read may open only one of them (the second
    # thread is not waiting yet when the slices are queued), and on the second read the
    # fresh thread can take every slice before the one holding the dead socket wakes.
    eng = make_engine(config={"nic_failure_threshold": 10, "connections_per_endpoint": 1})
    seg = eng.open_segment(first.name)
    local = eng.register_memory(bytearray(4 * MiB))
    eng.read(local, 0, seg, 0, 4 * MiB)
    first.kill()
    second = start_target(size=4 * MiB, port=port)  # same address, same segment id
    assert second.name == first.name
    # The pooled connections are dead: the slice fails once, the endpoint is dropped,
    # and the retry connects a fresh one to the new process.
    eng.read(local, 0, seg, 0, 4 * MiB)
    assert bytes(local.view()) == pattern(4 * MiB)
    snap = eng.snapshot().nic("127.0.0.1")
    assert snap.errors >= 1 and snap.retries >= 1
    assert eng._tcp.pool.created >= 2
