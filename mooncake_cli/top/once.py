"""``mooncake top --once``: one snapshot printed with rich (or as JSON) for scripts."""

from __future__ import annotations

import json
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from mooncake_core.fmt import ago, duration, pct, seconds, si, size
from mooncake_core.telemetry import ClusterView, to_plain

from ..tables import fit
from .gauges import spark
from .widgets.scheduler_summary import scheduler_text
from .widgets.store_summary import store_text
from .widgets.transport_table import TransportTable, transport_cells

__all__ = ["render_view", "view_json"]


def view_json(view: ClusterView) -> str:
    """The whole view as indented JSON (the same fields as the dataclasses)."""
    data: Any = to_plain(view)
    return json.dumps(data, indent=1, sort_keys=True)


def _table(title: str, columns: tuple[str, ...]) -> Table:
    # Compact; one line per row where it fits (fit() wraps other columns, never a name).
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in columns:
        t.add_column(col, no_wrap=True)
    return t


def render_view(
    view: ClusterView, width: int | None = None, console: Console | None = None
) -> RenderableType:
    """Nodes, NICs, store and scheduler as rich tables, each fitted to ``width`` columns
    (``None``: natural width) without cutting a node name or a request id."""
    console = console or Console()

    def fitted(table: Table, *keep: str) -> RenderableType:
        return fit(table, keep, width, console)

    nodes = _table(
        f"Nodes ({view.nodes_up}/{len(view.nodes)} healthy)",
        ("Name", "Role", "Health", "Version", "Uptime", "Seen", "Detail"),
    )
    for n in view.nodes:
        nodes.add_row(
            n.name,
            n.role,
            Text("healthy", style="green") if n.up else Text("unreachable", style="bold red"),
            (n.version or "-").removeprefix("mooncake-py "),
            duration(n.uptime_s),
            "now" if n.last_seen == view.taken_at else ago(n.last_seen, view.taken_at),
            n.endpoint if n.up else (n.error or ""),
        )
    nics = _table(
        f"NICs (bytes/s, K M G = 1e3 1e6 1e9, over {view.window_s:.0f}s)",
        ("Node", "NIC/iface", "TE tx", "TE rx", "OS tx", "OS rx", "Share", "Err", "Trend"),
    )
    for nic in view.nics:
        flag = " PAUSED" if nic.paused else " SLOW" if nic.slow else ""
        nics.add_row(
            nic.node + flag,
            f"{nic.nic}/{nic.iface}" if nic.iface else nic.nic,
            si(nic.te_tx_bps),
            si(nic.te_rx_bps),
            si(nic.os_tx_bps),
            si(nic.os_rx_bps),
            pct(nic.share),
            str(nic.errors),
            spark(nic.history, 8),
        )
    transports = _table(
        "Transports (own: its requests; served: peers' through it)",
        tuple(c.label for c in TransportTable.COLUMNS),
    )
    for t in view.transports:
        transports.add_row(*transport_cells(t))
    hosts = _table("OS interfaces (bytes/s)", ("Host", "Iface", "tx", "rx", "Errors", "Drops"))
    for h in view.host_nics:
        hosts.add_row(h.hostname, h.iface, si(h.tx_bps), si(h.rx_bps), str(h.errors), str(h.drops))
    segs = _table(
        "Store segments", ("Segment", "Client", "Tier", "State", "Capacity", "Used", "Keys")
    )
    for s in view.store.segments:
        segs.add_row(
            s.name,
            s.client,
            s.tier,
            s.state,
            size(s.capacity, compact=True),
            size(s.used, compact=True),
            str(s.keys),
        )
    dec = _table(
        "Last decisions", ("Request", "Prefill", "Decode", "Pred TTFT", "Actual", "Result")
    )
    for d in view.scheduler.last_decisions[:10]:
        dec.add_row(
            d.request_id,
            d.prefill or "-",
            d.decode or "-",
            seconds(d.predicted_ttft_s, compact=True),
            seconds(d.actual_ttft_s, compact=True),
            "ok" if d.admitted else f"429 {d.reject_reason}",
        )
    return Group(
        fitted(nodes, "Name"),
        fitted(nics, "Node", "NIC/iface"),
        fitted(transports, "Node", "Transport"),
        fitted(hosts, "Host", "Iface"),
        Text("Store", style="bold"),
        store_text(view.store),
        fitted(segs, "Segment", "Client"),
        Text("Scheduler", style="bold"),
        scheduler_text(view.scheduler),
        fitted(dec, "Request", "Prefill", "Decode"),
    )
