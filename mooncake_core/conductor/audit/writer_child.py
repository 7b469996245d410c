"""The audit writer process (started by :class:`.process_writer.ProcessAuditWriter`).

Reads ``(url, options, ring fd)`` on its input, opens the database (answers
``("ready",)`` or ``("error", text)``), then reads the items the conductor writes into
the shared ring (:mod:`.ring`), hands them to an :class:`AuditWriter` running here,
and, once a batch is committed, releases its records in the ring and acknowledges
``(last seq, ok, counters, decisions, updates)`` on its output (the last two: how many
decisions and updates were released, ever). It looks at the ring
every ``POLL_S`` and whenever a byte arrives on its input (the conductor asks for a
flush); it ends when its input closes, after committing everything in the ring.
Ignores SIGINT and SIGTERM: a signal to the whole process group must not lose what is
in the ring.

Records after the ring's released position and before its "seen" mark were read by a
writer process that died before releasing them; they are read again here, and the
decisions among them that were committed already (by request id and time) are not
written twice. Records after the mark are new: written as they are.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict
from typing import IO, Any

from mooncake_core import _flat
from mooncake_core.conductor.candidates import unpack_decision

from .process_writer import read_frame, write_frame
from .ring import DECISION, OUTCOME, UPDATE, SharedRing
from .writer import AuditWriter, WriterOptions

NICE = 10
"""How much lower the writer process's CPU priority is than the conductor's: where the
two want the same core, the decisions win; the audit catches up when there is room."""
POLL_S = 0.05
"""Longest the ring goes unread while the conductor writes into it."""


def _counters(w: AuditWriter) -> dict[str, Any]:
    snap = asdict(w.snapshot())
    return {k: snap[k] for k in ("failed", "batches", "retention_deleted", "last_error")}


def _ack_at(ack: Callable[[int, int, int, int, bool], None], seq: int, pos: int,
            decisions: int, updates: int, ok: bool) -> None:  # fmt: skip
    ack(seq, pos, decisions, updates, ok)


def serve(inp: IO[bytes], out: IO[bytes]) -> int:
    """Run the writer process's loop (``inp``: a pipe); returns the exit status."""
    url, opts, ring_fd = read_frame(inp)
    try:
        ring = SharedRing(ring_fd)
        # The conductor bounds what it writes and keeps unacknowledged (``queue_max``).
        opts["queue_max"] = 2 * int(opts["queue_max"]) + 16
        w = AuditWriter.open(url, WriterOptions(**opts))
    except Exception as exc:
        write_frame(out, ("error", f"{url}: {exc}"))
        return 1
    write_frame(out, ("ready",))
    w.start()
    out_lock = threading.Lock()

    def ack(seq: int, pos: int, decisions: int, updates: int, ok: bool) -> None:
        # On the writer thread, in commit order. OSError: the conductor is gone; what
        # is committed stays committed.
        ring.release(pos, seq, decisions, updates)
        with out_lock, contextlib.suppress(OSError):
            write_frame(out, (seq, ok, _counters(w), decisions, updates))

    pos, seq, decisions, updates = ring.released()
    again = ring.seen  # read by a process that died: perhaps committed already
    batch = 4 * int(opts["batch_size"])
    fd = inp.fileno()
    closed = False
    try:
        while True:
            first = seq
            records: list[tuple[int, bytes, int]] = []
            while len(records) < batch and (rec := ring.read(pos)) is not None:
                records.append((rec[0], rec[1], pos))
                pos = rec[2]
            if records:
                ring.see(pos)  # before any of them can be committed
            for kind, payload, at in records:
                seq += 1
                if kind == DECISION:
                    decisions += 1
                    try:
                        d = unpack_decision(payload)
                    except ValueError as exc:
                        w.note_failure(f"decision {seq}: {exc}")
                    else:
                        if not (at < again and w.stored(d.request_id, d.time)):
                            w.submit_source(d)
                elif kind in (UPDATE, OUTCOME):
                    updates += 1
                    it = _flat.unpack(payload)
                    if kind == UPDATE:
                        w.update_actual(it[0], it[1], it[2])
                    else:
                        w.record_outcome(it[0], it[1], it[2])
                else:
                    w.note_failure(f"item {seq}: unknown kind {kind}")
            if seq != first:
                w.when_written(functools.partial(_ack_at, ack, seq, pos, decisions, updates))
                continue  # more may be waiting
            if closed:
                break
            # Nothing to read: wait for a nudge (or the end) on the input, or POLL_S.
            if select.select([fd], [], [], POLL_S)[0] and not os.read(fd, 4096):
                closed = True  # read what was written before the end, then stop
    finally:
        w.close()
    return 0


def main() -> int:
    """Entry point: stdin/stdout are the frames; stderr is the log."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.nice(NICE)
    return serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    sys.exit(main())
