"""`mooncake node ...`: list store nodes, take one out of placement (drain)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from .common import ConfigOption, JsonOption, err, fail, load, out, write_stdout

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.progress import Progress, TaskID

    from mooncake_core.config import ClusterConfig

app = typer.Typer(help="Store nodes: list them, drain one (no new placement, report what is left).")

NodeArg = Annotated[str, typer.Argument(help="Store node name, e.g. store-0.")]


def _master(cfg: ClusterConfig) -> tuple[str, bytes | None]:
    secret = None
    if cfg.secret_path.exists():
        secret = cfg.secret_path.read_bytes().strip() or None
    return f"{cfg.host(cfg.master.host).address}:{cfg.master.port}", secret


@app.command("ls")
def ls(config: ConfigOption = None, json_out: JsonOption = False) -> None:
    """Every mounted segment: node, state, usage, objects."""
    import asyncio
    import json

    from mooncake_core.cluster.drain import node_of
    from mooncake_core.store import StoreError
    from mooncake_core.store.master_client import MasterClient

    cfg = load(config)
    address, secret = _master(cfg)

    async def go() -> list[dict[str, object]]:
        async with MasterClient(address, client_id="mooncake-node-cli", secret=secret) as mc:
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

    cols = ("segment", "node", "client", "state", "used", "capacity", "objects", "address")
    table = Table(*cols)
    for r in rows:
        table.add_row(*(str(r[k]) for k in cols))
    out.print(table)


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
        typer.Option("--wait", min=0, help="Seconds to wait for DRAINED (0: do not wait)."),
    ] = 0.0,
) -> None:
    """Stop placing on a store node (DRAINING: still readable) and report what is left on it.

    Exits 0 once DRAINED; 3 when objects remain (copying them off needs master support
    that this version does not have: see docs/cluster.md).
    """
    import asyncio
    import json
    import time
    from dataclasses import asdict

    from rich.progress import Progress

    from mooncake_core.cluster.drain import NodeScan, drain_node, scan_node
    from mooncake_core.store import StoreError
    from mooncake_core.store.master_client import MasterClient

    cfg = load(config)
    workers = {w.name for w in (*cfg.prefill_workers, *cfg.decode_workers)}
    if node in workers:
        fail(
            f"{node!r} is a worker: draining workers needs a conductor endpoint that stops "
            "routing to it, which this version does not have"
        )
    address, secret = _master(cfg)

    async def go() -> NodeScan:
        async with MasterClient(address, client_id="mooncake-node-cli", secret=secret) as mc:
            segs = await drain_node(mc, node)
            err.print(
                f"{node}: {', '.join(segs)} DRAINING (readable, no new objects)", highlight=False
            )
            deadline = time.monotonic() + wait
            while True:
                with Progress(console=err, transient=True) as bar:
                    task = bar.add_task(f"scanning objects on {node}", total=None)
                    scan = await scan_node(mc, node, _progress(bar, task))
                if scan.drained or time.monotonic() >= deadline:
                    return scan
                await asyncio.sleep(1.0)

    try:
        scan = asyncio.run(go())
    except (StoreError, ValueError) as exc:
        fail(str(exc))
    if json_out:
        write_stdout(json.dumps({**asdict(scan), "drained": scan.drained}, indent=1))
    else:
        out.print(
            f"{node}: {'/'.join(scan.states)}; {scan.on_node} of {scan.scanned} objects still on it, "
            f"{len(scan.sole)} with no replica elsewhere",
            highlight=False,
        )
    if not scan.drained:
        err.print(
            "objects are not copied off in this version (the master has no read-safe replica "
            "move); they stay readable here until removed or evicted",
            highlight=False,
        )
        raise typer.Exit(3)
