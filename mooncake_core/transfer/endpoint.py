"""Endpoints (one per local NIC x remote NIC) and their capped pool.

An endpoint owns ``connections_per_endpoint`` data connections, each driven by one
thread that takes a chunk of queued slices and hands it to ``_native.transfer``
(pipelined, GIL released). Results go back to the owner (the engine), which retries
failures elsewhere and drops failed endpoints.

A small chunk (at most ``INLINE_MAX`` bytes) that finds the queue empty is run by the
submitting thread itself on a connection of its own (:meth:`Endpoint.run_inline`):
handing it to a connection thread and waiting for the result costs more than the
transfer (measured ~35 us of a ~140 us 4 KiB read on loopback). At most
``connections_per_endpoint`` such connections per endpoint; beyond that, or with work
queued, the chunk is queued as usual.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from array import array
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any, Protocol

from ._c import native as _native
from .protocol import SLICE
from .sieve import make_policy

PIPELINE_WINDOW = 16
"""Requests in flight per connection: enough that the server never waits for the next one."""
MAX_CHUNK = 64
"""Most slices one connection takes from the queue per native call."""
INLINE_MAX = 256 << 10
"""Chunks of at most this many bytes may run in the submitting thread."""
FRESH_SHARE_MIN = 4 << 20
"""Queued bytes from which connection threads still starting get a share of the
endpoint's first request. Each opens its connection first (~1 ms here): a fresh
engine's first 1 MiB read took 2.2-2.4 ms on one connection and 2.5-2.6 ms split over
two, 2 MiB broke even, 4 MiB gained 3-10% and 16 MiB 24% (docs/transfer.md)."""


class Slice:
    """One slice of a request on its way (internal, mutable)."""

    __slots__ = ("attempts", "length", "local_addr", "op", "path", "remote_off", "req", "seg_id")

    def __init__(
        self, req: Any, op: int, seg_id: int, remote_off: int, local_addr: int, length: int
    ) -> None:
        self.req = req
        self.op = op
        self.seg_id = seg_id
        self.remote_off = remote_off
        self.local_addr = local_addr
        self.length = length
        self.attempts = 0
        self.path: tuple[str, str] | None = None


class EndpointOwner(Protocol):
    """What an endpoint calls back into (the engine)."""

    def open_data_connection(self, local_ip: str, remote: str) -> socket.socket: ...

    def chunk_done(
        self, ep: Endpoint, chunk: list[Slice], results: array, done: int, err: int, msg: str
    ) -> None: ...

    def connect_failed(self, ep: Endpoint, chunk: list[Slice], exc: Exception) -> None: ...


class Endpoint:
    """Connections from one local NIC to one remote data server."""

    def __init__(self, local_ip: str, remote: str, connections: int, owner: EndpointOwner) -> None:
        self.key = (local_ip, remote)
        self.local_ip = local_ip
        self.remote = remote
        self._n = connections
        self._owner = owner
        self._queue: deque[Slice] = deque()
        self._cv = threading.Condition()
        self._closed = False
        self._idle = 0
        self._arriving = 0  # connection threads started that have not asked for work yet
        self._hard = False
        self._threads: list[threading.Thread] = []
        self._socks: set[socket.socket] = set()
        self._spare: list[socket.socket] = []  # inline connections not in use
        self._inline = 0  # inline chunks running now

    @property
    def closed(self) -> bool:
        """Whether the endpoint stopped taking work."""
        return self._closed

    def enqueue(self, slices: list[Slice]) -> bool:
        """Queue slices; False if the endpoint is closed (caller re-routes them)."""
        with self._cv:
            if self._closed:
                return False
            self._queue.extend(slices)
            if not self._threads:
                self._arriving = self._n
                for i in range(self._n):
                    t = threading.Thread(
                        target=self._worker,
                        name=f"mc-ep-{self.local_ip}-{self.remote}-{i}",
                        daemon=True,
                    )
                    self._threads.append(t)
                    t.start()
            self._cv.notify_all()
        return True

    def close(self, hard: bool = False) -> list[Slice]:
        """Stop taking work and return the slices still queued.

        Args:
            hard: Also shut the sockets down, interrupting chunks in flight (engine close);
                otherwise chunks in flight finish first (eviction).
        """
        with self._cv:
            self._closed = True
            self._hard = self._hard or hard
            left = list(self._queue)
            self._queue.clear()
            socks = list(self._socks)
            spare, self._spare = self._spare, []
            self._socks.difference_update(spare)
            self._cv.notify_all()
        for s in spare:
            s.close()
        if hard:
            for s in socks:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
        return left

    def run_inline(self, chunk: list[Slice]) -> bool:
        """Run ``chunk`` on the calling thread if the endpoint is idle enough.

        Returns:
            False when it was not run (closed, work queued, or every inline connection
            busy): the caller queues it. True when it ran; its results went to the
            owner like a connection thread's, failures included.
        """
        with self._cv:
            if self._closed or self._queue or self._inline >= self._n:
                return False
            self._inline += 1
            sock = self._spare.pop() if self._spare else None
        try:
            if sock is None:
                try:
                    sock = self._owner.open_data_connection(self.local_ip, self.remote)
                except Exception as exc:  # any connect/handshake failure fails the chunk
                    self._owner.connect_failed(self, chunk, exc)
                    return True
                with self._cv:
                    self._socks.add(sock)
                    if self._hard:
                        sock.shutdown(socket.SHUT_RDWR)
            sock = self._run_chunk(sock, chunk)
        finally:
            with self._cv:
                self._inline -= 1
                if sock is not None and self._closed:
                    self._socks.discard(sock)
                    sock.close()
                elif sock is not None:
                    self._spare.append(sock)
        return True

    def _run_chunk(self, sock: socket.socket, chunk: list[Slice]) -> socket.socket | None:
        """Transfer ``chunk`` over ``sock`` and report to the owner.

        Returns:
            The socket, or None when it failed and was closed (with an RST).
        """
        buf = b"".join(
            SLICE.pack(s.op, s.seg_id, i, s.remote_off, s.local_addr, s.length)
            for i, s in enumerate(chunk)
        )
        results = array("i", bytes(4 * len(chunk)))
        done, err, msg = _native.transfer(sock.fileno(), buf, results, PIPELINE_WINDOW)
        out: socket.socket | None = sock
        if err:
            # Abort (RST) before the failed slices are retried elsewhere: bytes of a
            # WRITE still queued here must never reach the target after its retry.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with self._cv:
                self._socks.discard(sock)
            sock.close()
            out = None
        self._owner.chunk_done(self, chunk, results, done, err, msg)
        return out

    def join(self, timeout: float) -> None:
        """Wait for the worker threads to exit."""
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout)

    def _take(self, first: bool) -> list[Slice] | None:
        with self._cv:
            self._idle += 1
            if first:
                self._arriving -= 1
            while not self._queue and not self._closed:
                self._cv.wait()
            # Share the queue with the other idle connections (a busy one takes its
            # share when it comes back; halving per taker would leave 1-slice chunks),
            # and, for a large first request, with those still starting: it would
            # otherwise go whole to the first thread that runs.
            idle = self._idle
            if self._arriving and sum(s.length for s in self._queue) >= FRESH_SHARE_MIN:
                idle += self._arriving
            self._idle -= 1
            if self._closed:
                return None
            k = min(MAX_CHUNK, max(1, -(-len(self._queue) // idle)))
            return [self._queue.popleft() for _ in range(min(k, len(self._queue)))]

    def _worker(self) -> None:
        sock: socket.socket | None = None
        first = True
        try:
            while True:
                chunk = self._take(first)
                first = False
                if chunk is None:
                    return
                if sock is None:
                    try:
                        sock = self._owner.open_data_connection(self.local_ip, self.remote)
                    except Exception as exc:  # any connect/handshake failure fails the chunk
                        self._owner.connect_failed(self, chunk, exc)
                        return
                    with self._cv:
                        self._socks.add(sock)
                        if self._hard:  # engine closing: interrupt; eviction lets it finish
                            sock.shutdown(socket.SHUT_RDWR)
                sock = self._run_chunk(sock, chunk)
                if sock is None:
                    return
        finally:
            if sock is not None:
                with self._cv:
                    self._socks.discard(sock)
                sock.close()


class EndpointPool:
    """At most ``capacity`` endpoints; the policy (SIEVE or FIFO) picks who leaves.

    Args:
        capacity: Most endpoints open at once.
        policy: ``sieve`` or ``fifo``.
        factory: Builds the endpoint for a key on first use.
        evicted: Receives an evicted endpoint's queued slices for re-routing.
    """

    def __init__(
        self,
        capacity: int,
        policy: str,
        factory: Callable[[tuple[str, str]], Endpoint],
        evicted: Callable[[list[Slice]], None],
    ) -> None:
        self._policy = make_policy(policy, capacity)
        self._factory = factory
        self._evicted = evicted
        self._eps: dict[Hashable, Endpoint] = {}
        self._lock = threading.Lock()
        self.created = 0
        self.evictions = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._eps)

    def get(self, key: tuple[str, str]) -> Endpoint:
        """The endpoint for ``key``, created on first use (may evict another)."""
        gone: Endpoint | None = None
        with self._lock:
            ep = self._eps.get(key)
            if ep is not None and not ep.closed:
                self._policy.access(key)
                return ep
            if ep is not None:
                self._policy.remove(key)
                del self._eps[key]
            ep = self._factory(key)
            self.created += 1
            victim = self._policy.insert(key)
            self._eps[key] = ep
            if victim is not None:
                gone = self._eps.pop(victim, None)
                self.evictions += 1
        if gone is not None:
            self._evicted(gone.close(hard=False))
        return ep

    def drop(self, ep: Endpoint) -> list[Slice]:
        """Remove a failed endpoint; returns its queued slices. Recreated on next use."""
        with self._lock:
            if self._eps.get(ep.key) is ep:
                del self._eps[ep.key]
                self._policy.remove(ep.key)
        return ep.close(hard=False)

    def close(self) -> None:
        """Close every endpoint, interrupting transfers in flight."""
        with self._lock:
            eps = list(self._eps.values())
            self._eps.clear()
        for ep in eps:
            self._evicted(ep.close(hard=True))  # the owner ends the queued slices
        for ep in eps:
            ep.join(timeout=5)
