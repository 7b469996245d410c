"""`mooncake config`: show the effective configuration, validate a file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import ConfigOption, err, load, write_stdout

app = typer.Typer(help="Show and validate the cluster configuration.", no_args_is_help=True)


@app.command("show")
def show(
    config: ConfigOption = None,
    fmt: Annotated[str, typer.Option("--format", help="yaml or json.")] = "yaml",
) -> None:
    """Print the effective configuration (defaults filled in); stderr names its file."""
    from mooncake_core.config import config_source, dump_config

    cfg = load(config)
    # On stderr: stdout stays a config that `config validate` and `-c` take back.
    err.print(f"config: {config_source(config)}", highlight=False, markup=False, soft_wrap=True)
    if fmt == "json":
        write_stdout(cfg.model_dump_json(indent=2))
    elif fmt == "yaml":
        write_stdout(dump_config(cfg))
    else:
        err.print(f"[red]error:[/] --format must be yaml or json, got {fmt!r}")
        raise typer.Exit(2)


@app.command("validate")
def validate(
    file: Annotated[Path, typer.Argument(help="Config file to check.", show_default=False)],
) -> None:
    """Check a config file; exits 2 and names each bad key if it is invalid."""
    load(file)
    err.print(f"[green]ok:[/] {file} is a valid mooncake config")
