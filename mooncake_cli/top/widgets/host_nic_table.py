"""OS interfaces per host (kernel counters from /proc/net/dev, all traffic)."""

from __future__ import annotations

from rich.text import Text

from mooncake_core.fmt import si
from mooncake_core.telemetry import ClusterView, HostNicView

from .sortable_table import Column, Row, SortableTable

__all__ = ["HostNicTable"]


class HostNicTable(SortableTable):
    """One row per (host, interface)."""

    COLUMNS = (
        Column("Host", 14, identity=True),
        Column("Iface", 10, identity=True),
        Column("tx B/s", 6, descending=True),
        Column("rx B/s", 6, descending=True),
        Column("Errors", 6, descending=True),
        Column("Drops", 6, descending=True),
    )

    def show(self, view: ClusterView) -> None:
        """Rebuild the rows from ``view``."""
        self.set_rows([_row(h) for h in view.host_nics])


def _row(h: HostNicView) -> Row:
    return Row(
        key=f"{h.hostname}|{h.iface}",
        cells=(
            h.hostname,
            h.iface,
            si(h.tx_bps),
            si(h.rx_bps),
            Text(str(h.errors), style="red" if h.errors else ""),
            str(h.drops),
        ),
        sort=(h.hostname, h.iface, h.tx_bps, h.rx_bps, h.errors, h.drops),
        search=f"{h.hostname} {h.iface}",
    )
