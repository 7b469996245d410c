"""The master's fast control channel: the hot Store calls without a gRPC round trip.

One unary call through Python gRPC costs 600-800 us on the test machine, while the
master's own work for a lookup or a put is 5-15 us (docs/benchmarks.md, "Control
path"). The calls every ``put`` and ``get`` makes (exist, replica lookup, put
start/end/revoke, remove, and their batch forms) therefore also travel over a plain
TCP connection with a small framing of their own. The messages are the very protobuf
messages of ``store.proto`` and the master answers them with the very handlers that
serve gRPC (:class:`~.master_servicer.MasterServicer`): locking, journaling (a reply
waits until its change is durable), events, metrics and errors are the same by
construction. Everything else (mounts, heartbeats, admin, event streams, HA) stays on
gRPC.

Wire format, both directions: a 9-byte header ``>IBI`` (payload length, kind, call
id), then the payload.

* The first frame a client sends is ``HELLO`` with the control token of
  :func:`~.auth.control_token` as payload (empty without a cluster secret). The master
  answers ``OK``, or ``AUTH_FAILED`` and closes. Nothing else is read before it.
* A request's kind is its op code (:data:`OPS`), its payload the serialized request.
  The call id is the caller's; the reply carries it back, so calls may be pipelined.
* A reply's kind is a status: ``OK`` (payload: the serialized response), ``REFUSED``
  (the master does not serve now: an HA follower, a leader whose lease is not
  confirmed; payload: why, in words; nothing was done, the client asks gRPC, which
  follows the leader) or ``BAD`` (unknown op, undecodable request, frame too large;
  payload: why).

A frame larger than :data:`MAX_FRAME` (the gRPC message limit) is refused and the
connection closed before its payload is buffered.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import socket
import struct
import threading
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.protobuf.message import DecodeError, Message

from mooncake_core.rpc import store_pb2 as pb

from .auth import control_token

if TYPE_CHECKING:
    from .master_service import MasterService
    from .master_servicer import MasterServicer

log = logging.getLogger(__name__)

HEADER = struct.Struct(">IBI")
"""Payload length, kind (op code or status), call id."""
MAX_FRAME = 64 << 20
"""Largest payload either side accepts (the gRPC message limit of ``convert``)."""
MAX_HELLO = 256
"""Largest HELLO payload: nothing bigger is buffered before a connection is trusted."""
MAX_IN_FLIGHT = 64
"""Calls one connection may have running before the master stops reading from it."""

HELLO = 0
OK, REFUSED, BAD, AUTH_FAILED = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class Op:
    """One call of the fast channel: its gRPC method name and message types."""

    code: int
    name: str
    request: type[Message]
    response: type[Message]


OPS: tuple[Op, ...] = (
    Op(1, "Exist", pb.ExistRequest, pb.ExistResponse),
    Op(2, "BatchExist", pb.BatchKeysRequest, pb.BatchExistResponse),
    Op(3, "GetReplicaList", pb.GetReplicaListRequest, pb.GetReplicaListResponse),
    Op(4, "BatchGetReplicaList", pb.BatchKeysRequest, pb.BatchGetReplicaListResponse),
    Op(5, "PutStart", pb.PutStartRequest, pb.PutStartResponse),
    Op(6, "Upsert", pb.PutStartRequest, pb.PutStartResponse),
    Op(7, "PutEnd", pb.KeyRequest, pb.KeyResponse),
    Op(8, "PutRevoke", pb.KeyRequest, pb.KeyResponse),
    Op(9, "BatchPutStart", pb.BatchPutStartRequest, pb.BatchPutStartResponse),
    Op(10, "BatchUpsert", pb.BatchPutStartRequest, pb.BatchPutStartResponse),
    Op(11, "BatchPutEnd", pb.BatchKeysRequest, pb.BatchKeyResponse),
    Op(12, "BatchPutRevoke", pb.BatchKeysRequest, pb.BatchKeyResponse),
    Op(13, "Remove", pb.RemoveRequest, pb.KeyResponse),
    Op(14, "BatchRemove", pb.BatchKeysRequest, pb.BatchKeyResponse),
)
"""The hot calls, the one description both ends are driven from."""
OP_BY_CODE = {op.code: op for op in OPS}
OP_BY_NAME = {op.name: op for op in OPS}


def frame(kind: int, call_id: int, payload: bytes) -> bytes:
    """One frame: header and payload."""
    return HEADER.pack(len(payload), kind, call_id) + payload


# ----------------------------------------------------------------------- master side
class FastControlServer:
    """Serves :data:`OPS` on a TCP port for one :class:`~.master_service.MasterService`.

    Args:
        service: the running master (its ``serving`` gate and counters).
        servicer: the gRPC handlers, called as they are for gRPC (without a context).
        secret: the cluster secret (``None``: HELLO carries an empty token).
        on_refused: called once per connection refused for a wrong token.
    """

    def __init__(
        self,
        service: MasterService,
        servicer: MasterServicer,
        secret: bytes | None,
        on_refused: Callable[[], None] = lambda: None,
    ) -> None:
        self.service = service
        self._handlers = {op.code: (op, getattr(servicer, op.name)) for op in OPS}
        self._token = control_token(secret).encode() if secret is not None else b""
        self._on_refused = on_refused
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()
        self.port = 0
        """Bound port (after :meth:`start`)."""

    async def start(self, host: str, port: int) -> None:
        """Bind and serve.

        Raises:
            RuntimeError: the port could not be bound.
        """
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: _Conn(self), host, port, reuse_address=True
            )
        except OSError as exc:
            raise RuntimeError(
                f"cannot bind the fast control port on {host}:{port}: {exc.strerror or exc}"
            ) from None
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop accepting and drop every connection (clients fall back to gRPC)."""
        if self._server is not None:
            self._server.close()
            for conn in list(self._conns):
                conn.abort()
            await self._server.wait_closed()

    def track(self, conn: _Conn) -> None:
        """A connection opened (it is aborted by :meth:`stop`)."""
        self._conns.add(conn)

    def untrack(self, conn: _Conn) -> None:
        """A connection closed."""
        self._conns.discard(conn)

    def note_refused(self) -> None:
        """A connection sent a wrong token (calls ``on_refused``)."""
        self._on_refused()

    def handler(self, code: int) -> tuple[Op, Callable[..., Any]] | None:
        """The op of ``code`` and the servicer method serving it, or None if unknown."""
        return self._handlers.get(code)

    def check_token(self, sent: bytes) -> bool:
        """Whether ``sent`` is this cluster's control token."""
        return hmac.compare_digest(sent, self._token)

    def refusal(self) -> str:
        """Why this master does not serve now (when it does not)."""
        svc = self.service
        hint = svc.leader_hint
        if svc.role == "leader":
            return "NOT_LEADER: this master's leader lease is not confirmed"
        if hint is None:
            return f"NOT_LEADER: this master is {svc.role}; no leader known yet"
        return f"NOT_LEADER: this master is {svc.role}; the leader is {hint[0]} at {hint[1]}"


class _Conn(asyncio.Protocol):
    """One client connection: frames in, handler tasks, replies out."""

    def __init__(self, server: FastControlServer) -> None:
        self._srv = server
        self._buf = bytearray()
        self._trusted = False
        self._transport: asyncio.Transport | None = None
        self._running = 0
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._srv.track(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._srv.untrack(self)
        self._transport = None

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _send(self, kind: int, call_id: int, payload: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(frame(kind, call_id, payload))

    def _close_with(self, kind: int, call_id: int, text: str) -> None:
        self._send(kind, call_id, text.encode())
        if self._transport is not None:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos = 0
        while len(buf) - pos >= HEADER.size:
            length, kind, call_id = HEADER.unpack_from(buf, pos)
            limit = MAX_FRAME if self._trusted else MAX_HELLO
            if length > limit:
                del buf[:]
                self._close_with(BAD, call_id, f"frame of {length} bytes exceeds {limit}")
                return
            end = pos + HEADER.size + length
            if len(buf) < end:
                break
            payload = bytes(buf[pos + HEADER.size : end])
            pos = end
            if not self._trusted:
                if kind != HELLO or not self._srv.check_token(payload):
                    del buf[:]
                    self._srv.note_refused()
                    self._close_with(AUTH_FAILED, call_id, "missing or wrong cluster token")
                    return
                self._trusted = True
                self._send(OK, call_id, b"")
                continue
            self._call(kind, call_id, payload)
        del buf[:pos]

    def _call(self, code: int, call_id: int, payload: bytes) -> None:
        entry = self._srv.handler(code)
        if entry is None:
            self._send(BAD, call_id, f"unknown op {code}".encode())
            return
        if not self._srv.service.serving:
            self._send(REFUSED, call_id, self._srv.refusal().encode())
            return
        op, handler = entry
        try:
            request = op.request.FromString(payload)
        except DecodeError as exc:
            self._send(BAD, call_id, f"{op.name}: undecodable request: {exc}".encode())
            return
        self._srv.service.metrics.fast_calls.labels(op.name).inc()
        # Run the handler at once, in this callback: most calls finish without waiting
        # (the lock is free, no journal to wait for) and are answered here, without a
        # task and the extra loop turns it costs. One that must wait goes on as a task.
        coro = handler(request, None)
        try:
            pending = coro.send(None)
        except StopIteration as stop:
            self._reply(op, call_id, stop.value, None)
            return
        except Exception as exc:
            self._reply(op, call_id, None, exc)
            return
        task = asyncio.ensure_future(_finish(coro, pending))
        self._running += 1
        if self._running >= MAX_IN_FLIGHT and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()
        task.add_done_callback(lambda t: self._done(t, op, call_id))

    def _done(self, task: asyncio.Future[Any], op: Op, call_id: int) -> None:
        self._running -= 1
        if self._paused and self._running < MAX_IN_FLIGHT // 2 and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        if not task.cancelled():
            exc = task.exception()
            self._reply(op, call_id, None if exc else task.result(), exc)

    def _reply(self, op: Op, call_id: int, result: Any, exc: BaseException | None) -> None:
        if exc is not None:
            log.error("fast control %s failed", op.name, exc_info=exc)
            self._send(BAD, call_id, f"{op.name}: {type(exc).__name__}: {exc}".encode())
            return
        self._send(OK, call_id, result.SerializeToString())


async def _finish(coro: Coroutine[Any, Any, Any], pending: Any) -> Any:
    """Run the rest of a handler whose first step (run in the protocol callback) stopped
    at ``pending``: the task waits on what the handler waits on, as if it had run it."""
    return await _Rest(coro, pending)


class _Rest:
    """Awaitable over a started coroutine: hands its awaited futures to the task."""

    __slots__ = ("_coro", "_pending")

    def __init__(self, coro: Coroutine[Any, Any, Any], pending: Any) -> None:
        self._coro = coro
        self._pending = pending

    def __await__(self) -> Generator[Any, Any, Any]:
        pending = self._pending
        while True:
            try:
                value = yield pending
            except BaseException as exc:  # cancellation: into the handler, as await would
                try:
                    pending = self._coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    pending = self._coro.send(value)
                except StopIteration as stop:
                    return stop.value


# ----------------------------------------------------------------------- client side
class FastRefused(Exception):
    """The master does not serve the fast channel now; nothing was done."""


class FastUnsent(Exception):
    """The call never reached the master (no connection): nothing was done."""


class FastLost(Exception):
    """The call was sent but no reply came: the master may or may not have applied it."""


class FastConnection:
    """One blocking connection to a master's fast channel (one user thread at a time).

    Args:
        address: ``host:port`` of the fast channel.
        secret: the cluster secret (``None``: none).
        timeout_s: connect and per-call deadline.

    Raises:
        FastUnsent: the connection or the HELLO failed.
        FastRefused: the master refused the token (it closes the connection).
    """

    def __init__(self, address: str, secret: bytes | None, timeout_s: float) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        self._next = 0
        try:
            self._sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        except OSError as exc:
            raise FastUnsent(f"fast control {address}: {exc}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
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

    def call(self, name: str, request: Message) -> Message:
        """Send one request and wait for its reply.

        Raises:
            FastRefused: the master does not serve now (nothing was done).
            FastLost: the connection broke after the request went out (outcome unknown).
            FastUnsent: the request could not be sent at all.
        """
        op = OP_BY_NAME[name]
        kind, payload = self._roundtrip(op.code, request.SerializeToString())
        if kind == OK:
            return op.response.FromString(payload)
        text = payload.decode(errors="replace")
        if kind == REFUSED:
            raise FastRefused(text)
        raise FastLost(f"fast control {self.address}: {op.name}: {text}")

    def _roundtrip(self, kind: int, payload: bytes) -> tuple[int, bytes]:
        self._next = (self._next + 1) & 0xFFFFFFFF
        call_id = self._next
        try:
            self._sock.sendall(frame(kind, call_id, payload))
        except OSError as exc:
            raise FastUnsent(f"fast control {self.address}: {exc}") from None
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
