"""Mounting and heartbeats of a store client, on a background asyncio loop.

The client's API is synchronous, but ``MasterClient.keep_alive`` is a coroutine that
must keep running between user calls, so it lives on its own thread's event loop. Only
mounting, remounting and heartbeats run there; data-path calls use the blocking
``SyncMaster`` from the user's thread (cheaper than a hop onto this loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import StoreError
from .async_master import MasterClient

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Mount:
    """A segment to mount: name, bytes, Transfer Engine address, memory location, and
    the bytes of the SSD tier behind it (0: none)."""

    name: str
    size: int
    transport_address: str
    location: str
    ssd_capacity: int = 0


class Heartbeat:
    """Mounts segments, heartbeats until stopped, remounts when the master forgot us.

    Args:
        master: ``host:port`` of the master.
        client_id: this client's identity.
        secret: cluster secret or None.
        mounts: segments to mount (mounted again after a master restart).
        interval_s: heartbeat period.
        timeout_s: deadline of each master call.
    """

    def __init__(
        self,
        master: str,
        client_id: str,
        secret: bytes | None,
        mounts: Sequence[Mount],
        interval_s: float,
        timeout_s: float,
    ) -> None:
        self._args = (master, client_id, secret, timeout_s)
        self.mounts = tuple(mounts)
        self._interval = interval_s
        self._timeout = timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"store-heartbeat-{client_id}", daemon=True
        )
        self._mc: MasterClient | None = None
        self._task: asyncio.Task[None] | None = None
        self.remounts = 0
        """How many times the master forgot this client and the segments were remounted."""

    def start(self) -> None:
        """Start the loop, mount every segment, start heartbeating.

        Raises:
            StoreError: a mount was refused (e.g. the name is taken) or the master is
                unreachable; nothing stays mounted or running then.
        """
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(), self._loop).result()
        except BaseException:
            self.stop(unmount=True)
            raise

    async def _start(self) -> None:
        master, client_id, secret, timeout_s = self._args
        from ..ha.discovery import split_master_url

        endpoint, cluster = split_master_url(master)
        if endpoint is None:
            self._mc = MasterClient(master, client_id=client_id, secret=secret, timeout_s=timeout_s)
        else:  # HA: mounts and heartbeats follow the leader through etcd
            self._mc = await MasterClient.from_etcd(
                endpoint, cluster=cluster, client_id=client_id, secret=secret, timeout_s=timeout_s
            )
        for m in self.mounts:
            await _mount(self._mc, m)
        self._task = asyncio.get_running_loop().create_task(
            self._mc.keep_alive(self._interval, on_forgotten=self._remount)
        )

    async def _remount(self) -> bool:
        """Mount every segment again; False when one was refused (retried next beat).

        Mounting a segment this client already holds is a no-op on the master, so a
        retry after a partial success mounts only what is missing.
        """
        if self._mc is None:  # keep_alive only runs after _start set it
            return True
        ok = True
        for m in self.mounts:
            try:
                await _mount(self._mc, m)
                log.warning("master forgot client %s: remounted %s", self._mc.client_id, m.name)
            except StoreError as exc:
                ok = False
                log.warning("remount of %s failed (retried at the next beat): %s", m.name, exc)
        if ok:
            self.remounts += 1
        return ok

    def stop(self, *, unmount: bool) -> None:
        """Stop heartbeating; unmount the segments first when ``unmount`` (best effort)."""
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._stop(unmount), self._loop).result(
                self._timeout + 5
            )
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()

    async def _stop(self, unmount: bool) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._mc is None:
            return
        if unmount:
            for m in self.mounts:
                try:
                    await self._mc.unmount_segment(m.name)
                except StoreError as exc:
                    log.info("unmount of %s: %s", m.name, exc)
        await self._mc.close()


async def _mount(mc: MasterClient, m: Mount) -> None:
    if m.ssd_capacity:
        await mc.mount_segment(
            m.name,
            m.size,
            transport_address=m.transport_address,
            location=m.location,
            ssd_capacity=m.ssd_capacity,
        )
    else:  # the plain call, understood by masters without an SSD tier too
        await mc.mount_segment(
            m.name, m.size, transport_address=m.transport_address, location=m.location
        )
