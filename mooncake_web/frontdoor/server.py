"""Run the conductor: core service and HTTP front door on one asyncio loop."""

from __future__ import annotations

import asyncio
import logging
import signal

from mooncake_core.conductor.service import ConductorService, ConductorServiceOptions
from mooncake_core.config.models import ClusterConfig

__all__ = ["serve"]

log = logging.getLogger(__name__)


async def serve(
    cluster: ClusterConfig,
    options: ConductorServiceOptions,
    *,
    host: str,
    port: int,
    on_ready: object = None,
) -> None:
    """Start the service and uvicorn; run until SIGINT/SIGTERM, then shut down cleanly.

    Args:
        cluster: the cluster config.
        options: conductor process options.
        host, port: HTTP bind address.
        on_ready: called with no arguments once HTTP is serving (for the CLI's line).

    Raises:
        RuntimeError: startup failed (a worker did not answer, audit DB, port in use).
    """
    import uvicorn

    from mooncake_web.frontdoor.app import create_app

    service = ConductorService(cluster, options)
    await service.start()
    app = create_app(service)
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", lifespan="off", access_log=False
    )
    server = uvicorn.Server(config)
    # uvicorn captures SIGINT/SIGTERM while serving and re-raises them on exit with the
    # handlers it found: install ours first so the re-raise lands here, not on the default
    # handler (which would kill the process before the service shuts down).
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                await task
                raise RuntimeError(f"front door could not serve on {host}:{port}")
            await asyncio.sleep(0.05)
        if callable(on_ready):
            on_ready()
        await task
    finally:
        await service.stop()
