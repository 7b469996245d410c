"""Screen 3: Scheduler (decisions/s, TTFT, rejections, queues, last decisions)."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Label

from mooncake_core.telemetry import ClusterView

from ..widgets import DecisionTable, QueueTable, SchedulerSummary, SortableTable
from .base import TopScreen

__all__ = ["SchedulerScreen"]


class SchedulerScreen(TopScreen):
    """Conductor telemetry and the audit trail; Enter or ``e`` explains a decision."""

    SCREEN_TITLE = "3 Scheduler"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("e", "explain", "Explain")]

    def body(self) -> ComposeResult:
        yield SchedulerSummary(
            "waiting for the conductor...", id="sched-summary", classes="summary"
        )
        yield QueueTable(id="queues")
        yield Label("Last decisions (Enter/e: audit explain)", classes="section")
        yield DecisionTable(id="decisions")

    def main_table(self) -> SortableTable:
        return self.query_one(DecisionTable)

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(DecisionTable).focus()

    def draw(self, view: ClusterView) -> None:
        self.query_one(SchedulerSummary).show(view.scheduler)
        self.query_one(QueueTable).show(view)
        self.query_one(DecisionTable).show(view)

    def action_explain(self) -> None:
        """Open ``audit explain`` for the decision under the cursor."""
        rid = self.query_one(DecisionTable).selected_key
        if rid is None:
            self.notify("no decision selected", severity="warning")
            return
        self.top.explain(rid)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "decisions":
            self.action_explain()
