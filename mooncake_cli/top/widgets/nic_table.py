"""Per-NIC table: Transfer Engine and OS rates side by side, share, errors, sparkline."""

from __future__ import annotations

from rich.text import Text

from mooncake_core.fmt import pct, si
from mooncake_core.telemetry import ClusterView, NicView

from ..gauges import spark
from .sortable_table import Column, Row, SortableTable

__all__ = ["NicTable"]

TREND_WIDTH = 8


class NicTable(SortableTable):
    """One row per (component, NIC); a NIC far below its peers is highlighted."""

    COLUMNS = (
        Column("Node", 9, identity=True),
        Column("NIC/iface", 13, identity=True),
        Column("TE tx", 5, descending=True),
        Column("TE rx", 5, descending=True),
        Column("OS tx", 5, descending=True),
        Column("OS rx", 5, descending=True),
        Column("Share", 5, descending=True),
        Column("Err", 3, descending=True),
        Column("Trend", TREND_WIDTH),
    )

    def show(self, view: ClusterView) -> None:
        """Rebuild the rows from ``view``."""
        self.set_rows([_row(n) for n in view.nics])

    def nic(self, view: ClusterView) -> NicView | None:
        """The NIC under the cursor in ``view``."""
        key = self.selected_key
        return next((n for n in view.nics if f"{n.node}|{n.nic}" == key), None)


def _row(n: NicView) -> Row:
    style = "bold red" if n.paused else "bold yellow" if n.slow else ""
    flag = " PAUSED" if n.paused else " SLOW" if n.slow else ""
    name = f"{n.nic}/{n.iface}" if n.iface else n.nic
    err = Text(str(n.errors), style="red" if n.errors else "")
    cells = (
        Text(n.node, style=style),
        Text(name, style=style),
        si(n.te_tx_bps),
        si(n.te_rx_bps),
        si(n.os_tx_bps),
        si(n.os_rx_bps),
        pct(n.share),
        err,
        # The flag takes the trend's cells: in the Node column it would widen the table
        # past 80 columns (or, at a fixed width, cut the node's name).
        Text(flag.strip(), style=style)
        if flag
        else Text(spark(n.history, TREND_WIDTH), style="green"),
    )
    return Row(
        key=f"{n.node}|{n.nic}",
        cells=cells,
        sort=(
            n.node,
            n.nic,
            n.te_tx_bps,
            n.te_rx_bps,
            n.os_tx_bps,
            n.os_rx_bps,
            n.share,
            n.errors,
            n.te_total_bps,
        ),
        search=f"{n.node} {n.nic} {n.iface}",
    )
