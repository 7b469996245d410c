"""A DataTable rebuilt from rows on every refresh, with a sort column and a text filter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from rich.text import Text
from textual.widgets import DataTable

__all__ = ["Column", "Row", "SortableTable"]


@dataclass(frozen=True, slots=True)
class Column:
    """One column: header label, width (None: auto) and whether it sorts descending.

    An ``identity`` column (a name, an id) is sized to its content, never cut: ``width``
    is only its width before the first rows arrive.
    """

    label: str
    width: int | None = None
    descending: bool = False
    identity: bool = False


@dataclass(frozen=True, slots=True)
class Row:
    """One row: a stable key (keeps the cursor across refreshes), the cells, sort values
    (one per column) and the text the filter matches."""

    key: str
    cells: tuple[str | Text, ...]
    sort: tuple[Any, ...]
    search: str


class SortableTable(DataTable[str | Text]):
    """Subclasses set ``COLUMNS``; the screen calls :meth:`set_rows` with fresh rows."""

    COLUMNS: ClassVar[tuple[Column, ...]] = ()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.sort_index = 0
        self.filter_text = ""
        self._rows: list[Row] = []

    def on_mount(self) -> None:
        for c in self.COLUMNS:
            self.add_column(c.label, width=None if c.identity else c.width, key=c.label)

    @property
    def sort_label(self) -> str:
        """Header of the sort column."""
        return self.COLUMNS[self.sort_index].label if self.COLUMNS else ""

    def cycle_sort(self) -> str:
        """Sort by the next column; returns its label."""
        if self.COLUMNS:
            self.sort_index = (self.sort_index + 1) % len(self.COLUMNS)
            self._render_rows()
        return self.sort_label

    def set_filter(self, text: str) -> None:
        """Show only rows whose text (any visible cell, or the row's search text) contains
        ``text`` (case-insensitive)."""
        self.filter_text = text.strip().lower()
        self._render_rows()

    def set_rows(self, rows: list[Row]) -> None:
        """Replace the rows (sorted and filtered), keeping the cursor on the same key."""
        self._rows = rows
        self._render_rows()

    @property
    def selected_key(self) -> str | None:
        """Key of the row under the cursor (``None`` when empty)."""
        if self.row_count == 0:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:  # the cursor can point past a shrunk table for one frame
            return None

    def _render_rows(self) -> None:
        keep = self.selected_key
        rows = [r for r in self._rows if self.filter_text in _haystack(r)]
        if self.COLUMNS:
            col = self.COLUMNS[self.sort_index]
            rows.sort(key=lambda r: _sortable(r.sort[self.sort_index]), reverse=col.descending)
        self.clear()
        for r in rows:
            self.add_row(*r.cells, key=r.key)
        if keep is not None:
            for i, r in enumerate(rows):
                if r.key == keep:
                    self.move_cursor(row=i, animate=False)
                    break


def _haystack(r: Row) -> str:
    cells = " ".join(c.plain if isinstance(c, Text) else c for c in r.cells)
    return f"{r.search} {cells}".lower()


def _sortable(value: Any) -> tuple[int, Any]:
    # None sorts last whatever the direction of the other values' type.
    if value is None:
        return (0, 0)
    if isinstance(value, int | float):
        return (1, value)
    return (2, str(value))
