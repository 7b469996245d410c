"""Follow the store master's events so the prefix index knows what the Store holds.

The prefill workers store each block as one object per layer (``kv/<model>/<hex>/L<l>``,
see ``mooncake_core/worker/service_store.py``); :class:`StoreFeed` understands block
objects (``kv/<model>/<hex>``). :func:`as_block_event` maps the layer objects onto their
block: a block is held once its last layer object is stored (the bridge writes a block's
layers in order, on one thread), and stops being held when any of its layer objects is
removed or loses a replica. Events that are not about objects (segments) pass through.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable

from mooncake_core.conductor.events import CacheEvent
from mooncake_core.conductor.index import PrefixIndex
from mooncake_core.conductor.store_feed import StoreFeed
from mooncake_core.store import Event, ObjectRemoved, ObjectStored, ReplicaDropped

__all__ = ["as_block_event", "follow_store"]

log = logging.getLogger(__name__)


def as_block_event(event: Event, layers: int) -> Event | None:
    """The block-object form of a layer-object event, or None when it says nothing.

    Args:
        event: a store master event.
        layers: model layers (the last layer's object completes a block).
    """
    if not isinstance(event, ObjectStored | ObjectRemoved | ReplicaDropped):
        return event
    base, sep, layer = event.key.rpartition("/L")
    if not sep or not layer.isdigit():
        return None
    if isinstance(event, ObjectStored) and int(layer) != layers - 1:
        return None
    return dataclasses.replace(event, key=base)


async def follow_store(
    address: str,
    secret: bytes | None,
    feed: StoreFeed,
    index: PrefixIndex,
    apply: Callable[[CacheEvent], None],
    layers: int,
    retry_s: float = 1.0,
) -> None:
    """Apply the master's events to the index until cancelled (re-subscribes on errors).

    Objects stored before the subscription are not replayed (no ListKeys resync yet).
    """
    from mooncake_core.store.client.async_master import MasterClient

    while True:
        try:
            async with MasterClient.for_target(address, secret=secret) as mc:
                async for watched in mc.watch_events():
                    ev = as_block_event(watched.event, layers)
                    if ev is None:
                        continue
                    for ce in feed.translate(ev, index):
                        apply(ce)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # master down or restarting: try again
            log.debug("store events from %s: %s", address, exc)
        await asyncio.sleep(retry_s)
