"""Resynchronise the prefix index's store tier from the master's key listing.

Events alone drift: blocks stored before the conductor started are never replayed, and
an event lost while the master was unreachable stays lost. :class:`StoreResync` lists the
block-layer objects under ``kv/<model>/`` page by page (``ListKeys``), counts a block as
held only when all its layer objects ``kv/<model>/<hex16>/L<l>`` are complete, asks the
master where each such block lives (``Stat`` of its last layer, the same replica the event
path uses), and replaces each store location's view with :meth:`Conductor.resync`, which
counts the difference as drift.

The listing runs as awaits on the event loop between scheduling decisions; only the final
``resync`` calls touch the Conductor, synchronously, so no lock is needed. An event that
arrives between the listing and the apply may be overwritten by the older listing; the
next round (``resync_interval_s``) repairs it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mooncake_core.conductor.hashing import parse_block_store_key
from mooncake_core.store import ObjectState

if TYPE_CHECKING:
    from mooncake_core.conductor.scheduler import Conductor
    from mooncake_core.conductor.service.links import WorkerLink
    from mooncake_core.conductor.store_feed import StoreFeed
    from mooncake_core.store.client.async_master import MasterClient

__all__ = ["ResyncStats", "StoreResync", "list_store_blocks", "list_worker_blocks"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ResyncStats:
    """Counters of the store resync loop, for ``/health``.

    Attributes:
        runs: completed store resyncs.
        errors: rounds that failed (master unreachable, ...).
        last_at: wall time of the last completed round, or None.
        last_blocks: complete blocks the last round found.
        last_added, last_removed: drift the last round corrected.
    """

    runs: int
    errors: int
    last_at: float | None
    last_blocks: int
    last_added: int
    last_removed: int


async def list_store_blocks(
    mc: MasterClient,
    model: str,
    layers: int,
    feed: StoreFeed,
    page: int = 1000,
    concurrency: int = 16,
) -> dict[str, set[int]]:
    """Complete KV blocks the Store holds, grouped by index location.

    Args:
        mc: an open master client.
        model: the served model's name (the key prefix is ``kv/<model>/``).
        layers: model layers; a block is complete when ``L0`` .. ``L<layers-1>`` exist.
        feed: maps a replica's segment to the index location.
        page: ListKeys page size.
        concurrency: Stat calls in flight at once.

    Returns:
        ``{location: block keys}``.
    """
    seen: dict[int, set[int]] = defaultdict(set)
    async for key in _complete_keys(mc, f"kv/{model}/", page):
        base, sep, layer = key.rpartition("/L")
        parsed = parse_block_store_key(base) if sep and layer.isdigit() else None
        if parsed is None or parsed[0] != model or int(layer) >= layers:
            continue
        seen[parsed[1]].add(int(layer))
    complete = sorted(k for k, ls in seen.items() if len(ls) == layers)
    out: dict[str, set[int]] = defaultdict(set)
    sem = asyncio.Semaphore(concurrency)

    async def locate(block: int) -> None:
        async with sem:
            try:
                info = await mc.stat(f"kv/{model}/{block:016x}/L{layers - 1}")
            except Exception as exc:  # removed since the listing: not held
                log.debug("resync stat %016x: %s", block, exc)
                return
        for loc in {feed.location_of(r[0].segment) for r in info.replicas if r}:
            out[loc].add(block)

    await asyncio.gather(*(locate(b) for b in complete))
    return dict(out)


async def _complete_keys(mc: MasterClient, prefix: str, page: int) -> AsyncIterator[str]:
    """Keys under ``prefix`` whose objects are complete (readable), page by page."""
    after = ""
    while True:
        res = await mc.list_keys(prefix, after, page)
        for e in res.entries:
            if e.state == ObjectState.COMPLETE:
                yield e.key
        if res.next_start_after is None:
            return
        after = res.next_start_after


async def list_worker_blocks(
    link: WorkerLink, page: int = 4096, timeout: float = 10.0
) -> tuple[str, set[int]]:
    """The block keys a prefill worker's prefix cache holds: ``(location, keys)``.

    Raises:
        grpc.RpcError: the worker did not answer (or predates ``ListCachedBlocks``).
    """
    from mooncake_core.rpc import worker_pb2 as pb

    keys: set[int] = set()
    req = pb.ListCachedBlocksRequest(limit=page)
    while True:
        rep = await link.stub.ListCachedBlocks(req, timeout=timeout, metadata=link.metadata)
        keys.update(rep.keys)
        if not rep.more or not rep.keys:
            return rep.location or link.name, keys
        req = pb.ListCachedBlocksRequest(start_after=rep.keys[-1], has_start=True, limit=page)


class StoreResync:
    """Resyncs the Conductor's store tier on start and every ``resync_interval_s``.

    Args:
        conductor: the live Conductor (only touched from the event loop).
        address: the store master's ``host:port``.
        secret: cluster secret, or None.
        feed: the store feed (model name, tier, segment to location).
        layers: model layers.
        page: ListKeys page size.
        links: prefill worker links whose HBM tier is resynced too (``ListCachedBlocks``).
    """

    def __init__(
        self,
        conductor: Conductor,
        address: str,
        secret: bytes | None,
        feed: StoreFeed,
        layers: int,
        page: int = 1000,
        links: dict[str, WorkerLink] | None = None,
    ) -> None:
        self.conductor = conductor
        self.address = address
        self.secret = secret
        self.feed = feed
        self.layers = layers
        self.page = page
        self.links = links or {}
        self.worker_runs = 0
        """Completed worker HBM resyncs (all workers together)."""
        self.worker_errors = 0
        self._runs = 0
        self._errors = 0
        self._last_at: float | None = None
        self._last_blocks = 0
        self._last_drift = (0, 0)

    @property
    def stats(self) -> ResyncStats:
        """Counters so far."""
        return ResyncStats(
            self._runs,
            self._errors,
            self._last_at,
            self._last_blocks,
            self._last_drift[0],
            self._last_drift[1],
        )

    async def run_once(self) -> tuple[int, int]:
        """List the Store and replace every store location's view; ``(added, removed)``.

        Raises:
            grpc.RpcError, OSError: the master is unreachable (nothing is changed).
        """
        from mooncake_core.store.client.async_master import MasterClient

        async with MasterClient.for_target(self.address, secret=self.secret) as mc:
            held = await list_store_blocks(
                mc, self.feed.model, self.layers, self.feed, page=self.page
            )
        tier = self.feed.tier
        # Store locations the index believes in but the listing did not show are stale.
        locations = set(held) | {loc for loc, t in self.conductor.index.holders() if t == tier}
        now = time.time()
        added = removed = 0
        for loc in sorted(locations):
            a, r = self.conductor.resync(loc, tier, held.get(loc, ()), now)
            added, removed = added + a, removed + r
        self._runs += 1
        self._last_at = now
        self._last_blocks = len(set().union(*held.values())) if held else 0
        self._last_drift = (added, removed)
        if added or removed:
            log.info("store resync: %d blocks, drift +%d -%d", self._last_blocks, added, removed)
        return added, removed

    def due(self, now: float) -> bool:
        """Whether a round is due: never run, or a store location is due per ``resync_due``."""
        if self._last_at is None or now - self._last_at >= self.conductor.config.resync_interval_s:
            return True
        tier = self.feed.tier
        stores = {loc for loc, t in self.conductor.index.holders() if t == tier}
        return bool(stores & set(self.conductor.resync_due(now)))

    async def resync_workers(self, names: list[str]) -> None:
        """Resync the HBM tier of the named prefill workers that are up (failures counted)."""
        from mooncake_core.conductor.events import Tier

        for name in names:
            link = self.links.get(name)
            if link is None or link.role != "prefill" or not link.up:
                continue
            try:
                location, keys = await list_worker_blocks(link)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # worker down: its Watch handles membership
                self.worker_errors += 1
                log.debug("HBM resync of %s: %s", name, exc)
                continue
            self.conductor.resync(location, Tier.HBM, keys, time.time())
            self.worker_runs += 1

    async def try_once(self) -> None:
        """:meth:`run_once`, counting (not raising) a failure."""
        try:
            await self.run_once()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # master down: the next round tries again
            self._errors += 1
            log.warning("store resync from %s failed: %s", self.address, exc)

    async def loop(self, tick_s: float = 1.0) -> None:
        """Run a round whenever one is due, until cancelled."""
        while True:
            now = time.time()
            if self.due(now):
                await self.try_once()
            if self.links:
                await self.resync_workers(self.conductor.resync_due(now))
            await asyncio.sleep(tick_s)
