"""Drains started from the dashboard: one asyncio task per node, with progress.

A drain marks the node's segments DRAINING through the master (no new placement), then
scans every object to report what is still on the node and what exists only there
(:mod:`mooncake_core.cluster.drain`). The scan's progress is what the Nodes page shows.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mooncake_core.store.master_client import MasterClient

__all__ = ["DrainJob", "DrainJobs"]


@dataclass(frozen=True, slots=True)
class DrainJob:
    """Progress of one drain.

    Attributes:
        node: Store node.
        state: ``running``, ``done`` or ``failed``.
        started_at: Wall time it started.
        segments: Segments marked DRAINING.
        scanned: Objects scanned so far.
        total: Objects to scan (an estimate until done).
        on_node: Objects with a replica on the node (when done).
        sole: Keys whose only replicas are on the node (when done; at most 100 listed).
        sole_count: How many such keys.
        segment_states: States of the node's segments after the scan.
        error: Why it failed.
    """

    node: str
    state: str
    started_at: float
    segments: tuple[str, ...] = ()
    scanned: int = 0
    total: int = 0
    on_node: int | None = None
    sole: tuple[str, ...] = ()
    sole_count: int | None = None
    segment_states: tuple[str, ...] = field(default_factory=tuple)
    error: str | None = None


class DrainJobs:
    """The drains of this dashboard process, newest state per node."""

    def __init__(self) -> None:
        self.jobs: dict[str, DrainJob] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def get(self, node: str) -> DrainJob | None:
        """The last drain of ``node`` (``None``: never drained from here)."""
        return self.jobs.get(node)

    async def start(self, mc: MasterClient, node: str, now: float) -> DrainJob:
        """Mark ``node``'s segments DRAINING and start the scan in the background.

        Returns:
            The job (state ``running``); a drain already running is returned as is.

        Raises:
            ValueError: No segment of ``node`` is mounted.
            StoreError: The master refused.
        """
        from mooncake_core.cluster.drain import drain_node

        cur = self.jobs.get(node)
        if cur is not None and cur.state == "running":
            return cur
        segs = await drain_node(mc, node)
        job = DrainJob(node=node, state="running", started_at=now, segments=tuple(segs))
        self.jobs[node] = job
        task = asyncio.get_running_loop().create_task(self._scan(mc, node))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    async def _scan(self, mc: MasterClient, node: str) -> None:
        from mooncake_core.cluster.drain import scan_node

        def progress(done: int, total: int) -> None:
            self.jobs[node] = replace(self.jobs[node], scanned=done, total=total)

        try:
            scan = await scan_node(mc, node, progress)
        except Exception as exc:  # shown on the page; the dashboard keeps running
            self.jobs[node] = replace(
                self.jobs[node], state="failed", error=f"{type(exc).__name__}: {exc}"[:300]
            )
            return
        self.jobs[node] = replace(
            self.jobs[node],
            state="done",
            scanned=scan.scanned,
            total=scan.scanned,
            on_node=scan.on_node,
            sole=scan.sole[:100],
            sole_count=len(scan.sole),
            segment_states=scan.states,
        )

    async def close(self) -> None:
        """Cancel running scans."""
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
