"""A store node: a process that only hosts a DRAM segment (``mooncake store node``).

It runs a store :class:`Client` that mounts one segment and heartbeats, and serves
``/health`` (JSON), ``/telemetry`` and ``/metrics`` (docs/metrics.md) on its metrics
port; it never reads or writes objects itself. Peers reach the segment through this
process's Transfer Engine (shm on the same host, tcp otherwise). The node runs until
:meth:`StoreNode.stop` (SIGTERM/SIGINT in the CLI); then it unmounts the segment (the
master keeps it readable for ``unmount_grace_s``, but the memory goes with the process, so
readers fall back to other replicas).

SSD tier (``ssd_dir`` + ``ssd_size``): the segment is mounted with ``ssd_capacity`` and the
node follows the master's event stream with a :class:`~.tier.worker.TierWorker`: it copies
objects the master asks to offload from the segment into checksummed files, stages files
back into the ranges the master allocates for readers, deletes files of removed objects,
and reports files its disk evicted (docs/durability.md, "SSD tier"). The directory's tier
files are deleted at start: a new process is a new client, whose old copies the master
has already dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from mooncake_core import __version__
from mooncake_core.telemetry import ComponentInfo, TelemetryRegistry, telemetry_routes

from .client import Client
from .client.async_master import MasterClient
from .client.options import ClientOptions, SegmentSpec
from .errors import ConflictError, ErrorCode, InvalidArgumentError
from .metrics_http import serve_http
from .tier.agent import TierAgent, wipe_tier_dir
from .tier.ssd import SsdTier, SsdTierOptions
from .tier.worker import TierWorker

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NodeOptions:
    """What a node hosts and where it listens.

    Attributes:
        name: node name; also its segment name (the client id is ``<name>-<pid>-<hex>``).
        size: bytes lent to the store.
        client: connection options (master, secret, host, data_port, transfer); its
            ``segments`` and ``client_id`` are replaced by this node's.
        metrics_host: address of the ``/health`` server.
        metrics_port: its port (0: any free port; None: no HTTP server).
        ssd_dir: directory of the SSD tier (its tier files are deleted at start);
            None: no SSD tier.
        ssd_size: byte limit of the SSD tier (> 0 with ``ssd_dir``).
    """

    name: str
    size: int
    client: ClientOptions
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    ssd_dir: Path | None = None
    ssd_size: int = 0

    def __post_init__(self) -> None:
        if self.ssd_dir is not None and self.ssd_size <= 0:
            raise InvalidArgumentError(
                ErrorCode.INVALID_PARAMS,
                f"node {self.name!r}: an SSD tier at {self.ssd_dir} needs ssd_size > 0, "
                f"got {self.ssd_size}",
            )


class StoreNode:
    """Host one segment until stopped.

    Args:
        options: node options.
    """

    def __init__(self, options: NodeOptions) -> None:
        self.options = options
        self.client = Client(self._client_options())
        self.metrics_port: int | None = None
        self._started = time.monotonic()
        self._http: asyncio.Server | None = None
        self.tier: TierAgent | None = None
        """The SSD tier agent (after start, with ``ssd_dir``)."""
        self._worker: TierWorker | None = None
        self._tier_mc: MasterClient | None = None
        self._tier_task: asyncio.Task[None] | None = None

    def _client_options(self) -> ClientOptions:
        o = self.options.client
        return ClientOptions(
            master=o.master,
            secret=o.secret,
            # One id per process: a restarted node must not inherit the metadata of the
            # previous process's segment (its memory is gone), so it waits for the master
            # to expire that incarnation instead (see start()).
            client_id=f"{self.options.name}-{os.getpid()}-{secrets.token_hex(3)}",
            segments=(
                SegmentSpec(
                    self.options.name,
                    self.options.size,
                    ssd_capacity=self.options.ssd_size if self.options.ssd_dir else 0,
                ),
            ),
            host=o.host,
            data_port=o.data_port,
            transport=o.transport,
            transfer=o.transfer,
            master_config=o.master_config,
            rpc_timeout_s=o.rpc_timeout_s,
            connect_timeout_s=o.connect_timeout_s,
            heartbeat_interval_s=o.heartbeat_interval_s,
        )

    async def start(self) -> None:
        """Mount the segment (blocking work in a thread) and start ``/health``.

        If the segment name is still held (a previous process of this node died and the
        master has not expired it yet), retry until ``client_ttl_s + unmount_grace_s``
        plus a margin has passed.

        Raises:
            StoreError: the master refused the mount or is unreachable.
        """
        o = self.options
        tier: SsdTier | None = None
        if o.ssd_dir is not None:
            wiped = await asyncio.to_thread(wipe_tier_dir, o.ssd_dir)
            if wiped:
                log.info("SSD tier %s: deleted %d files of a previous process", o.ssd_dir, wiped)
            tier = SsdTier(SsdTierOptions(o.ssd_dir, o.ssd_size))
        mc = o.client.master_config
        deadline = time.monotonic() + mc.client_ttl_s + mc.unmount_grace_s + 5.0
        while True:
            try:
                await asyncio.to_thread(self.client.setup)
                break
            except ConflictError as exc:
                if exc.code != ErrorCode.SEGMENT_ALREADY_EXISTS or time.monotonic() > deadline:
                    raise
                log.warning("%s; waiting for the master to expire the old holder", exc.message)
                self.client = Client(self._client_options())
                await asyncio.sleep(0.5)
        if tier is not None:
            await self._start_tier(tier)
        if o.metrics_port is not None:
            # /telemetry and /metrics read the same registry (docs/metrics.md).
            reg = TelemetryRegistry(ComponentInfo(o.name, "store", __version__))
            reg.register("transfer", self.client.transfer_snapshot)
            if self.tier is not None:
                reg.register("ssd_tier", self.tier.snapshot)
            routes = {"/health": self._health, **telemetry_routes(reg)}
            self._http = await serve_http(o.metrics_host, o.metrics_port, routes)
            self.metrics_port = int(self._http.sockets[0].getsockname()[1])

    async def _start_tier(self, tier: SsdTier) -> None:
        """Follow the master's tier events with the node's own client id (the master
        checks that confirmations come from the segment's owner)."""
        from .ha.discovery import split_master_url

        co = self.options.client
        cid, secret, timeout = self.client.client_id, co.secret, co.rpc_timeout_s
        endpoint, cluster = split_master_url(co.master)
        if endpoint is None:
            self._tier_mc = MasterClient(co.master, client_id=cid, secret=secret, timeout_s=timeout)
        else:  # HA: confirmations and the event stream follow the leader
            self._tier_mc = await MasterClient.from_etcd(
                endpoint, cluster=cluster, client_id=cid, secret=secret, timeout_s=timeout
            )
        memory = self.client.segment_memory(self.options.name)
        # Half the master's stage timeout: a copy that late is dropped rather than
        # written into a range the master may have handed to a writer.
        deadline = co.master_config.stage_timeout_s / 2
        self.tier = TierAgent(self.options.name, tier, memory, stage_deadline_s=deadline)
        self._worker = TierWorker(self.tier, self._tier_mc)
        self._tier_task = asyncio.get_running_loop().create_task(self._worker.follow())
        # Ready only once subscribed: the master's first offload requests are not missed.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._worker.subscribed.wait(), co.connect_timeout_s)

    def _health(self) -> tuple[int, str, bytes]:
        body = {
            "status": "ok",
            "name": self.options.name,
            "segment": self.options.name,
            "size": self.options.size,
            "transfer_address": self.client.transfer_address,
            "master": self.options.client.master,
            "remounts": self.client.remounts,
            "uptime_s": round(time.monotonic() - self._started, 3),
        }
        if self.tier is not None and self._worker is not None:
            body["ssd"] = {
                **dataclasses.asdict(self.tier.snapshot()),
                "directory": str(self.options.ssd_dir),
                "subscribed": self._worker.subscribed.is_set(),
                "resubscribes": self._worker.resubscribes,
                "confirm_errors": self._worker.errors,
            }
        return 200, "application/json", json.dumps(body).encode() + b"\n"

    async def stop(self) -> None:
        """Stop ``/health`` and the tier worker, unmount the segment, close the engine."""
        if self._http is not None:
            self._http.close()
            await self._http.wait_closed()
        if self._tier_task is not None:
            self._tier_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tier_task
        if self._worker is not None:
            await self._worker.drain(5.0)
        if self._tier_mc is not None:
            await self._tier_mc.close()
        if self.tier is not None:
            # The engine unmaps the segment next; a job still copying keeps its own view.
            with contextlib.suppress(BufferError):
                self.tier.memory.release()
        await asyncio.to_thread(self.client.close)
