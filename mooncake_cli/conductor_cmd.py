"""`mooncake conductor serve`: the live conductor (scheduler, audit, HTTP front door)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .common import ConfigOption, fail, load
from .serve import cluster_secret, say
from .serve import serve as serve_component

if TYPE_CHECKING:
    from mooncake_core.conductor.service import ConductorServiceOptions
    from mooncake_core.config import ClusterConfig

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
    store_kv: Annotated[
        bool | None,
        typer.Option(
            "--store-kv/--no-store-kv",
            help="Store new KV blocks to the Store (default: conductor.store_kv).",
        ),
    ] = None,
    cpp_threshold: Annotated[
        int | None,
        typer.Option(
            "--cpp-threshold",
            min=0,
            help="Prompts longer than this many tokens run on a 2-stage CPP prefill group "
            "(needs 2 prefill workers); 0 disables CPP (default: conductor.cpp_threshold).",
        ),
    ] = None,
    cpp_chunk: Annotated[
        int | None,
        typer.Option(
            "--cpp-chunk",
            min=1,
            help="CPP chunk size in tokens (default: conductor.cpp_chunk_tokens).",
        ),
    ] = None,
    prefill_model: Annotated[
        Path | None,
        typer.Option(
            "--prefill-model",
            help="Fitted prefill predictor JSON (default: conductor.prefill_model).",
        ),
    ] = None,
    decode_model: Annotated[
        Path | None,
        typer.Option(
            "--decode-model",
            help="Fitted decode predictor JSON (default: conductor.decode_model).",
        ),
    ] = None,
    profile: Annotated[
        bool | None,
        typer.Option(
            "--profile/--no-profile",
            help="Self-profile at start, else default predictors (default: conductor.profile).",
        ),
    ] = None,
    profile_device: Annotated[
        str | None,
        typer.Option(
            "--profile-device",
            help="Device of the self-profile: cpu, cuda or auto "
            "(default: conductor.profile_device, i.e. the workers' device).",
        ),
    ] = None,
) -> None:
    """Serve until SIGINT/SIGTERM; ready when GET /health answers 200."""
    from mooncake_web.frontdoor import ConductorProcess

    if (prefill_model is None) != (decode_model is None):
        fail("give both --prefill-model and --decode-model, or neither")
    if profile_device not in (None, "cpu", "cuda", "auto"):
        fail(f"--profile-device {profile_device}: expected cpu, cuda or auto")
    cfg = load(config)
    cc = cfg.conductor
    models = (prefill_model, decode_model) if prefill_model else (cc.prefill_model, cc.decode_model)
    for what, model in zip(("prefill", "decode"), models, strict=True):
        if model is not None and not model.expanduser().is_file():
            fail(f"{what} predictor file {model} not found")
    secret = cluster_secret(cfg, secret_file)
    try:
        host, port, opts = conductor_settings(
            cfg,
            secret=secret,
            store_kv=store_kv,
            cpp_threshold=cpp_threshold,
            cpp_chunk=cpp_chunk,
            prefill_model=prefill_model,
            decode_model=decode_model,
            profile=profile,
            profile_device=profile_device,
        )
    except ValueError as exc:
        fail(str(exc))
    ready = (
        f"mooncake conductor: serving on http://{host}:{port} "
        f"(policy {cc.policy}, admission {cc.admission})"
    )

    serve_component(
        lambda: ConductorProcess(cfg, opts, host=host, port=port),
        ready=lambda _: ready,
        stopping="mooncake conductor: stopping",
    )
    say("mooncake conductor: stopped")


def conductor_settings(
    cfg: ClusterConfig,
    *,
    secret: bytes | None = None,
    store_kv: bool | None = None,
    cpp_threshold: int | None = None,
    cpp_chunk: int | None = None,
    prefill_model: Path | None = None,
    decode_model: Path | None = None,
    profile: bool | None = None,
    profile_device: str | None = None,
) -> tuple[str, int, ConductorServiceOptions]:
    """Bind address, port and service options of ``mooncake conductor serve``: the
    config's conductor settings with the flags given (None: the config's) applied.

    Raises:
        ValueError: ``conductor.host`` is not a configured host.
    """
    from mooncake_core.conductor.service import ConductorServiceOptions

    cc = cfg.conductor
    if prefill_model is None:
        prefill_model, decode_model = cc.prefill_model, cc.decode_model
    device = cfg.profile_device if profile_device is None else profile_device
    try:
        host = cfg.host(cc.host).address
    except KeyError:
        raise ValueError(f"conductor.host {cc.host!r} is not one of the configured hosts") from None
    opts = ConductorServiceOptions(
        secret=secret,
        store_kv=cc.store_kv if store_kv is None else store_kv,
        profile=cc.profile if profile is None else profile,
        profile_device=None if device == "auto" else device,
        cpp_threshold=cc.cpp_threshold if cpp_threshold is None else cpp_threshold,
        cpp_chunk_tokens=cc.cpp_chunk_tokens if cpp_chunk is None else cpp_chunk,
        prefill_model_path=None if prefill_model is None else prefill_model.expanduser(),
        decode_model_path=None if decode_model is None else decode_model.expanduser(),
    )
    return host, cc.http_port, opts
