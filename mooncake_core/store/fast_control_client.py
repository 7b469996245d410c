"""The client's side of the fast control channel (protocol: :mod:`.fast_control`)."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

from google.protobuf.message import Message

from .auth import control_token
from .fast_control import (
    BAD,
    HEADER,
    HELLO,
    MAX_FRAME,
    OK,
    OP_BY_NAME,
    REFUSED,
    FastLost,
    FastRefused,
    FastUnknownOp,
    FastUnsent,
    frame,
)

UNIX = "unix:"
"""Prefix of a fast channel address that is an abstract Unix socket (``unix:@name``)."""


def _unix_connect(name: str, timeout_s: float) -> socket.socket:
    if not name.startswith("@"):
        raise OSError(f"not an abstract socket name: {name!r}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout_s)
        sock.connect("\0" + name[1:])
    except OSError:
        sock.close()
        raise
    return sock


def unix_reachable(name: str, timeout_s: float) -> bool:
    """Whether the abstract Unix socket ``name`` (``@...``, from a master's readiness)
    accepts a connection here: only on the master's host, in its network namespace."""
    try:
        _unix_connect(name, timeout_s).close()
    except OSError:
        return False
    return True


class FastConnection:
    """One blocking connection to a master's fast channel (one user thread at a time).

    Args:
        address: ``host:port`` of the fast channel, or ``unix:@name`` for its abstract
            Unix socket on this host.
        secret: the cluster secret (``None``: none).
        timeout_s: connect and per-call deadline.

    Raises:
        FastUnsent: the connection or the HELLO failed.
        FastRefused: the master refused the token (it closes the connection).
    """

    def __init__(self, address: str, secret: bytes | None, timeout_s: float) -> None:
        self.address = address
        self._next = 0
        try:
            if address.startswith(UNIX):
                self._sock = _unix_connect(address[len(UNIX) :], timeout_s)
            else:
                host, _, port = address.rpartition(":")
                self._sock = socket.create_connection((host, int(port)), timeout=timeout_s)
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            raise FastUnsent(f"fast control {address}: {exc}") from None
        # The deadline is the kernel's (SO_RCVTIMEO/SO_SNDTIMEO on a blocking socket): a
        # Python-level timeout would poll() before every send and recv.
        self._sock.settimeout(None)
        tv = struct.pack("ll", int(timeout_s), int((timeout_s % 1) * 1e6))
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        self._buf = bytearray(64 << 10)
        token = control_token(secret).encode() if secret is not None else b""
        try:
            kind, text = self._roundtrip(HELLO, token)
        except FastLost as exc:
            self.close()
            raise FastUnsent(str(exc)) from None
        if kind != OK:
            self.close()
            raise FastRefused(f"fast control {address}: {text.decode(errors='replace')}")

    def close(self) -> None:
        """Close the socket."""
        with contextlib.suppress(OSError):
            self._sock.close()

    def call(self, name: str, request: Message) -> Message | bytes:
        """Send one request and wait for its reply (a packed op's: its bytes).

        Raises:
            FastRefused: the master does not serve now (nothing was done).
            FastUnknownOp: the master does not know the op (nothing was done).
            FastLost: the connection broke after the request went out (outcome unknown).
            FastUnsent: the request could not be sent at all.
        """
        return self.receive(name, self.send(name, request))

    def send(self, name: str, request: Message) -> int:
        """Send one request without waiting; returns its call id for :meth:`receive`
        (the caller may do other work meanwhile, but send nothing else on this
        connection before it has received the reply).

        Raises:
            FastUnsent: the request could not be sent.
        """
        return self._send(OP_BY_NAME[name].code, request.SerializeToString())

    def receive(self, name: str, call_id: int) -> Message | bytes:
        """The reply to call ``call_id`` of op ``name``, sent by :meth:`send`.

        Raises:
            (as :meth:`call`, less FastUnsent)
        """
        op = OP_BY_NAME[name]
        kind, payload = self._receive(call_id)
        if kind == OK:
            return payload if op.response is None else op.response.FromString(payload)
        text = payload.decode(errors="replace")
        if kind == REFUSED:
            raise FastRefused(text)
        if kind == BAD and text == f"unknown op {op.code}":
            raise FastUnknownOp(text)
        raise FastLost(f"fast control {self.address}: {op.name}: {text}")

    def _roundtrip(self, kind: int, payload: bytes) -> tuple[int, bytes]:
        return self._receive(self._send(kind, payload))

    def _send(self, kind: int, payload: bytes) -> int:
        self._next = (self._next + 1) & 0xFFFFFFFF
        call_id = self._next
        try:
            self._sock.sendall(frame(kind, call_id, payload))
        except OSError as exc:
            raise FastUnsent(f"fast control {self.address}: {exc}") from None
        return call_id

    def _receive(self, call_id: int) -> tuple[int, bytes]:
        try:
            # One recv usually holds the whole reply (header and body).
            have = self._recv_into(0, HEADER.size)
            length, status, got = HEADER.unpack_from(self._buf)
            if length > MAX_FRAME:
                raise FastLost(f"fast control {self.address}: reply of {length} bytes")
            end = HEADER.size + length
            if end > len(self._buf):
                self._buf.extend(bytes(end - len(self._buf)))
            if have < end:
                have = self._recv_into(have, end)
            if have > end:  # one call at a time: the master sent more than one reply
                raise FastLost(f"fast control {self.address}: {have - end} bytes after a reply")
        except OSError as exc:
            raise FastLost(f"fast control {self.address}: {exc}") from None
        if got != call_id:
            raise FastLost(f"fast control {self.address}: reply to call {got}, not {call_id}")
        return status, bytes(memoryview(self._buf)[HEADER.size : end])

    def _recv_into(self, have: int, need: int) -> int:
        """Receive into ``self._buf`` from ``have`` until at least ``need`` bytes are there."""
        view = memoryview(self._buf)
        while have < need:
            n = self._sock.recv_into(view[have:])
            if not n:
                raise FastLost(f"fast control {self.address}: connection closed")
            have += n
        return have


class FastChannels:
    """Per-thread :class:`FastConnection` s to the current master, made on first use.

    Args:
        secret: the cluster secret.
        timeout_s: connect and per-call deadline.
    """

    def __init__(self, secret: bytes | None, timeout_s: float) -> None:
        self._secret = secret
        self._timeout = timeout_s
        self._tls = threading.local()
        self._lock = threading.Lock()
        self._all: list[FastConnection] = []

    def get(self, address: str) -> FastConnection:
        """This thread's connection to ``address`` (a new one after a change).

        Raises:
            FastUnsent, FastRefused: as :class:`FastConnection`.
        """
        conn: FastConnection | None = getattr(self._tls, "conn", None)
        if conn is not None and conn.address == address:
            return conn
        if conn is not None:
            self.drop(conn)
        conn = FastConnection(address, self._secret, self._timeout)
        self._tls.conn = conn
        with self._lock:
            self._all.append(conn)
        return conn

    def drop(self, conn: FastConnection) -> None:
        """Close ``conn`` (after an error); the thread's next call connects again."""
        conn.close()
        if getattr(self._tls, "conn", None) is conn:
            self._tls.conn = None
        with self._lock, contextlib.suppress(ValueError):
            self._all.remove(conn)

    def close(self) -> None:
        """Close every thread's connection."""
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
