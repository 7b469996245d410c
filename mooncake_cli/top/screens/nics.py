"""Screen 1: NICs (Transfer Engine and OS rates, share, errors, trend)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import DataTable, Label

from mooncake_core.telemetry import ClusterView

from ..widgets import HostNicTable, NicTable, NicTrend, SortableTable, TransportTable
from .base import TopScreen

__all__ = ["NicsScreen"]


class NicsScreen(TopScreen):
    """Per-NIC bandwidth in bytes/s, decimal units (1G = 1e9), over the sliding window."""

    SCREEN_TITLE = "1 NICs"

    def body(self) -> ComposeResult:
        yield Label(
            "Transfer Engine NICs (bytes/s, K M G = 1e3 1e6 1e9; OS = kernel counters)",
            classes="section",
        )
        yield NicTable(id="nics")
        yield NicTrend(id="trend")
        yield Label(
            "Transports (own: this component's requests; served: peers' through it)",
            classes="section",
        )
        yield TransportTable(id="transports")
        yield Label("OS interfaces per host", classes="section")
        yield HostNicTable(id="host-nics")

    def main_table(self) -> SortableTable:
        return self.query_one(NicTable)

    def draw(self, view: ClusterView) -> None:
        table = self.query_one(NicTable)
        table.show(view)
        self.query_one(TransportTable).show(view)
        self.query_one(HostNicTable).show(view)
        self.query_one(NicTrend).show(table.nic(view))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "nics" and self.top.view is not None:
            self.query_one(NicTrend).show(self.query_one(NicTable).nic(self.top.view))
