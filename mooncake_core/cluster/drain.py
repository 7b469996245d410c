"""Take a store node out of placement: ``mooncake node drain`` / ``undrain`` / ``ls``.

A drain, step by step (see docs/cluster.md, "Draining a store node"):

1. every segment of the node goes DRAINING (:func:`drain_node`): still readable, no new
   allocations;
2. :func:`move_off` walks the node's objects (the master's ``ListSegmentObjects``). An
   object that has a COMPLETE replica elsewhere just loses its replica here
   (``DropReplica``). An object that has none gets one first, without ever becoming
   unreadable: take a read lease (``GetReplicaList``: no upsert, remove or eviction can
   free the object while the bytes move), ``AddReplicaStart`` (a new replica off the
   node, invisible to readers), copy the bytes (:class:`Copier`, e.g.
   :class:`~.replica_copy.ReplicaCopier`), ``AddReplicaEnd``, then ``DropReplica``;
3. a dropped replica leaves replica lists at once, but a reader that was handed it
   keeps a valid copy until its lease ends; the master frees the space then, and the
   segment turns DRAINED once nothing is left on it.

Re-running is safe: objects already moved are no longer listed, and an addition left
pending by a crashed run is revoked and started again. :func:`undrain_node` puts the
node back into placement.

The classification is pure (:func:`classify`, :func:`node_segments`); the rest is the
I/O shell over a :class:`MasterClient`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from mooncake_core.store import (
    ConflictError,
    ErrorCode,
    NotFoundError,
    ObjectInfo,
    ObjectState,
    Replica,
    SegmentSnapshot,
    SegmentState,
    StoreError,
)

if TYPE_CHECKING:
    from mooncake_core.store.client.async_master import MasterClient

Progress = Callable[[int, int], None]
"""Called with (objects scanned, objects to scan)."""


@dataclass(frozen=True, slots=True)
class NodeScan:
    """What a node still holds.

    ``sole`` lists the keys whose every replica touches the node: they have no copy
    elsewhere and are lost with it.
    """

    node: str
    segments: tuple[str, ...]
    states: tuple[str, ...]
    scanned: int
    on_node: int
    sole: tuple[str, ...]

    @property
    def drained(self) -> bool:
        """Every segment of the node is DRAINED (nothing left on it)."""
        return bool(self.states) and all(s == SegmentState.DRAINED.name for s in self.states)


def node_segments(segments: Iterable[SegmentSnapshot], node: str) -> list[SegmentSnapshot]:
    """The segments that belong to store node ``node``.

    A store node mounts a segment named after itself (``store-0``), or several named
    ``store-0/<tier>``; a client id equal to the node name also counts.
    """
    return [
        s
        for s in segments
        if s.name == node or s.name.startswith(node + "/") or s.client_id == node
    ]


def node_of(segment: SegmentSnapshot) -> str:
    """The store node a segment belongs to: its name up to the first ``/``."""
    return segment.name.split("/", 1)[0]


def classify(info: ObjectInfo, segments: frozenset[str]) -> tuple[bool, bool]:
    """Whether object ``info`` has data on ``segments``, and whether it has no replica
    entirely outside them.

    Returns:
        ``(on_node, sole)``: ``sole`` implies ``on_node``.
    """
    touching = [any(s.segment in segments for s in r) for r in info.replicas]
    on_node = any(touching)
    return on_node, on_node and all(touching)


async def drain_node(mc: MasterClient, node: str) -> list[str]:
    """Mark every segment of ``node`` DRAINING (idempotent; a DRAINED one stays so).

    Returns:
        The segment names.

    Raises:
        ValueError: no segment belongs to ``node`` (the message lists the known ones).
        StoreError: the master refused (e.g. a segment is unmounting).
    """
    snap = await mc.get_snapshot()
    segs = node_segments(snap.segments, node)
    if not segs:
        known = ", ".join(sorted({node_of(s) for s in snap.segments})) or "none"
        raise ValueError(f"no segment of store node {node!r} is mounted (nodes: {known})")
    for seg in segs:
        await mc.drain_segment(seg.name)
    return [s.name for s in segs]


async def scan_node(
    mc: MasterClient, node: str, progress: Progress = lambda done, total: None, page: int = 500
) -> NodeScan:
    """Stat every object and count those on ``node`` and those only on ``node``.

    Args:
        mc: a connected master client.
        node: store node name.
        progress: called after each page of keys.
        page: keys per ListKeys page.

    Returns:
        The scan. Keys removed while scanning are skipped.
    """
    from mooncake_core.store import NotFoundError

    snap = await mc.get_snapshot()
    segs = node_segments(snap.segments, node)
    names = frozenset(s.name for s in segs)
    total = snap.complete_count
    scanned = on_node = 0
    sole: list[str] = []
    start = ""
    while True:
        res = await mc.list_keys(start_after=start, limit=page)
        for entry in res.entries:
            if entry.state != ObjectState.COMPLETE:
                continue  # being written: it cannot land on a DRAINING segment anyway
            try:
                info = await mc.stat(entry.key)
            except NotFoundError:
                continue
            scanned += 1
            here, only = classify(info, names)
            on_node += here
            if only:
                sole.append(info.key)
        progress(scanned, max(total, scanned))
        if res.next_start_after is None:
            break
        start = res.next_start_after
    after = node_segments((await mc.get_snapshot()).segments, node)
    return NodeScan(
        node=node,
        segments=tuple(s.name for s in after),
        states=tuple(s.state.name for s in after),
        scanned=scanned,
        on_node=on_node,
        sole=tuple(sole),
    )


class MoveStopped(Exception):
    """:func:`move_off` stopped between objects because its ``stop`` was set (an
    undrain or a Ctrl-C while it ran).

    Attributes:
        done: Objects handled before the stop.
    """

    def __init__(self, done: int) -> None:
        super().__init__(f"drain stopped after {done} objects")
        self.done = done


class Copier(Protocol):
    """Moves replica bytes (see :class:`~.replica_copy.ReplicaCopier`)."""

    def set_segments(self, segments: Iterable[SegmentSnapshot]) -> None:
        """Where each segment is now."""

    def copy(self, size: int, source: Replica, target: Replica) -> None:
        """Blocking: read ``source`` and write the bytes into ``target``."""


class _Refused(Exception):
    """A copy refused because the move was stopped (see :class:`_StoppableCopier`)."""


class _StoppableCopier:
    """``inner``, refusing new copies once ``stop`` is set (the move revokes the replica
    it had started to add, and ends). A copy already running finishes: its thread cannot
    be stopped mid-write, and cancelling the move instead could strand an addition the
    master made before its reply."""

    def __init__(self, inner: Copier, stop: threading.Event) -> None:
        self._inner = inner
        self._stop = stop

    def set_segments(self, segments: Iterable[SegmentSnapshot]) -> None:
        self._inner.set_segments(segments)

    def copy(self, size: int, source: Replica, target: Replica) -> None:
        if self._stop.is_set():
            raise _Refused("drain stopped")
        self._inner.copy(size, source, target)


@dataclass(frozen=True, slots=True)
class MoveReport:
    """What one :func:`move_off` run did.

    ``copied`` objects got a new replica off the node (they had none elsewhere);
    ``dropped`` objects only lost their replica on the node; ``waiting`` of those drops
    keep their space until a reader's lease ends; ``failed`` lists ``(key, reason)``.
    """

    node: str
    segments: tuple[str, ...]
    copied: int
    copied_bytes: int
    dropped: int
    waiting: int
    failed: tuple[tuple[str, str], ...]


def _touches(replica: Replica, names: frozenset[str]) -> bool:
    return any(s.segment in names for s in replica)


async def undrain_node(mc: MasterClient, node: str) -> list[str]:
    """Put every segment of ``node`` back into placement (MOUNTED).

    Returns:
        The segment names.

    Raises:
        ValueError: no segment belongs to ``node``.
        StoreError: the master refused (e.g. a segment is unmounting).
    """
    snap = await mc.get_snapshot()
    segs = node_segments(snap.segments, node)
    if not segs:
        known = ", ".join(sorted({node_of(s) for s in snap.segments})) or "none"
        raise ValueError(f"no segment of store node {node!r} is mounted (nodes: {known})")
    for seg in segs:
        await mc.undrain_segment(seg.name)
    return [s.name for s in segs]


async def _add_replica(mc: MasterClient, key: str, names: frozenset[str]) -> Replica:
    try:
        return await mc.add_replica_start(key, exclude_segments=sorted(names))
    except ConflictError as exc:
        if exc.code != ErrorCode.INVALID_STATE:
            raise
        # An addition left pending by an earlier (crashed) run: start it again.
        await mc.add_replica_revoke(key)
        return await mc.add_replica_start(key, exclude_segments=sorted(names))


async def _move_one(
    mc: MasterClient, info: ObjectInfo, names: frozenset[str], copier: Copier
) -> tuple[int, bool]:
    """Make sure ``info`` has a replica off the node, then drop its replicas on it.

    Returns:
        (bytes copied, whether every drop waits for a lease).
    """
    copied = 0
    if all(_touches(r, names) for r in info.replicas):
        # The lease keeps the object (and so the new replica's space) from being freed
        # by an upsert, a plain remove or eviction while the bytes move.
        res = await mc.get_replica_list(info.key)
        target = await _add_replica(mc, info.key, names)
        try:
            await asyncio.to_thread(copier.copy, res.size, res.replicas[0], target)
        except BaseException:
            with contextlib.suppress(StoreError):
                await mc.add_replica_revoke(info.key)
            raise
        await mc.add_replica_end(info.key)
        copied = res.size
    waiting = False
    for seg in sorted({s.segment for r in info.replicas for s in r} & names):
        try:
            waiting |= not await mc.drop_replica(info.key, seg)
        except NotFoundError:
            continue  # a replica spanning two of the node's segments went with the first
    return copied, waiting


async def move_off(
    mc: MasterClient,
    node: str,
    copier: Copier,
    progress: Progress = lambda done, total: None,
    *,
    stop: threading.Event | None = None,
    page: int = 200,
    max_passes: int = 20,
    busy_wait_s: float = 0.5,
) -> MoveReport:
    """Move every object off ``node`` (whose segments must already be DRAINING).

    Objects being written when the drain started are waited for (they cannot be moved
    before they are complete); passes repeat until nothing is left to do or
    ``max_passes`` is reached.

    Args:
        mc: a connected master client.
        node: store node name.
        copier: moves the bytes of objects that have no replica elsewhere.
        progress: called with (objects handled, objects to handle) after each object.
        stop: once set, the move ends at its next clean point (after the object in
            hand, or before a pause between passes; no copy starts after it) with
            :class:`MoveStopped`.
        page: keys per ListSegmentObjects page.
        max_passes: passes over the node's objects before giving up on busy ones.
        busy_wait_s: pause between passes while objects are still being written.

    Returns:
        The report; objects that failed are listed, not raised.

    Raises:
        ValueError: no segment belongs to ``node``.
        StoreError: the master could not be reached.
        MoveStopped: ``stop`` was set.
    """
    snap = await mc.get_snapshot()
    segs = node_segments(snap.segments, node)
    if not segs:
        known = ", ".join(sorted({node_of(s) for s in snap.segments})) or "none"
        raise ValueError(f"no segment of store node {node!r} is mounted (nodes: {known})")
    names = frozenset(s.name for s in segs)
    total = sum(s.keys for s in segs)
    if stop is None:
        stop = threading.Event()
    copier = _StoppableCopier(copier, stop)
    done = copied = copied_bytes = dropped = waiting = 0
    failed: dict[str, str] = {}
    for _ in range(max_passes):
        busy = 0
        for seg in sorted(names):
            start = ""
            while True:
                copier.set_segments((await mc.get_snapshot()).segments)
                res = await mc.list_segment_objects(seg, start_after=start, limit=page)
                for entry in res.entries:
                    if entry.key in failed:
                        continue
                    if entry.state != ObjectState.COMPLETE:
                        busy += 1
                        continue
                    try:
                        info = await mc.stat(entry.key)
                        n, wait = await _move_one(mc, info, names, copier)
                    except NotFoundError:
                        continue  # removed meanwhile: nothing to move
                    except _Refused:
                        raise MoveStopped(done) from None
                    except Exception as exc:  # one object must not stop the drain
                        failed[entry.key] = f"{type(exc).__name__}: {exc}"
                        continue
                    done += 1
                    copied += n > 0
                    copied_bytes += n
                    dropped += 1
                    waiting += wait
                    progress(done, max(total, done))
                    if stop.is_set():
                        raise MoveStopped(done)
                if res.next_start_after is None:
                    break
                start = res.next_start_after
        if not busy:
            break
        if stop.is_set():
            raise MoveStopped(done)
        await asyncio.sleep(busy_wait_s)
    progress(done, max(done, 1) if total == 0 else max(total, done))
    return MoveReport(
        node=node,
        segments=tuple(sorted(names)),
        copied=copied,
        copied_bytes=copied_bytes,
        dropped=dropped,
        waiting=waiting,
        failed=tuple(sorted(failed.items())),
    )
