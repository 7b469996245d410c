"""Store segments: the client that mounted each, tier, state, capacity, usage, objects.

Words as everywhere else: a segment's *state* is MOUNTED/DRAINING/DRAINED, its *client*
the client id that mounted it (`node ls` prints the node name beside it), and a
component's *health* is healthy/unreachable (the Nodes screen: whether its
telemetry answered the last poll).
"""

from __future__ import annotations

from rich.text import Text

from mooncake_core.fmt import pct, size
from mooncake_core.telemetry import ClusterView, SegmentView

from .sortable_table import Column, Row, SortableTable

__all__ = ["SegmentTable"]


class SegmentTable(SortableTable):
    """One row per segment."""

    COLUMNS = (
        Column("Segment", 10, identity=True),
        Column("Client", 9, identity=True),
        Column("Tier", 4),
        Column("State", 8),
        Column("Cap", 7, descending=True),
        Column("Used", 7, descending=True),
        Column("Use", 4, descending=True),
        Column("Keys", 5, descending=True),
    )

    def show(self, view: ClusterView) -> None:
        """Rebuild the rows from ``view``."""
        self.set_rows([_row(s) for s in view.store.segments])


def _row(s: SegmentView) -> Row:
    state = Text(s.state, style="" if s.state in ("OK", "MOUNTED") else "bold yellow")
    # The store summary above has the bars; a full-length client id needs the room.
    use = Text(pct(s.usage), style="red" if s.usage > 0.9 else "")
    return Row(
        key=s.name,
        cells=(
            s.name,
            s.client,
            s.tier,
            state,
            size(s.capacity, compact=True),
            size(s.used, compact=True),
            use,
            str(s.keys),
        ),
        sort=(s.name, s.client, s.tier, s.state, s.capacity, s.used, s.usage, s.keys),
        search=f"{s.name} {s.client} {s.tier} {s.state}",
    )
