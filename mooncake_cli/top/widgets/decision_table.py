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
        Column("Pred", 5, descending=True),
        Column("Actual", 6, descending=True),
        Column("Result", 10),
    )

    RESULT_WIDTH = (4, 30)
    """Narrowest and widest Result column: it takes what the identity columns leave."""
    SCROLLBAR = 2

    def show(self, view: ClusterView) -> None:
        """Rebuild the rows from ``view``."""
        rows = [_row(d) for d in view.scheduler.last_decisions]
        self._fit_result(rows)
        self.set_rows(rows)

    def _fit_result(self, rows: list[Row]) -> None:
        """Give the Result column the room the others leave (ids are never cut): at 80
        columns ``429 deco`` or just ``429``, wide terminals the whole reason; a
        vertical scrollbar's room is always kept, so no horizontal one appears."""
        if not self.size.width or "Result" not in self.columns:
            return
        used = self.SCROLLBAR + 2 * self.cell_padding * len(self.COLUMNS)
        for i, c in enumerate(self.COLUMNS[:-1]):
            if c.identity:
                used += max([len(c.label)] + [len(_plain(r.cells[i])) for r in rows])
            else:
                used += c.width or len(c.label)
        lo, hi = self.RESULT_WIDTH
        self.columns["Result"].width = max(lo, min(hi, self.size.width - used))  # type: ignore[index]


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


def _plain(cell: str | Text) -> str:
    return cell.plain if isinstance(cell, Text) else cell
