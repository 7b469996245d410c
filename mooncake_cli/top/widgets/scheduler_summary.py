"""Scheduler totals: decisions/s, admitted, in flight, TTFT prediction error, rejections."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from mooncake_core.fmt import per_s, seconds, signed_seconds
from mooncake_core.telemetry import SchedulerView

__all__ = ["SchedulerSummary", "scheduler_text"]


def scheduler_text(s: SchedulerView) -> Text:
    """The summary as rich text (also used by ``--once``)."""
    if not s.available:
        return Text("scheduler: no conductor telemetry and no audit database", style="bold red")
    t = Text()
    if s.policy:
        t.append(f"{s.policy}", style="bold")
        t.append(f" / {s.admission}  ")
    t.append(f"decisions {per_s(s.decisions_per_s)}/s")
    if s.decisions_total is not None:
        t.append(f" ({s.decisions_total} total, {s.admitted_total} admitted, ")
        t.append(f"{s.in_flight} in flight)")
    t.append(f"  [{s.source}]\n", style="dim")
    # The one definition (docs/audit.md): bias = mean of actual - predicted.
    t.append("TTFT error (actual − predicted): ")
    t.append(
        f"MAE {seconds(s.ttft_mae_s, compact=True)}, bias {signed_seconds(s.ttft_bias_s, compact=True)}\n"
    )
    t.append(f"rejected {s.rejected_total}", style="bold red" if s.rejected_total else "")
    if s.rejected:
        t.append(": " + ", ".join(f"{reason} x{n}" for reason, n in s.rejected[:3]))
    return t


class SchedulerSummary(Static):
    """The screen calls :meth:`show` with the scheduler view."""

    def show(self, s: SchedulerView) -> None:
        """Redraw."""
        self.update(scheduler_text(s))
