"""The IO shell of a store node's SSD tier: follow the master's events, run the
:class:`~.agent.TierAgent`'s actions in worker threads, confirm them to the master.

Ordering: jobs touching the same key run one after another in event order, so a
``Forget`` of an old version never deletes the file a later ``Offload`` wrote, and a
``TierDropped`` for a file the disk evicted is sent after that file's ``TierOffloadDone``
(the master then never believes in a copy that is gone). Jobs on different keys run in
parallel (``max_parallel`` threads doing file I/O).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, ParamSpec, Protocol, TypeVar

from .. import events as ev
from ..errors import ErrorCode, StoreError
from .agent import Forget, Offload, Stage, TierAction, TierAgent

if TYPE_CHECKING:
    from ..client.async_master import WatchedEvent

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")


class TierMaster(Protocol):
    """The master calls a node makes (``MasterClient`` has them)."""

    def tier_offload_done(
        self, key: str, segment: str, token: int, ok: bool, reason: str = ""
    ) -> Awaitable[None]: ...

    def tier_stage_done(
        self, key: str, segment: str, request_id: int, ok: bool, reason: str = ""
    ) -> Awaitable[None]: ...

    def tier_dropped(self, segment: str, keys: Sequence[str]) -> Awaitable[int]: ...

    def watch_events(self, started: asyncio.Event | None = None) -> AsyncIterator[WatchedEvent]: ...


class TierWorker:
    """Runs the agent's actions off the event loop and confirms them to the master.

    Args:
        agent: the node's tier agent.
        master: where confirmations go.
        max_parallel: actions doing file I/O at once (worker threads).
    """

    def __init__(self, agent: TierAgent, master: TierMaster, max_parallel: int = 4) -> None:
        self.agent = agent
        self.master = master
        self._sem = asyncio.Semaphore(max_parallel)
        self._tails: dict[str, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.errors = 0
        """Confirmations that could not be delivered (the master asks again)."""
        self.subscribed = asyncio.Event()
        """Set while the event stream is subscribed."""
        self.resubscribes = 0
        """Times the event stream broke and was subscribed again."""

    async def follow(self, retry_s: float = 0.1, max_retry_s: float = 0.25) -> None:
        """Act on the master's events until cancelled, subscribing again after errors
        (first after ``retry_s``, doubling up to ``max_retry_s``).

        Events missed while unsubscribed are not all recovered: the master asks again
        for offloads it did not hear back about, but a stage requested meanwhile times
        out (its reader waits ``stage_timeout_s`` and may get UNAVAILABLE). Subscribing
        again quickly keeps that window short after a master restart or failover.
        """
        delay = retry_s
        while True:
            try:
                async for watched in self.master.watch_events(self.subscribed):
                    delay = retry_s
                    self.dispatch(watched.event)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # master restarting or leader changing: again
                log.warning("tier events of %s: %s", self.agent.segment, exc)
            if self.subscribed.is_set():
                delay = retry_s  # the stream worked, then ended: subscribe again soon
            self.subscribed.clear()
            self.resubscribes += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_retry_s)

    def dispatch(self, event: ev.Event) -> TierAction | None:
        """Start the work one event asks for (returns at once).

        Returns:
            The action started, or None when the event is not for this node.
        """
        action = self.agent.decide(event)
        if action is None:
            return None
        if isinstance(action, Offload):
            self._after((action.key,), lambda: self._offload(action))
        elif isinstance(action, Stage):
            self._after((action.key,), lambda: self._stage(action))
        elif isinstance(action, Forget):
            self._after((action.key,), self._forget_job(action.key))
        else:
            keys = self.agent.tier.keys()
            log.warning(
                "SSD tier of %s: %s, deleting %d files",
                self.agent.segment,
                action.reason,
                len(keys),
            )
            for key in keys:  # each after the jobs already queued on its key
                self._after((key,), self._forget_job(key))
        return action

    def _forget_job(self, key: str) -> Callable[[], Awaitable[bool]]:
        return lambda: self._blocking(self.agent.forget, key)

    def _after(self, keys: Iterable[str], job: Callable[[], Awaitable[object]]) -> None:
        """Run ``job`` once every earlier job on any of ``keys`` has finished."""
        keys = tuple(dict.fromkeys(keys))
        before = [t for k in keys if (t := self._tails.get(k)) is not None and not t.done()]

        async def run() -> None:
            for t in before:
                with contextlib.suppress(BaseException):
                    await asyncio.shield(t)
            await job()

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        for k in keys:
            self._tails[k] = task

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            for k in keys:
                if self._tails.get(k) is t:
                    del self._tails[k]
            if not t.cancelled() and (exc := t.exception()) is not None:
                self.errors += 1
                log.warning("tier job on %s failed: %s", keys, exc)

        task.add_done_callback(done)

    async def _blocking(self, fn: Callable[P, R], *args: P.args, **kw: P.kwargs) -> R:
        async with self._sem:
            return await asyncio.to_thread(fn, *args, **kw)

    async def _offload(self, a: Offload) -> None:
        out = await self._blocking(self.agent.offload, a)
        seg = self.agent.segment
        try:
            await self.master.tier_offload_done(a.key, seg, a.token, out.ok, out.reason)
        except StoreError as exc:
            if exc.code == ErrorCode.STALE or exc.code == ErrorCode.OBJECT_NOT_FOUND:
                await self._blocking(self.agent.note_stale, a.key)
            else:
                raise
        if out.evicted:
            self._after(out.evicted, lambda: self._dropped(out.evicted))

    async def _dropped(self, keys: tuple[str, ...]) -> None:
        await self.master.tier_dropped(self.agent.segment, keys)

    async def _stage(self, a: Stage) -> None:
        out = await self._blocking(self.agent.stage, a)
        await self.master.tier_stage_done(
            a.key, self.agent.segment, a.request_id, out.ok, out.reason
        )

    async def drain(self, timeout_s: float = 10.0) -> None:
        """Wait for the jobs in flight, and the jobs they start (then cancel what is
        left after ``timeout_s``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._tasks:
            left_s = deadline - loop.time()
            if left_s <= 0:
                break
            await asyncio.wait(set(self._tasks), timeout=left_s)
        left = set(self._tasks)
        for t in left:
            t.cancel()
        if left:
            await asyncio.wait(left, timeout=1.0)
