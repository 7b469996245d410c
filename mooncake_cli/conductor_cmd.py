"""`mooncake conductor serve`: the live conductor (scheduler, audit, HTTP front door)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import ConfigOption, err, fail, load, setup_service_logging

app = typer.Typer(help="Run the conductor (global scheduler + front door).", no_args_is_help=True)


@app.command("serve")
def serve(
    config: ConfigOption = None,
    secret_file: Annotated[
        Path | None,
        typer.Option(
            "--secret-file",
            help="Cluster secret (default: the config's secret_file if set, else no auth).",
        ),
    ] = None,
    no_store_kv: Annotated[
        bool, typer.Option("--no-store-kv", help="Do not store new KV blocks to the Store.")
    ] = False,
    cpp_threshold: Annotated[
        int,
        typer.Option(
            "--cpp-threshold",
            min=0,
            help="Prompts longer than this many tokens run on a 2-stage CPP prefill group "
            "(needs 2 prefill workers); 0 disables CPP.",
        ),
    ] = 1024,
    cpp_chunk: Annotated[
        int, typer.Option("--cpp-chunk", min=1, help="CPP chunk size in tokens.")
    ] = 256,
    prefill_model: Annotated[
        Path | None,
        typer.Option("--prefill-model", help="Fitted prefill predictor JSON (worker profile)."),
    ] = None,
    decode_model: Annotated[
        Path | None,
        typer.Option("--decode-model", help="Fitted decode predictor JSON (worker profile)."),
    ] = None,
    no_profile: Annotated[
        bool,
        typer.Option("--no-profile", help="Skip the start-up self-profile (default predictors)."),
    ] = False,
) -> None:
    """Serve until SIGINT/SIGTERM; ready when GET /health answers 200."""
    import asyncio

    from mooncake_core.conductor.service import ConductorServiceOptions
    from mooncake_core.store.auth import read_secret
    from mooncake_web.frontdoor import serve as run_front

    if (prefill_model is None) != (decode_model is None):
        fail("give both --prefill-model and --decode-model, or neither")
    cfg = load(config)
    secret: bytes | None = None
    path = secret_file or cfg.secret_file
    if path is not None:
        try:
            secret = read_secret(path.expanduser())
        except (OSError, ValueError) as exc:
            fail(f"cannot read the cluster secret: {exc}")
    try:
        host = cfg.host(cfg.conductor.host).address
    except KeyError:
        fail(f"conductor.host {cfg.conductor.host!r} is not one of the configured hosts")
    port = cfg.conductor.http_port
    setup_service_logging()
    opts = ConductorServiceOptions(
        secret=secret,
        store_kv=not no_store_kv,
        profile=not no_profile,
        cpp_threshold=cpp_threshold,
        cpp_chunk_tokens=cpp_chunk,
        prefill_model_path=prefill_model,
        decode_model_path=decode_model,
    )

    def ready() -> None:
        err.print(
            f"mooncake conductor: serving on http://{host}:{port} "
            f"(policy {cfg.conductor.policy}, admission {cfg.conductor.admission})",
            highlight=False,
            markup=False,
        )

    try:
        asyncio.run(run_front(cfg, opts, host=host, port=port, on_ready=ready))
    except RuntimeError as exc:
        fail(str(exc))
    err.print("mooncake conductor: stopped", highlight=False, markup=False)
