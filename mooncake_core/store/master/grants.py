"""Grants: the space of a writer's next put, handed out ahead. Sans-IO.

A put is PutStart (the master places the replicas), the transfer, PutEnd: two
exchanges with the master around the bytes. A writer that puts objects of one size
(KV cache blocks are) is granted, in the reply that completes a put, the replicas of
its next put of that size; that put is the transfer, then one :meth:`GrantsApi.
put_commit` naming the grant and the key, which installs and completes the object at
once (docs/store.md, "Grants"). A writer of batches of one size is granted its next
batch the same way (:meth:`GrantsApi.grant_batch`, all or none, one grant per put)
and commits it with :meth:`GrantsApi.batch_put_commit`.

The rules that keep a grant as safe as a PutStart:

- A grant is allocated space no other object gets while it lives, never by evicting
  (none when the space is not free, or past the eviction high watermark), at most
  :data:`MAX_PER_CLIENT` per client, of at most ``put_grant_max_bytes``.
- Its writer starts no transfer into it after ``put_timeout_s`` (as for a PutStart);
  the master forgets it then and holds its ranges until ``put_release_s`` after it was
  handed out (a writer that stalled mid-transfer lands in its own range). The service
  journals a grant as a writer hold, so a rebuilt master holds it as long.
- A writer that will not use a grant says so (``release``): freed at once, as a
  revoked write is.
- Committing checks everything a PutStart checks about the key (valid, not present)
  before it changes anything; a refused commit leaves the grant for another put.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import events as ev
from ..errors import ConflictError, ErrorCode, StoreError
from ..objects import ObjectMeta, ObjectState, Replica, Slice
from ..placement import allocate_in, healthy
from ..results import ReplicateConfig
from ..validation import check_key, validate_put
from . import space
from . import writes as write_ops
from .core import MasterCore
from .eviction import Placer
from .tables import Grant

MAX_PER_CLIENT = 4
"""Grants one client may hold at once (one per thread that puts, for a few threads)."""

MAX_BATCH = 256
"""Objects the batch grants of one client may cover at once (its next batch)."""


def grant(
    ms: MasterCore, client_id: str, size: int, cfg: ReplicateConfig, now: float
) -> tuple[int, tuple[Replica, ...]] | None:
    """Body of :meth:`GrantsApi.grant_put`."""
    if not 0 < size <= ms.config.put_grant_max_bytes:
        return None
    if ms.grants.count(client_id) >= MAX_PER_CLIENT:
        return None
    segs = ms.segments.allocatable()
    if not segs:
        return None
    try:
        n = validate_put(ms.config, "grant", size, client_id, cfg, len(segs))
    except StoreError:
        return None
    total = ms.segments.capacity()
    if ms.segments.used() + size * n > ms.config.eviction_high_watermark * total:
        return None  # a grant never makes anything be evicted
    replicas = Placer(ms, segs, client_id, cfg).place(size, n)
    if replicas is None:
        return None
    return ms.grants.add(Grant(client_id, size, replicas, cfg, now)), replicas


def grant_batch(
    ms: MasterCore, client_id: str, size: int, count: int, cfg: ReplicateConfig, now: float
) -> list[tuple[int, tuple[Replica, ...]]]:
    """Body of :meth:`GrantsApi.grant_batch`."""
    limit = ms.config.put_grant_max_bytes
    if not (0 < size <= limit and 0 < count <= MAX_BATCH) or size * count > MAX_PER_CLIENT * limit:
        return []
    if ms.grants.count(client_id, batch=True) + count > MAX_BATCH:
        return []
    segs = ms.segments.allocatable()
    if not segs:
        return []
    try:
        n = validate_put(ms.config, "grant", size, client_id, cfg, len(segs))
    except StoreError:
        return []
    total = ms.segments.capacity()
    if ms.segments.used() + size * n * count > ms.config.eviction_high_watermark * total:
        return []  # grants never make anything be evicted
    placer = Placer(ms, segs, client_id, cfg)
    plain = write_ops.plain(ms, cfg, client_id) and size <= ms.config.max_slice_size
    placed = _extent(placer, size, count) if plain else None
    if placed is None:
        placed = []
        place_plain = write_ops.plain_place(placer) if plain else None
        for _ in range(count):
            if place_plain is not None:
                p = place_plain(size)
                r = None if p is None else p[1]
            else:
                r = placer.place(size, n)
            if r is None:
                break
            placed.append(r)
    grants = [Grant(client_id, size, r, cfg, now, batch=True) for r in placed]
    if len(grants) < count:  # all or none: a batch is written as one
        for g in grants:
            space.free_grant(ms, g, None)
        return []
    return [(ms.grants.add(g), g.replicas) for g in grants]


def _extent(placer: Placer, size: int, count: int) -> list[tuple[Replica, ...]] | None:
    """A batch's plain grants cut from one free range of a segment the strategy picks
    for all of them (one allocation instead of ``count``; the allocator tracks no
    allocated ranges, so each object's range is freed alone later). None when no
    usable segment has such a range (then they are placed one by one)."""
    pool = healthy(placer.segs, 1, placer.ctx)
    cands = [s for s in pool if s.allocator.fits(s.allocator.rounded(size) * count)]
    if not cands:
        return None
    seg = placer.strategy.choose(cands, size * count, placer.ctx)
    step = seg.allocator.rounded(size)
    start = allocate_in(seg, step * count)
    name = seg.name
    return [((Slice(name, start + k * step, size),),) for k in range(count)]


def batch_commit(
    ms: MasterCore,
    client_id: str,
    keys: Sequence[str],
    grant_ids: Sequence[int],
    size: int,
    now: float,
) -> list[StoreError | None]:
    """Body of :meth:`GrantsApi.batch_put_commit`."""
    # The common commit (an unpinned grant of one replica of one slice, a key whose
    # checks surely pass, no SSD tier) stored as commit() would, without its layers;
    # any other item takes commit()'s path, which raises as documented.
    grants, objects, tier = ms.grants, ms.objects, ms.tier
    max_key = ms.config.max_key_length
    fast = not ms.segments.any_ssd
    out: list[StoreError | None] = []
    for key, gid in zip(keys, grant_ids, strict=True):
        g = grants.get(gid)
        if (
            fast
            and g is not None
            and g.client_id == client_id
            and g.size == size
            and len(g.replicas) == 1
            and len(g.replicas[0]) == 1
            and not g.config.hard_pin
            and not g.config.soft_pin
            and type(key) is str
            and 0 < len(key) <= max_key
            and key.isascii()
            and key not in objects
        ):
            seg = ms.segments.find(g.replicas[0][0].segment)
            if seg is not None:
                grants.pop(gid)
                obj = ObjectMeta(size, g.replicas, client_id, now)
                obj.state = ObjectState.COMPLETE
                obj.token = tier.new_token()
                objects.add(key, obj)
                seg.keys.add(key)
                tier.changes += 1
                ms.events.append(ev.ObjectStored(now, key, size, g.replicas))
                out.append(None)
                continue
        try:
            commit(ms, client_id, key, gid, size, now)
            out.append(None)
        except StoreError as exc:
            out.append(exc)
    return out


def commit(ms: MasterCore, client_id: str, key: str, grant_id: int, size: int, now: float) -> None:
    """Body of :meth:`GrantsApi.put_commit` for a grant."""
    g = ms.grants.get(grant_id)
    if g is None or g.client_id != client_id or g.size != size:
        raise ConflictError(
            ErrorCode.STALE,
            f"put {key!r}: grant {grant_id} is not held by this client for {size} bytes "
            "(expired, released, or handed out by another master); put it again",
        )
    check_key(key, ms.config.max_key_length)
    write_ops.refuse_existing(ms, key)
    ms.grants.pop(grant_id)
    write_ops.install(ms, key, size, g.replicas, client_id, g.config, now)
    write_ops.put_end(ms, key, now)


def release(ms: MasterCore, client_id: str, grant_id: int) -> bool:
    """Body of :meth:`GrantsApi.release_grant`."""
    g = ms.grants.get(grant_id)
    if g is None or g.client_id != client_id:
        return False
    ms.grants.pop(grant_id)
    space.free_grant(ms, g, None)
    return True


def discard_stale(ms: MasterCore, now: float) -> int:
    """Body of :meth:`GrantsApi.discard_stale_grants`."""
    stale = ms.grants.pop_started_before(now - ms.config.put_timeout_s)
    for g in stale:
        space.free_grant(ms, g, space.writer_hold(ms, g.started, now))
    return len(stale)


class GrantsApi(MasterCore):
    """Grants: the space of a writer's next put, ahead (see the module).

    Part of :class:`~.state.MasterState`.
    """

    def grant_put(
        self, client_id: str, size: int, config: ReplicateConfig | None, now: float
    ) -> tuple[int, tuple[Replica, ...]] | None:
        """Allocate the replicas of ``client_id``'s next put of ``size`` bytes.

        Returns:
            ``(grant id, replicas)``, or None when no grant is given (grants off or the
            size above ``put_grant_max_bytes``, the client holds :data:`MAX_PER_CLIENT`,
            the options invalid, no free space without evicting, or the store past its
            eviction high watermark). Never raises: a grant is an offer.
        """
        return grant(self, client_id, size, config or ReplicateConfig(), now)

    def put_commit(self, client_id: str, key: str, grant_id: int, size: int, now: float) -> None:
        """Store ``key`` at the replicas of grant ``grant_id`` (written by its writer),
        readable at once: PutStart and PutEnd in one step.

        Raises:
            ConflictError: STALE, the grant is not this client's for ``size`` bytes
                (expired, released, unknown to this master; write the object again
                with a PutStart); OBJECT_ALREADY_EXISTS, the key exists (the grant
                stays for another put).
            InvalidArgumentError: a bad key (the grant stays).
        """
        commit(self, client_id, key, grant_id, size, now)

    def grant_batch(
        self, client_id: str, size: int, count: int, config: ReplicateConfig | None, now: float
    ) -> list[tuple[int, tuple[Replica, ...]]]:
        """Allocate the replicas of ``client_id``'s next batch: ``count`` puts of
        ``size`` bytes, one grant each, as :meth:`grant_put` would.

        Returns:
            ``count`` ``(grant id, replicas)``, or ``[]`` when not all of them can be
            given: the grant rules of :meth:`grant_put` for each, at most
            :data:`MAX_BATCH` objects in a client's batch grants and ``size x count``
            within :data:`MAX_PER_CLIENT` times ``put_grant_max_bytes``. Never raises.
        """
        return grant_batch(self, client_id, size, count, config or ReplicateConfig(), now)

    def batch_put_commit(
        self, client_id: str, keys: Sequence[str], grant_ids: Sequence[int], size: int, now: float
    ) -> list[StoreError | None]:
        """:meth:`put_commit` of each key at its grant (``grant_ids`` pairs with
        ``keys``); ``None`` where it was stored, else its error (that grant stays)."""
        return batch_commit(self, client_id, keys, grant_ids, size, now)

    def release_grant(self, client_id: str, grant_id: int) -> bool:
        """Free grant ``grant_id`` of ``client_id`` now (its writer will not write it);
        False if it is not held (expired or unknown)."""
        return release(self, client_id, grant_id)

    def discard_stale_grants(self, now: float) -> int:
        """Forget the grants handed out ``put_timeout_s`` ago or earlier; their ranges
        are held until ``put_release_s`` after that. Returns how many."""
        return discard_stale(self, now)

    def granted_ranges(self) -> list[tuple[str, int, int]]:
        """``(segment, offset, length)`` of every live grant's slices, sorted."""
        return sorted(sl for g in self.grants for sl in g.slices)

    def grant_count(self) -> int:
        """Grants held now (all clients)."""
        return len(self.grants)

    def take_back_grants(self, ranges: set[tuple[str, int, int]]) -> set[tuple[str, int, int]]:
        """Forget and free the grants lying wholly in ``ranges`` (``(segment, offset,
        length)``): their journal records were not written, so the call that made them
        is refused and no writer has them. Returns the ranges they held."""
        out: set[tuple[str, int, int]] = set()
        for g in self.grants.pop_within(ranges):
            space.free_grant(self, g, None)
            out.update(g.slices)
        return out
