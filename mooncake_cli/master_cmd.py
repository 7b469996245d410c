"""`mooncake master`: run the store master in the foreground."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import ConfigOption, err, fail, load

app = typer.Typer(
    help="Run the store master (metadata, allocation, leases, pins, eviction).",
    invoke_without_command=True,
)


@app.callback(invoke_without_command=True)
def master(
    config: ConfigOption = None,
    host: Annotated[
        str | None,
        typer.Option("--host", help="Bind address (default: the master host's address)."),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", min=0, max=65535, help="gRPC port (0: any free port)."),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port", min=0, max=65535, help="/metrics, /health, /snapshot port (0: any)."
        ),
    ] = None,
    secret_file: Annotated[
        Path | None,
        typer.Option(
            "--secret-file",
            help="Cluster secret; every RPC then needs its token (default: the config's "
            "secret_file if set, else no authentication).",
        ),
    ] = None,
) -> None:
    """Serve until SIGINT/SIGTERM; prints one 'serving on' line on stderr when ready."""
    import asyncio
    import logging
    import signal

    from mooncake_core.store.auth import read_secret
    from mooncake_core.store.master_service import MasterService, ServiceOptions

    cfg = load(config)
    mcfg = cfg.master
    try:
        bind = host or cfg.host(mcfg.host).address
    except KeyError:
        fail(f"master.host {mcfg.host!r} is not one of the configured hosts")
    secret: bytes | None = None
    path = secret_file or cfg.secret_file
    if path is not None:
        try:
            secret = read_secret(path.expanduser())
        except (OSError, ValueError) as exc:
            fail(f"cannot read the cluster secret: {exc}")
    opts = ServiceOptions(
        host=bind,
        port=mcfg.port if port is None else port,
        metrics_host=bind,
        metrics_port=mcfg.metrics_port if metrics_port is None else metrics_port,
        secret=secret,
    )
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    async def run() -> None:
        service = MasterService(mcfg, opts)
        try:
            await service.start()
        except RuntimeError as exc:
            fail(str(exc))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        auth = "on" if secret is not None else "off (no cluster secret)"
        err.print(
            f"mooncake master: serving on {bind}:{service.port} "
            f"(metrics on {bind}:{service.metrics_port}, auth {auth})",
            highlight=False,
            markup=False,
        )
        await stop.wait()
        err.print("mooncake master: shutting down", highlight=False, markup=False)
        await service.stop()

    asyncio.run(run())
