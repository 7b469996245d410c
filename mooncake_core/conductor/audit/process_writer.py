"""The audit writer in its own process: the conductor keeps only an append per decision.

:class:`AuditWriter` writes on a thread of the conductor's process, so building the
records (a row per candidate, its "why not" sentence) and the SQL run under the same
GIL, on the same cores, as the decisions: +62% per decision with 32 candidates measured
back to back. :class:`ProcessAuditWriter` has the same interface; what it does per item:

- on the calling thread: the decision packed into bytes
  (:func:`~mooncake_core.conductor.candidates.pack_decision`: the candidate *inputs*, not
  rows, copied by a C encoder, ~3 us for 32 candidates) and a ``deque.append``. Packing
  here rather than later keeps nothing of the decision alive: queued bytes are not
  scanned by the garbage collector, queued decisions would be;
- on a sender thread of this process: a batch of those bytes pickled at once and written
  to a pipe (the write releases the GIL);
- in the writer process (``python -m mooncake_core.conductor.audit.writer_child``): the
  decision made again, its records built and committed by an :class:`AuditWriter` (the
  same batching, group commit, retention and retry code), and each frame acknowledged
  with its last sequence number once committed.

No decision is lost: every item keeps a sequence number and stays in memory until the
writer process acknowledged it. If that process dies, a new one is started and
everything unacknowledged is sent again; decisions it already committed (it died
before acknowledging them) are recognised by request id and time and not written twice.
Barriers (:meth:`when_written`) complete when the item before them is acknowledged.

The writer process ignores SIGINT and SIGTERM (a signal to the whole process group must
not lose what is in the pipe): it stops when its input closes, after committing what it
read, which is also what happens when the conductor dies.

Frames, both ways: a 4-byte big-endian length, then a pickle; except the frames of items
to the writer process (:func:`write_items`), whose first byte says whether they are sent
again (1) or not (0), followed by the pickled ``(first sequence number, items)`` (not
pickled a second time, nor copied into one string with its length: a frame is up to a
few MB). The items have consecutive sequence numbers; each is a packed decision
(``bytes``), ``("u", request_id, ttft, tbt)``, ``("o", request_id, outcome, detail)`` or
``("b",)`` (a barrier). Back: ``(seq, ok, counters)``, where ``counters`` are the writer
process's :class:`WriterSnapshot` fields.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import fields
from typing import IO, TYPE_CHECKING, Any

from mooncake_core.conductor.candidates import pack_decision

from .records import Outcome, checked_outcome
from .writer import AuditWriter, RecordSource, WriterOptions, WriterSnapshot

if TYPE_CHECKING:
    from mooncake_core.config import AuditConfig

log = logging.getLogger(__name__)

__all__ = [
    "AuditSink",
    "ProcessAuditWriter",
    "open_audit_writer",
    "read_frame",
    "read_items",
    "write_frame",
    "write_items",
]

_LEN = struct.Struct(">I")
_CHILD_COUNTERS = ("failed", "batches", "retention_deleted")
FRAME_MAX = 256 << 20
"""Largest frame either side accepts (a corrupt length must not allocate gigabytes)."""


def write_frame(out: IO[bytes], obj: object) -> None:
    """Pickle ``obj`` and write it as one length-prefixed frame."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_LEN.pack(len(data)) + data)
    out.flush()


def write_items(out: IO[bytes], resend: bool, payload: bytes) -> None:
    """Write a frame of items already pickled (``payload``), marked as sent again or not."""
    out.write(_LEN.pack(len(payload) + 1) + (b"\x01" if resend else b"\x00"))
    out.write(payload)  # a large write goes to the pipe without a copy here
    out.flush()


def _read_raw(inp: IO[bytes]) -> bytes:
    head = inp.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError("audit writer pipe closed")
    (n,) = _LEN.unpack(head)
    if n > FRAME_MAX:
        raise ValueError(f"audit frame of {n} bytes is over the {FRAME_MAX}-byte limit")
    data = inp.read(n)
    if len(data) < n:
        raise EOFError("audit writer pipe closed inside a frame")
    return data


def read_frame(inp: IO[bytes]) -> Any:
    """Read one frame; ``EOFError`` at a clean or cut end of stream.

    Raises:
        EOFError: the stream ended (before or inside a frame).
        ValueError: a length over :data:`FRAME_MAX`.
    """
    return pickle.loads(_read_raw(inp))


def read_items(inp: IO[bytes]) -> tuple[bool, Any]:
    """Read a frame :func:`write_items` wrote: (sent again, what was pickled: the first
    sequence number and the items).

    Raises:
        EOFError: the stream ended (before or inside a frame).
        ValueError: a length over :data:`FRAME_MAX`, or an empty frame.
    """
    data = _read_raw(inp)
    if not data:
        raise ValueError("an empty audit items frame")
    return data[0] == 1, pickle.loads(memoryview(data)[1:])


class ProcessAuditWriter:
    """:class:`AuditWriter`'s interface, with the writing done by a child process.

    Args:
        url: database URL, already upgraded (the child checks the schema and exits with
            the error otherwise; :meth:`start` raises it).
        options: batching, retention and queue limits (``queue_max`` counts items
            queued here and items sent but not yet acknowledged).
        python: interpreter for the writer process (default: this one).
    """

    def __init__(
        self, url: str, options: WriterOptions | None = None, *, python: str | None = None
    ) -> None:
        self._url = url
        self._opts = options or WriterOptions()
        self._python = python or sys.executable
        self._q: deque[Any] = deque()
        self._limit = self._opts.queue_max
        self._wake = threading.Event()
        self._stop = threading.Event()
        # Held while a frame is written and while a new child is started and sent the
        # unacknowledged items, so the two never interleave on the pipe.
        self._send_lock = threading.Lock()
        self._ack = threading.Lock()  # the frames and barriers awaiting an acknowledgement
        # Frames sent and not yet acknowledged, in order: (last seq, pickled items,
        # item count, decisions, updates); ``_unacked_items`` counts their items. Kept
        # pickled: bytes are not tracked by the garbage collector, thousands of nested
        # tuples would make every collection in the conductor's process slower.
        self._unacked: deque[tuple[int, bytes, int, int, int]] = deque()
        self._unacked_items = 0
        self._barriers: deque[tuple[int, Callable[[bool], None]]] = deque()
        self._seq = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._sender: threading.Thread | None = None
        self._reader: threading.Thread | None = None
        self._closed = False
        self._started = False
        self._submitted = 0
        self._dropped = 0
        self._updates_dropped = 0
        self._restarts = 0
        # Decisions and updates the writer processes acknowledged (counted here: a
        # process that died may have counted some it never acknowledged).
        self._acked_decisions = 0
        self._acked_updates = 0
        self._base = dict.fromkeys(_CHILD_COUNTERS, 0)  # counters of children gone
        self._child: dict[str, Any] = dict.fromkeys(_CHILD_COUNTERS, 0)
        self._last_error: str | None = None

    @classmethod
    def open(cls, url: str, options: WriterOptions | None = None) -> ProcessAuditWriter:
        """Same as the constructor (the name :class:`AuditWriter` uses)."""
        return cls(url, options)

    # -- decision path (any thread; O(1), never blocks) -------------------------------

    def _room(self) -> bool:
        return len(self._q) + self._unacked_items < self._limit

    def submit_source(self, source: RecordSource) -> bool:
        """Queue a decision (the conductor's ``Decision``), packed here into bytes.

        Returns:
            ``False`` when the queue is full, the writer closed, or ``source`` is not a
            decision that packs (counted in ``dropped``; the reason in ``last_error``).
        """
        if not self._room():
            self._dropped += 1
            return False
        try:
            packed = pack_decision(source)  # type: ignore[arg-type]
        except Exception as exc:
            self._dropped += 1
            self._last_error = f"audit: a {type(source).__name__} does not pack: {exc}"
            return False
        self._q.append(packed)
        self._submitted += 1
        if len(self._q) >= self._opts.batch_size:
            self._wake.set()
        return True

    def update_actual(self, request_id: str, ttft_s: float | None, tbt_s: float | None) -> bool:
        """Queue the measured TTFT/TBT of a request (see :meth:`AuditWriter.update_actual`)."""
        if not self._room():
            self._updates_dropped += 1
            return False
        self._q.append(("u", request_id, ttft_s, tbt_s))
        return True

    def record_outcome(self, request_id: str, outcome: Outcome, detail: str | None = None) -> bool:
        """Queue how a request ended (see :meth:`AuditWriter.record_outcome`).

        Raises:
            ValueError: an unknown outcome (nothing is queued).
        """
        detail = checked_outcome(outcome, detail)
        if not self._room():
            self._updates_dropped += 1
            return False
        self._q.append(("o", request_id, outcome, detail))
        return True

    def when_written(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback(ok)`` once everything queued before this call is committed.

        It runs on this writer's reader thread (or here, with ``False``, when the writer
        is closed or full): keep it short and thread-safe.
        """
        if self._closed or not self._room():
            callback(False)
            return
        self._q.append(("b", callback))
        self._wake.set()

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the writer process and this side's threads (idempotent).

        Raises:
            RuntimeError: closed, or the writer process could not open the database
                (its error is in the message).
        """
        if self._closed:
            raise RuntimeError("ProcessAuditWriter is closed")
        if self._started:
            return
        self._spawn()
        self._started = True
        self._sender = threading.Thread(target=self._send_loop, name="audit-send", daemon=True)
        self._reader = threading.Thread(target=self._read_loop, name="audit-acks", daemon=True)
        self._sender.start()
        self._reader.start()

    def flush(self, timeout_s: float = 60.0) -> bool:
        """Wait until everything queued before this call is committed; ``False`` on timeout."""
        if not self._started:
            return not self._q
        done = threading.Event()
        ok: list[bool] = []

        def settle(v: bool) -> None:
            ok.append(v)
            done.set()

        self.when_written(settle)
        return done.wait(timeout_s) and all(ok)

    def close(self, timeout_s: float = 60.0) -> None:
        """Send what is queued, wait until it is committed, and stop the writer process."""
        if self._closed:
            return
        if self._started:
            self.flush(timeout_s)
        self._limit = 0
        self._closed = True
        self._stop.set()
        self._wake.set()
        if self._sender is not None:
            self._sender.join()
        proc = self._proc
        if proc is not None:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()  # the child commits what it read and exits
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._reader is not None:
            self._reader.join(timeout_s)
        with self._ack:
            barriers, self._barriers = list(self._barriers), deque()
        for _, cb in barriers:
            _call(cb, False)
        while self._q:
            it = self._q.popleft()
            if type(it) is tuple and it[0] == "b":
                _call(it[1], False)

    def __enter__(self) -> ProcessAuditWriter:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def snapshot(self) -> WriterSnapshot:
        """Counters: this side's, plus the writer processes' (all of them, restarts included)."""
        child = self._child
        total = {k: self._base[k] + int(child.get(k, 0)) for k in _CHILD_COUNTERS}
        proc = self._proc
        return WriterSnapshot(
            submitted=self._submitted,
            written=max(self._acked_decisions - total["failed"], 0),
            dropped=self._dropped,
            failed=total["failed"],
            updates_applied=self._acked_updates,
            updates_dropped=self._updates_dropped,
            queue_depth=len(self._q) + self._unacked_items,
            batches=total["batches"],
            retention_deleted=total["retention_deleted"],
            last_error=child.get("last_error") or self._last_error,
            running=proc is not None and proc.poll() is None and not self._closed,
        )

    @property
    def restarts(self) -> int:
        """Writer processes started again after one died."""
        return self._restarts

    @property
    def pid(self) -> int | None:
        """The writer process's pid (``None`` before :meth:`start`)."""
        return self._proc.pid if self._proc is not None else None

    # -- the writer process --------------------------------------------------------------

    def _spawn(self) -> None:
        """Start a writer process and wait for its "ready" frame (it opened the database)."""
        opts = {f.name: getattr(self._opts, f.name) for f in fields(WriterOptions)}
        proc = subprocess.Popen(
            [self._python, "-m", "mooncake_core.conductor.audit.writer_child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            write_frame(proc.stdin, (self._url, opts))
            hello = read_frame(proc.stdout)
        except (EOFError, OSError, ValueError) as exc:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"audit writer process did not start: {exc}") from None
        if hello[0] != "ready":
            proc.wait()
            raise RuntimeError(f"audit writer process: {hello[1]}")
        self._proc = proc
        self._child = dict.fromkeys(_CHILD_COUNTERS, 0)

    def _restart(self) -> None:
        """A writer process died: start another and send it everything unacknowledged."""
        for k in _CHILD_COUNTERS:
            self._base[k] += int(self._child.get(k, 0))
        self._child = dict.fromkeys(_CHILD_COUNTERS, 0)  # counted in _base now
        delay = 0.05
        while not self._closed:
            try:
                self._spawn()
            except Exception as exc:
                self._last_error = f"audit writer process restart: {exc}"
                log.warning("%s; retrying in %.1fs", self._last_error, delay)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            self._restarts += 1
            with self._ack:
                pending = list(self._unacked)
            proc = self._proc
            assert proc is not None and proc.stdin is not None
            try:
                for frame in pending:
                    write_items(proc.stdin, True, frame[1])
            except OSError:
                continue  # died again: the reader sees it and comes back here
            log.warning(
                "audit writer process restarted (pid %d); %d items sent again",
                proc.pid,
                sum(f[2] for f in pending),
            )
            return

    # -- sender thread ---------------------------------------------------------------------

    def _send_loop(self) -> None:
        opts = self._opts
        while True:
            if len(self._q) < opts.batch_size and not self._stop.is_set():
                self._wake.wait(opts.flush_interval_s)
                self._wake.clear()
            if not self._q:
                if self._stop.is_set():
                    return
                continue
            with self._send_lock:
                self._send_batch()

    def _send_batch(self) -> None:
        q = self._q
        pop = q.popleft
        items = [pop() for _ in range(min(len(q), 4 * self._opts.batch_size))]
        if not items:
            return
        first = self._seq + 1
        barriers: list[tuple[int, Callable[[bool], None]]] = []
        updates = 0
        for i, it in enumerate(items):
            if type(it) is not bytes:  # decisions are their packed bytes
                if it[0] == "b":
                    barriers.append((first + i, it[1]))
                    items[i] = ("b",)
                else:
                    updates += 1
        decisions = len(items) - len(barriers) - updates
        seq = self._seq = first + len(items) - 1
        frame = (first, items)
        payload = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
        with self._ack:
            self._unacked.append((seq, payload, len(items), decisions, updates))
            self._unacked_items += len(items)
            self._barriers.extend(barriers)
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        # OSError: the child died; the reader restarts it and sends these again.
        with contextlib.suppress(OSError):
            write_items(proc.stdin, False, payload)

    # -- reader thread ---------------------------------------------------------------------

    def _read_loop(self) -> None:
        while True:
            proc = self._proc
            assert proc is not None and proc.stdout is not None
            try:
                seq, ok, counters = read_frame(proc.stdout)
            except (EOFError, OSError, ValueError, pickle.UnpicklingError) as exc:
                proc.wait()
                if self._closed:
                    return
                self._last_error = f"audit writer process exited ({proc.returncode}): {exc}"
                log.warning("%s", self._last_error)
                with self._send_lock:
                    self._restart()
                continue
            self._child = counters
            self._acknowledge(seq, ok)

    def _acknowledge(self, seq: int, ok: bool) -> None:
        due: list[Callable[[bool], None]] = []
        with self._ack:
            u = self._unacked
            while u and u[0][0] <= seq:
                _, _, n, decisions, updates = u.popleft()
                self._unacked_items -= n
                self._acked_decisions += decisions
                self._acked_updates += updates
            b = self._barriers
            while b and b[0][0] <= seq:
                due.append(b.popleft()[1])
        for cb in due:
            _call(cb, ok)


def _call(cb: Callable[[bool], None], ok: bool) -> None:
    try:
        cb(ok)
    except Exception as exc:  # a waiter's bug must not stop the writer
        log.warning("audit barrier callback failed: %s", exc)


AuditSink = AuditWriter | ProcessAuditWriter
"""Either writer: the conductor uses the one ``audit.writer`` names."""


def open_audit_writer(url: str, cfg: AuditConfig) -> AuditSink:
    """The writer ``cfg.writer`` names for an upgraded database at ``url`` (not started).

    Raises:
        SchemaError: ``thread`` and the database is not at this code's schema (the
            ``process`` writer's child checks it when started).
    """
    opts = WriterOptions.from_config(cfg)
    if cfg.writer == "process":
        return ProcessAuditWriter(url, opts)
    return AuditWriter.open(url, opts)
