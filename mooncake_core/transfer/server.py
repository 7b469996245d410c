"""Data-plane server of one NIC: accept, authenticate, answer lookups, then serve in C.

Threads, not asyncio: each connection's life is one blocking handshake followed by one
call into ``_native.SegTable.serve``, which runs the request loop without the GIL and
reads/writes registered memory in place.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from . import handshake
from ._c import native as _native
from .protocol import SERVER_SLOTS, Op, ProtocolError, Status
from .stats import Counters

log = logging.getLogger(__name__)

LookupFn = Callable[[str, str], dict[str, Any]]
"""(segment name, NIC address) -> LOOKUP reply; raises KeyError/TransferError if unknown."""


class DataServer:
    """Listens on one NIC address and serves registered segments.

    Args:
        address: IPv4 address to bind.
        port: Port (0 = any free port).
        table: Segment table shared by all NIC servers of an engine.
        secret: Cluster secret, or None for no authentication.
        lookup: Answers LOOKUP requests.
        handshake_timeout_s: Limit for the handshake phase.
        io_timeout_s: Limit for one request once its header has arrived.
    """

    def __init__(
        self,
        address: str,
        port: int,
        table: Any,
        secret: bytes | None,
        lookup: LookupFn,
        handshake_timeout_s: float,
        io_timeout_s: float,
    ) -> None:
        self.address = address
        self._table = table
        self._secret = secret
        self._lookup = lookup
        self._handshake_timeout = handshake_timeout_s
        self._io_timeout = io_timeout_s
        self.counters = Counters()
        # u64 slots updated atomically by the C loop (see protocol.SERVER_SLOTS).
        self._native_counters = bytearray(8 * _native.COUNTERS)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Buffers set before listen() are inherited by accepted sockets and size the
        # window scale negotiated in the SYN; set after accept() they come too late.
        handshake.tune(self._listener)
        try:
            self._listener.bind((address, port))
        except OSError:
            self._listener.close()
            raise
        self._listener.listen(128)
        self.port: int = self._listener.getsockname()[1]
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(
            target=self._accept_loop, name=f"mc-transfer-accept-{address}", daemon=True
        )
        self._thread.start()

    @property
    def endpoint(self) -> str:
        """``host:port`` of this server."""
        return f"{self.address}:{self.port}"

    def native_counters(self) -> dict[str, int]:
        """The C loop's counters by name."""
        view = memoryview(self._native_counters).cast("Q")
        return {name: int(view[slot]) for name, slot in SERVER_SLOTS.items()}

    def close(self) -> None:
        """Stop accepting and end every connection (their threads exit)."""
        with self._lock:
            self._closed = True
            conns = list(self._conns)
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self._conns.add(conn)
            threading.Thread(
                target=self._serve_conn, args=(conn,), name="mc-transfer-conn", daemon=True
            ).start()

    def _serve_conn(self, conn: socket.socket) -> None:
        try:
            handshake.tune(conn)
            conn.settimeout(self._handshake_timeout)
            try:
                handshake.server_handshake(conn, self._secret)
            except handshake.AuthError:
                self.counters.add("auth_failures")
                return
            if not self._control_loop(conn):
                return
            self.counters.add("connections")
            handshake.set_io_timeout(conn, self._io_timeout)
            code, message = self._table.serve(conn.fileno(), self._native_counters)
            if code == 1:
                log.warning("closing connection on %s: malformed frame (%s)", self.address, message)
        except ProtocolError as exc:
            self.counters.add("malformed_frames")
            log.warning("closing connection on %s: %s", self.address, exc)
        except (OSError, ConnectionError):
            pass  # the peer left or timed out during the handshake; nothing to clean up
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def _control_loop(self, conn: socket.socket) -> bool:
        """Answer LOOKUPs until START_DATA (True) or the peer leaves (False)."""
        while True:
            try:
                frame = handshake.recv_frame(conn)
            except ConnectionError:
                return False
            op = frame.header.op
            if op == Op.START_DATA:
                return True
            if op != Op.LOOKUP:
                raise ProtocolError(f"unexpected {op.name} frame after the handshake")
            name = frame.payload.decode(errors="replace")
            try:
                reply = self._lookup(name, self.address)
            except (KeyError, ValueError, RuntimeError) as exc:
                msg = exc.args[0] if exc.args else str(exc)
                handshake.send_frame(
                    conn, Op.ERROR, str(msg).encode(), status=Status.UNKNOWN_SEGMENT
                )
                continue
            handshake.send_frame(conn, Op.LOOKUP_RESP, json.dumps(reply).encode())
