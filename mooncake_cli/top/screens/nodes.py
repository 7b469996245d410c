"""Screen 4: Nodes (health, version, uptime, last seen)."""

from __future__ import annotations

from textual.app import ComposeResult

from mooncake_core.telemetry import ClusterView

from ..widgets import NodeTable, SortableTable
from .base import TopScreen

__all__ = ["NodesScreen"]


class NodesScreen(TopScreen):
    """Every polled component; one that stops answering turns DOWN at the next poll."""

    SCREEN_TITLE = "4 Nodes"

    def body(self) -> ComposeResult:
        yield NodeTable(id="nodes")

    def main_table(self) -> SortableTable:
        return self.query_one(NodeTable)

    def draw(self, view: ClusterView) -> None:
        self.query_one(NodeTable).show(view)
