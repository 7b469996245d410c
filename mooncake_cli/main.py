"""The `mooncake` command. Each group lives in its own module and imports heavy
libraries (torch, grpc, sqlalchemy) only inside its commands, so `--help` is fast."""

from __future__ import annotations

import typer

from mooncake_core import __version__

from . import (
    audit_cmd,
    bench_cmd,
    cluster_cmd,
    conductor_cmd,
    config_cmd,
    db_cmd,
    loadgen_cmd,
    master_cmd,
    node_cmd,
    sim_cmd,
    store_cmd,
    top_cmd,
    topo_cmd,
    web_cmd,
    worker_cmd,
)

app = typer.Typer(
    name="mooncake",
    help="Mooncake-py: KVCache-centric disaggregated LLM serving and its operator toolkit.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(config_cmd.app, name="config")
app.add_typer(bench_cmd.app, name="bench")
app.add_typer(topo_cmd.app, name="topo")
app.add_typer(audit_cmd.app, name="audit")
app.add_typer(db_cmd.app, name="db")
app.add_typer(sim_cmd.app, name="sim")
app.add_typer(master_cmd.app, name="master")
app.add_typer(cluster_cmd.app, name="cluster")
app.add_typer(node_cmd.app, name="node")
app.add_typer(store_cmd.app, name="store")
app.add_typer(worker_cmd.app, name="worker")
app.add_typer(conductor_cmd.app, name="conductor")
app.add_typer(loadgen_cmd.app, name="loadgen")
app.command("top")(top_cmd.top)
app.command("web")(web_cmd.web)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mooncake-py {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Mooncake-py operator CLI."""


def main() -> None:
    """Console-script entry point."""
    app()
