"""The master's local journal: append-only record files, CRC-checked, group-committed.

On-disk layout of a data directory::

    snap-00000000000000001200.mj    records that rebuild the image at seq 1200 (atomic rename)
    log-00000000000000001200.mj     records with seq > 1200, appended in order

Every file is a sequence of frames::

    +----------------+----------------+---------------------------+
    | length u32 LE  | crc32 u32 LE   | payload (length bytes)    |
    +----------------+----------------+---------------------------+

``payload`` is the UTF-8 JSON of one record (``{"s": seq, "t": type, ...}``, see
:mod:`.ha.image`); ``crc32`` covers the payload. A reader stops at the first frame that is
short or whose CRC does not match (a torn tail: the process died while writing) and the
writer truncates the file there before appending, so a crash never leaves garbage in the
middle of a log.

**Durability.** :meth:`Journal.append` writes the frames with ``os.write`` at once (under
the service lock, so the order on disk is the order of the events) and returns the last
seq written; :meth:`Journal.wait_durable` returns when that seq is durable under the
policy:

- ``always`` (default): a reply waits for an ``fsync`` that covers its records; one
  fsync runs at a time and every reply that arrives meanwhile shares the next one
  (group commit), so concurrent writers do not pay one fsync each;
- ``batch``: the same, but each fsync starts ``batch_ms`` after the first reply waits
  for it, so more replies share it (more throughput under many writers, up to
  ``batch_ms`` more latency);
- ``none``: no fsync; records are in the OS page cache once written.

So with ``always`` and ``batch`` an acknowledged PutEnd survives a crash of the machine;
with ``none`` it survives a crash (or SIGKILL) of the master process only.

**Snapshots** (:meth:`Journal.snapshot`) start a new log file at the current seq, write the
image's records to ``snap-<seq>.mj.tmp``, fsync it, rename it and then delete older files.
Recovery takes the newest snapshot and replays every log whose start is at or after it,
skipping records already covered; a crash at any step leaves a readable set.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import json
import logging
import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger(__name__)

FsyncPolicy = Literal["always", "batch", "none"]
Record = dict[str, Any]

_HEADER = struct.Struct("<II")
_MAX_RECORD = 64 << 20


@dataclass(frozen=True, slots=True)
class JournalOptions:
    """How the journal syncs and compacts."""

    fsync: FsyncPolicy = "always"
    """``always`` (group commit, no delay), ``batch`` (group commit after ``batch_ms``)
    or ``none``."""
    batch_ms: float = 2.0
    """Delay before each fsync under the ``batch`` policy."""
    snapshot_every: int = 100_000
    """Write a snapshot (and drop older logs) after this many records."""


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Records read from one file and whether it ended cleanly."""

    records: list[Record]
    good_bytes: int
    """Length of the valid prefix of the file."""
    torn: bool
    """True when bytes after ``good_bytes`` were ignored (short or corrupt frame)."""


def encode(record: Record) -> bytes:
    """One frame: header plus the record's compact JSON."""
    payload = json.dumps(record, separators=(",", ":")).encode()
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def decode_all(data: bytes) -> ReadResult:
    """Decode frames until the end or the first short/corrupt one.

    Args:
        data: a whole file's bytes.

    Returns:
        The good records, the good prefix length and whether a tail was ignored.
    """
    out: list[Record] = []
    pos = 0
    n = len(data)
    while pos < n:
        if n - pos < _HEADER.size:
            return ReadResult(out, pos, True)
        length, crc = _HEADER.unpack_from(data, pos)
        end = pos + _HEADER.size + length
        if length > _MAX_RECORD or end > n:
            return ReadResult(out, pos, True)
        payload = data[pos + _HEADER.size : end]
        if zlib.crc32(payload) != crc:
            return ReadResult(out, pos, True)
        try:
            rec = json.loads(payload)
        except ValueError:
            return ReadResult(out, pos, True)
        if not isinstance(rec, dict) or not isinstance(rec.get("s"), int):
            return ReadResult(out, pos, True)
        out.append(rec)
        pos = end
    return ReadResult(out, pos, False)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (continuing after short writes).

    Raises:
        OSError: the write failed (ENOSPC, EIO...) or made no progress; part of
            ``data`` may have been written.
    """
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.ENOSPC, "write made no progress")
        view = view[n:]


def _name(kind: str, seq: int) -> str:
    return f"{kind}-{seq:020d}.mj"


def _files(directory: Path, kind: str) -> list[tuple[int, Path]]:
    found = []
    for p in directory.glob(f"{kind}-*.mj"):
        with contextlib.suppress(ValueError):
            found.append((int(p.name[len(kind) + 1 : -3]), p))
    return sorted(found)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class Recovered:
    """What :func:`recover` found in a data directory."""

    records: list[Record]
    """Snapshot records then log records, in seq order, each seq once."""
    last_seq: int
    torn_files: list[str]
    """Files whose tail was ignored."""
    good_bytes: dict[str, int] = dataclasses.field(default_factory=dict)
    """Valid prefix length of each log read (so the writer need not decode it again)."""


def recover(directory: Path) -> Recovered:
    """Read the newest snapshot and the logs after it.

    Args:
        directory: the data directory (may be empty or missing).

    Returns:
        The records to replay, in order; snapshot records carry seq 0 and come first.
    """
    if not directory.exists():
        return Recovered([], 0, [])
    good: dict[str, int] = {}
    torn: list[str] = []
    snaps = _files(directory, "snap")
    base = 0
    records: list[Record] = []
    if snaps:
        base, path = snaps[-1]
        res = decode_all(path.read_bytes())
        if res.torn:
            # A renamed snapshot was fsynced first, so this is real damage, not a crash.
            raise ValueError(f"snapshot {path} is corrupt after byte {res.good_bytes}")
        records.extend(res.records)
    last = base
    for start, path in _files(directory, "log"):
        if start < base:
            continue
        res = decode_all(path.read_bytes())
        good[path.name] = res.good_bytes
        if res.torn:
            torn.append(path.name)
        for rec in res.records:
            if rec["s"] > last:
                records.append(rec)
                last = rec["s"]
    return Recovered(records, last, torn, good)


class Journal:
    """Appends records to the current log file; syncs per :class:`JournalOptions`.

    Args:
        directory: data directory (created if missing).
        last_seq: seq of the last record already in the directory (from :func:`recover`).
        options: fsync policy and snapshot period.
        good_bytes: :attr:`Recovered.good_bytes`, to skip decoding the newest log again.
    """

    def __init__(
        self,
        directory: Path,
        last_seq: int,
        options: JournalOptions | None = None,
        *,
        good_bytes: dict[str, int] | None = None,
    ) -> None:
        self.directory = directory
        self.options = options or JournalOptions()
        directory.mkdir(parents=True, exist_ok=True)
        self.last_seq = last_seq
        self.durable_seq = last_seq
        self.since_snapshot = 0
        self.fsyncs = 0
        self._fd = self._open_log(last_seq, good_bytes or {})
        self._size = os.fstat(self._fd).st_size
        self._dirty_from: int | None = None
        """Where a failed append's partial bytes start when cutting them failed too."""
        self._syncing: asyncio.Task[None] | None = None
        self._retired: list[int] = []
        self._closed = False
        self._snapshotting: asyncio.Task[None] | None = None

    def _open_log(self, start: int, known: dict[str, int]) -> int:
        logs = _files(self.directory, "log")
        if logs and logs[-1][0] <= start:
            # Continue the newest log (it holds the records up to ``start``), cutting a
            # torn tail so appends follow good frames.
            path = logs[-1][1]
            good = known.get(path.name)
            if good is None:
                good = decode_all(path.read_bytes()).good_bytes
            if path.stat().st_size > good:
                log.warning("journal %s: ignoring a torn tail after byte %d", path, good)
                os.truncate(path, good)
        else:
            path = self.directory / _name("log", start)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        _fsync_dir(self.directory)
        return fd

    # ---------------------------------------------------------------- append
    def append(self, records: Iterable[Record]) -> int:
        """Number and write the records (not yet synced), all of them or none.

        Every byte is written (a short write is continued); when the write fails (disk
        full, I/O error) the file is cut back to where this call started, so the log
        never holds a partial frame followed by later good ones, and the seqs are not
        used up. When even the cut fails, the next call cuts first.

        Returns:
            The seq of the last record written (the value to pass to :meth:`wait_durable`).

        Raises:
            OSError: nothing of this call is in the log (the caller must not apply it).
        """
        chunks = []
        seq = self.last_seq
        for rec in records:
            seq += 1
            rec["s"] = seq
            chunks.append(encode(rec))
        if not chunks:
            return self.last_seq
        self._cut_dirty_tail()
        start = self._size
        try:
            write_all(self._fd, b"".join(chunks))
        except OSError:
            self._cut(start)
            raise
        self._size = start + sum(len(c) for c in chunks)
        self.last_seq = seq
        self.since_snapshot += len(chunks)
        return seq

    def _cut(self, size: int) -> None:
        try:
            os.ftruncate(self._fd, size)
            self._dirty_from = None
        except OSError:
            self._dirty_from = size

    def _cut_dirty_tail(self) -> None:
        if self._dirty_from is not None:
            os.ftruncate(self._fd, self._dirty_from)  # OSError: still failing, refuse
            self._dirty_from = None

    async def wait_durable(self, seq: int) -> None:
        """Return once every record up to ``seq`` is durable under the fsync policy.

        Group commit: one fsync runs at a time and covers every record written before
        it started; callers that arrive meanwhile share the next one.

        Raises:
            OSError: the fsync failed (the caller must not acknowledge).
        """
        if self.options.fsync == "none":
            return
        while self.durable_seq < seq:
            if self._syncing is None:
                self._syncing = asyncio.create_task(self._sync_round())
            task = self._syncing
            await asyncio.shield(task)

    async def _sync_round(self) -> None:
        try:
            if self.options.fsync == "batch":
                # Wait a little so more writers share this fsync.
                await asyncio.sleep(self.options.batch_ms / 1000)
            target = self.last_seq
            if target > self.durable_seq:
                await asyncio.to_thread(os.fsync, self._fd)
                self.fsyncs += 1
                self.durable_seq = max(self.durable_seq, target)
        finally:
            self._syncing = None
            while self._retired:
                os.close(self._retired.pop())

    # -------------------------------------------------------------- snapshot
    def rotate(self) -> int:
        """Start a new log at the current seq (call under the service lock).

        Returns:
            The seq the snapshot to write next must cover.
        """
        os.fsync(self._fd)
        seq = self.last_seq
        # Open the new log first: when that fails (disk full) nothing has changed.
        fd = os.open(
            self.directory / _name("log", seq), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
        )
        old, self._fd = self._fd, fd
        if self._syncing is None:
            os.close(old)
        else:
            # A group-commit fsync may be running on it in a thread: that round closes it.
            self._retired.append(old)
        self._size = os.fstat(self._fd).st_size
        self._dirty_from = None
        self.durable_seq = seq
        self.since_snapshot = 0
        return seq

    def write_snapshot(self, seq: int, records: Iterator[Record] | list[Record]) -> Path:
        """Write ``snap-<seq>`` atomically, then delete files it makes redundant.

        Safe in a worker thread: touches only files, not the open log.
        """
        path = self.directory / _name("snap", seq)
        tmp = path.with_suffix(".mj.tmp")
        with open(tmp, "wb") as f:
            buf = []
            for rec in records:
                rec["s"] = 0
                buf.append(encode(rec))
                if len(buf) >= 4096:
                    f.write(b"".join(buf))
                    buf.clear()
            f.write(b"".join(buf))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(self.directory)
        for s, p in _files(self.directory, "snap"):
            if s < seq:
                p.unlink(missing_ok=True)
        for s, p in _files(self.directory, "log"):
            if s < seq:
                p.unlink(missing_ok=True)
        return path

    def maybe_compact(self, image: Any) -> None:
        """Snapshot when ``snapshot_every`` records accumulated (call under the service
        lock: the log is rotated and the image copied there; the file is written in a
        worker thread)."""
        if self.since_snapshot < self.options.snapshot_every or self._snapshotting is not None:
            return
        seq = self.rotate()
        records = list(image.records())
        self._snapshotting = asyncio.create_task(self._snapshot_in_thread(seq, records))

    async def _snapshot_in_thread(self, seq: int, records: list[Record]) -> None:
        try:
            await asyncio.to_thread(self.write_snapshot, seq, records)
        except OSError as exc:
            (self.directory / _name("snap", seq)).with_suffix(".mj.tmp").unlink(missing_ok=True)
            log.warning("journal snapshot at seq %d failed (%s); logs are kept", seq, exc)
        finally:
            self._snapshotting = None

    async def close(self) -> None:
        """Wait for a snapshot in progress, sync and close the file."""
        if self._closed:
            return
        if self._snapshotting is not None:
            await self._snapshotting
        if self._syncing is not None:
            await asyncio.shield(self._syncing)
        self._closed = True
        os.fsync(self._fd)
        for fd in [*self._retired, self._fd]:
            os.close(fd)
        self._retired.clear()
