"""Screen 2: Store (capacity and usage per segment and tier, objects, pins, evictions)."""

from __future__ import annotations

from textual.app import ComposeResult

from mooncake_core.telemetry import ClusterView

from ..widgets import SegmentTable, SortableTable, StoreSummary
from .base import TopScreen

__all__ = ["StoreScreen"]


class StoreScreen(TopScreen):
    """The master's view of the store."""

    SCREEN_TITLE = "2 Store"

    def body(self) -> ComposeResult:
        yield StoreSummary("waiting for the master...", id="store-summary", classes="summary")
        yield SegmentTable(id="segments")

    def main_table(self) -> SortableTable:
        return self.query_one(SegmentTable)

    def draw(self, view: ClusterView) -> None:
        self.query_one(StoreSummary).show(view.store)
        self.query_one(SegmentTable).show(view)
