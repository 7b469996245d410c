"""The conductor process: core service and HTTP front door on one asyncio loop.

A :class:`mooncake_core.lifecycle.Component`, so ``mooncake conductor serve`` runs it
through the same serve scaffold as every long-running command.
"""

from __future__ import annotations

from mooncake_core.conductor.service import ConductorService, ConductorServiceOptions
from mooncake_core.config.models import ClusterConfig
from mooncake_web.http_component import HttpComponent

__all__ = ["ConductorProcess"]


class ConductorProcess:
    """The conductor service with its front door on ``host:port``.

    ``start`` raises RuntimeError when the service cannot start (a worker did not
    answer, the audit database) or the port cannot be bound; ``stop`` stops the HTTP
    server first (no new requests), then the service.
    """

    def __init__(
        self, cluster: ClusterConfig, options: ConductorServiceOptions, *, host: str, port: int
    ) -> None:
        self.service = ConductorService(cluster, options)
        self._host = host
        self._port = port
        self._http: HttpComponent | None = None

    async def start(self) -> None:
        from mooncake_web.frontdoor.app import create_app

        await self.service.start()
        self._http = HttpComponent(
            create_app(self.service), self._host, self._port, lifespan="off", access_log=False
        )
        try:
            await self._http.start()
        except BaseException:
            self._http = None
            await self.service.stop()
            raise

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.stop()
        await self.service.stop()
