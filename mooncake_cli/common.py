"""Options and helpers shared by every command group (declared once)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console

if TYPE_CHECKING:
    from mooncake_core.config import ClusterConfig

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="Cluster config file (default: $MOONCAKE_CONFIG, ./mooncake.yaml, else the embedded default).",
        show_default=False,
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print JSON for scripts instead of tables.")
]

out = Console()
"""stdout: data only, so output can be redirected."""
err = Console(stderr=True, soft_wrap=True)
"""stderr: diagnostics; one line per message whatever the terminal width (log files and
readiness probes grep them)."""


def setup_service_logging() -> None:
    """Log lines of a long-running component: INFO and up, one line each, timestamped.

    Client libraries log every HTTP request at INFO (httpx: each etcd call, several a
    second under HA); only their warnings reach a component's log.
    """
    import logging

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print a clear error on stderr and exit with ``code``."""
    from rich.markup import escape

    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def load(config: Path | None) -> ClusterConfig:
    """Load the effective config or exit with the config errors."""
    from mooncake_core.config import ConfigError, load_config

    try:
        return load_config(config)
    except ConfigError as exc:
        err.print(f"[bold red]error:[/] {exc.source}: invalid configuration", highlight=False)
        for line in exc.problems:
            err.print(f"  {line}", highlight=False, markup=False)
        raise typer.Exit(2) from None


def write_stdout(text: str) -> None:
    """Write raw text to stdout (no rich markup or wrapping)."""
    sys.stdout.write(text)
    if not text.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()
