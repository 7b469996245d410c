"""Background writer: takes audit records off the decision path and stores them in batches.

Threading (why it looks like this): the conductor decides on its own thread or event
loop and must never wait for the database. ``submit`` (records) and ``submit_source``
(an immutable object with ``to_record()``, converted on the writer thread) only append
to a deque (O(1), no lock: ``deque.append``/``popleft`` are atomic under the GIL). One
writer thread drains the deque in batches of ``batch_size`` and writes each batch in one
transaction with multi-row INSERTs (decisions, then candidates), releasing the GIL at
least every 0.2 ms so that a decision never waits long for it (``inserts.GilPacer``). Row ids of decisions are assigned here, not
by the database, so candidates can reference them without a round-trip per row; this
assumes one writer per database (the conductor). A failed batch is retried record by
record after re-reading ``max(id)``.

If the database cannot keep up, the deque is bounded by ``queue_max`` and further
records are dropped and counted (``snapshot().dropped``): decisions are never blocked.

Durability on demand: ``when_written(callback)`` queues a barrier and wakes the thread at
once; the callback runs on the writer thread when everything queued before it is
committed. The front door awaits one before it dispatches or answers a request, so a
SIGKILL can only lose rows of requests nobody has seen an effect of yet. Barriers that
arrive while a batch commits ride on the next one (group commit): under load one commit
covers many requests.

    submit() --append--> deque --[writer thread: batch_size, flush_interval_s or a barrier]--> DB
                                  \\-- every retention_interval_s: apply_retention()
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Engine

from .db import make_engine, require_current_schema
from .inserts import (
    GilPacer,
    OutcomeUpdate,
    Update,
    apply_updates,
    decision_stored,
    insert_batch,
)
from .records import CandidateRecord, DecisionRecord, Outcome, checked_outcome
from .retention import RetentionResult, apply_retention

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mooncake_core.config import AuditConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WriterOptions:
    """Tuning of :class:`AuditWriter` (the first four come from ``AuditConfig``).

    Attributes:
        batch_size: Most queued items (decisions, latency or outcome updates) per transaction.
        flush_interval_s: Longest a submitted record waits before it is written.
        retention_days: Decisions older than this are deleted.
        retention_rows: At most this many decisions are kept.
        queue_max: Items allowed to wait; beyond it new ones are dropped and counted.
        retention_interval_s: How often the retention pass runs.
    """

    batch_size: int = 512
    flush_interval_s: float = 0.5
    retention_days: float = 30.0
    retention_rows: int = 10_000_000
    queue_max: int = 200_000
    retention_interval_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("batch_size", "retention_rows", "queue_max"):
            if getattr(self, name) < 1:
                raise ValueError(f"WriterOptions.{name} must be >= 1, got {getattr(self, name)!r}")
        for name in ("flush_interval_s", "retention_days", "retention_interval_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"WriterOptions.{name} must be > 0, got {getattr(self, name)!r}")

    @classmethod
    def from_config(cls, cfg: AuditConfig, **overrides: Any) -> WriterOptions:
        """Options from the cluster's ``AuditConfig``, with keyword overrides."""
        base: dict[str, Any] = {
            "batch_size": cfg.batch_size,
            "flush_interval_s": cfg.flush_interval_s,
            "retention_days": cfg.retention_days,
            "retention_rows": cfg.retention_rows,
        }
        base.update(overrides)
        return cls(**base)


@dataclass(frozen=True, slots=True)
class WriterSnapshot:
    """Counters of an :class:`AuditWriter` at one moment.

    Attributes:
        submitted: Decisions accepted by ``submit``.
        written: Decisions stored.
        dropped: Decisions refused because the queue was full.
        failed: Decisions that could not be written (e.g. a bad record; counted after the
            batch was retried record by record).
        updates_applied: ``update_actual`` and ``record_outcome`` calls written.
        updates_dropped: ``update_actual`` and ``record_outcome`` calls refused because
            the queue was full (or the writer was closed).
        queue_depth: Items waiting now.
        batches: Transactions committed.
        retention_deleted: Decisions deleted by retention so far.
        last_error: Text of the last write error, if any.
        running: Whether the background thread is running.
    """

    submitted: int
    written: int
    dropped: int
    failed: int
    updates_applied: int
    updates_dropped: int
    queue_depth: int
    batches: int
    retention_deleted: int
    last_error: str | None
    running: bool


@dataclass(frozen=True, slots=True)
class _Barrier:
    """A queue item whose callback runs once the items queued before it are committed."""

    callback: Callable[[bool], None]


class RecordSource(Protocol):
    """Anything that can turn itself into audit records (the conductor's ``Decision``)."""

    def to_record(self) -> tuple[DecisionRecord, Sequence[CandidateRecord]]:
        """Return the decision record and its candidate records."""
        ...


class AuditWriter:
    """Stores audit records in batches on a background thread.

    Args:
        engine: Engine of an upgraded audit database.
        options: Batching, retention and queue limits.
        own_engine: Dispose of ``engine`` on :meth:`close`.

    Raises:
        SchemaError: the database is not at the schema this code writes
            (run ``mooncake db upgrade``).
    """

    def __init__(
        self, engine: Engine, options: WriterOptions | None = None, *, own_engine: bool = False
    ) -> None:
        require_current_schema(engine)
        self._engine = engine
        self._own_engine = own_engine
        self._opts = options or WriterOptions()
        self._q: deque[
            tuple[DecisionRecord, Sequence[CandidateRecord]]
            | Update
            | OutcomeUpdate
            | RecordSource
            | _Barrier
        ]
        self._q = deque()
        self._io_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_id: int | None = None
        self._last_retention = 0.0
        self._closed = False
        # Queue bound checked by submit; 0 after close, so late records are dropped and
        # counted instead of waiting forever in a queue nobody drains.
        self._limit = self._opts.queue_max
        self._submitted = 0
        self._written = 0
        self._dropped = 0
        self._failed = 0
        self._updates = 0
        self._updates_dropped = 0
        self._batches = 0
        self._retention_deleted = 0
        self._last_error: str | None = None

    @classmethod
    def open(cls, url: str, options: WriterOptions | None = None) -> AuditWriter:
        """Connect to ``url`` and return a writer that owns its engine (not started).

        Raises:
            SchemaError: missing or un-upgraded database.
        """
        engine = make_engine(url)
        try:
            return cls(engine, options, own_engine=True)
        except BaseException:
            engine.dispose()
            raise

    # -- decision path ---------------------------------------------------------------

    def submit(
        self, decision: DecisionRecord, candidate_records: Sequence[CandidateRecord]
    ) -> bool:
        """Queue one decision and its candidates; never blocks, never touches the DB.

        Args:
            decision: The decision.
            candidate_records: The instances it considered (kept as given; pass a tuple
                or a list you will not modify).

        Returns:
            ``False`` when the queue is full, or the writer is closed, and the record
            was dropped (counted in ``dropped``).

        Thread safety: the deque is safe from any thread; the counters assume one
        submitting thread (the conductor's) and may under-count with several.
        """
        q = self._q
        if len(q) >= self._limit:
            self._dropped += 1
            return False
        q.append((decision, candidate_records))
        self._submitted += 1
        if len(q) == self._opts.batch_size:
            self._wake.set()
        return True

    def submit_source(self, source: RecordSource) -> bool:
        """Queue an immutable object whose ``to_record()`` the writer thread calls later.

        Building the records (a dozen frozen dataclasses for a large cluster) then happens
        off the decision path too; ``source`` must not change after it is submitted
        (the conductor's ``Decision`` is frozen). A ``to_record()`` that raises counts
        as ``failed``.

        Returns:
            ``False`` when the queue is full or the writer is closed (counted in ``dropped``).
        """
        q = self._q
        if len(q) >= self._limit:
            self._dropped += 1
            return False
        q.append(source)
        self._submitted += 1
        if len(q) == self._opts.batch_size:
            self._wake.set()
        return True

    def update_actual(self, request_id: str, ttft_s: float | None, tbt_s: float | None) -> bool:
        """Queue the measured TTFT/TBT of a request (applied to its latest decision).

        ``None`` leaves a value unchanged, so TTFT can be recorded at the first token and
        TBT when the request finishes.

        Returns:
            ``False`` when the queue is full and the update was dropped (counted).
        """
        if len(self._q) >= self._limit:
            self._updates_dropped += 1
            return False
        self._q.append(Update(request_id, ttft_s, tbt_s))
        return True

    def record_outcome(self, request_id: str, outcome: Outcome, detail: str | None = None) -> bool:
        """Queue how a request ended (applied to its latest decision); never blocks.

        It goes through the same queue as the decisions, so it lands after the decision
        it describes. A later call for the same request replaces the outcome.

        Args:
            request_id: The request.
            outcome: ``completed``, ``rejected``, ``failed`` or ``cancelled``.
            detail: The reason code and text, or the error; cut to
                :data:`~.records.OUTCOME_DETAIL_MAX` characters. ``None``: nothing to add.

        Returns:
            ``False`` when the queue is full or the writer is closed, and the outcome was
            dropped (counted in ``updates_dropped``).

        Raises:
            ValueError: ``outcome`` is not one of the codes above (nothing is queued).
        """
        detail = checked_outcome(outcome, detail)
        if len(self._q) >= self._limit:
            self._updates_dropped += 1
            return False
        self._q.append(OutcomeUpdate(request_id, outcome, detail))
        return True

    def when_written(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback(ok)`` once everything queued before this call is committed.

        Wakes the writer thread at once (no ``flush_interval_s`` wait). The callback runs
        on the writer thread (or the thread that calls :meth:`flush` / :meth:`close`):
        keep it short and thread-safe (``loop.call_soon_threadsafe``). ``ok`` is false
        when the batch failed (some rows may still have been written one by one), and
        when the writer is closed or its queue full: then it is called right here.

        Args:
            callback: called once with whether the preceding items are in the database.
        """
        if len(self._q) >= self._limit:
            callback(False)
            return
        self._q.append(_Barrier(callback))
        self._wake.set()

    def stored(self, request_id: str, time: float) -> bool:
        """Whether a decision for ``request_id`` made at ``time`` is in the database.

        (What the writer process checks for decisions sent again after a restart.)
        """
        with self._io_lock, self._engine.connect() as conn:
            return decision_stored(conn, request_id, time)

    def note_failure(self, error: str) -> None:
        """Count a decision that could not even be read as failed, with its error."""
        self._failed += 1
        self._last_error = error

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Start the background thread (idempotent)."""
        if self._closed:
            raise RuntimeError("AuditWriter is closed")
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
            self._thread.start()

    def flush(self) -> None:
        """Write everything submitted before this call, in the calling thread if needed."""
        pending = len(self._q)
        with self._io_lock:
            done = 0
            while done < pending and self._q:
                done += self._write_batch_locked()

    def close(self) -> None:
        """Stop the thread, write what is left, and release the engine if owned."""
        if self._closed:
            return
        self._limit = 0
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.flush()
        self._closed = True
        if self._own_engine:
            self._engine.dispose()

    def __enter__(self) -> AuditWriter:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def snapshot(self) -> WriterSnapshot:
        """Current counters (cheap; safe from any thread)."""
        return WriterSnapshot(
            submitted=self._submitted,
            written=self._written,
            dropped=self._dropped,
            failed=self._failed,
            updates_applied=self._updates,
            updates_dropped=self._updates_dropped,
            queue_depth=len(self._q),
            batches=self._batches,
            retention_deleted=self._retention_deleted,
            last_error=self._last_error,
            running=self._thread is not None and self._thread.is_alive(),
        )

    def run_retention(self, now: float | None = None) -> RetentionResult:
        """Apply retention now (the thread also runs it every ``retention_interval_s``).

        Args:
            now: Current unix time; ``time.time()`` when omitted.
        """
        when = time.time() if now is None else now
        with self._io_lock, self._engine.begin() as conn:
            res = apply_retention(
                conn,
                now=when,
                max_age_s=self._opts.retention_days * 86_400.0,
                max_rows=self._opts.retention_rows,
            )
        self._retention_deleted += res.total
        return res

    # -- writer thread ---------------------------------------------------------------

    def _run(self) -> None:
        opts = self._opts
        while not self._stop.is_set():
            if len(self._q) < opts.batch_size:
                self._wake.wait(opts.flush_interval_s)
                self._wake.clear()
            while self._q and not self._stop.is_set():
                with self._io_lock:
                    self._write_batch_locked()
                self._maybe_retention()  # also under sustained load, when the queue never empties
            self._maybe_retention()

    def _maybe_retention(self) -> None:
        mono = time.monotonic()
        if mono - self._last_retention < self._opts.retention_interval_s:
            return
        self._last_retention = mono
        try:
            self.run_retention()
        except Exception as exc:  # keep the thread alive; report via snapshot
            self._last_error = f"retention: {exc}"
            log.warning("audit retention failed: %s", exc)

    def _write_batch_locked(self) -> int:
        """Pop up to one batch and write it in one transaction; returns items taken."""
        q = self._q
        n = min(len(q), self._opts.batch_size)
        items = [q.popleft() for _ in range(n)]
        if not items:
            return 0
        rows: list[tuple[DecisionRecord, Sequence[CandidateRecord]]] = []
        # Each update with the number of decisions queued before it in this batch, so
        # it applies to the decision it followed even if a newer one has the same id.
        updates: list[tuple[Update | OutcomeUpdate, int]] = []
        barriers: list[_Barrier] = []
        pacer = GilPacer()
        for it in items:
            if type(it) is tuple:
                rows.append(it)
            elif isinstance(it, (Update, OutcomeUpdate)):
                updates.append((it, len(rows)))
            elif isinstance(it, _Barrier):
                barriers.append(it)
            else:
                pacer.tick()  # to_record() is the slow part; let the decision thread in
                try:
                    rows.append(it.to_record())  # type: ignore[union-attr]
                except Exception as exc:
                    self._failed += 1
                    self._last_error = f"to_record() of {type(it).__name__}: {exc}"
        if not rows and not updates:  # only barriers: what they wait for is committed
            self._release(barriers, True)
            return n
        try:
            self._commit(rows, updates, pacer)
        except Exception as exc:
            # The whole batch rolled back. Retry it piece by piece: a bad record (or ids
            # taken by another writer, re-read below) then costs only itself, and a
            # database that is down loses the batch, counted in `failed`, never raised.
            self._next_id = None
            log.warning(
                "audit batch of %d decisions failed, retrying one by one: %s", len(rows), exc
            )
            self._last_error = str(exc)
            self._retry_singly(rows, updates)
            self._release(barriers, False)
            return n
        self._written += len(rows)
        self._updates += len(updates)
        self._batches += 1
        self._release(barriers, True)
        return n

    def _release(self, barriers: list[_Barrier], ok: bool) -> None:
        for b in barriers:
            try:
                b.callback(ok)
            except Exception as exc:  # a waiter's bug must not stop the writer
                log.warning("audit barrier callback failed: %s", exc)

    def _commit(
        self,
        rows: list[tuple[DecisionRecord, Sequence[CandidateRecord]]],
        updates: list[tuple[Update | OutcomeUpdate, int]],
        pacer: GilPacer | None = None,
    ) -> None:
        with self._engine.begin() as conn:
            self._next_id = insert_batch(conn, rows, self._next_id, pacer)
            first = None
            if rows and self._next_id is not None:
                first = self._next_id - len(rows)  # ids of this batch: first, first + 1...
            apply_updates(conn, [(u, None if first is None else first + k - 1) for u, k in updates])

    def _retry_singly(
        self,
        rows: list[tuple[DecisionRecord, Sequence[CandidateRecord]]],
        updates: list[tuple[Update | OutcomeUpdate, int]],
    ) -> None:
        # In queue order: each update right after the decisions queued before it.
        done = 0
        for u, before in [*updates, (None, len(rows))]:
            for one in rows[done:before]:
                try:
                    self._commit([one], [])
                except Exception as exc:
                    self._next_id = None
                    self._failed += 1
                    self._last_error = f"request {one[0].request_id!r}: {exc}"
                else:
                    self._written += 1
                    self._batches += 1
            done = max(done, before)
            if u is None:
                continue
            try:
                self._commit([], [(u, 0)])
            except Exception as exc:
                self._last_error = f"update of request {u.request_id!r}: {exc}"
            else:
                self._updates += 1
