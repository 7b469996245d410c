"""Drains started from the dashboard: one asyncio task per node, with progress.

The dashboard runs the same core path as ``mooncake node drain``
(:mod:`mooncake_core.cluster.drain`): mark the node's segments DRAINING
(:func:`drain_node`), move every object off it (:func:`move_off`: objects with no
replica elsewhere are copied first by a :class:`~mooncake_core.cluster.replica_copy.
ReplicaCopier`, then the node's replicas are dropped), then wait for readers' leases to
end and the segments to turn DRAINED. This module only keeps the job's state for the
Nodes page; no drain logic lives here.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from mooncake_core.cluster.drain import MoveStopped

if TYPE_CHECKING:
    from mooncake_core.cluster.replica_copy import ReplicaCopier
    from mooncake_core.store.client.async_master import MasterClient

__all__ = ["DrainJob", "DrainJobs"]

_FAILED_LISTED = 100


@dataclass(frozen=True, slots=True)
class DrainJob:
    """Progress of one drain.

    Attributes:
        node: Store node.
        state: ``running``, ``done`` (every segment DRAINED), ``incomplete`` (finished,
            but something is left: failures, objects still being written, or leases not
            over within the wait; running it again continues), ``failed`` (an error
            stopped it) or ``cancelled`` (undrained while it ran).
        phase: While running: ``moving`` (objects being moved) or ``waiting`` (for
            readers' leases to end and the segments to turn DRAINED).
        started_at: Wall time it started.
        segments: Segments marked DRAINING.
        done: Objects handled so far.
        total: Objects to handle (an estimate until the move ends).
        copied: Objects copied to another node (they had no replica elsewhere).
        copied_bytes: Bytes those copies moved.
        dropped: Replicas dropped from the node.
        waiting: Of those, how many kept their space until a reader's lease ended.
        failed: ``(key, reason)`` of objects that could not be moved (at most 100).
        failed_count: How many objects failed.
        segment_states: States of the node's segments at the end.
        error: Why it failed.
    """

    node: str
    state: str
    started_at: float
    phase: str = "moving"
    segments: tuple[str, ...] = ()
    done: int = 0
    total: int = 0
    copied: int = 0
    copied_bytes: int = 0
    dropped: int = 0
    waiting: int = 0
    failed: tuple[tuple[str, str], ...] = ()
    failed_count: int = 0
    segment_states: tuple[str, ...] = ()
    error: str | None = None


async def _build(factory: Callable[[], ReplicaCopier]) -> ReplicaCopier:
    """Run the blocking ``factory`` in a thread; a copier finished after the caller was
    cancelled (an undrain during start-up) is closed rather than leaked."""
    fut = asyncio.ensure_future(asyncio.to_thread(factory))
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:

        def close_late(f: asyncio.Future[ReplicaCopier]) -> None:
            if not f.cancelled() and f.exception() is None:
                threading.Thread(target=f.result().close, name="copier-close").start()

        fut.add_done_callback(close_late)
        raise


class DrainJobs:
    """The drains of this dashboard process, newest state per node.

    Args:
        copier: Builds the copier that moves bytes (blocking: it starts a Transfer
            Engine; called in a worker thread, closed when the move ends).
        wait_s: How long a drain waits, after moving, for the node to turn DRAINED.
        poll_s: Pause between those checks.
        refresh: Called (in a worker thread) when a drain has finished moving and
            waiting, before its end state is shown: the dashboard's polled view of the
            cluster is refreshed then, so no reader sees a finished drain beside a row
            from before it (the nodes page stops polling once no drain runs).
    """

    def __init__(
        self,
        copier: Callable[[], ReplicaCopier],
        *,
        wait_s: float = 60.0,
        poll_s: float = 0.5,
        refresh: Callable[[], object] | None = None,
    ) -> None:
        if wait_s < 0:
            raise ValueError(f"wait_s must be >= 0, got {wait_s}")
        self.jobs: dict[str, DrainJob] = {}
        self._copier = copier
        self._wait_s = wait_s
        self._poll_s = poll_s
        self._refresh = refresh
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stops: dict[str, threading.Event] = {}
        self._moving: set[str] = set()  # nodes whose drain is moving objects

    def get(self, node: str) -> DrainJob | None:
        """The last drain of ``node`` (``None``: never drained from here)."""
        return self.jobs.get(node)

    async def start(self, mc: MasterClient, node: str, now: float) -> DrainJob:
        """Mark ``node``'s segments DRAINING and move its objects off in the background.

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
        self._stops[node] = threading.Event()
        task = asyncio.get_running_loop().create_task(self._run(mc, node))
        self._tasks[node] = task
        task.add_done_callback(lambda t: self._forget(node, t))
        return job

    def _forget(self, node: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(node) is task:
            del self._tasks[node]

    async def cancel(self, node: str, timeout_s: float = 60.0) -> bool:
        """Stop a running drain of ``node`` between objects: the object in hand is
        finished (or its new replica revoked), no copy starts after; objects already
        moved stay moved.

        While objects move, the stop is cooperative: the move ends at its next clean
        point (:class:`~mooncake_core.cluster.drain.MoveStopped`). Cancelling the task
        there instead could land between a replica addition the master has made and the
        reply (the addition stays pending, a second replica on another node, until
        ``put_timeout_s``), or during a copy that a worker thread keeps writing. The
        task is cancelled outright only while nothing is being moved (the copier being
        built, or the wait for leases) or once ``timeout_s`` has passed.

        Args:
            node: Store node.
            timeout_s: Longest wait for the object in hand (one transfer batch).

        Returns:
            Whether one was running.
        """
        task = self._tasks.get(node)
        if task is None or task.done():
            return False
        self._stops[node].set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not task.done():
            if node not in self._moving or loop.time() >= deadline:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(task), 0.1)
        self._set(node, state="cancelled")
        return True

    def _set(self, node: str, **changes: object) -> None:
        self.jobs[node] = replace(self.jobs[node], **changes)  # type: ignore[arg-type]

    async def _run(self, mc: MasterClient, node: str) -> None:
        try:
            await self._move_and_wait(mc, node)
        except asyncio.CancelledError:
            raise
        except MoveStopped:
            self._set(node, state="cancelled")
        except Exception as exc:  # shown on the page; the dashboard keeps running
            self._set(node, state="failed", error=f"{type(exc).__name__}: {exc}"[:300])

    async def _move_and_wait(self, mc: MasterClient, node: str) -> None:
        from mooncake_core.cluster.drain import move_off, node_segments

        stop = self._stops[node]

        def progress(done: int, total: int) -> None:
            self._set(node, done=done, total=total)

        copier = await _build(self._copier)
        self._moving.add(node)
        try:
            report = await move_off(mc, node, copier, progress, stop=stop)
        finally:
            self._moving.discard(node)
            await asyncio.to_thread(copier.close)
        if stop.is_set():
            raise MoveStopped(report.dropped)
        self._set(
            node,
            phase="waiting",
            copied=report.copied,
            copied_bytes=report.copied_bytes,
            dropped=report.dropped,
            waiting=report.waiting,
            failed=report.failed[:_FAILED_LISTED],
            failed_count=len(report.failed),
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_s
        while True:
            segs = node_segments((await mc.get_snapshot()).segments, node)
            states = tuple(s.state.name for s in segs)
            self._set(node, segment_states=states)
            drained = bool(states) and all(s == "DRAINED" for s in states)
            if drained or loop.time() >= deadline:
                break
            await asyncio.sleep(self._poll_s)
        if self._refresh is not None:
            # A view that cannot be refreshed now (a target down) is refreshed by the
            # next poll: the drain's own outcome stands.
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._refresh)
        self._set(node, state="done" if drained else "incomplete")

    async def close(self) -> None:
        """Stop running drains (as :meth:`cancel`); their nodes stay DRAINING."""
        for node in list(self._tasks):
            await self.cancel(node)
