"""Build a serving :class:`MasterState` from a :class:`MetadataImage`. Sans-IO.

Segments, segment states and pins go through the core's public API. Objects cannot: a
restored object must keep the exact ranges its bytes occupy, and the core only has
"allocate somewhere". So this module reserves those ranges with the segment allocator's
public ``allocate``/``release`` (see :func:`_reserve`) and then registers each object in
the core's tables. It is the one place outside ``master_state.py`` that writes the core's
private tables; a ``MasterState.restore`` method would be its natural home.
"""

from __future__ import annotations

import logging
import random
from collections import defaultdict

from mooncake_core.config.models import MasterConfig

from ..allocator import OffsetAllocator
from ..master_state import MasterState
from ..objects import ObjectMeta, ObjectState, Replica
from .image import MetadataImage

log = logging.getLogger(__name__)


class RebuildError(RuntimeError):
    """The image is inconsistent (overlapping ranges, ranges outside a segment)."""


def _reserve(alloc: OffsetAllocator, ranges: list[tuple[int, int]], segment: str) -> None:
    """Mark exactly ``ranges`` (offset, length) as allocated in a fresh allocator.

    With only the tail block free, best fit always returns the tail's start, so
    allocating the gaps and the ranges in offset order lays them out exactly; the gaps
    are released afterwards (and coalesce).
    """
    cursor = 0
    gaps: list[tuple[int, int]] = []
    for off, length in sorted(ranges):
        if off < cursor:
            raise RebuildError(f"segment {segment!r}: range at {off} overlaps one before {cursor}")
        if off > cursor:
            if alloc.allocate(off - cursor) != cursor:
                raise RebuildError(f"segment {segment!r}: cannot reserve the gap at {cursor}")
            gaps.append((cursor, off - cursor))
        got = alloc.allocate(length)
        if got != off:
            raise RebuildError(
                f"segment {segment!r}: range [{off}, +{length}) does not fit its capacity"
            )
        cursor = off + alloc.rounded(length)
    for off, length in gaps:
        alloc.release(off, length)


def build_state(
    image: MetadataImage,
    config: MasterConfig,
    now: float,
    wall: float,
    *,
    rng: random.Random | None = None,
) -> MasterState:
    """A MasterState holding the image's segments, objects and live pins.

    Args:
        image: the folded journal.
        config: master settings.
        now: the new master's monotonic clock.
        wall: the wall clock at ``now`` (pin expiries are stored on the wall clock).
        rng: for the allocation strategy.

    Returns:
        The state, with its event outbox empty (restoring is not news).

    Raises:
        RebuildError: the image's ranges overlap or exceed a segment.
    """
    st = MasterState(config, rng=rng or random.Random())
    for name, seg in image.segments.items():
        st.mount_segment(
            name,
            seg.client_id,
            seg.capacity,
            now,
            transport_address=seg.transport_address,
            location=seg.location,
            ssd_capacity=seg.ssd_capacity,
        )
    ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)
    restored: list[tuple[str, int, tuple[Replica, ...], bool]] = []
    names = image.segments.keys()
    everything = [(k, v, True) for k, v in image.objects.items()]
    everything += [(k, v, False) for k, v in image.processing.items() if k not in image.objects]
    # Hot loop (promotion time grows with it): plain loops, no generators.
    for key, (size, replicas), complete in everything:
        kept = replicas
        for r in replicas:
            for sl in r:
                if sl.segment not in names:
                    kept = tuple(x for x in replicas if all(y.segment in names for y in x))
                    break
            if kept is not replicas:
                break
        if not complete and len(kept) != len(replicas):
            continue  # a write that lost a replica cannot complete as the writer expects
        if not kept and not (complete and any(s in names for s in image.ssd.get(key, ()))):
            continue  # no replica and no SSD copy left
        restored.append((key, size, kept, complete))
        for r in kept:
            for sl in r:
                ranges[sl.segment].append((sl.offset, sl.length))
    table = st._segments  # private: see the module docstring
    segs = {name: table.get(name) for name in names}
    for name, rs in ranges.items():
        _reserve(segs[name].allocator, rs, name)
    objects, processing, keys = st._objects, st._processing, st._keys
    complete_state = ObjectState.COMPLETE
    # Version tokens start above any the previous master can have handed out (it
    # counted from 0 in its own life), so a late TierOffloadDone for an old version
    # is never taken for a new one.
    tier = st._tier
    tier.next_token = int(wall * 1e6)
    for key, size, replicas, complete in restored:
        meta = ObjectMeta(size, replicas, "", now)
        if complete:
            meta.state = complete_state
            meta.token = tier.new_token()
        else:
            processing[key] = now  # put_timeout_s counts from the restart
        objects[key] = meta
        keys.add(key)
        for r in replicas:
            for sl in r:
                segs[sl.segment].keys.add(key)
    for key, ssd in image.ssd.items():
        if key in objects and objects[key].complete:
            st.restore_ssd_copies(key, ssd)
    for name, seg in image.segments.items():
        if seg.state in ("DRAINING", "DRAINED"):
            st.drain_segment(name, now)
        elif seg.state == "UNMOUNTING":
            st.unmount_segment(name, now)  # a fresh grace period
    for (target, prefix), pin in image.pins.items():
        if not prefix and target not in st._objects:
            continue
        if pin.hard:
            st.pin(target, now, prefix=prefix, hard=True)
        elif pin.expires_wall is not None and pin.expires_wall > wall:
            st.pin(target, now, prefix=prefix, ttl_s=pin.expires_wall - wall)
    st.take_events()
    return st
