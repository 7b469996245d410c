"""Undo a change the journal did not take: the tables go back to what the journal holds.

The core applies a call to its tables first and the service journals the events after
(:mod:`..master_service`). When that journal write fails (disk full, I/O error) nothing
of the call reached the journal, so the tables are ahead of it: an object removed in
memory is still in the journal, and its ranges, reused by the next write, would hold
another object's bytes after a restart. :func:`undo` puts the tables back for every key
and pin the failed records touch (:func:`.restore.reconcile`), from the
:class:`~.ha.image.MetadataImage` (which folds exactly the records that were written),
or rebuilds the whole core from the image when the records touch segments or the SSD
tier. A rebuilt core keeps the ranges the old one held for readers (the image has them
free) and its objects' ranges for ``lease_ttl_s`` (the leases went with the old core).

A grant the refused call made (:mod:`.grants`; its ``hold`` records are what failed)
is forgotten and its space freed: the writer is refused, it never learns the grant.

One kind of change is kept instead of undone: dropping a write that never completed
(revoked, or discarded after ``put_timeout_s``). No reader ever saw it and no writer was
acknowledged, so keeping it dropped frees its space at once while the journal cannot be
written; its ``removed`` record is *owed* and written before any later record (so the
freed ranges are journaled as free before the journal can say they hold anything else).
A crash before that brings back only the unfinished write, which expires again. A PutEnd
whose record cannot be written is refused and revokes its write the same way (the writer
writes again; the space is free at once).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .. import events as ev
from ..errors import StoreError
from . import removal as removal_ops
from . import restore
from .restore import RebuildError, RestoredObject

if TYPE_CHECKING:
    from mooncake_core.config.models import MasterConfig

    from ..ha.image import MetadataImage
    from .state import MasterState

Record = dict[str, Any]

_KEYED = frozenset({"stored", "started", "removed", "replica_dropped", "replica_added"})
_PINS = frozenset({"pin", "unpin"})


class Rebuild(Protocol):
    """Builds a whole core from a journal image (``ha.rebuild.build_state``; passed in
    by the service, so that the core does not depend on the HA package)."""

    def __call__(
        self,
        image: MetadataImage,
        config: MasterConfig,
        now: float,
        wall: float,
        *,
        rng: random.Random | None = None,
    ) -> MasterState: ...


@dataclass(frozen=True, slots=True)
class Undone:
    """What :func:`undo` left."""

    state: MasterState
    """The core to serve: the same object, or a rebuilt one."""
    owed: list[Record]
    """Records of changes kept in memory, to write before any other record."""
    refused: bool
    """Whether part of the change was undone (the call must fail)."""
    rebuilt: bool
    """Whether the whole core was rebuilt from the image."""


def undo(
    state: MasterState,
    image: MetadataImage,
    failed: list[Record],
    owed: list[Record],
    now: float,
    wall: float,
    *,
    rebuild: Rebuild,
) -> Undone:
    """Bring ``state`` back to ``image`` for everything ``failed`` touched.

    Args:
        state: the core, with the failed change applied.
        image: the records that did reach the journal, folded.
        failed: the records of the change that were not written.
        owed: records already owed from earlier failures (kept unless undone now).
        now: the core's clock.
        wall: the wall clock at ``now`` (pin expiries are journaled on the wall clock).
        rebuild: builds a whole core from ``image`` when the change cannot be undone
            piecemeal.
    """
    keys: dict[str, set[str]] = {}
    pins: set[tuple[str, bool]] = set()
    entangled = False
    # A grant made by the refused call: forgotten and freed (its writer never got it).
    granted = state.take_back_grants(
        {(r["seg"], r["off"], r["len"]) for r in failed if r.get("t") == "hold" and r.get("w")}
    )
    for rec in failed:
        if rec.get("t") == "hold" and (rec["seg"], rec["off"], rec["len"]) in granted:
            continue
        t = rec.get("t")
        if t in _KEYED:
            keys.setdefault(rec["key"], set()).add(t)
        elif t in _PINS:
            pins.add((rec["target"], bool(rec["prefix"])))
        else:  # segments, SSD copies: too entangled to undo piecemeal
            entangled = True
    # A PutEnd that cannot be journaled revokes its write (the writer is told so and
    # writes again), instead of leaving it PROCESSING, holding its space for
    # put_timeout_s and refusing the writer's retry as "already exists".
    ended = {
        k
        for k, types in keys.items()
        if types == {"stored"} and k in image.processing and k not in image.objects
    }
    kept = {
        k
        for k, types in keys.items()
        if types == {"removed"}
        and k in image.processing
        and k not in image.objects
        and k not in state.objects
    }
    if entangled:
        again = ended | kept | {k for r in owed if r.get("t") == "removed" and (k := _about(r))}
        return _rebuild(state, image, again, now, wall, rebuild)
    revoked = _revoke(state, image, ended, now)
    kept |= ended
    pins -= {(k, False) for k in kept}
    redo = {k: _journaled(image, k) for k in keys if k not in kept}
    wanted_pins = {p: _journaled_pin(image, p, now, wall) for p in pins}
    try:
        restore.reconcile(state, redo, wanted_pins, now)
        for key in redo:
            ssd = image.ssd.get(key)
            if ssd and state.exist(key, now):
                state.restore_ssd_copies(key, ssd)
    except (StoreError, RebuildError):
        again = ended | kept | {k for r in owed if r.get("t") == "removed" and (k := _about(r))}
        return _rebuild(state, image, again, now, wall, rebuild)
    state.take_events()
    owe = [r for r in owed if _about(r) not in redo]
    owe += [r for r in failed if _about(r) in kept and _about(r) not in ended] + revoked
    return Undone(state, owe, refused=bool(redo or wanted_pins or ended), rebuilt=False)


def _about(rec: Record) -> str | None:
    key = rec.get("key", rec.get("target"))
    return key if isinstance(key, str) else None


def _journaled(image: MetadataImage, key: str) -> RestoredObject | None:
    # The same choice as a restart (ha.rebuild): a complete version wins.
    if key in image.objects:
        size, replicas = image.objects[key]
        return (key, size, replicas, True)
    if key in image.processing:
        size, replicas = image.processing[key]
        return (key, size, replicas, False)
    return None


def _journaled_pin(
    image: MetadataImage, pin: tuple[str, bool], now: float, wall: float
) -> tuple[bool, float | None] | None:
    rec = image.pins.get(pin)
    if rec is None:
        return None
    if rec.hard or rec.expires_wall is None:
        return (rec.hard, None)
    if rec.expires_wall <= wall:
        return None  # ended meanwhile
    return (False, rec.expires_wall - wall + now)


def _revoke(state: MasterState, image: MetadataImage, keys: set[str], now: float) -> list[Record]:
    """Drop the unfinished writes ``keys``; returns the records owed for them."""
    owed: list[Record] = []
    for key in sorted(keys):
        obj = state.objects.get(key)
        if obj is not None:
            removal_ops.drop(state, key, obj, ev.RemoveReason.REVOKED, now)
        owed.append({"t": "removed", "key": key})
        if (key, False) in image.pins:
            owed.append({"t": "unpin", "target": key, "prefix": False})
    state.take_events()
    return owed


def _rebuild(
    state: MasterState,
    image: MetadataImage,
    unfinished: set[str],
    now: float,
    wall: float,
    build_state: Rebuild,
) -> Undone:
    """The whole core from the image; the unfinished writes dropped so far stay dropped."""
    try:
        fresh = build_state(image, state.config, now, wall, rng=state.rng)
    except (StoreError, RebuildError):
        # The image itself is inconsistent: keep serving what we have, refusing the call.
        return Undone(state, [], refused=True, rebuilt=False)
    # Counters are not journaled; they must not go backwards.
    fresh.counters = dataclasses.replace(state.counters)
    removal_ops.carry_holds(state, fresh, now)
    return Undone(fresh, _revoke(fresh, image, unfinished, now), refused=True, rebuilt=True)
