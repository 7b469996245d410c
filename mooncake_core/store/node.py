"""A store node: a process that only hosts a DRAM segment (``mooncake store node``).

It runs a store :class:`Client` that mounts one segment and heartbeats, and serves
``/health`` (JSON), ``/telemetry`` and ``/metrics`` (docs/metrics.md) on its metrics
port; it never reads or writes objects itself. Peers reach the segment through this
process's Transfer Engine (shm on the same host, tcp otherwise). The node runs until
:meth:`StoreNode.stop` (SIGTERM/SIGINT in the CLI); then it unmounts the segment (the
master keeps it readable for ``unmount_grace_s``, but the memory goes with the process, so
readers fall back to other replicas).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import time
from dataclasses import dataclass

from mooncake_core import __version__
from mooncake_core.telemetry import ComponentInfo, TelemetryRegistry, telemetry_routes

from .client import Client
from .client_options import ClientOptions, SegmentSpec
from .errors import ConflictError, ErrorCode
from .metrics_http import serve_http

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
    """

    name: str
    size: int
    client: ClientOptions
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None


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

    def _client_options(self) -> ClientOptions:
        o = self.options.client
        return ClientOptions(
            master=o.master,
            secret=o.secret,
            # One id per process: a restarted node must not inherit the metadata of the
            # previous process's segment (its memory is gone), so it waits for the master
            # to expire that incarnation instead (see start()).
            client_id=f"{self.options.name}-{os.getpid()}-{secrets.token_hex(3)}",
            segments=(SegmentSpec(self.options.name, self.options.size),),
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
        mc = self.options.client.master_config
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
        o = self.options
        if o.metrics_port is not None:
            # /telemetry and /metrics read the same registry (docs/metrics.md).
            reg = TelemetryRegistry(ComponentInfo(o.name, "store", __version__))
            reg.register("transfer", self.client.transfer_snapshot)
            routes = {"/health": self._health, **telemetry_routes(reg)}
            self._http = await serve_http(o.metrics_host, o.metrics_port, routes)
            self.metrics_port = int(self._http.sockets[0].getsockname()[1])

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
        return 200, "application/json", json.dumps(body).encode() + b"\n"

    async def stop(self) -> None:
        """Stop ``/health``, unmount the segment, close the engine."""
        if self._http is not None:
            self._http.close()
            await self._http.wait_closed()
        await asyncio.to_thread(self.client.close)
