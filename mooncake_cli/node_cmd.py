"""`mooncake node ...`: list store nodes, take one out of placement (drain)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from .common import ConfigOption, JsonOption, err, fail, load, out, write_stdout

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.progress import Progress, TaskID

    from mooncake_core.config import ClusterConfig

app = typer.Typer(help="Store nodes: list them, drain one (move every object off it), undrain.")

NodeArg = Annotated[str, typer.Argument(help="Store node name, e.g. store-0.")]


def _master(cfg: ClusterConfig) -> tuple[str, bytes | None]:
    secret = None
    if cfg.secret_path.exists():
        secret = cfg.secret_path.read_bytes().strip() or None
    return cfg.master_target, secret


@app.command("ls")
def ls(config: ConfigOption = None, json_out: JsonOption = False) -> None:
    """Every mounted segment: node, state, usage, objects."""
    import asyncio
    import json

    from mooncake_core.cluster.drain import node_of
    from mooncake_core.store import StoreError
    from mooncake_core.store.client.async_master import MasterClient

    cfg = load(config)
    address, secret = _master(cfg)

    async def go() -> list[dict[str, object]]:
        async with MasterClient.for_target(
            address, client_id="mooncake-node-cli", secret=secret
        ) as mc:
            snap = await mc.get_snapshot()
        return [
            {
                "segment": s.name,
                "node": node_of(s),
                "client": s.client_id,
                "state": s.state.name,
                "used": s.used,
                "capacity": s.capacity,
                "objects": s.keys,
                "address": s.transport_address,
            }
            for s in snap.segments
        ]

    try:
        rows = asyncio.run(go())
    except StoreError as exc:
        fail(f"master {address}: {exc}")
    if json_out:
        write_stdout(json.dumps(rows, indent=1))
        return
    from rich.table import Table

    from mooncake_core.fmt import size

    from .tables import print_table

    cols = ("segment", "node", "client", "state", "used", "capacity", "objects", "address")
    table = Table(*cols)
    for r in rows:
        cells = {k: str(r[k]) for k in cols}
        cells["used"], cells["capacity"] = size(int(r["used"])), size(int(r["capacity"]))  # type: ignore[call-overload]
        table.add_row(*(cells[k] for k in cols))
    print_table(out, table, ("segment", "node", "client"))


def _progress(bar: Progress, task: TaskID) -> Callable[[int, int], None]:
    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return update


@app.command()
def drain(
    node: NodeArg,
    config: ConfigOption = None,
    json_out: JsonOption = False,
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            min=0,
            help="Seconds to wait, after moving, for readers' leases to end and the node "
            "to turn DRAINED.",
        ),
    ] = 60.0,
) -> None:
    """Take a store node out of placement and move every object off it, reads unaffected.

    Its segments go DRAINING (readable, no new objects); objects with a replica elsewhere
    lose the one here, the others are first copied to other nodes. Exits 0 once DRAINED,
    3 when something is left (the report says what). Safe to run again. Ctrl-C stops it
    after the object in hand (exit 130; the node stays DRAINING); a second one at once.
    """
    import asyncio
    import json
    import signal
    import threading
    import time
    from dataclasses import asdict

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from mooncake_core.cluster.drain import (
        MoveReport,
        MoveStopped,
        drain_node,
        move_off,
        node_segments,
    )
    from mooncake_core.cluster.replica_copy import ReplicaCopier
    from mooncake_core.store import StoreError
    from mooncake_core.store.client.async_master import MasterClient
    from mooncake_core.transfer import TransferError

    cfg = load(config)
    workers = {w.name for w in (*cfg.prefill_workers, *cfg.decode_workers)}
    if node in workers:
        fail(
            f"{node!r} is a worker: draining workers needs a conductor endpoint that stops "
            "routing to it, which this version does not have"
        )
    address, secret = _master(cfg)
    host = cfg.host(cfg.master.host).address

    stop = threading.Event()

    def interrupted() -> None:
        # The first Ctrl-C stops the move at its next clean point (cancelling it could
        # strand a replica addition the master made); the next one interrupts at once.
        stop.set()
        asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
        err.print("stopping after the object in hand; Ctrl-C again to abort now", highlight=False)

    async def go() -> tuple[MoveReport, list[str]]:
        async with MasterClient.for_target(
            address, client_id="mooncake-node-cli", secret=secret
        ) as mc:
            segs = await drain_node(mc, node)
            err.print(
                f"{node}: {', '.join(segs)} DRAINING (readable, no new objects)", highlight=False
            )
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, interrupted)
            with ReplicaCopier(cfg.transfer, secret=secret, host=host) as copier:
                columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
                with Progress(*columns, console=err, transient=True) as bar:
                    task = bar.add_task(f"moving objects off {node}", total=None)
                    report = await move_off(mc, node, copier, _progress(bar, task), stop=stop)
            deadline = time.monotonic() + wait
            while True:
                states = [
                    s.state.name for s in node_segments((await mc.get_snapshot()).segments, node)
                ]
                done = all(s == "DRAINED" for s in states)
                if done or time.monotonic() >= deadline or stop.is_set():
                    return report, states
                await asyncio.sleep(0.5)

    try:
        report, states = asyncio.run(go())
    except MoveStopped as stopped:
        err.print(
            f"{node}: drain stopped after {stopped.done} objects; it stays DRAINING. Run "
            f"'mooncake node drain {node}' again to continue, or 'mooncake node undrain "
            f"{node}'",
            highlight=False,
        )
        raise typer.Exit(130) from None
    except (StoreError, TransferError, ValueError) as exc:
        fail(str(exc))
    drained = bool(states) and all(s == "DRAINED" for s in states)
    if json_out:
        write_stdout(json.dumps({**asdict(report), "states": states, "drained": drained}, indent=1))
    else:
        out.print(
            f"{node}: {'/'.join(states)}; {report.copied} objects copied "
            f"({report.copied_bytes} bytes), {report.dropped} replicas dropped "
            f"({report.waiting} freed when their read lease ends), {len(report.failed)} failed",
            highlight=False,
        )
    for key, why in report.failed:
        err.print(f"  {key}: {why}", highlight=False)
    if not drained:
        err.print(
            f"{node} is not DRAINED yet: objects still being written, failures above, or "
            "readers' leases not over; run the command again",
            highlight=False,
        )
        raise typer.Exit(3)


@app.command()
def undrain(node: NodeArg, config: ConfigOption = None) -> None:
    """Put a DRAINING or DRAINED store node back into placement (MOUNTED)."""
    import asyncio

    from mooncake_core.cluster.drain import undrain_node
    from mooncake_core.store import StoreError
    from mooncake_core.store.client.async_master import MasterClient

    cfg = load(config)
    address, secret = _master(cfg)

    async def go() -> list[str]:
        async with MasterClient.for_target(
            address, client_id="mooncake-node-cli", secret=secret
        ) as mc:
            return await undrain_node(mc, node)

    try:
        segs = asyncio.run(go())
    except (StoreError, ValueError) as exc:
        fail(str(exc))
    out.print(f"{node}: {', '.join(segs)} MOUNTED (placement resumed)", highlight=False)
