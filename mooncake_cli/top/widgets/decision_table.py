"""Last scheduling decisions (audit): chosen pair, predicted vs actual TTFT, rejections."""

from __future__ import annotations

import time

from rich.text import Text

from mooncake_core.fmt import seconds
from mooncake_core.telemetry import ClusterView, DecisionView

from .sortable_table import Column, Row, SortableTable

__all__ = ["DecisionTable"]


class DecisionTable(SortableTable):
    """One row per decision, newest first; Enter opens ``audit explain``."""

    COLUMNS = (
        Column("Time", 8, descending=True),
        Column("Request", 12, identity=True),
        Column("Prefill", 9, identity=True),
        Column("Decode", 8, identity=True),
        Column("Pred", 6, descending=True),
        Column("Actual", 6, descending=True),
        Column("Result", 10),
    )

    def show(self, view: ClusterView) -> None:
        """Rebuild the rows from ``view``."""
        self.set_rows([_row(d) for d in view.scheduler.last_decisions])


def _row(d: DecisionView) -> Row:
    result = (
        Text("ok", style="green")
        if d.admitted
        else Text(f"429 {d.reject_reason or ''}", style="bold red")
    )
    return Row(
        key=d.request_id,
        cells=(
            time.strftime("%H:%M:%S", time.localtime(d.time)),
            d.request_id,
            d.prefill or "-",
            d.decode or "-",
            seconds(d.predicted_ttft_s, compact=True),
            seconds(d.actual_ttft_s, compact=True),
            result,
        ),
        sort=(
            d.time,
            d.request_id,
            d.prefill,
            d.decode,
            d.predicted_ttft_s,
            d.actual_ttft_s,
            d.admitted,
        ),
        search=f"{d.request_id} {d.prefill} {d.decode} {d.reject_reason or ''}",
    )
