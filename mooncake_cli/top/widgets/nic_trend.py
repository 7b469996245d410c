"""Live sparkline of the NIC under the cursor."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Label, Sparkline

from mooncake_core.fmt import byte_rate
from mooncake_core.telemetry import NicView

__all__ = ["NicTrend"]


class NicTrend(Widget):
    """A label and a :class:`Sparkline` of TE tx+rx over the last polls."""

    def compose(self) -> ComposeResult:
        yield Label("no NIC selected", id="trend-label")
        yield Sparkline([], id="trend-spark")

    def show(self, nic: NicView | None) -> None:
        """Draw ``nic``'s history (or clear)."""
        label = self.query_one("#trend-label", Label)
        spark = self.query_one("#trend-spark", Sparkline)
        if nic is None:
            label.update("no NIC selected")
            spark.data = []
            return
        peak = max(nic.history) if nic.history else 0.0
        label.update(
            f"{nic.node} {nic.nic}: TE {byte_rate(nic.te_total_bps, compact=True)} now, "
            f"peak {byte_rate(peak, compact=True)} over {len(nic.history)} polls"
        )
        spark.data = list(nic.history)
