"""The audit writer in its own process: the conductor keeps only a copy per decision.

:class:`AuditWriter` writes on a thread of the conductor's process, so building the
records (a row per candidate, its "why not" sentence) and the SQL run under the same
GIL, on the same cores, as the decisions: +62% per decision with 32 candidates measured
back to back. :class:`ProcessAuditWriter` has the same interface; what it does per item:

- on the calling thread, in one C call: the decision's candidate *inputs* (not rows;
  :func:`~mooncake_core.conductor.candidates.decision_to_wire`) encoded straight into a
  ring in shared memory (:mod:`.ring`), ~3 us for 32 candidates. Nothing is allocated
  for it and nothing of the decision stays alive; no other thread of this process
  touches it again (no sender thread, no pickle, no pipe write per batch);
- in the writer process (``python -m mooncake_core.conductor.audit.writer_child``): the
  records read from the ring, the decision made again, its rows built and committed by
  an :class:`AuditWriter` (the same batching, group commit, retention and retry code);
  then the records' space released in the ring and the batch acknowledged with its last
  sequence number.

No decision is lost: a record stays in the ring until the writer process committed it.
If that process dies, a new one is started on the same ring and reads again everything
not released; decisions it already committed (it died before releasing them) are
recognised by request id and time and not written twice. When the ring or
``queue_max`` is full, new items are refused and counted (``dropped``), as with the
thread writer. Barriers (:meth:`when_written`) complete when the items before them are
acknowledged.

The writer process ignores SIGINT and SIGTERM (a signal to the whole process group must
not lose what is in the ring): it stops when its input closes, after committing what is
in the ring, which is also what happens when the conductor dies.

Frames on the pipes (the handshake, the acknowledgements): a 4-byte big-endian length,
then a pickle. To the writer process: ``(url, options, ring fd)``, then single bytes
that ask it to look at the ring now (a flush). Back: ``("ready",)`` or ``("error",
text)``, then ``(seq, ok, counters, decisions, updates)``: everything up to ``seq`` is
committed, ``decisions`` and ``updates`` of them (the ring keeps these counts for the
next writer process), and ``counters`` are the writer process's
:class:`WriterSnapshot` fields.
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

from mooncake_core.conductor.candidates import decision_to_wire

from .records import Outcome, checked_outcome
from .ring import DECISION, OUTCOME, UPDATE, SharedRing, ring_bytes
from .writer import AuditWriter, RecordSource, WriterOptions, WriterSnapshot

if TYPE_CHECKING:
    from mooncake_core.config import AuditConfig

log = logging.getLogger(__name__)

__all__ = [
    "AuditSink",
    "ProcessAuditWriter",
    "open_audit_writer",
    "read_frame",
    "write_frame",
]

_LEN = struct.Struct(">I")
_CHILD_COUNTERS = ("failed", "batches", "retention_deleted")
FRAME_MAX = 1 << 20
"""Largest frame either side accepts (a corrupt length must not allocate gigabytes)."""


def write_frame(out: IO[bytes], obj: object) -> None:
    """Pickle ``obj`` and write it as one length-prefixed frame."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_LEN.pack(len(data)) + data)
    out.flush()


def read_frame(inp: IO[bytes]) -> Any:
    """Read one frame.

    Raises:
        EOFError: the stream ended (before or inside a frame).
        ValueError: a length over :data:`FRAME_MAX`.
    """
    head = inp.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError("audit writer pipe closed")
    (n,) = _LEN.unpack(head)
    if n > FRAME_MAX:
        raise ValueError(f"audit frame of {n} bytes is over the {FRAME_MAX}-byte limit")
    data = inp.read(n)
    if len(data) < n:
        raise EOFError("audit writer pipe closed inside a frame")
    return pickle.loads(data)


class ProcessAuditWriter:
    """:class:`AuditWriter`'s interface, with the writing done by a child process.

    Args:
        url: database URL, already upgraded (the child checks the schema and exits with
            the error otherwise; :meth:`start` raises it).
        options: batching, retention and queue limits (``queue_max`` counts the items
            written into the ring and not yet acknowledged).
        python: interpreter for the writer process (default: this one).
        ring_size: bytes of the shared ring (default: :func:`.ring.ring_bytes` of
            ``queue_max``, at most 64 MiB).
    """

    def __init__(
        self,
        url: str,
        options: WriterOptions | None = None,
        *,
        python: str | None = None,
        ring_size: int | None = None,
    ) -> None:
        self._url = url
        self._opts = options or WriterOptions()
        self._python = python or sys.executable
        # Created here: items submitted before start() wait in it.
        self._ring = SharedRing.create(ring_size or ring_bytes(self._opts.queue_max))
        self._limit = self._opts.queue_max
        self._ack = threading.Lock()  # the barriers and the acknowledged counts
        self._barriers: deque[tuple[int, Callable[[bool], None]]] = deque()
        self._written = 0  # records written into the ring (the last push's number)
        self._acked = 0  # records the writer processes acknowledged
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._spawn_lock = threading.Lock()  # the nudge and a restart never interleave
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

    def _push(self, kind: int, value: Any) -> bool:
        """``value`` into the ring; ``False``: full (or not started, or closed)."""
        ring = self._ring
        if self._closed or self._written - self._acked >= self._limit:
            return False
        n = ring.push(kind, value)
        if not n:
            self._last_error = f"audit: the writer's ring of {ring.size} bytes is full"
            return False
        self._written = n
        return True

    def submit_source(self, source: RecordSource) -> bool:
        """Queue a decision (the conductor's ``Decision``), encoded here into the ring.

        Returns:
            ``False`` when the queue is full, the writer is closed, or ``source`` is
            not a decision that packs (counted in ``dropped``; the reason in
            ``last_error``).
        """
        try:
            ok = self._push(DECISION, decision_to_wire(source))  # type: ignore[arg-type]
        except Exception as exc:
            self._dropped += 1
            self._last_error = f"audit: a {type(source).__name__} does not pack: {exc}"
            return False
        if not ok:
            self._dropped += 1
            return False
        self._submitted += 1
        return True

    def update_actual(self, request_id: str, ttft_s: float | None, tbt_s: float | None) -> bool:
        """Queue the measured TTFT/TBT of a request (see :meth:`AuditWriter.update_actual`)."""
        if not self._push(UPDATE, (request_id, ttft_s, tbt_s)):
            self._updates_dropped += 1
            return False
        return True

    def record_outcome(self, request_id: str, outcome: Outcome, detail: str | None = None) -> bool:
        """Queue how a request ended (see :meth:`AuditWriter.record_outcome`).

        Raises:
            ValueError: an unknown outcome (nothing is queued).
        """
        detail = checked_outcome(outcome, detail)
        if not self._push(OUTCOME, (request_id, outcome, detail)):
            self._updates_dropped += 1
            return False
        return True

    def when_written(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback(ok)`` once everything queued before this call is committed.

        It runs on this writer's reader thread (or here: with ``True`` when that is so
        already, with ``False`` when the writer is closed): keep it short and
        thread-safe.
        """
        if self._closed:
            callback(False)
            return
        target = self._ring.written
        with self._ack:
            due = self._acked >= target
            if not due:
                self._barriers.append((target, callback))
        if due:
            callback(True)
            return
        self._nudge()

    def _nudge(self) -> None:
        """Ask the writer process to read the ring now (it does every ``POLL_S``)."""
        with self._spawn_lock:
            proc = self._proc
            if proc is not None and proc.stdin is not None:
                # A paused process's pipe may be full: it reads the ring when it runs.
                with contextlib.suppress(OSError):
                    os.write(proc.stdin.fileno(), b"\x00")

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the writer process and this side's reader thread (idempotent).

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
        self._reader = threading.Thread(target=self._read_loop, name="audit-acks", daemon=True)
        self._reader.start()

    def flush(self, timeout_s: float = 60.0) -> bool:
        """Wait until everything queued before this call is committed; ``False`` on timeout."""
        if not self._started:
            return self._written == 0
        done = threading.Event()
        ok: list[bool] = []

        def settle(v: bool) -> None:
            ok.append(v)
            done.set()

        self.when_written(settle)
        return done.wait(timeout_s) and all(ok)

    def close(self, timeout_s: float = 60.0) -> None:
        """Wait until what is queued is committed, and stop the writer process."""
        if self._closed:
            return
        if self._started:
            self.flush(timeout_s)
        self._closed = True
        proc = self._proc
        if proc is not None:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()  # the child commits what is in the ring and exits
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
        self._ring.close()

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
            queue_depth=max(self._written - self._acked, 0),
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
        """Start a writer process on the ring and wait for its "ready" frame (it opened
        the database)."""
        opts = {f.name: getattr(self._opts, f.name) for f in fields(WriterOptions)}
        fd = self._ring.fd
        proc = subprocess.Popen(
            [self._python, "-m", "mooncake_core.conductor.audit.writer_child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            pass_fds=(fd,),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            write_frame(proc.stdin, (self._url, opts, fd))
            hello = read_frame(proc.stdout)
        except (EOFError, OSError, ValueError) as exc:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"audit writer process did not start: {exc}") from None
        if hello[0] != "ready":
            proc.wait()
            raise RuntimeError(f"audit writer process: {hello[1]}")
        os.set_blocking(proc.stdin.fileno(), False)  # a nudge never waits
        with self._spawn_lock:
            self._proc = proc
        self._child = dict.fromkeys(_CHILD_COUNTERS, 0)

    def _restart(self) -> None:
        """A writer process died: start another on the same ring (it reads again
        everything not released)."""
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
            proc = self._proc
            assert proc is not None
            log.warning(
                "audit writer process restarted (pid %d); %d items to read again",
                proc.pid,
                self._written - self._acked,
            )
            if self._barriers:
                self._nudge()
            return

    # -- reader thread ---------------------------------------------------------------------

    def _read_loop(self) -> None:
        while True:
            proc = self._proc
            assert proc is not None and proc.stdout is not None
            try:
                seq, ok, counters, decisions, updates = read_frame(proc.stdout)
            except (EOFError, OSError, ValueError, pickle.UnpicklingError) as exc:
                proc.wait()
                if self._closed:
                    return
                self._last_error = f"audit writer process exited ({proc.returncode}): {exc}"
                log.warning("%s", self._last_error)
                self._restart()
                continue
            self._child = counters
            self._acknowledge(seq, ok, decisions, updates)

    def _acknowledge(self, seq: int, ok: bool, decisions: int, updates: int) -> None:
        due: list[Callable[[bool], None]] = []
        with self._ack:
            self._acked = max(self._acked, seq)
            self._acked_decisions = max(self._acked_decisions, decisions)
            self._acked_updates = max(self._acked_updates, updates)
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
