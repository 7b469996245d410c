"""The master's side of the fast control channel (protocol: :mod:`.fast_control`)."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
import socket
import sys
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any

from google.protobuf.message import DecodeError

from .auth import control_token
from .fast_control import (
    AUTH_FAILED,
    BAD,
    HEADER,
    HELLO,
    MAX_FRAME,
    MAX_HELLO,
    MAX_IN_FLIGHT,
    OK,
    OPS,
    REFUSED,
    Op,
    frame,
)

if TYPE_CHECKING:
    from .master_service import MasterService
    from .master_servicer import MasterServicer

log = logging.getLogger(__name__)


class FastControlServer:
    """Serves :data:`OPS` on a TCP port (and an abstract Unix socket) for one
    :class:`~.master_service.MasterService`.

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
        self._unix: asyncio.Server | None = None
        self._conns: set[_Conn] = set()
        self.port = 0
        """Bound port (after :meth:`start`)."""
        self.unix_name = ""
        """The same channel on an abstract Unix socket, ``@`` + its name (after
        :meth:`start` with ``unix``; empty: none)."""

    async def start(self, host: str, port: int, *, unix: bool = False) -> None:
        """Bind and serve; with ``unix`` (Linux), also on an abstract Unix socket.

        The Unix socket is for clients on this host, in this network namespace: a round
        trip over it costs ~30 us where loopback TCP costs ~50 us (docs/store.md). Its
        name is random, so a client on another host never finds one of the same name;
        abstract names live in the network namespace (a partitioned namespace cannot
        reach it) and the same HELLO token guards it as the TCP port.

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
        if unix and sys.platform == "linux":
            name = f"mooncake-fast-{secrets.token_hex(12)}"
            try:
                self._unix = await loop.create_unix_server(lambda: _Conn(self), "\0" + name)
            except OSError as exc:  # the TCP port still serves
                log.warning("fast control: no abstract Unix socket (%s); TCP only", exc)
            else:
                self.unix_name = "@" + name

    async def stop(self) -> None:
        """Stop accepting and drop every connection (clients fall back to gRPC)."""
        servers = [s for s in (self._server, self._unix) if s is not None]
        for server in servers:
            server.close()
        for conn in list(self._conns):
            conn.abort()
        for server in servers:
            await server.wait_closed()

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
        self._srv.service.metrics.fast_calls.labels(op.rpc).inc()
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
        self._send(OK, call_id, result if op.response is None else result.SerializeToString())


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
