"""Build a serving :class:`MasterState` from a :class:`MetadataImage`. Sans-IO.

Everything goes through the core's public API: segments, segment states and pins as a
live master would set them, objects through :meth:`MasterState.restore_objects` (which
puts each at the exact ranges its bytes occupy) and SSD copies through
:meth:`MasterState.restore_ssd_copies`. This module only decides what of the image
survives (objects whose segments are gone, pins whose TTL ended).
"""

from __future__ import annotations

import logging
import random

from mooncake_core.config.models import MasterConfig

from ..master import MasterState, RebuildError, RestoredObject
from .image import MetadataImage

log = logging.getLogger(__name__)

__all__ = ["RebuildError", "build_state"]  # RebuildError lives with the restore code


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
        The state, with its event outbox empty (restoring is not news). Its objects
        come back without a lease, but are not evicted, nor their ranges reused, for
        ``lease_ttl_s`` (``read_hold`` of :meth:`MasterState.restore_objects`).

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
    restored: list[RestoredObject] = []
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
    # Version tokens start above any the previous master can have handed out (it
    # counted from 0 in its own life), so a late TierOffloadDone for an old version
    # is never taken for a new one.
    # Readers of the previous master may read on under leases this one never saw.
    hold = now + config.lease_ttl_s
    st.restore_objects(restored, now, token_base=int(wall * 1e6), read_hold=hold)
    # ... and so may readers of objects it had removed under their lease: their ranges
    # are free in the records but stay held for one lease here too; a write discarded
    # unfinished stays held for put_release_s (its writer may have stalled mid-transfer).
    st.hold_ranges(image.held_ranges(for_writer=False), hold)
    st.hold_ranges(image.held_ranges(for_writer=True), now + config.put_release_s)
    for key, ssd in image.ssd.items():
        if st.exist(key, now):  # restored and complete
            st.restore_ssd_copies(key, ssd)
    for name, seg in image.segments.items():
        if seg.state in ("DRAINING", "DRAINED"):
            st.drain_segment(name, now)
        elif seg.state == "UNMOUNTING":
            st.unmount_segment(name, now)  # a fresh grace period
    for (target, prefix), pin in image.pins.items():
        if not prefix and not st.has_object(target):
            continue
        if pin.hard:
            st.pin(target, now, prefix=prefix, hard=True)
        elif pin.expires_wall is not None and pin.expires_wall > wall:
            st.pin(target, now, prefix=prefix, ttl_s=pin.expires_wall - wall)
    st.take_events()
    return st
