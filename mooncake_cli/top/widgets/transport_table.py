"""Per-transport traffic of each component: what its requests moved, what peers moved
through it (same-host shm copies included, which no NIC counter sees)."""

from __future__ import annotations

from mooncake_core.fmt import byte_rate, size
from mooncake_core.telemetry import ClusterView, TransportView

from .sortable_table import Column, Row, SortableTable

__all__ = ["TransportTable", "transport_cells"]


class TransportTable(SortableTable):
    """One row per (component, transport) that moved anything."""

    COLUMNS = (
        Column("Node", 12, identity=True),
        Column("Transport", 9, identity=True),
        Column("Own", 8, descending=True),
        Column("Own rate", 10, descending=True),
        Column("Served", 8, descending=True),
        Column("Served rate", 11, descending=True),
    )

    def show(self, view: ClusterView) -> None:
        """Rebuild the rows from ``view``."""
        self.set_rows([_row(t) for t in view.transports])


def transport_cells(t: TransportView) -> tuple[str, ...]:
    """One row's cells, in COLUMNS order (the TUI table and ``top --once`` alike)."""
    return (
        t.node,
        t.transport,
        size(t.bytes, compact=True),
        byte_rate(t.bps, compact=True),
        size(t.served_bytes, compact=True),
        byte_rate(t.served_bps, compact=True),
    )


def _row(t: TransportView) -> Row:
    return Row(
        key=f"{t.node}|{t.transport}",
        cells=transport_cells(t),
        sort=(t.node, t.transport, t.bytes, t.bps, t.served_bytes, t.served_bps),
        search=" ".join(
            (t.node, t.transport, size(t.bytes, compact=True), size(t.served_bytes, compact=True))
        ),
    )
