"""shm transport: same-host segments backed by /dev/shm files, copied in C.

The initiator maps the target's segment file once (cached per path) and copies between
its own memory and the mapping with ``_native.copy_many``: GIL released, and a large
batch is cut into equal byte ranges copied by two pthreads.

The target takes no part in a copy, so it could not count them. Each initiator keeps a
ledger beside the segment file (``<segment file>.peer-<pid>-<token>``, 32 bytes: bytes
and requests written, bytes and requests read), which only it writes; the target sums
the ledgers of its segments for its served counters (:func:`served`) and removes them
with the segment.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ._c import native as _native
from .protocol import COPY_JOB
from .region import pid_gone
from .request import TransferError

COPY_THREADS = 2
"""Most threads per large copy batch (two cores on the reference machine)."""
SPLIT_MIN = 2 << 20
"""Batches below this are copied by one thread: creating a thread costs more."""
INLINE_MAX = SPLIT_MIN - 1
"""Batches of at most this many bytes are copied in the submitting thread (the GIL
released): handing them to the copy thread and waiting for it costs more than the
copy. Measured with one synchronous request: 1 MiB read/write p50 133/138 -> 77/73 us,
1.5 MiB 203/219 -> 132/128 us against a 256 KiB limit; a batch this size would be
copied by one thread anyway (SPLIT_MIN), so the copy thread only adds its hand-off.
The submitter is blocked for the copy, at most ~0.2 ms here."""
_LOAD_RECHECK_S = 1.0


def copy_threads(cpus: int, load_1min: float) -> int:
    """Threads to split a large copy over, given the host's CPUs and run-queue load.

    A batch waits for its slowest thread, so a second thread only pays when a core is
    idle for it: on a busy host the split halved throughput (measured 1.3 vs 2.5 GB/s
    for 1 MiB blocks with the 1-minute load at ~10 on 2 cores).
    """
    return max(1, min(COPY_THREADS, cpus)) if cpus - load_1min >= 1.0 else 1


# Fault the whole mapping in at open: otherwise the first pass over a segment pays one
# page fault per 4 KiB inside the copy loop (measured 10x slower).
_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)

_LEDGER = struct.Struct("=4Q")  # written bytes, written requests, read bytes, read requests
_PEER = ".peer-"


def ledger_paths(segment_path: str) -> list[str]:
    """The initiators' ledgers of the segment file at ``segment_path``."""
    folder, name = os.path.split(segment_path)
    prefix = name + _PEER
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [os.path.join(folder, n) for n in names if n.startswith(prefix)]


def _owner_gone(path: str) -> bool:
    try:
        pid = int(path.rsplit(_PEER, 1)[1].split("-", 1)[0])
    except (ValueError, IndexError):
        return False
    return pid_gone(pid)


def served(segment_path: str, folded: list[int] | None = None) -> tuple[int, int]:
    """(bytes, requests) same-host peers copied into or out of this segment file.

    Args:
        segment_path: The segment file.
        folded: ``[bytes, requests]`` of ledgers already folded in, updated here: the
            ledger of an initiator that has exited is added to it and removed, so a node
            that outlives many short-lived clients keeps one file per live one (each
            costs a page of /dev/shm) and its counters still never go back.
    """
    nbytes = nreq = 0
    for path in ledger_paths(segment_path):
        try:
            with open(path, "rb") as f:
                raw = f.read(_LEDGER.size)
        except OSError:
            continue  # its owner or the target removed it meanwhile
        if len(raw) != _LEDGER.size:
            continue
        wb, wr, rb, rr = _LEDGER.unpack(raw)
        if folded is not None and _owner_gone(path):
            with contextlib.suppress(OSError):
                os.unlink(path)
                folded[0] += wb + rb
                folded[1] += wr + rr
            continue
        nbytes += wb + rb
        nreq += wr + rr
    if folded is not None:
        nbytes += folded[0]
        nreq += folded[1]
    return nbytes, nreq


def remove_ledgers(segment_path: str) -> None:
    """Remove every ledger of a segment file (with the segment)."""
    for path in ledger_paths(segment_path):
        with contextlib.suppress(OSError):
            os.unlink(path)


class _Ledger:
    """This initiator's counts for one peer segment, in a file only it writes."""

    def __init__(self, segment_path: str) -> None:
        self.path = f"{segment_path}{_PEER}{os.getpid()}-{secrets.token_hex(4)}"
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, _LEDGER.size)
            self.map = mmap.mmap(fd, _LEDGER.size, mmap.MAP_SHARED)
        finally:
            os.close(fd)
        self.values = [0, 0, 0, 0]

    def add(self, read: bool, nbytes: int, requests: int = 1) -> None:
        i = 2 if read else 0
        self.values[i] += nbytes
        self.values[i + 1] += requests
        _LEDGER.pack_into(self.map, 0, *self.values)

    def close(self) -> None:
        with contextlib.suppress(BufferError, ValueError):
            self.map.close()


Job = tuple[Any, int, int, int]
"""(request state, destination address, source address, length)."""


class ShmTransport:
    """Maps peer segments and runs copy batches on one worker thread.

    Args:
        on_done: Called with the request states of a finished batch.
    """

    def __init__(self, on_done: Callable[[list[Any]], None]) -> None:
        self._on_done = on_done
        self._maps: dict[str, tuple[mmap.mmap, int]] = {}
        self._ledgers: dict[str, _Ledger | None] = {}
        self._lock = threading.Lock()
        self._queue: deque[list[Job]] = deque()
        self._cv = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.bytes = 0
        self._load_checked = float("-inf")
        self._nthreads = 1

    def map(self, path: str, size: int) -> int:
        """Base address of the peer's segment file, mapped on first use.

        Raises:
            TransferError: The file is gone, smaller than ``size``, or cannot be mapped.
        """
        with self._lock:
            hit = self._maps.get(path)
            if hit is not None and hit[0].size() >= size:
                return hit[1]
            try:
                fd = os.open(path, os.O_RDWR)
            except OSError as exc:
                raise TransferError(f"shm: cannot open peer segment {path}: {exc}") from exc
            try:
                actual = os.fstat(fd).st_size
                if actual < size:
                    raise TransferError(f"shm: {path} has {actual} bytes, segment says {size}")
                m = mmap.mmap(fd, size, _MAP_FLAGS, mmap.PROT_READ | mmap.PROT_WRITE)
            except OSError as exc:
                raise TransferError(f"shm: cannot map {path}: {exc}") from exc
            finally:
                os.close(fd)
            addr = _native.buffer_address(m)[0]
            self._maps[path] = (m, addr)
            if path not in self._ledgers:
                try:
                    self._ledgers[path] = _Ledger(path)
                except OSError:
                    self._ledgers[path] = None  # counted here only; the copy still works
            return addr

    def account(self, path: str, read: bool, nbytes: int, requests: int = 1) -> None:
        """Count finished copies (``requests`` of them, ``nbytes`` together) in the
        ledger of the segment file at ``path``."""
        with self._lock:
            ledger = self._ledgers.get(path)
            if ledger is not None:
                ledger.add(read, nbytes, requests)

    def copy_now(self, copies: list[tuple[int, int, int]]) -> None:
        """Copy ``(dst, src, length)`` triples (bounds-checked by the engine, together at
        most :data:`INLINE_MAX` bytes) in this thread, the GIL released.

        Raises:
            TransferError: the engine is closed.
        """
        if self._closed:
            raise TransferError("engine is closed")
        self.bytes += _native.copy_many(
            b"".join(COPY_JOB.pack(dst, src, n) for dst, src, n in copies), 1, SPLIT_MIN
        )

    def submit(self, jobs: list[Job]) -> None:
        """Copy one batch (already bounds-checked by the engine): a small one at once in
        this thread, a larger one on the copy thread (the caller goes on meanwhile)."""
        if sum(j[3] for j in jobs) <= INLINE_MAX:
            self.copy_now([(dst, src, n) for _, dst, src, n in jobs])
            self._on_done([j[0] for j in jobs])
            return
        with self._cv:
            if self._closed:
                raise TransferError("engine is closed")
            self._queue.append(jobs)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mc-shm-copy", daemon=True)
                self._thread.start()
            self._cv.notify()

    def close(self) -> None:
        """Finish queued copies, stop the worker and unmap everything."""
        with self._cv:
            self._closed = True
            self._cv.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=10)
        with self._lock:
            for m, _ in self._maps.values():
                # Someone may still hold a view; then the OS unmaps at exit.
                with contextlib.suppress(BufferError):
                    m.close()
            self._maps.clear()
            # The ledgers stay: the target's served counters must not go back.
            for ledger in self._ledgers.values():
                if ledger is not None:
                    ledger.close()
            self._ledgers.clear()

    def _threads(self) -> int:
        now = time.monotonic()
        if now - self._load_checked >= _LOAD_RECHECK_S:
            self._load_checked = now
            self._nthreads = copy_threads(os.cpu_count() or 1, os.getloadavg()[0])
        return self._nthreads

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if not self._queue:
                    return
                # Merge everything queued into one native call: one thread split per batch.
                jobs: list[Job] = []
                while self._queue:
                    jobs.extend(self._queue.popleft())
            buf = b"".join(COPY_JOB.pack(dst, src, n) for _, dst, src, n in jobs)
            self.bytes += _native.copy_many(buf, self._threads(), SPLIT_MIN)
            self._on_done([j[0] for j in jobs])
