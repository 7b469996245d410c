"""Components: health, version, uptime, last seen, poll latency."""

from __future__ import annotations

from rich.text import Text

from mooncake_core.fmt import duration, seconds
from mooncake_core.telemetry import ClusterView, NodeView

from .sortable_table import Column, Row, SortableTable

__all__ = ["NodeTable"]


class NodeTable(SortableTable):
    """One row per polled component; unreachable ones in red with the reason."""

    COLUMNS = (
        # 80 columns: the widths and 2 of padding per column; "unreachable" whole.
        Column("Name", 10, identity=True),
        Column("Role", 9),
        Column("Health", 11),
        Column("Version", 7),
        Column("Uptime", 6, descending=True),
        Column("Seen", 5),
        Column("Poll", 5, descending=True),
        Column("Detail", 9),
    )

    def show(self, view: ClusterView) -> None:
        """Rebuild the rows from ``view``."""
        self.set_rows([_row(n, view.taken_at) for n in view.nodes])


def _row(n: NodeView, now: float) -> Row:
    state = Text("healthy", style="bold green") if n.up else Text("unreachable", style="bold red")
    detail = n.endpoint if n.up else (n.error or "")
    return Row(
        key=n.name,
        cells=(
            n.name,
            n.role,
            state,
            (n.version or "-").removeprefix("mooncake-py "),
            duration(n.uptime_s),
            "never"
            if n.last_seen is None
            else "now"
            if n.last_seen == now
            else duration(now - n.last_seen),
            seconds(n.latency_s, compact=True),
            Text(detail, style="" if n.up else "red"),
        ),
        sort=(n.name, n.role, n.up, n.version, n.uptime_s, n.last_seen, n.latency_s, detail),
        search=f"{n.name} {n.role} {'healthy' if n.up else 'unreachable'} {n.url}",
    )
