"""`mooncake worker prefill|decode`: run one worker instance in the foreground."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import ConfigOption, err, fail, load

app = typer.Typer(help="Run a prefill or decode worker (tiny torch model).", no_args_is_help=True)

NameOption = Annotated[str, typer.Option("--name", help="Worker name from the config.")]
SecretOption = Annotated[
    Path | None,
    typer.Option(
        "--secret-file",
        help="Cluster secret (default: the config's secret_file if set, else no auth).",
    ),
]


def _serve(role: str, name: str, config: Path | None, secret_file: Path | None) -> None:
    import asyncio
    import logging
    import signal

    from mooncake_core.store.auth import read_secret
    from mooncake_core.worker.service import WorkerService, WorkerServiceOptions

    cfg = load(config)
    secret: bytes | None = None
    path = secret_file or cfg.secret_file
    if path is not None:
        try:
            secret = read_secret(path.expanduser())
        except (OSError, ValueError) as exc:
            fail(f"cannot read the cluster secret: {exc}")
    try:
        opts = WorkerServiceOptions.from_cluster(cfg, role, name, secret=secret)  # type: ignore[arg-type]
    except KeyError as exc:
        fail(str(exc.args[0]))
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    async def run() -> None:
        service = WorkerService(cfg, opts, store=_store_bridge(cfg, opts, secret))
        try:
            await service.start()
        except (RuntimeError, OSError) as exc:
            fail(str(exc))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        err.print(
            f"mooncake worker {role} {name}: serving on {opts.host}:{service.rpc_port}",
            highlight=False,
            markup=False,
        )
        await stop.wait()
        err.print(f"mooncake worker {name}: shutting down", highlight=False, markup=False)
        await service.stop()

    asyncio.run(run())


def _store_bridge(cfg, opts, secret):  # type: ignore[no-untyped-def]
    """The Store bridge of a prefill worker (None for decode workers)."""
    return None


@app.command("prefill")
def prefill(
    name: NameOption, config: ConfigOption = None, secret_file: SecretOption = None
) -> None:
    """Serve a prefill instance until SIGINT/SIGTERM (ready when Health answers)."""
    _serve("prefill", name, config, secret_file)


@app.command("decode")
def decode(name: NameOption, config: ConfigOption = None, secret_file: SecretOption = None) -> None:
    """Serve a decode instance until SIGINT/SIGTERM (ready when Health answers)."""
    _serve("decode", name, config, secret_file)
