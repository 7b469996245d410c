"""Take a store node out of placement: ``mooncake node drain`` / ``node ls``.

What the master offers today (``DrainSegment``): the node's segments go DRAINING, stay
readable, get no new allocations, and turn DRAINED once no object is left on them. What
it does not offer, and this module therefore does not pretend to do:

- **copying** objects off a DRAINING segment without a read failing. The only client-side
  tool, ``Upsert``, makes the object PROCESSING (``OBJECT_NOT_READY`` for readers) from
  its start until the new copy is written, and is refused while a reader holds a lease;
  a read-safe move needs a master operation that adds a replica to a COMPLETE object and
  later drops the drained one once its lease ends;
- **undrain** (DRAINING/DRAINED back to MOUNTED);
- listing the objects of one segment (this module scans every key with ``Stat``).

So a drain here stops new placement at once and reports, object by object, what is still
on the node and which objects have no replica anywhere else (lost if the node goes).

The classification is pure (:func:`classify`, :func:`node_segments`); :func:`drain_node`
and :func:`scan_node` are the I/O shell over a :class:`MasterClient`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mooncake_core.store import ObjectInfo, ObjectState, SegmentSnapshot, SegmentState

if TYPE_CHECKING:
    from mooncake_core.store.master_client import MasterClient

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
