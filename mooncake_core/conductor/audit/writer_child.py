"""The audit writer process (started by :class:`.process_writer.ProcessAuditWriter`).

Reads ``(url, options)``, opens the database (answers ``("ready",)`` or ``("error",
text)``), then reads frames of items until its input closes, hands them to an
:class:`AuditWriter` running here, and acknowledges each frame's last sequence number
once it is committed. Ignores SIGINT and SIGTERM: it ends when its input closes, after
committing what it read.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict
from typing import IO, Any

from mooncake_core.conductor.candidates import unpack_decision

from .process_writer import read_frame, read_items, write_frame
from .writer import AuditWriter, WriterOptions

NICE = 10
"""How much lower the writer process's CPU priority is than the conductor's: where the
two want the same core, the decisions win; the audit catches up when there is room."""


def _counters(w: AuditWriter) -> dict[str, Any]:
    snap = asdict(w.snapshot())
    return {k: snap[k] for k in ("failed", "batches", "retention_deleted", "last_error")}


def _ack_at(ack: Callable[[int, bool], None], seq: int, ok: bool) -> None:
    ack(seq, ok)


def serve(inp: IO[bytes], out: IO[bytes]) -> int:
    """Run the writer process's loop on ``inp``/``out``; returns the exit status."""
    url, opts = read_frame(inp)
    try:
        # The conductor bounds what it sends and keeps unacknowledged (``queue_max``);
        # everything that arrives here must be kept (barriers come on top of items).
        opts["queue_max"] = 2 * int(opts["queue_max"]) + 16
        w = AuditWriter.open(url, WriterOptions(**opts))
    except Exception as exc:
        write_frame(out, ("error", f"{url}: {exc}"))
        return 1
    write_frame(out, ("ready",))
    w.start()
    out_lock = threading.Lock()

    def ack(seq: int, ok: bool) -> None:  # on the writer thread
        # OSError: the conductor is gone; what is committed stays committed.
        with out_lock, contextlib.suppress(OSError):
            write_frame(out, (seq, ok, _counters(w)))

    try:
        while True:
            try:
                resend, (first, items) = read_items(inp)
            except EOFError:
                break
            for seq, it in enumerate(items, first):
                if type(it) is bytes:
                    try:
                        d = unpack_decision(it)
                    except ValueError as exc:
                        w.note_failure(f"decision {seq}: {exc}")
                        continue
                    # Sent again after a writer process died: it may have committed
                    # this decision before it could acknowledge it.
                    if resend and w.stored(d.request_id, d.time):
                        continue
                    w.submit_source(d)
                elif it[0] == "u":
                    w.update_actual(it[1], it[2], it[3])
                elif it[0] == "o":
                    w.record_outcome(it[1], it[2], it[3])
            if items:
                w.when_written(functools.partial(_ack_at, ack, first + len(items) - 1))
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
