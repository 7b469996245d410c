"""The store node's side of the SSD tier: the master's tier events -> file and memory work.

The master decides what goes to disk and what comes back (docs/durability.md, "SSD
tier"); the node that hosts a segment only moves bytes between that segment's memory and
its :class:`~mooncake_core.store.tier.ssd.SsdTier` and confirms::

    WatchEvents ──> TierAgent.decide(event) ──> Offload | Stage | Forget | ForgetAll | None
                                                   │
        TierWorker (asyncio, worker.py): one job per action, in event order per key
                                                   │
           worker thread: TierAgent.offload / stage / forget (file I/O, memcpy)
                                                   │
           master: TierOffloadDone / TierStageDone / TierDropped

:class:`TierAgent` is synchronous and holds no sockets (tests drive it with a real
directory and a bytearray as segment memory); ``worker.TierWorker`` is the IO shell
that follows the event stream and talks to the master.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import events as ev
from ..objects import Replica
from .ssd import SsdMiss, SsdTier

log = logging.getLogger(__name__)

_TIER_FILE = re.compile(r"[0-9a-f]{16}\.(obj|tmp\d+)")


@dataclass(frozen=True, slots=True)
class Offload:
    """Copy ``replica`` (on this node's segment) to disk, confirm with ``token``."""

    key: str
    replica: Replica
    size: int
    token: int


@dataclass(frozen=True, slots=True)
class Stage:
    """Read the file of ``key`` into ``replica`` (on this node's segment)."""

    key: str
    replica: Replica
    size: int
    request_id: int
    at: float = 0.0
    """The master's wall-clock time of the request (0: unknown, never late)."""


@dataclass(frozen=True, slots=True)
class Forget:
    """The object is gone: delete its file."""

    key: str


@dataclass(frozen=True, slots=True)
class ForgetAll:
    """The master dropped every SSD copy of this segment (it unmounted the segment or
    forgot this client, and a remount starts afresh): delete every file."""

    reason: str


TierAction = Offload | Stage | Forget | ForgetAll


@dataclass(frozen=True, slots=True)
class TierOutcome:
    """What one offload or stage did.

    Attributes:
        ok: the file was written (offload) or the bytes are in memory (stage).
        reason: why not (``miss``, ``corrupt``, ``bad_range``, ``too_large``,
            ``size_mismatch``, ``io: ...``); empty when ok.
        evicted: keys whose files the disk evicted to make room (offload only).
    """

    ok: bool
    reason: str = ""
    evicted: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TierAgentSnapshot:
    """Read-model of a node's SSD tier (served on ``/health`` and ``/telemetry``)."""

    segment: str
    files: int
    used_bytes: int
    capacity_bytes: int
    offloads: int
    """Files written on the master's request."""
    offload_failures: int
    stale: int
    """Offloads the master refused (the object changed meanwhile); file deleted."""
    stages: int
    """Objects read back into DRAM."""
    stage_failures: int
    misses: int
    corrupt: int
    """Files that failed a check (each one a miss, never wrong bytes)."""
    evictions: int
    """Files deleted to make room (reported to the master)."""
    removed: int
    """Files deleted because the object was removed."""


class TierAgent:
    """Offloads, stages and forgets objects of one segment (blocking; thread-safe).

    Args:
        segment: name of the segment this node hosts (events for others are ignored).
        tier: the node's SSD tier.
        memory: the segment's bytes (writable, its whole length).
        stage_deadline_s: a stage whose request is older than this (master wall clock
            vs this host's) is not written to memory: the master gives up on a stage
            after ``stage_timeout_s`` (10 s) and may hand the range to a writer, so a
            late copy could overwrite another object. Keep it below that timeout, with
            room for clock skew between hosts.
        clock: wall clock (tests pass their own).
    """

    def __init__(
        self,
        segment: str,
        tier: SsdTier,
        memory: memoryview,
        *,
        stage_deadline_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.segment = segment
        self.tier = tier
        self.stage_deadline_s = stage_deadline_s
        self._clock = clock
        self.memory = memory.cast("B") if memory.format != "B" else memory
        self._lock = threading.Lock()
        self._offloads = self._offload_failures = self._stale = 0
        self._stages = self._stage_failures = self._removed = 0

    # ------------------------------------------------------------------ decide
    def decide(self, event: ev.Event) -> TierAction | None:
        """The action one master event asks of this node, or None.

        Offload and stage requests count only for this node's segment; a removed
        object is forgotten when the tier holds a file of it; every file is forgotten
        when the segment is unmounted or mounted again.
        """
        if isinstance(event, ev.OffloadRequested):
            if event.segment != self.segment:
                return None
            return Offload(event.key, event.replica, event.size, event.token)
        if isinstance(event, ev.StageRequested):
            if event.segment != self.segment:
                return None
            return Stage(event.key, event.replica, event.size, event.request_id, event.at)
        if isinstance(event, ev.ObjectRemoved) and self.tier.contains(event.key):
            return Forget(event.key)
        if isinstance(event, ev.SegmentUnmounted) and event.name == self.segment:
            return ForgetAll(f"segment unmounted ({event.reason})")
        if isinstance(event, ev.SegmentMounted) and event.name == self.segment:
            # Only a *re*-mount reaches us (we subscribe after the first mount): the
            # master had forgotten this client, and with it every copy on our disk.
            return ForgetAll("segment mounted again")
        return None

    # ------------------------------------------------------------------ actions
    def offload(self, action: Offload) -> TierOutcome:
        """Copy the replica's bytes out of segment memory into a checksummed file.

        Returns:
            ok, or why not; ``evicted`` lists the keys whose files made room.
        """
        bad = self._check(action.replica, action.size)
        if bad:
            return self._offload_failed(action.key, bad)
        # A copy, not a view: the master may reuse the range once the object is evicted.
        # Torn bytes cannot be served either way: the master refuses the confirmation
        # (STALE) of a version it no longer holds here, and the file is deleted.
        data = b"".join(bytes(self.memory[s.offset : s.offset + s.length]) for s in action.replica)
        try:
            stored = self.tier.put(action.key, data)
        except OSError as exc:
            return self._offload_failed(action.key, f"io: {exc}")
        evicted = tuple(k for k in self.tier.take_evicted() if k != action.key)
        if not stored:
            return TierOutcome(False, "too_large", evicted)
        with self._lock:
            self._offloads += 1
        return TierOutcome(True, "", evicted)

    def _offload_failed(self, key: str, reason: str) -> TierOutcome:
        with self._lock:
            self._offload_failures += 1
        log.warning("offload of %r on %s failed: %s", key, self.segment, reason)
        return TierOutcome(False, reason)

    def stage(self, action: Stage) -> TierOutcome:
        """Read the object's file (checksums verified) into the replica's memory.

        Returns:
            ok, or ``miss`` / ``corrupt`` (counted by the tier) / ``size_mismatch``
            (a file of another version; deleted) / ``bad_range`` / ``late`` (see
            ``stage_deadline_s``). Memory is only written with verified bytes of the
            right size, in time.
        """
        bad = self._check(action.replica, action.size)
        if bad:
            return self._stage_failed(action.key, bad)
        got = self.tier.fetch(action.key)
        if isinstance(got, SsdMiss):
            return self._stage_failed(action.key, got.reason)
        data = got.data
        late = self._clock() - action.at if action.at else 0.0
        if late > self.stage_deadline_s:
            return self._stage_failed(
                action.key, f"late: requested {late:.1f} s ago (limit {self.stage_deadline_s} s)"
            )
        if len(data) != action.size:
            self.tier.remove(action.key)
            return self._stage_failed(
                action.key, f"size_mismatch: file has {len(data)} bytes, want {action.size}"
            )
        pos = 0
        for s in action.replica:
            self.memory[s.offset : s.offset + s.length] = data[pos : pos + s.length]
            pos += s.length
        with self._lock:
            self._stages += 1
        return TierOutcome(True)

    def _stage_failed(self, key: str, reason: str) -> TierOutcome:
        with self._lock:
            self._stage_failures += 1
        log.warning("stage of %r on %s failed: %s", key, self.segment, reason)
        return TierOutcome(False, reason)

    def forget(self, key: str) -> bool:
        """Delete the file of ``key`` (the object is gone or the master refused it)."""
        gone = self.tier.remove(key)
        if gone:
            with self._lock:
                self._removed += 1
        return gone

    def note_stale(self, key: str) -> None:
        """The master refused an offload confirmation: delete the file, count it."""
        self.tier.remove(key)
        with self._lock:
            self._stale += 1

    def _check(self, replica: Replica, size: int) -> str:
        """Empty when every slice is on this segment, inside it, and they sum to size."""
        total = 0
        for s in replica:
            if s.segment != self.segment:
                return f"bad_range: slice on {s.segment!r}, this node hosts {self.segment!r}"
            if s.offset < 0 or s.length <= 0 or s.offset + s.length > len(self.memory):
                return (
                    f"bad_range: slice [{s.offset}, +{s.length}) outside the "
                    f"{len(self.memory)}-byte segment"
                )
            total += s.length
        if total != size:
            return f"bad_range: slices hold {total} bytes, object has {size}"
        return ""

    def snapshot(self) -> TierAgentSnapshot:
        """Tier usage and counters."""
        t = self.tier.snapshot()
        with self._lock:
            return TierAgentSnapshot(
                self.segment,
                t.files,
                t.used_bytes,
                t.capacity_bytes,
                self._offloads,
                self._offload_failures,
                self._stale,
                self._stages,
                self._stage_failures,
                t.misses,
                t.corrupt,
                t.evictions,
                self._removed,
            )


def wipe_tier_dir(directory: Path) -> int:
    """Delete the tier files under ``directory`` (and their emptied sub-folders).

    A restarted node is a new client: the master dropped the old process's copies, so
    its files are orphans. Only names the tier writes (``xx/<16 hex>.obj`` and temp
    files) are deleted; anything else is left alone.

    Returns:
        Files deleted.
    """
    n = 0
    if not directory.is_dir():
        return 0
    for sub in directory.iterdir():
        if not (sub.is_dir() and re.fullmatch(r"[0-9a-f]{2}", sub.name)):
            continue
        for f in sub.iterdir():
            if f.is_file() and _TIER_FILE.fullmatch(f.name):
                f.unlink(missing_ok=True)
                n += 1
        with contextlib.suppress(OSError):
            sub.rmdir()  # only when empty
    return n
