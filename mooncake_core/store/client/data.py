"""The store client's data path: where each segment is, and moving slices to and from it.

::

    Client.put_from(key, ptr, n)
      master.put_start ─▶ replicas ─▶ plan(): one Op per slice of every replica
                                        │
      DataPath.run(groups) ─────────────┤ segment hosted by this process ─▶ memcpy (C, no GIL)
                                        │ other segment ─▶ TransferEngine batch (shm on
                                        │   this host, tcp elsewhere), all slices in flight
                                        ▼
      one error reason (or None) per group ─▶ put_end / put_revoke

A *group* is everything one object needs (all slices of all its replicas for a put, the
slices of one replica for a get): it succeeds only if every op in it does.

Segment names are resolved to Transfer Engine names (``<transport_address>/<segment>``)
from the master's snapshot, opened once and cached; a failed transfer drops the cache
entry so a node that came back on another port is found again.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
import select
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mooncake_core.transfer import (
    Batch,
    OpCode,
    Region,
    RemoteSegment,
    TransferEngine,
    TransferError,
    TransferRequest,
    TransferState,
)
from mooncake_core.transfer._c import native as _native

from ..errors import ErrorCode, InvalidArgumentError, StoreError, UnavailableError
from ..objects import Replica

_JOB = struct.Struct("<QQQ")
_COPY_THREADS = 2
"""Threads for a large local copy (two cores on the reference machine)."""
_SPLIT_MIN = 4 << 20
"""Local copies below this use one thread: starting a thread costs more."""
_STREAM_WRITES = 4096
"""A put's copies into a segment of at least this many bytes use streaming stores: this
process does not read them back, and the destination's lines are not fetched first
(64 KiB pieces 11.5 -> 15.6 GB/s, 1 MiB 11.4 -> 16.4: ``bench/copy_streams.py``,
docs/benchmarks.md, "Three steps for the batches"). A read's destination is the caller's
buffer, which it is about to use: those stay cached (the engine's own bar, 8 MiB)."""
_SHM_OWNER = re.compile(r"^mooncake-(\d+)-[0-9a-f]+$")
"""Name of a Transfer Engine's /dev/shm segment file: ``mooncake-<pid>-<token>``."""


@dataclass(frozen=True, slots=True)
class Op:
    """One slice to move between a local buffer and a segment.

    Attributes:
        op: WRITE (buffer -> segment) or READ (segment -> buffer).
        region: registered local memory holding the buffer.
        offset: byte offset of the slice inside ``region``.
        segment: store segment name.
        seg_offset: byte offset inside the segment.
        length: bytes.
    """

    op: OpCode
    region: Region
    offset: int
    segment: str
    seg_offset: int
    length: int


LEASE_TRIES = 3
"""A read whose transfer outlasted its lease is tried this many times in all."""


def outlasted(asked_at: float, lease_ttl_s: float, now: float) -> bool:
    """Whether a read that asked for its replica list at ``asked_at`` (this process's
    monotonic clock, before the request went out) finished too late to trust its bytes.

    The master granted the lease after ``asked_at`` and counts it on a clock that never
    runs faster than real time, so the lease surely held until ``asked_at + lease_ttl_s``;
    past that the ranges may have been freed (forced remove, eviction) and rewritten.
    """
    return now - asked_at >= lease_ttl_s


def lease_outlasted_error(key: str, took: float, lease_ttl_s: float, tries: int) -> StoreError:
    """The clean error of a read that kept outlasting its lease."""
    return UnavailableError(
        ErrorCode.UNAVAILABLE,
        f"get {key!r}: the transfer took {took:.3f} s, longer than its read lease "
        f"({lease_ttl_s:.3f} s), {tries} time(s); its bytes may have been reused, retry",
    )


def unreadable_error(key: str, replicas: int, reasons: Sequence[str]) -> StoreError:
    """The error of a read whose every replica failed, naming why each did."""
    return UnavailableError(
        ErrorCode.UNAVAILABLE,
        f"get {key!r}: none of {replicas} replicas readable: " + "; ".join(reasons),
    )


def write_too_late(
    key: str, asked_at: float, put_timeout_s: float, now: float
) -> StoreError | None:
    """The error of a write about to start a transfer at ``now`` too late to be sure of
    its range, or None while it may.

    ``asked_at``: this process's monotonic clock before its PutStart went out. Past
    ``put_timeout_s`` the master may have discarded the write (it holds the range for
    its writer until ``put_release_s``, so a transfer already under way lands safely);
    a transfer is never *started* then: the caller revokes and reports this error.
    """
    took = now - asked_at
    if took < put_timeout_s:
        return None
    return UnavailableError(
        ErrorCode.UNAVAILABLE,
        f"put {key!r}: the write would start {took:.3f} s after its PutStart, past "
        f"put_timeout_s ({put_timeout_s:.3f} s), when the master may have discarded it; "
        "revoked, retry",
    )


def plan(op: OpCode, region: Region, offset: int, replica: Replica) -> list[Op]:
    """Ops that move one replica between ``region[offset:]`` and its slices, in object order."""
    out: list[Op] = []
    pos = offset
    for s in replica:
        out.append(Op(op, region, pos, s.segment, s.offset, s.length))
        pos += s.length
    return out


def plan_window(op: OpCode, region: Region, replica: Replica, start: int, length: int) -> list[Op]:
    """Ops that move object bytes ``[start, start + length)`` of one replica between
    ``region[0:length]`` and the slices that hold them (a streamed put's window)::

        object   |---- slice A ----|------- slice B -------|-- slice C --|
        window              [start ............ start+length)
        ops                 [A tail][  B head  ]
    """
    out: list[Op] = []
    end = start + length
    obj = 0
    for s in replica:
        lo, hi = max(obj, start), min(obj + s.length, end)
        if lo < hi:
            out.append(Op(op, region, lo - start, s.segment, s.offset + (lo - obj), hi - lo))
        obj += s.length
        if obj >= end:
            break
    return out


class Buffers:
    """Registered user buffers, looked up by address range (``register_buffer``)."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._regions: dict[int, Region] = {}
        self._lock = threading.Lock()

    def add(self, region: Region) -> None:
        """Remember a registered region (by its start address)."""
        with self._lock:
            if region.address in self._regions:
                raise InvalidArgumentError(
                    ErrorCode.INVALID_PARAMS,
                    f"a buffer at {region.address:#x} is already registered",
                )
            bisect.insort(self._starts, region.address)
            self._regions[region.address] = region

    def remove(self, address: int) -> Region:
        """Forget the region starting at ``address``.

        Raises:
            InvalidArgumentError: nothing registered there.
        """
        with self._lock:
            region = self._regions.pop(address, None)
            if region is None:
                raise InvalidArgumentError(
                    ErrorCode.INVALID_PARAMS, f"no buffer registered at {address:#x}"
                )
            self._starts.remove(address)
            return region

    def all(self) -> list[Region]:
        """Every registered region."""
        with self._lock:
            return list(self._regions.values())

    def find_many(
        self, addresses: Sequence[int], sizes: Sequence[int]
    ) -> list[tuple[Region, int] | StoreError]:
        """:meth:`find` for each ``(address, size)`` under one lock; for a range it
        refuses, the error :meth:`find` raises."""
        out: list[tuple[Region, int] | StoreError | None] = []
        with self._lock:
            starts, regions = self._starts, self._regions
            for a, n in zip(addresses, sizes, strict=True):
                if type(a) is int and type(n) is int and a > 0 and n >= 0:
                    i = bisect.bisect_right(starts, a) - 1
                    if i >= 0:
                        region = regions[starts[i]]
                        if a + n <= region.address + region.length:
                            out.append((region, a - region.address))
                            continue
                out.append(None)  # find says why, below
        for k, hit in enumerate(out):
            if hit is None:
                try:
                    out[k] = self.find(addresses[k], sizes[k])
                except StoreError as exc:
                    out[k] = exc
        return out  # type: ignore[return-value]

    def find(self, address: int, size: int) -> tuple[Region, int]:
        """The region holding ``[address, address + size)`` and the offset inside it.

        Raises:
            InvalidArgumentError: the range is not inside one registered buffer.
        """
        if not isinstance(address, int) or isinstance(address, bool) or address <= 0:
            raise InvalidArgumentError(
                ErrorCode.INVALID_PARAMS, f"buffer address must be a positive int, got {address!r}"
            )
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InvalidArgumentError(
                ErrorCode.INVALID_PARAMS, f"buffer size must be a non-negative int, got {size!r}"
            )
        with self._lock:
            i = bisect.bisect_right(self._starts, address) - 1
            region = self._regions[self._starts[i]] if i >= 0 else None
        if region is None or address + size > region.address + region.length:
            where = (
                f"registered buffer {region.address:#x}+{region.length}"
                if region is not None
                else "no registered buffer below it"
            )
            raise InvalidArgumentError(
                ErrorCode.INVALID_PARAMS,
                f"buffer range {address:#x}+{size} is not inside a registered buffer "
                f"({where}); call register_buffer first",
            )
        return region, address - region.address


def _exited_owner(shm_path: str) -> int | None:
    """The pid of the engine owning ``shm_path`` if that process has exited (or is a
    zombie), else ``None`` (running, or the name does not say)."""
    m = _SHM_OWNER.match(os.path.basename(shm_path))
    if m is None:
        return None
    pid = int(m.group(1))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return pid
    except PermissionError:
        return None  # alive, another user's
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[:1]
    except OSError:
        return None
    return pid if state == [b"Z"] else None


class OwnerWatch:
    """Whether the engine process owning a same-host segment file has exited.

    One pidfd per owner process, opened at its first check and polled without blocking
    after that (0.5 us against 16 us for ``kill`` and a read of ``/proc/PID/stat``: a
    4 KiB put checks once). A pidfd turns readable when its process ends (a zombie
    included) and always names the process it was opened on, so a later process that
    reuses the pid is never taken for the owner. Where pidfds are not available the
    check falls back to :func:`_exited_owner`. The pidfds stay open for the client's
    life (one per node process it ever wrote to) and are closed by :meth:`close`.
    """

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}
        self._lock = threading.Lock()

    def exited(self, shm_path: str) -> int | None:
        """The owner's pid if it has exited (or is a zombie), else ``None`` (running, or
        the file name does not say)."""
        m = _SHM_OWNER.match(os.path.basename(shm_path))
        if m is None:
            return None
        pid = int(m.group(1))
        fd = self._fds.get(pid)
        if fd is None:
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                return pid
            except (OSError, AttributeError):
                return _exited_owner(shm_path)
            with self._lock:
                kept = self._fds.setdefault(pid, fd)
            if kept != fd:  # another thread opened one first
                os.close(fd)
                fd = kept
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return pid if poller.poll(0) else None

    def close(self) -> None:
        """Close every pidfd."""
        with self._lock:
            fds, self._fds = list(self._fds.values()), {}
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def bytes_of(region: Region, off: int, n: int) -> bytes:
    """A new bytes object holding ``n`` bytes of ``region`` from ``off`` (a staged read's
    result): one copy, a large one onto huge pages (``_native.bytes_of``)."""
    return _native.bytes_of(region.view(), off, n)


@dataclass(slots=True)
class Pending:
    """Transfers started by :meth:`DataPath.start`, not yet waited for."""

    batch: Batch | None
    reqs: list[TransferRequest]
    owners: list[int]
    errors: list[str | None]
    failed: list[set[str]] = field(default_factory=list)
    """Per group, the segments that could not be reached or refused a transfer."""


Flat = tuple[Region, int, str, int, int]
"""One slice as :meth:`DataPath.start_flat` takes it: (region, offset in it, segment,
offset in the segment, length)."""

Directory = Callable[[], dict[str, tuple[str, str]]]
"""The master's segments now: name -> (transport address ``host:port``, owner client id)."""


class DataPath:
    """Moves op groups: memcpy for this process's segments, the engine for the rest.

    Args:
        engine: this client's Transfer Engine (started).
        local: segments hosted by this process, by name.
        directory: reads the master's segment table (address and owner per name).
        timeout_s: longest wait for one engine batch.
        revalidate_s: how old the cached segment table may get while segments are open.

    A segment handle is cached with the (address, owner) it was opened under. The table
    is re-read on a miss and, while handles are cached, at most every ``revalidate_s``;
    a handle whose segment now has another address or owner (the node restarted: a new
    process, a new shm file) is dropped, so bytes never go to a dead incarnation's
    memory. The residual window is ``revalidate_s`` after the new mount (see
    docs/store_client.md).
    """

    def __init__(
        self,
        engine: TransferEngine,
        local: dict[str, Region],
        directory: Directory,
        timeout_s: float,
        revalidate_s: float = 1.0,
    ) -> None:
        self.engine = engine
        self.local = local
        self._directory = directory
        self._timeout = timeout_s
        self._revalidate_s = revalidate_s
        self._where: dict[str, tuple[str, str]] = {}
        self._checked_at = -1e18
        self._remote: dict[str, tuple[RemoteSegment, tuple[str, str]]] = {}
        self._lock = threading.Lock()
        self._owners = OwnerWatch()
        self._all_here: bool | None = None
        """:meth:`copies_all_here`'s answer (None: ask again)."""

    def close(self) -> None:
        """Release what the data path holds (the owners' pidfds)."""
        self._owners.close()

    def transport_of(self, segment: str) -> str:
        """``local``, ``shm`` or ``tcp`` for an already opened segment, else ``unknown``."""
        if segment in self.local:
            return "local"
        hit = self._remote.get(segment)
        return hit[0].transport if hit is not None else "unknown"

    def forget(self, segment: str) -> None:
        """Drop a segment's handle and table entry (it failed; look it up again)."""
        with self._lock:
            self._remote.pop(segment, None)
            self._where.pop(segment, None)
            self._all_here = None

    def copies_all_here(self) -> bool:
        """Whether every segment this process has opened is one it copies to and from
        itself (its own, or a same-host node's mapped through shm). Then a batch's
        copies are made in the caller's thread (:meth:`start_flat`) and nothing overlaps
        them: cutting the batch into parts would only add round trips. False while
        nothing is opened; segments not opened yet do not count (deciding opens
        nothing: a dead node would stall it). Asked again whenever a segment is opened
        or dropped.
        """
        known = self._all_here
        if known is None:
            with self._lock:
                handles = [seg for seg, _ in self._remote.values()]
            known = bool(handles or self.local) and not any(map(self._engine_only, handles))
            self._all_here = known
        return known

    def _engine_only(self, seg: RemoteSegment) -> bool:
        # Whether an opened segment is reached through the engine alone (no mapping here).
        try:
            return self.engine.shm_mapping(seg) is None
        except TransferError:
            return True

    def refresh(self) -> None:
        """Re-read the segment table; drop handles whose address or owner changed.

        Raises:
            StoreError: the master could not be asked.
        """
        where = self._directory()
        with self._lock:
            self._where = where
            self._checked_at = time.monotonic()
            for name, (_, ident) in list(self._remote.items()):
                if where.get(name) != ident:
                    del self._remote[name]
                    self._all_here = None

    def _open(self, segment: str) -> RemoteSegment:
        hit = self._remote.get(segment)
        if hit is not None:
            return hit[0]
        ident = self._where.get(segment)
        if ident is None:
            try:
                self.refresh()
            except StoreError as exc:
                raise TransferError(f"cannot look segment {segment!r} up: {exc}") from exc
            ident = self._where.get(segment)
        if ident is None or not ident[0]:
            raise TransferError(f"segment {segment!r} is not mounted at the master")
        seg = self.engine.open_segment(f"{ident[0]}/{segment}")
        with self._lock:
            self._remote[segment] = (seg, ident)
            self._all_here = None
        return seg

    def run(self, groups: Sequence[Sequence[Op]]) -> list[str | None]:
        """Move every op of every group; all remote ops are in flight at once.

        Returns:
            Per group ``None`` (every op done) or the first failure's reason.
        """
        return self.finish(self.start(groups))

    def run_reporting(
        self, groups: Sequence[Sequence[Op]]
    ) -> tuple[list[str | None], list[set[str]]]:
        """:meth:`run`, also returning per group the segments that failed (a put
        reports them to the master, which places the write elsewhere)."""
        p = self.start(groups)
        return self.finish(p), p.failed

    def start(self, groups: Sequence[Sequence[Op]]) -> Pending:
        """Submit the remote ops and do the local copies; :meth:`finish` waits for the rest.

        Between the two the caller may talk to the master while the engine moves bytes.
        """
        if self._remote and time.monotonic() - self._checked_at > self._revalidate_s:
            with contextlib.suppress(StoreError):  # master away: keep the handles we have
                self.refresh()
        errors: list[str | None] = [None] * len(groups)
        failed: list[set[str]] = [set() for _ in groups]
        jobs: list[bytes] = []
        reads = False
        reqs: list[TransferRequest] = []
        owners: list[int] = []
        for g, ops in enumerate(groups):
            for o in ops:
                if errors[g] is not None:
                    break
                own = self.local.get(o.segment)
                if own is not None:
                    if o.seg_offset + o.length > own.length:
                        errors[g] = f"slice {o.segment}@{o.seg_offset}+{o.length} outside segment"
                        continue
                    seg_addr = own.address + o.seg_offset
                    buf_addr = o.region.address + o.offset
                    if o.op == OpCode.WRITE:
                        jobs.append(_JOB.pack(seg_addr, buf_addr, o.length))
                    else:
                        reads = True
                        jobs.append(_JOB.pack(buf_addr, seg_addr, o.length))
                    continue
                try:
                    seg = self._open(o.segment)
                except TransferError as exc:
                    errors[g] = f"segment {o.segment}: {exc}"
                    failed[g].add(o.segment)
                    self.forget(o.segment)  # look it up again next time
                    continue
                reqs.append(TransferRequest(o.op, o.region, o.offset, seg, o.seg_offset, o.length))
                owners.append(g)
        batch = self._submit(reqs, owners, errors) if reqs else None
        if jobs:
            # Runs while the engine moves the remote slices; GIL released in C.
            stream = 0 if reads else _STREAM_WRITES
            _native.copy_many(b"".join(jobs), _COPY_THREADS, _SPLIT_MIN, stream)
        return Pending(batch, reqs, owners, errors, failed)

    def start_flat(self, op: OpCode, items: Sequence[Flat]) -> Pending | None:
        """:meth:`start` for items of one slice each, all on this process's segments or
        on same-host (shm) ones: every copy made here and now, in one call into C,
        without an :class:`Op`, a request or a batch per item (a 64-key batch of 4 KiB
        spends a third of its client time on those). None (nothing done): some item is
        elsewhere or out of its segment's bounds; :meth:`start` reports it.

        Each slice is bounds-checked against its segment, each buffer region pinned
        while copying (unregister waits) and the copies counted as the engine counts
        its own. A write through shm counts only if the segment's owner still runs
        (:meth:`finish`'s check, here once per segment).
        """
        if self._remote and time.monotonic() - self._checked_at > self._revalidate_s:
            with contextlib.suppress(StoreError):  # master away: keep the handles we have
                self.refresh()
        segs: dict[str, tuple[int, int, RemoteSegment | None]] = {}
        pins: dict[Region, int] = {}
        tally: dict[str, list[int]] = {}
        flat: list[int] = []
        write = op == OpCode.WRITE
        for region, off, segment, seg_off, n in items:
            seg = segs.get(segment)
            if seg is None:
                seg = self._mapping(segment)
                if seg is None:
                    return None
                segs[segment] = seg
            if seg_off < 0 or n < 0 or seg_off + n > seg[1] or off < 0 or off + n > region.length:
                return None
            buf = region.address + off
            if write:
                flat += (seg[0] + seg_off, buf, n)
            else:
                flat += (buf, seg[0] + seg_off, n)
            pins[region] = pins.get(region, 0) + 1
            t = tally.get(segment)
            if t is None:
                t = tally[segment] = [0, 0]
            t[0] += n
            t[1] += 1
        if not flat:
            return None
        held: list[tuple[Region, int]] = []
        try:
            for region, k in pins.items():
                region.acquire(k)  # raises if it was unregistered meanwhile
                held.append((region, k))
            stream = _STREAM_WRITES if write else 0
            _native.copy_many(
                struct.pack(f"<{len(flat)}Q", *flat), _COPY_THREADS, _SPLIT_MIN, stream
            )
        except TransferError:
            return None
        finally:
            for region, k in held:
                region.release(k)
        errors: list[str | None] = [None] * len(items)
        failed: list[set[str]] = [set() for _ in items]
        gone: dict[str, str] = {}
        for segment, (nbytes, count) in tally.items():
            _, _, remote = segs[segment]
            if remote is None:
                continue
            self.engine.count_shm_copies(remote, not write, nbytes, count)
            pid = self._owners.exited(remote.info.shm_path or "") if write else None
            if pid is not None:
                gone[segment] = (
                    f"{remote.name}: its node process {pid} has exited "
                    "(its memory is still mapped here, but nobody serves it)"
                )
                self.forget(segment)
        if gone:
            for g, item in enumerate(items):
                reason = gone.get(item[2])
                if reason is not None:
                    errors[g] = reason
                    failed[g].add(item[2])
        return Pending(None, [], [], errors, failed)

    def _mapping(self, segment: str) -> tuple[int, int, RemoteSegment | None] | None:
        # (base address, size, handle: None for this process's own) of a segment this
        # process can copy to and from itself; None: it goes through the engine.
        own = self.local.get(segment)
        if own is not None:
            return own.address, own.length, None
        try:
            seg = self._open(segment)
            where = self.engine.shm_mapping(seg)
        except TransferError:
            return None  # start() meets the same failure and reports it
        return None if where is None else (where[0], where[1], seg)

    def finish(self, p: Pending) -> list[str | None]:
        """Wait for what :meth:`start` submitted; per group ``None`` or a reason."""
        if p.batch is not None:
            self._finish(p.batch, p.reqs, p.owners, p.errors, p.failed)
        if p.reqs:
            self._check_shm_owners(p)
        return p.errors

    def _check_shm_owners(self, p: Pending) -> None:
        # A same-host segment is written through a mapping of its owner's /dev/shm file,
        # and the mapping outlives a SIGKILLed owner: the copy "succeeds" into memory
        # nobody will ever serve. A write there counts only if the owner still runs
        # (checked after the copy; same PID namespace, as the engine's stale-file sweep
        # already assumes).
        gone: dict[str, int | None] = {}
        for req, g in zip(p.reqs, p.owners, strict=True):
            if req.op != OpCode.WRITE or req.segment.transport != "shm" or p.errors[g]:
                continue
            path = req.segment.info.shm_path or ""
            if path not in gone:
                gone[path] = self._owners.exited(path)
            pid = gone[path]
            if pid is not None:
                segment = req.segment.name.rpartition("/")[2]
                p.errors[g] = (
                    f"{req.segment.name}: its node process {pid} has exited "
                    "(its memory is still mapped here, but nobody serves it)"
                )
                if p.failed:
                    p.failed[g].add(segment)
                self.forget(segment)

    def _submit(
        self, reqs: list[TransferRequest], owners: list[int], errors: list[str | None]
    ) -> Batch | None:
        """The engine batch moving ``reqs``; None when there is nothing to wait for:
        small shm requests the engine did at once (``run_now``), or requests it refused
        (their groups' errors say why)."""
        batch = None
        try:
            if self.engine.run_now(reqs):
                return None
            batch = self.engine.allocate_batch(len(reqs))
            self.engine.submit(batch, reqs)
        except TransferError as exc:
            # run_now and submit validate everything first: nothing is in flight.
            if batch is not None:
                with contextlib.suppress(TransferError):
                    self.engine.free_batch(batch)
            for g in owners:
                errors[g] = errors[g] or str(exc)
            return None
        return batch

    def _finish(
        self,
        batch: Batch,
        reqs: list[TransferRequest],
        owners: list[int],
        errors: list[str | None],
        failed: list[set[str]],
    ) -> None:
        statuses = self.engine.wait(batch, timeout=self._timeout)
        for req, g, st in zip(reqs, owners, statuses, strict=True):
            if st.state is TransferState.COMPLETED:
                continue
            segment = req.segment.name.rpartition("/")[2]
            if failed:
                failed[g].add(segment)
            if errors[g] is None:
                reason = st.reason or "still pending at the client's timeout"
                errors[g] = f"{req.segment.name}@{req.target_offset}+{req.length}: {reason}"
                self.forget(segment)
        with contextlib.suppress(TransferError):
            self.engine.free_batch(batch)
