"""``mooncake top``: live TUI of the cluster (NICs, store, scheduler, nodes).

A thin layer: builds the targets and a Collector from the config, then runs the textual
app, or prints one snapshot with ``--once``. textual is imported only inside.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .common import ConfigOption, JsonOption, fail, load, out, write_stdout

if TYPE_CHECKING:
    from mooncake_core.config import ClusterConfig
    from mooncake_core.telemetry import Collector


def _audit_url(cfg: ClusterConfig, given: str | None) -> str | None:
    if given is not None:
        return given or None
    url = cfg.audit_url
    if url.startswith("sqlite:///"):
        # Only read a database that exists: top must never create one.
        return url if Path(url.removeprefix("sqlite:///")).exists() else None
    return url


def _collector(
    config: Path | None,
    targets: list[str],
    targets_only: bool,
    timeout: float,
    window: float,
    audit_db: str | None,
) -> Collector:
    from mooncake_core.telemetry import (
        Collector,
        merge_targets,
        parse_target,
        targets_from_config,
        targets_from_run_state,
    )

    cfg = load(config)
    try:
        extra = [parse_target(t) for t in targets]
    except ValueError as exc:
        fail(str(exc), code=2)
    if targets_only:
        if not extra:
            fail("--targets-only needs at least one --target NAME=URL", code=2)
        found = extra
    else:
        found = merge_targets(
            targets_from_config(cfg), targets_from_run_state(cfg.state_path), extra
        )
    try:
        return Collector(
            found, timeout_s=timeout, window_s=window, audit_url=_audit_url(cfg, audit_db)
        )
    except ValueError as exc:
        fail(str(exc), code=2)


def top(
    config: ConfigOption = None,
    interval: Annotated[
        float, typer.Option("--interval", "-n", min=0.1, max=3600, help="Seconds between polls.")
    ] = 1.0,
    once: Annotated[
        bool, typer.Option("--once", help="Print one snapshot and exit (scripts, non-TTY).")
    ] = False,
    json_out: JsonOption = False,
    target: Annotated[
        list[str] | None,
        typer.Option(
            "--target",
            "-t",
            help="Extra endpoint NAME=URL or NAME:ROLE=URL serving /telemetry (repeatable).",
        ),
    ] = None,
    targets_only: Annotated[
        bool, typer.Option("--targets-only", help="Poll only the --target endpoints.")
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            min=0.05,
            max=60,
            help="Per-request timeout (default: 0.8 x interval, at most 2 s).",
        ),
    ] = None,
    window: Annotated[
        float, typer.Option("--window", min=0.5, max=3600, help="Rate window, seconds.")
    ] = 10.0,
    audit_db: Annotated[
        str | None,
        typer.Option(
            "--audit-db",
            help="Audit database URL for the last decisions (default: the config's, if it "
            "exists; '' for none).",
        ),
    ] = None,
    screen: Annotated[
        str, typer.Option("--screen", help="First screen: nics, store, scheduler or nodes.")
    ] = "nics",
) -> None:
    """Live view of the cluster: per-NIC bandwidth, store, scheduler and nodes."""
    from mooncake_cli.top import SCREENS_ORDER

    if screen not in SCREENS_ORDER:
        fail(f"--screen {screen!r}: one of {', '.join(SCREENS_ORDER)}", code=2)
    t = timeout if timeout is not None else min(2.0, 0.8 * interval)
    collector = _collector(config, target or [], targets_only, t, window, audit_db)
    if once or json_out or not sys.stdout.isatty():
        _print_once(collector, interval, json_out)
        return
    from mooncake_cli.top import TopApp

    TopApp(collector, interval_s=interval, start_screen=screen).run()


def _print_once(collector: Collector, interval: float, json_out: bool) -> None:
    from mooncake_cli.top import render_view, view_json

    with collector:
        # Two polls a short time apart, so rates exist in a single snapshot.
        collector.poll()
        time.sleep(min(interval, 1.0))
        view = collector.poll()
    if json_out:
        write_stdout(view_json(view))
    else:
        from .tables import table_width

        width = table_width(out)
        out.print(render_view(view, width, out), width=width)
