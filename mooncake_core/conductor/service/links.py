"""The conductor's connections to its workers: gRPC stubs and the report subscriptions.

Each worker gets one :class:`WorkerLink`: a grpc.aio channel, the worker's ``Health``
identity (its KV segment and block geometry), the last :class:`LoadReport` and a task
that follows the worker's ``Watch`` stream, turning its cache events into
``BlockStored``/``BlockRemoved`` for the sans-IO Conductor (applied on the event loop,
the only thread that touches the Conductor). A broken stream is re-opened after
``retry_s``; a worker that never answers simply has no report.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from mooncake_core.conductor.events import BlockRemoved, BlockStored, CacheEvent, Tier
from mooncake_core.rpc import worker_pb2 as pb
from mooncake_core.rpc import worker_pb2_grpc as pbg
from mooncake_core.store.auth import auth_metadata

__all__ = ["LoadReport", "WorkerLink"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadReport:
    """A worker's last load report (for the dashboard and TBT prediction checks).

    Attributes:
        time: unix seconds on the worker.
        queued: prefill requests waiting for the engine thread.
        running: decoding sequences (in the batch or waiting for a slot).
        batch: size of the last decode step.
        used_blocks, num_blocks: KV pool use.
        computed_tokens, reused_tokens: engine totals.
    """

    time: float
    queued: int
    running: int
    batch: int
    used_blocks: int
    num_blocks: int
    computed_tokens: int
    reused_tokens: int


class WorkerLink:
    """One worker as seen from the conductor.

    Args:
        name: instance name.
        role: ``prefill`` or ``decode``.
        address: ``host:port`` of its gRPC server.
        secret: cluster secret for the bearer token, or None.
    """

    def __init__(self, name: str, role: str, address: str, secret: bytes | None) -> None:
        self.name = name
        self.role = role
        self.address = address
        self.metadata = auth_metadata(secret)
        self.channel = grpc.aio.insecure_channel(
            address, options=[("grpc.max_receive_message_length", 64 << 20)]
        )
        self.stub = pbg.WorkerStub(self.channel)
        self.health: pb.HealthReply | None = None
        self.report: LoadReport | None = None
        self.events_applied = 0
        self.up = True  # answering (Health at start, then its Watch stream)
        self._task: asyncio.Task[None] | None = None
        self._on_report_cb: Callable[[WorkerLink], None] | None = None

    async def hello(self, timeout: float) -> pb.HealthReply:
        """Ask ``Health`` once and remember the answer.

        Raises:
            grpc.RpcError: the worker did not answer.
        """
        self.health = await self.stub.Health(
            pb.HealthRequest(), timeout=timeout, metadata=self.metadata
        )
        return self.health

    def follow(
        self,
        apply: Callable[[CacheEvent], None],
        interval_s: float,
        retry_s: float = 1.0,
        on_change: Callable[[WorkerLink, bool], None] | None = None,
        on_report: Callable[[WorkerLink], None] | None = None,
    ) -> None:
        """Start following the worker's ``Watch`` stream (events go to ``apply``).

        ``on_change(link, up)`` is called when the stream breaks (the worker is taken
        as down) and when reports come again after that; ``on_report(link)`` after each
        report is stored in :attr:`report`.
        """
        self._on_report_cb = on_report
        self._task = asyncio.create_task(
            self._follow(apply, interval_s, retry_s, on_change), name=f"watch-{self.name}"
        )

    def _set_up(self, up: bool, on_change: Callable[[WorkerLink, bool], None] | None) -> None:
        if up != self.up:
            self.up = up
            log.warning("%s worker %s is %s", self.role, self.name, "back" if up else "down")
            if on_change is not None:
                on_change(self, up)

    async def _follow(
        self,
        apply: Callable[[CacheEvent], None],
        interval_s: float,
        retry_s: float,
        on_change: Callable[[WorkerLink, bool], None] | None,
    ) -> None:
        while True:
            try:
                call: Any = self.stub.Watch(
                    pb.WatchRequest(interval_s=interval_s), metadata=self.metadata
                )
                async for rep in call:
                    self._set_up(True, on_change)
                    self._on_report(rep, apply)
            except grpc.RpcError as exc:
                log.debug("watch %s: %s", self.name, exc)
            self._set_up(False, on_change)
            await asyncio.sleep(retry_s)

    def _on_report(self, rep: pb.WorkerReport, apply: Callable[[CacheEvent], None]) -> None:
        self.report = LoadReport(
            rep.time,
            rep.queued,
            rep.running,
            rep.batch,
            rep.used_blocks,
            rep.num_blocks,
            rep.computed_tokens,
            rep.reused_tokens,
        )
        if self._on_report_cb is not None:
            try:
                self._on_report_cb(self)
            except (ValueError, KeyError) as exc:  # a bad report must not end the stream
                log.warning("worker %s report not applied: %s", self.name, exc)
        for ev in rep.events:
            try:
                cls = BlockStored if ev.stored else BlockRemoved
                apply(cls(ev.location, Tier(ev.tier), tuple(ev.keys)))
                self.events_applied += 1
            except (ValueError, KeyError) as exc:  # a bad event must not end the stream
                log.warning("worker %s sent a bad cache event: %s", self.name, exc)

    async def close(self) -> None:
        """Stop following and close the channel."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self.channel.close(None)
