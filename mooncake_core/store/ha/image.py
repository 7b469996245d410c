"""The durable image of the master's metadata, rebuilt from journal records. Sans-IO.

The master's core emits typed events for every change (:mod:`..events`). The service
turns the events that matter after a restart into plain JSON records
(:func:`records_from_events`), journals them (locally or in etcd), and a
:class:`MetadataImage` folds records into the state a new master starts from:

    segments  name -> (client, capacity, transport address, location, state)
    objects   key  -> (size, replicas), in write order (oldest first: the LRU order);
              an SSD-only object has no replica
    ssd       key  -> segments whose node holds an SSD copy of the object
    processing key -> (size, replicas) of writes started and not ended
    pins      (target, is_prefix) -> (hard, wall-clock expiry)
    holds     segment -> {offset: length} of ranges a removal left held for readers
              and no later write has taken: a restored master holds them again
              for ``lease_ttl_s`` (a reader of the previous master may still read)

Writes in progress (PutStart without PutEnd) are journaled too (``started``), without
making PutStart wait for an fsync: when the record made it, the restored master has the
write as PROCESSING (its ``put_timeout_s`` counting from the restart) and the writer's
PutEnd succeeds; when it did not, PutEnd answers OBJECT_NOT_FOUND and the writer writes
again. What is **not** durable, on purpose: read leases, read recency (restored LRU order is write order), client heartbeat times (every
client of a restored segment gets a fresh ``client_ttl_s`` to come back) and counters.

Pin expiries are stored as wall-clock times: the master's monotonic clock means nothing
in another process.

Record types (``s`` is the seq, set by the journal)::

    {"t": "mount", "seg", "client", "cap", "addr", "loc", "ssd"}   ssd: SSD tier bytes (absent: 0)
    {"t": "seg_state", "seg", "state"}        UNMOUNTING | DRAINING | DRAINED | MOUNTED
    {"t": "unmount", "seg"}                   the segment and its replicas are gone
    {"t": "started", "key", "size", "replicas": [[[seg, offset, length], ...], ...]}
    {"t": "stored", "key", "size", "replicas"}   PutEnd (replicas repeated: self-contained)
    {"t": "removed", "key", "held"?, "w"?}       complete or in progress; held: its
                                                 replicas when readers may still read
                                                 them (the ranges stay held); w: held
                                                 for a stalled writer instead
    {"t": "hold", "seg", "off", "len", "w"?}     a held range (snapshots; and, with w,
                                                 a range handed to a replica addition
                                                 or an SSD stage, until an object takes
                                                 it)
    {"t": "replica_dropped", "key", "seg"}       an object with SSD copies stays (SSD-only)
    {"t": "replica_added", "key", "replica": [[seg, offset, length], ...]}   AddReplicaEnd
    {"t": "pin", "target", "prefix", "hard", "expires_wall"}
    {"t": "unpin", "target", "prefix"}
    {"t": "ssd_added", "key", "seg"}             the node of seg holds an SSD copy
    {"t": "ssd_dropped", "key", "seg"}           ... no longer (an object left with no
                                                 replica and no SSD copy is gone)

Offloads and stages in flight are not durable: a restarted master asks again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .. import events as ev
from ..objects import Replica, Slice
from ..segment import SegmentSnapshot

Record = dict[str, Any]


@dataclass(slots=True)
class SegmentRecord:
    """A segment as the image keeps it."""

    client_id: str
    capacity: int
    transport_address: str
    location: str
    state: str = "MOUNTED"
    ssd_capacity: int = 0


@dataclass(frozen=True, slots=True)
class PinRecord:
    """A pin as the image keeps it (expiry on the wall clock, None for hard pins)."""

    hard: bool
    expires_wall: float | None


def _replicas_to_json(replicas: tuple[Replica, ...]) -> list[list[list[Any]]]:
    return [[[s.segment, s.offset, s.length] for s in r] for r in replicas]


def _replicas_from_json(data: list[list[list[Any]]]) -> tuple[Replica, ...]:
    return tuple(tuple(Slice(str(s[0]), int(s[1]), int(s[2])) for s in r) for r in data)


def started_record(key: str, size: int, replicas: tuple[Replica, ...]) -> Record:
    """The journal record of a write that PutStart/Upsert started."""
    return {"t": "started", "key": key, "size": size, "replicas": _replicas_to_json(replicas)}


def writer_hold_records(replica: Replica) -> list[Record]:
    """Journal records of ranges handed to a writer outside any object (a replica being
    added, an SSD stage): a rebuilt master holds them ``put_release_s`` for that writer,
    unless a later record shows an object took them (``_taken``)."""
    return [
        {"t": "hold", "seg": sl.segment, "off": sl.offset, "len": sl.length, "w": True}
        for sl in replica
    ]


def records_from_events(
    events: Iterable[ev.Event],
    wall_minus_mono: float,
    segment_info: Callable[[str], SegmentSnapshot | None],
) -> list[Record]:
    """Translate core events into journal records (events that change nothing durable
    are skipped).

    Args:
        events: drained from ``MasterState.take_events()``, in order.
        wall_minus_mono: ``time.time() - time.monotonic()`` of the master, to turn pin
            expiries into wall-clock times.
        segment_info: the segment's snapshot by name (for the transport address and
            location, which ``SegmentMounted`` does not carry).

    Returns:
        Records without seq numbers, in event order.
    """
    out: list[Record] = []
    for e in events:
        if isinstance(e, ev.ObjectStored):
            out.append(
                {
                    "t": "stored",
                    "key": e.key,
                    "size": e.size,
                    "replicas": _replicas_to_json(e.replicas),
                }
            )
        elif isinstance(e, ev.ObjectRemoved):
            removed: Record = {"t": "removed", "key": e.key}
            if e.held:
                removed["held"] = _replicas_to_json(e.held)
                if e.for_writer:
                    removed["w"] = True
            out.append(removed)
        elif isinstance(e, ev.ReplicaDropped):
            out.append({"t": "replica_dropped", "key": e.key, "seg": e.segment})
        elif isinstance(e, ev.ReplicaAdded):
            out.append(
                {
                    "t": "replica_added",
                    "key": e.key,
                    "replica": _replicas_to_json((e.replica,))[0],
                }
            )
        elif isinstance(e, ev.ObjectPinned):
            exp = None if e.expires_at is None else e.expires_at + wall_minus_mono
            out.append(
                {
                    "t": "pin",
                    "target": e.target,
                    "prefix": e.is_prefix,
                    "hard": e.hard,
                    "expires_wall": exp,
                }
            )
        elif isinstance(e, ev.ObjectUnpinned):
            out.append({"t": "unpin", "target": e.target, "prefix": e.is_prefix})
        elif isinstance(e, ev.SegmentMounted):
            info = segment_info(e.name)
            rec: Record = {
                "t": "mount",
                "seg": e.name,
                "client": e.client_id,
                "cap": e.capacity,
                "addr": info.transport_address if info else "",
                "loc": info.location if info else "cpu:0",
            }
            if info is not None and info.ssd_capacity:
                rec["ssd"] = info.ssd_capacity
            out.append(rec)
        elif isinstance(e, ev.SegmentStateChanged):
            out.append({"t": "seg_state", "seg": e.name, "state": e.state})
        elif isinstance(e, ev.SegmentUnmounted):
            out.append({"t": "unmount", "seg": e.name})
        elif isinstance(e, ev.SsdCopyAdded):
            out.append({"t": "ssd_added", "key": e.key, "seg": e.segment})
        elif isinstance(e, ev.SsdCopyDropped):
            out.append({"t": "ssd_dropped", "key": e.key, "seg": e.segment})
        elif isinstance(e, ev.StageRequested):
            # The node fills the range from its disk; a rebuilt master must not hand it
            # out while the node may still be writing (the stage itself is asked again).
            out.extend(writer_hold_records(e.replica))
        # OffloadRequested: work in flight, asked again after a restart.
        # ClientExpired: its SegmentUnmounted records already say everything.
    return out


class MetadataImage:
    """Segments, complete objects and pins, folded from records.

    Applying is tolerant: a record naming an unknown key or segment changes nothing and
    is counted in :attr:`ignored` (a snapshot and a log may overlap after a crash).
    """

    def __init__(self) -> None:
        self.segments: dict[str, SegmentRecord] = {}
        self.objects: dict[str, tuple[int, tuple[Replica, ...]]] = {}
        self.processing: dict[str, tuple[int, tuple[Replica, ...]]] = {}
        self.pins: dict[tuple[str, bool], PinRecord] = {}
        self.ssd: dict[str, tuple[str, ...]] = {}
        self.holds: dict[str, dict[int, int]] = {}
        self.writer_holds: set[tuple[str, int]] = set()
        """(segment, offset) of the holds kept for a stalled writer, not for readers."""
        self.applied_seq = 0
        self.ignored = 0

    def held_ranges(self, *, for_writer: bool | None = None) -> list[tuple[str, int, int]]:
        """``(segment, offset, length)`` of every range the image holds, sorted; with
        ``for_writer``, only those held for a stalled writer (True) or for readers
        (False)."""
        return sorted(
            (n, o, ln)
            for n, held in self.holds.items()
            for o, ln in held.items()
            if for_writer is None or ((n, o) in self.writer_holds) == for_writer
        )

    def _hold(self, replicas: Iterable[Replica], for_writer: bool = False) -> None:
        for r in replicas:
            for sl in r:
                if sl.segment in self.segments:
                    self.holds.setdefault(sl.segment, {})[sl.offset] = sl.length
                    if for_writer:  # a reader's hold never shortens a writer's
                        self.writer_holds.add((sl.segment, sl.offset))

    def _forget_holds(self, segment: str) -> None:
        self.holds.pop(segment, None)
        self.writer_holds = {h for h in self.writer_holds if h[0] != segment}

    def _taken(self, replicas: Iterable[Replica]) -> None:
        # A write placed on (part of) a held range: the live master had released it.
        if not self.holds:
            return
        for r in replicas:
            for sl in r:
                held = self.holds.get(sl.segment)
                if not held:
                    continue
                end = sl.offset + sl.length
                for off in [o for o, ln in held.items() if o < end and o + ln > sl.offset]:
                    del held[off]
                    self.writer_holds.discard((sl.segment, off))
                if not held:
                    del self.holds[sl.segment]

    def apply_all(self, records: Iterable[Record]) -> None:
        """Apply records in order."""
        for rec in records:
            self.apply(rec)

    def apply(self, rec: Record) -> None:
        """Fold one record into the image.

        Raises:
            ValueError: an unknown record type (a newer master's journal).
        """
        t = rec.get("t")
        if t == "stored":
            key = rec["key"]
            self.objects.pop(key, None)
            self.processing.pop(key, None)
            self.ssd.pop(key, None)  # a new version has no SSD copy yet
            replicas = _replicas_from_json(rec["replicas"])
            self._taken(replicas)
            self.objects[key] = (int(rec["size"]), replicas)
        elif t == "started":
            replicas = _replicas_from_json(rec["replicas"])
            self._taken(replicas)
            self.processing[rec["key"]] = (int(rec["size"]), replicas)
        elif t == "removed":
            key = rec["key"]
            if "held" in rec:
                self._hold(_replicas_from_json(rec["held"]), bool(rec.get("w")))
            self.ssd.pop(key, None)
            if self.objects.pop(key, None) is None and self.processing.pop(key, None) is None:
                self.ignored += 1
        elif t == "replica_dropped":
            self._drop_replica(rec["key"], rec["seg"])
        elif t == "replica_added":
            found = self.objects.get(rec["key"])
            if found is None:
                self.ignored += 1
            else:
                added = _replicas_from_json([rec["replica"]])
                self._taken(added)
                self.objects[rec["key"]] = (found[0], found[1] + added)
        elif t == "hold":
            if rec["seg"] in self.segments:
                self.holds.setdefault(rec["seg"], {})[int(rec["off"])] = int(rec["len"])
                if rec.get("w"):
                    self.writer_holds.add((rec["seg"], int(rec["off"])))
            else:
                self.ignored += 1
        elif t == "pin":
            self.pins[(rec["target"], bool(rec["prefix"]))] = PinRecord(
                bool(rec["hard"]), rec.get("expires_wall")
            )
        elif t == "unpin":
            if self.pins.pop((rec["target"], bool(rec["prefix"])), None) is None:
                self.ignored += 1
        elif t == "mount":
            self._forget_holds(rec["seg"])  # a new allocator under that name
            self.segments[rec["seg"]] = SegmentRecord(
                rec["client"],
                int(rec["cap"]),
                rec.get("addr", ""),
                rec.get("loc", "cpu:0"),
                ssd_capacity=int(rec.get("ssd", 0)),
            )
        elif t == "ssd_added":
            key, seg_name = rec["key"], rec["seg"]
            have = self.ssd.get(key, ())
            if key not in self.objects or seg_name not in self.segments:
                self.ignored += 1
            elif seg_name not in have:
                self.ssd[key] = (*have, seg_name)
        elif t == "ssd_dropped":
            self._drop_ssd(rec["key"], rec["seg"])
        elif t == "seg_state":
            seg = self.segments.get(rec["seg"])
            if seg is None:
                self.ignored += 1
            else:
                seg.state = rec["state"]
        elif t == "unmount":
            self._unmount(rec["seg"])
        else:
            raise ValueError(f"unknown journal record type {t!r} (seq {rec.get('s')})")
        seq = rec.get("s", 0)
        if isinstance(seq, int) and seq > self.applied_seq:
            self.applied_seq = seq

    def _drop_replica(self, key: str, segment: str) -> None:
        table = self.objects if key in self.objects else self.processing
        found = table.get(key)
        if found is None:
            self.ignored += 1
            return
        size, replicas = found
        keep = tuple(r for r in replicas if all(s.segment != segment for s in r))
        if keep or (table is self.objects and self.ssd.get(key)):
            table[key] = (size, keep)  # no replica left but SSD copies: SSD-only
        else:
            del table[key]

    def _drop_ssd(self, key: str, segment: str, *, forget_empty: bool = False) -> None:
        have = self.ssd.get(key)
        if not have or segment not in have:
            self.ignored += 1
            return
        rest = tuple(s for s in have if s != segment)
        if rest:
            self.ssd[key] = rest
            return
        del self.ssd[key]
        found = self.objects.get(key)
        # After an ssd_dropped record the core's "removed" follows when nothing is left;
        # an unmount cleans up by itself.
        if forget_empty and found is not None and not found[1]:
            del self.objects[key]

    def _unmount(self, name: str) -> None:
        if self.segments.pop(name, None) is None:
            self.ignored += 1
            return
        self._forget_holds(name)
        for key in [k for k, segs in self.ssd.items() if name in segs]:
            self._drop_ssd(key, name, forget_empty=True)
        # The core reports lost replicas before the unmount; this catches any left over.
        for table in (self.objects, self.processing):
            for key in [k for k, (_, reps) in table.items() if _touches(reps, name)]:
                self._drop_replica(key, name)

    def records(self) -> Iterator[Record]:
        """Records that rebuild this image from nothing (a snapshot's content)."""
        for name, seg in self.segments.items():
            rec: Record = {
                "t": "mount",
                "seg": name,
                "client": seg.client_id,
                "cap": seg.capacity,
                "addr": seg.transport_address,
                "loc": seg.location,
            }
            if seg.ssd_capacity:
                rec["ssd"] = seg.ssd_capacity
            yield rec
            if seg.state != "MOUNTED":
                yield {"t": "seg_state", "seg": name, "state": seg.state}
        for key, (size, replicas) in self.objects.items():
            yield {"t": "stored", "key": key, "size": size, "replicas": _replicas_to_json(replicas)}
            for seg_name in self.ssd.get(key, ()):
                yield {"t": "ssd_added", "key": key, "seg": seg_name}
        for key, (size, replicas) in self.processing.items():
            yield started_record(key, size, replicas)
        for (target, prefix), pin in self.pins.items():
            yield {
                "t": "pin",
                "target": target,
                "prefix": prefix,
                "hard": pin.hard,
                "expires_wall": pin.expires_wall,
            }
        for name, offset, length in self.held_ranges():
            hold: Record = {"t": "hold", "seg": name, "off": offset, "len": length}
            if (name, offset) in self.writer_holds:
                hold["w"] = True
            yield hold


def _touches(replicas: tuple[Replica, ...], segment: str) -> bool:
    return any(s.segment == segment for r in replicas for s in r)
