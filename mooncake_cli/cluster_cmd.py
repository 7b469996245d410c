"""`mooncake cluster ...`: bring the cluster up and down, check it, inspect it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mooncake_core.fmt import duration, size

from .common import ConfigOption, JsonOption, err, fail, load, out, write_stdout

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table

    from mooncake_core.cluster import ComponentStatus, Supervisor
    from mooncake_core.cluster.checks import CheckResult

app = typer.Typer(help="Bring the cluster up and down, check it, show its status and logs.")

REMOTE_COMMAND_ENV = "MOONCAKE_REMOTE_COMMAND"
"""Remote command that runs `mooncake` on SSH hosts (default: `mooncake`)."""
KNOWN_HOSTS_ENV = "MOONCAKE_SSH_KNOWN_HOSTS"
"""known_hosts file for SSH hosts; `none` disables host key checking (test rigs only)."""

OnlyOption = Annotated[
    list[str] | None,
    typer.Option(
        "--only", help="Only this role or component (repeatable): master, store, store-0..."
    ),
]
ReadyTimeout = Annotated[
    float, typer.Option("--ready-timeout", min=1, help="Seconds a component may take to be ready.")
]


def available_commands() -> set[tuple[str, ...]]:
    """Every `mooncake` sub-command path of this installation, e.g. ("store", "node")."""
    from .main import app as root

    paths: set[tuple[str, ...]] = set()

    def walk(group: Any, prefix: tuple[str, ...]) -> None:
        for name, cmd in group.commands.items():
            paths.add((*prefix, name))
            if hasattr(cmd, "commands"):
                walk(cmd, (*prefix, name))

    walk(typer.main.get_group(root), ())
    return paths


def supervisor(config: Path | None, ready_timeout_s: float = 60.0) -> Supervisor:
    """The supervisor of the configured cluster (shared by `cluster` and `node`)."""
    from mooncake_core.cluster import RunState, Supervisor, resolve_config_file

    cfg = load(config)
    try:
        config_file = resolve_config_file(cfg, config, RunState(cfg.state_path))
    except OSError as exc:
        fail(exc.strerror or str(exc))
    ssh: dict[str, object] = {}
    if remote := os.environ.get(REMOTE_COMMAND_ENV):
        ssh["mooncake"] = tuple(remote.split())
    if known := os.environ.get(KNOWN_HOSTS_ENV):
        ssh["known_hosts"] = None if known.lower() == "none" else known
    import atexit

    sup = Supervisor(
        cfg,
        config_file,
        available_commands(),
        report=lambda line: err.print(line, highlight=False, markup=False, soft_wrap=True),
        ssh_options=ssh,
        ready_timeout_s=ready_timeout_s,
    )
    atexit.register(sup.close)
    return sup


def _print_checks(results: list[CheckResult]) -> None:
    from rich.table import Table

    table = Table("check", "", "result", "fix", show_lines=False)
    for r in results:
        mark = "[green]ok[/]" if r.ok else "[bold red]FAIL[/]"
        table.add_row(r.check, mark, r.message, r.fix)
    out.print(table)


@app.command()
def check(config: ConfigOption = None, json_out: JsonOption = False) -> None:
    """Preflight: config, hosts, ports, versions, hashing, NICs, RDMA. Exits 1 on failure."""
    import json
    from dataclasses import asdict

    from mooncake_core.cluster.checks import run_checks

    results = run_checks(supervisor(config))
    if json_out:
        write_stdout(json.dumps([asdict(r) for r in results], indent=1))
    else:
        _print_checks(results)
    if not all(r.ok for r in results):
        raise typer.Exit(1)


@app.command()
def up(
    config: ConfigOption = None,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Return once every component is ready.")
    ] = False,
    only: OnlyOption = None,
    ready_timeout: ReadyTimeout = 60.0,
    skip_check: Annotated[
        bool, typer.Option("--skip-check", help="Do not run `cluster check` first.")
    ] = False,
) -> None:
    """Start the cluster in dependency order; foreground shows a live status table.

    In the foreground, Ctrl-C stops every component; once `cluster down` (from another
    terminal) has stopped them all, it says so and exits.
    """
    from mooncake_core.cluster import ClusterError
    from mooncake_core.cluster.checks import run_checks

    sup = supervisor(config, ready_timeout)
    if not skip_check:
        results = run_checks(sup)
        bad = [r for r in results if not r.ok]
        if bad:
            _print_checks(bad)
            fail("cluster check failed; fix the above (or run `mooncake cluster check`)")
    try:
        sup.up(only or ())
    except (ClusterError, ValueError) as exc:
        for line in getattr(exc, "log_tail", []):
            err.print(f"  | {line}", highlight=False, markup=False, soft_wrap=True)
        fail(str(exc))
    if detach:
        return
    _foreground(sup)


def _foreground(sup: Supervisor) -> None:
    import signal
    import threading

    from rich.live import Live

    stop = threading.Event()

    def handler(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    from .tables import fit

    def table(rows: list[ComponentStatus]) -> RenderableType:
        return fit(_status_table(rows), STATUS_IDS, err.width, err)

    gone = 0  # consecutive checks that found every component stopped
    with Live(table(sup.status()), console=err, refresh_per_second=2) as live:
        while gone < 2 and not stop.wait(1.0):
            rows = sup.status()
            live.update(table(rows))
            # `cluster down` from another terminal stopped everything: nothing to watch.
            gone = gone + 1 if all(r.state in ("stopped", "skipped") for r in rows) else 0
    if gone >= 2:
        err.print("\nevery component stopped (mooncake cluster down?): exiting", highlight=False)
        return
    err.print("\nshutting down", highlight=False)
    sup.down()


STATUS_IDS = ("component",)
"""Columns of the status table never cut or wrapped, whatever the width."""


def _status_table(rows: list[ComponentStatus]) -> Table:
    from rich.table import Table

    colors = {
        "healthy": "green",
        "unhealthy": "yellow",
        "down": "red",
        "stopped": "dim",
        "skipped": "dim",
    }
    table = Table(
        "component",
        "role",
        "host",
        "address",
        "health",
        "pid",
        "version",
        "uptime",
        "ports",
        "detail",
    )
    for r in rows:
        table.add_row(
            r.name,
            r.role,
            r.host,
            r.address,
            f"[{colors.get(r.state, 'white')}]{r.state}[/]",
            str(r.pid or ""),
            r.version.removeprefix("mooncake-py "),
            duration(r.uptime_s, missing=""),
            " ".join(str(p) for p in r.ports.values()),
            r.detail,
        )
    return table


@app.command()
def status(
    config: ConfigOption = None, json_out: JsonOption = False, only: OnlyOption = None
) -> None:
    """Every component's health, version, uptime and address; store usage. Exits 1 if one is down."""
    import json
    from dataclasses import asdict

    sup = supervisor(config)
    rows = sup.status()
    if only:
        rows = [r for r in rows if r.role in only or r.name in only]
    usage = sup.store_usage()
    if json_out:
        write_stdout(
            json.dumps({"components": [asdict(r) for r in rows], "store": usage}, indent=1)
        )
    else:
        from .tables import print_table

        print_table(out, _status_table(rows), STATUS_IDS)
        if usage is not None:
            used, cap = usage.get("allocated_bytes", 0), usage.get("total_capacity_bytes", 0)
            out.print(
                f"store: {usage.get('key_count', 0)} keys, {len(usage.get('segments', []) or [])} segments, "  # type: ignore[arg-type]
                f"{size(int(used))} of {size(int(cap))} used",  # type: ignore[call-overload]
                highlight=False,
            )
    # "stopped" counts: a configured component that is not running is down for scripts.
    if any(r.state in ("down", "unhealthy", "stopped") for r in rows):
        raise typer.Exit(1)


@app.command()
def down(config: ConfigOption = None, only: OnlyOption = None) -> None:
    """Stop every recorded component in reverse order (SIGTERM, then SIGKILL after 10 s)."""
    sup = supervisor(config)
    if not sup.state.all():
        err.print("nothing is running", highlight=False)
        return
    sup.down(only or ())


@app.command()
def restart(
    name: Annotated[str, typer.Argument(help="Component name, e.g. master or store-0.")],
    config: ConfigOption = None,
) -> None:
    """Stop one component and start it again (waits until it is ready)."""
    from mooncake_core.cluster import ClusterError

    try:
        supervisor(config).restart(name)
    except ClusterError as exc:
        for line in exc.log_tail:
            err.print(f"  | {line}", highlight=False, markup=False, soft_wrap=True)
        fail(str(exc))


@app.command()
def logs(
    name: Annotated[str, typer.Argument(help="Component name, e.g. master or store-0.")],
    config: ConfigOption = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines.")
    ] = False,
    lines: Annotated[int, typer.Option("-n", "--lines", min=0, help="Lines to show.")] = 50,
) -> None:
    """Print a component's log (local file or over SSH)."""
    sup = supervisor(config)
    rec = sup.state.load(name)
    if rec is None:
        known = ", ".join(r.name for r in sup.state.all()) or "none"
        fail(f"no run record for {name!r} (recorded: {known})")
    launcher = sup.launcher(rec.host)
    if follow:
        import signal

        # Stop on Ctrl-C or SIGTERM even when started with SIGINT ignored (a shell's
        # background job inherits SIG_IGN, and Python then installs no handler).
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.default_int_handler)
    try:
        if follow:
            for line in launcher.follow(rec, lines):
                write_stdout(line)
        else:
            for line in launcher.tail(rec, lines):
                write_stdout(line)
    except KeyboardInterrupt:
        pass


@app.command("rdma-probe", hidden=True)
def rdma_probe() -> None:
    """Exit 0 when this host can run the rdma transport (used by `check` over SSH)."""
    from mooncake_core.transfer.rdma import require_rdma
    from mooncake_core.transfer.request import TransferError

    try:
        require_rdma()
    except TransferError as exc:
        fail(str(exc))
