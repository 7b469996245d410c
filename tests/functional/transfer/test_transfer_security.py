"""Authentication, bounds checks and malformed frames against a real target process."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transfer_target_proc import pattern

from mooncake_core.transfer import (
    AuthError,
    OpCode,
    PeerDirectory,
    TransferRequest,
    TransferState,
    auth,
    handshake,
)
from mooncake_core.transfer.protocol import HEADER_SIZE, Header, Op, Status, decode_header

pytestmark = pytest.mark.integration

MiB = 1 << 20
SECRET = b"cluster-secret-for-tests"


def _addr(target) -> tuple[str, int]:
    host, port = target.segment_name.rsplit(":", 1)
    return host, int(port)


def _data_conn(target, secret: bytes | None = None) -> socket.socket:
    host, port = _addr(target)
    sock = handshake.connect(host, port, local_ip=None, secret=secret, timeout=5)
    handshake.send_frame(sock, Op.START_DATA)
    return sock


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _nic(target) -> dict:
    return target.snapshot()["nics"][0]


def _counted(target, field: str, expected: int, timeout_s: float = 5.0) -> int:
    """The target's counter once it reaches ``expected`` (or what it holds at the timeout).

    The initiator sees a refusal before the target's server thread has counted it, so
    reading the counter right away races with that thread.
    """
    deadline = time.monotonic() + timeout_s
    value = _nic(target)[field]
    while value < expected and time.monotonic() < deadline:
        time.sleep(0.02)
        value = _nic(target)[field]
    return value


def test_right_secret_works_and_wrong_or_missing_is_refused(start_target, make_engine):
    target = start_target(size=MiB, secret=SECRET)
    eng = make_engine(secret=SECRET)
    seg = eng.open_segment(target.name)
    local = eng.register_memory(bytearray(MiB))
    eng.read(local, 0, seg, 0, MiB)
    assert bytes(local.view()) == pattern(MiB)

    with pytest.raises(AuthError, match="refused"):
        make_engine(secret=b"wrong").open_segment(target.name)
    with pytest.raises(AuthError, match="refused"):
        make_engine().open_segment(target.name)
    assert _counted(target, "auth_failures", 2) == 2


def test_client_with_secret_refuses_unauthenticated_server(start_target, make_engine):
    target = start_target(size=MiB)
    with pytest.raises(AuthError, match="does not authenticate"):
        make_engine(secret=SECRET).open_segment(target.name)


def test_replayed_answer_is_refused(start_target):
    target = start_target(size=MiB, secret=SECRET)
    host, port = _addr(target)
    first = socket.create_connection((host, port), timeout=5)
    hello = handshake.recv_frame(first)
    client_nonce = auth.new_nonce()
    payload = client_nonce + auth.client_proof(SECRET, hello.payload, client_nonce)
    answer = Header(Op.AUTH, length=len(payload)).encode() + payload
    first.sendall(answer)
    assert handshake.recv_frame(first).header.op == Op.AUTH_OK
    first.close()

    second = socket.create_connection((host, port), timeout=5)
    handshake.recv_frame(second)  # a fresh nonce
    second.sendall(answer)  # the recorded answer, replayed
    reply = handshake.recv_frame(second)
    assert reply.header.op == Op.ERROR and reply.header.status == Status.AUTH_FAILED
    assert _closed_by_peer(second)
    assert _counted(target, "auth_failures", 1) == 1


BAD_FRAMES = {
    "bad magic": b"XXXX" + Header(Op.READ, segment=1, length=8).encode()[4:],
    "bad version": Header(Op.READ, segment=1, length=8).encode()[:4]
    + b"\x09"
    + Header(Op.READ, segment=1, length=8).encode()[5:],
    "unknown op": Header(Op.READ, segment=1, length=8).encode()[:5]
    + b"\x63"
    + Header(Op.READ, segment=1, length=8).encode()[6:],
    "handshake op on data connection": Header(Op.HELLO).encode(),
    "response op from a client": Header(Op.WRITE_ACK, segment=1).encode(),
    "absurd length": Header(Op.READ, segment=1, length=1 << 40).encode(),
}


@pytest.mark.parametrize("kind", sorted(BAD_FRAMES))
def test_malformed_frame_closes_connection_and_is_counted(kind, start_target, make_engine):
    target = start_target(size=MiB)
    sock = _data_conn(target)
    sock.sendall(BAD_FRAMES[kind])
    assert _closed_by_peer(sock)
    assert _counted(target, "malformed_frames", 1) == 1
    eng = make_engine()  # the server still serves
    local = eng.register_memory(bytearray(MiB))
    eng.read(local, 0, eng.open_segment(target.name), 0, MiB)
    assert bytes(local.view()) == pattern(MiB)


def test_garbage_during_handshake_is_counted(start_target):
    target = start_target(size=MiB)
    sock = socket.create_connection(_addr(target), timeout=5)
    handshake.recv_frame(sock)
    sock.sendall(b"\x00" * HEADER_SIZE)
    assert _closed_by_peer(sock)
    assert _counted(target, "malformed_frames", 1) == 1


def _request(sock: socket.socket, header: Header, payload: bytes = b"") -> Header:
    sock.sendall(header.encode() + payload)
    reply = decode_header(handshake.recv_exact(sock, HEADER_SIZE))
    if reply.op == Op.READ_RESP and reply.length:
        handshake.recv_exact(sock, reply.length)
    return reply


def test_bounds_are_checked_by_the_server(start_target):
    target = start_target(size=MiB)
    info = PeerDirectory().resolve(target.name)
    sock = _data_conn(target)
    seg = info.segment_id
    cases = [
        (Header(Op.READ, segment=seg, offset=MiB - 4, length=8), b"", Status.OUT_OF_BOUNDS),
        (Header(Op.READ, segment=seg, offset=(1 << 64) - 1, length=2), b"", Status.OUT_OF_BOUNDS),
        (Header(Op.READ, segment=seg + 100, offset=0, length=8), b"", Status.UNKNOWN_SEGMENT),
        (Header(Op.WRITE, segment=seg, offset=MiB, length=16), b"z" * 16, Status.OUT_OF_BOUNDS),
        (Header(Op.WRITE, segment=seg + 100, length=4), b"zzzz", Status.UNKNOWN_SEGMENT),
    ]
    for i, (header, payload, want) in enumerate(cases):
        reply = _request(sock, dataclasses.replace(header, request_id=i), payload)
        assert (reply.status, reply.request_id, reply.length) == (want, i, 0), header
    # The connection stayed in sync: a valid request still works on it.
    ok = _request(sock, Header(Op.READ, segment=seg, offset=0, length=16, request_id=9))
    assert ok.status == Status.OK and ok.length == 16
    assert _nic(target)["bounds_errors"] == len(cases)
    assert target.sha256(0, MiB) == hashlib.sha256(pattern(MiB)).hexdigest()


def test_request_beyond_a_forged_size_fails_with_reason(start_target, make_engine):
    target = start_target(size=MiB)
    real = PeerDirectory().resolve(target.name)

    class Forged:
        def resolve(self, name):
            return dataclasses.replace(real, size=4 * MiB)

    eng = make_engine(directory=Forged())
    seg = eng.open_segment(target.name)
    local = eng.register_memory(bytearray(4 * MiB))
    batch = eng.allocate_batch(1)
    eng.submit(batch, [TransferRequest(OpCode.READ, local, 0, seg, 2 * MiB, MiB)])
    (status,) = eng.wait(batch, timeout=30)
    assert status.state is TransferState.FAILED
    assert "bounds" in (status.reason or "")


@pytest.fixture(scope="module")
def fuzz_target():
    script = Path(__file__).with_name("transfer_target_proc.py")
    proc = subprocess.Popen(
        [sys.executable, str(script), "--size", str(MiB)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    name = json.loads(proc.stdout.readline())["segment_name"]
    yield name, proc
    proc.kill()
    proc.wait(timeout=10)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(min_size=1, max_size=200))
def test_random_bytes_never_crash_the_server(fuzz_target, data):
    name, proc = fuzz_target
    host, port = name.rsplit(":", 1)
    sock = handshake.connect(host, int(port), local_ip=None, secret=None, timeout=5)
    handshake.send_frame(sock, Op.START_DATA)
    sock.sendall(data)
    sock.shutdown(socket.SHUT_WR)
    sock.settimeout(5)
    try:
        while sock.recv(65536):
            pass  # the server answers what parsed, then closes
    except ConnectionResetError:
        pass
    sock.close()
    assert proc.poll() is None
    probe = handshake.connect(host, int(port), local_ip=None, secret=None, timeout=5)
    probe.close()
