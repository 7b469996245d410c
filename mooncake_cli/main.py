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


def _flags_take_no_metavar() -> None:
    """Show no value type after a flag in rich help (``--version``, not ``--version <bool>``).

    typer's rich help prints ``display_type_rich()`` for every option, flags included,
    while its plain help (``TyperOption.get_help_record``) already leaves flags out; a
    flag takes no value, so it gets none here. Patched once, at import, for every
    command and typer's own ``--help`` / ``--install-completion``; a typer without the
    method (older ones) is left alone.
    """
    from typer.core import TyperOption

    original = getattr(TyperOption, "display_type_rich", None)
    if original is None or getattr(original, "flags_take_no_metavar", False):
        return

    def display_type_rich(self: TyperOption, ctx: typer.Context) -> str | None:
        if self.is_flag and self.metavar is None:
            return None
        return original(self, ctx)

    display_type_rich.flags_take_no_metavar = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign,assignment]


_flags_take_no_metavar()

app = typer.Typer(
    name="mooncake",
    help="Mooncake-py: KVCache-centric disaggregated LLM serving and its operator toolkit.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # typer's own: `mooncake --install-completion` / `--show-completion` (bash, zsh, fish).
    add_completion=True,
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
# One command, no subcommands: its usage line says `mooncake loadgen [OPTIONS]`.
app.command("loadgen", help=loadgen_cmd.HELP)(loadgen_cmd.loadgen)
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


DEBUG_ENV = "MOONCAKE_DEBUG"
"""Set to 1 to get the traceback of an unexpected error instead of its one line."""


def main() -> None:
    """Console-script entry point.

    Commands report the errors they expect as one ``error:`` line (exit 1, or 2 for bad
    input); this is the net for the rest: a file that cannot be written, a store error
    from a code path that does not catch it... still one line, exit 1, no traceback
    (``MOONCAKE_DEBUG=1`` shows it).
    """
    import os
    import sys

    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        sys.stderr.write(f"error: {_one_line(exc)}\n")
        sys.exit(1)


def _one_line(exc: Exception) -> str:
    """A person's description of ``exc``: what failed and on which file or key."""
    msg = getattr(exc, "message", None)  # StoreError and friends
    code = getattr(getattr(exc, "code", None), "name", None)
    if isinstance(msg, str) and code:
        text = f"{code}: {msg}"
    elif isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        text = f"{exc.strerror}{where}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split()) or type(exc).__name__
