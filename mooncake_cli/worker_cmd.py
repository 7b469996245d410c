"""`mooncake worker prefill|decode`: run one worker instance in the foreground."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import ConfigOption, JsonOption, err, fail, load, write_stdout
from .serve import cluster_secret, serve

app = typer.Typer(help="Run a prefill or decode worker (tiny torch model).", no_args_is_help=True)

NameOption = Annotated[str, typer.Option("--name", help="Worker name from the config.")]
SecretOption = Annotated[
    Path | None,
    typer.Option(
        "--secret-file",
        help="Cluster secret (default: the config's secret_file if set, else no auth).",
    ),
]


def _serve(
    role: str, name: str, config: Path | None, secret_file: Path | None, no_store: bool = False
) -> None:
    from mooncake_core.store.errors import StoreError
    from mooncake_core.worker.service import WorkerService, WorkerServiceOptions
    from mooncake_core.worker.service_store import store_bridge_factory

    cfg = load(config)
    secret = cluster_secret(cfg, secret_file)
    try:
        opts = WorkerServiceOptions.from_cluster(cfg, role, name, secret=secret)  # type: ignore[arg-type]
    except KeyError as exc:
        fail(str(exc.args[0]))

    def make() -> WorkerService:
        factory = None
        if role == "prefill" and not no_store:
            factory = store_bridge_factory(cfg, opts.host, secret)
        return WorkerService(cfg, opts, store_factory=factory)

    serve(
        make,
        ready=lambda s: f"mooncake worker {role} {name}: serving on {opts.host}:{s.rpc_port}",
        stopping=f"mooncake worker {name}: shutting down",
        start_errors=(RuntimeError, OSError, StoreError),
    )


@app.command("prefill")
def prefill(
    name: NameOption,
    config: ConfigOption = None,
    secret_file: SecretOption = None,
    no_store: Annotated[
        bool,
        typer.Option("--no-store", help="Run without the Store (no prefix fetch, no KV store)."),
    ] = False,
) -> None:
    """Serve a prefill instance until SIGINT/SIGTERM (ready when Health answers)."""
    _serve("prefill", name, config, secret_file, no_store)


@app.command("decode")
def decode(name: NameOption, config: ConfigOption = None, secret_file: SecretOption = None) -> None:
    """Serve a decode instance until SIGINT/SIGTERM (ready when Health answers)."""
    _serve("decode", name, config, secret_file)


@app.command("profile")
def profile(
    out_dir: Annotated[
        Path,
        typer.Option("--out", help="Folder for prefill_model.json and decode_model.json."),
    ] = Path("."),
    config: ConfigOption = None,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Timed runs per point.")] = 3,
    threads: Annotated[int, typer.Option("--threads", min=1, help="torch threads.")] = 1,
    as_json: JsonOption = False,
) -> None:
    """Profile the configured model on this host and fit the conductor's predictors.

    Writes ``prefill_model.json`` and ``decode_model.json`` (load them with
    ``mooncake conductor serve --prefill-model F --decode-model F``).
    """
    import json

    import torch

    from mooncake_core.worker.engine import InferenceEngine
    from mooncake_core.worker.profile import profile_engine

    cfg = load(config)
    torch.set_num_threads(threads)
    eng = InferenceEngine(cfg.model, cfg.hashing, num_blocks=1024, location="profile")
    try:
        prof = profile_engine(eng, repeats=repeats)
    except ValueError as exc:  # e.g. the default grid exceeds a small max_seq_len
        fail(f"profiling failed: {exc}")
    pre, dec = out_dir / "prefill_model.json", out_dir / "decode_model.json"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        prof.prefill_model.save(pre)
        prof.decode_model.save(dec)
    except OSError as exc:
        fail(f"cannot write the models to {out_dir}: {exc}")
    summary = {
        "prefill_model": str(pre),
        "decode_model": str(dec),
        "prefill_points": len(prof.prefill_points),
        "decode_points": len(prof.step_points),
        "prefill_r2": prof.prefill_model.report.r2 if prof.prefill_model.report else None,
        "decode_r2": prof.decode_model.report.r2 if prof.decode_model.report else None,
    }
    if as_json:
        write_stdout(json.dumps(summary))
    else:
        for k, v in summary.items():
            err.print(f"{k}: {v}", highlight=False, markup=False)
