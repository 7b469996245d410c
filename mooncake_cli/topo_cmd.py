"""`mooncake topo`: discover this host's NIC/NUMA/GPU affinity matrix and render one.

stdout carries only the JSON (``mooncake topo discover > topology.json``); warnings about
skipped devices go to stderr.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .common import err, fail, out, write_stdout


def _markup_safe(text: str) -> str:
    """Escape rich markup: messages quote JSON like ``[["a"]]`` that must print verbatim."""
    from rich.markup import escape as _escape

    return _escape(text)


if TYPE_CHECKING:
    from rich.table import Table

    from mooncake_core.topology import Inventory, Matrix

app = typer.Typer(help="Host topology: NIC/NUMA/GPU affinity matrix.", no_args_is_help=True)


class TopoFormat(StrEnum):
    """Output of ``topo discover``."""

    matrix = "matrix"
    full = "full"


@app.command("discover")
def discover(
    fmt: Annotated[
        TopoFormat,
        typer.Option(
            "--format",
            help="matrix: the upstream-compatible matrix JSON; full: {matrix, inventory}.",
        ),
    ] = TopoFormat.matrix,
    sysfs_root: Annotated[
        Path,
        typer.Option("--sysfs-root", help="Directory holding sys/ (a fixture or another root)."),
    ] = Path("/"),
    include_loopback: Annotated[
        bool, typer.Option("--include-loopback", help="Also list the loopback interface lo.")
    ] = False,
) -> None:
    """Print this host's NIC preference matrix as JSON (redirect it to topology.json)."""
    from mooncake_core.topology import TopologyError, build_matrix
    from mooncake_core.topology import discover as run_discovery

    try:
        inv = run_discovery(sysfs_root, include_loopback=include_loopback)
    except TopologyError as exc:
        fail(str(exc), 2)
    for line in inv.warnings:
        err.print(f"[yellow]warning:[/] {_markup_safe(line)}", highlight=False, soft_wrap=True)
    matrix = build_matrix(inv)
    if not matrix:
        err.print("[yellow]warning:[/] no NIC found; the matrix is empty", highlight=False)
    if fmt is TopoFormat.matrix:
        write_stdout(_matrix_json(matrix))
    else:
        write_stdout(json.dumps({"matrix": matrix, "inventory": inv.to_dict()}, indent=2))


def _matrix_json(matrix: Matrix) -> str:
    """The matrix with one location per line (diff-friendly, like upstream's examples)."""
    if not matrix:
        return "{}"
    lines = [f"  {json.dumps(loc)}: {json.dumps(entry)}" for loc, entry in matrix.items()]
    return "{\n" + ",\n".join(lines) + "\n}"


@app.command("show")
def show(
    file: Annotated[
        Path, typer.Argument(help="A matrix or --format full JSON file.", show_default=False)
    ],
) -> None:
    """Render a topology file (matrix, plus the inventory if present) as tables."""
    from mooncake_core.topology import Inventory, TopologyError, validate_matrix

    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        fail(f"{file}: cannot read ({exc.strerror or exc})", 2)
    except (ValueError, UnicodeError) as exc:
        fail(f"{file}: not valid JSON ({exc})", 2)
    try:
        matrix = validate_matrix(data, str(file))
        inv = None
        if isinstance(data, dict) and "inventory" in data:
            inv = Inventory.from_dict(data["inventory"], f"{file}: inventory")
    except TopologyError as exc:
        fail(str(exc), 2)
    out.print(_matrix_table(matrix, file))
    if inv is not None:
        for table in _inventory_tables(inv):
            out.print(table)
        for line in inv.warnings:
            err.print(
                f"[yellow]warning (at discovery):[/] {_markup_safe(line)}",
                highlight=False,
                soft_wrap=True,
            )


def _table(title: str, columns: tuple[str, ...], whole: tuple[str, ...] = ()) -> Table:
    from rich import box
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, collapse_padding=True)
    for col in columns:
        # Fold rather than truncate: a NIC name cut to "mlx5_..." would hide the answer.
        # Columns in ``whole`` (names, addresses) are never split; the others give way.
        table.add_column(col, overflow="fold", no_wrap=col in whole)
    return table


def _matrix_table(matrix: Matrix, file: Path) -> Table:
    table = _table(f"NIC preference ({file.name})", ("location", "preferred", "secondary"))
    for location, (preferred, secondary) in matrix.items():
        table.add_row(location, " ".join(preferred) or "-", " ".join(secondary) or "-")
    if not matrix:
        table.add_row("(empty)", "-", "-")
    return table


def _na(value: object) -> str:
    return "-" if value is None else str(value)


def _pci(path: tuple[str, ...] | None) -> str:
    """Last PCI path component (the device's own bus id); the full path is in the JSON."""
    return "-" if path is None else path[-1]


def _inventory_tables(inv: Inventory) -> list[Table]:
    nodes = _table("NUMA nodes", ("node", "cpus"))
    for node in inv.numa_nodes:
        nodes.add_row(str(node.id), _cpulist(node.cpus))
    tables = [nodes]
    if inv.rdma_devices:
        rdma = _table("RDMA devices", ("device", "pci", "numa", "ports", "netdevs"))
        for dev in inv.rdma_devices:
            ports = ", ".join(
                f"{p.number}:{_na(p.state)} {_na(p.rate_gbps)}Gb/s {_na(p.link_layer)}"
                for p in dev.ports
            )
            rdma.add_row(
                dev.name,
                _pci(dev.pci_path),
                _na(dev.numa_node),
                ports or "-",
                " ".join(dev.netdevs) or "-",
            )
        tables.append(rdma)
    ifaces = _table(
        "Network interfaces",
        ("iface", "kind", "pci", "numa", "state", "Gb/s", "mtu", "ipv4"),
        whole=("iface", "kind", "pci", "ipv4"),
    )
    for i in inv.interfaces:
        ifaces.add_row(
            i.name,
            i.kind,
            _pci(i.pci_path),
            _na(i.numa_node),
            i.operstate,
            "-" if i.speed_mbps is None else f"{i.speed_mbps / 1000:g}",
            _na(i.mtu),
            " ".join(i.ipv4) or "-",
        )
    tables.append(ifaces)
    if inv.gpus:
        gpus = _table("GPUs (PCI bus order)", ("cuda", "bus id", "vendor", "device", "numa"))
        for g in inv.gpus:
            gpus.add_row(_na(g.cuda_index), g.bus_id, g.vendor, _na(g.device), _na(g.numa_node))
        tables.append(gpus)
    return tables


def _cpulist(cpus: tuple[int, ...]) -> str:
    """Compact ``0-3,8`` form of a CPU id list."""
    ranges: list[str] = []
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        ranges.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(ranges) or "-"
