"""Tables that fit the terminal without cutting a name or an id.

rich squeezes a table that is wider than the console by cutting every column with an
ellipsis (``stor…`` for both store-0 and store-1). :func:`fit` instead keeps the identity
columns (names, ids, keys) at their full width and gives the rest of the width to the
other columns, in this order until the table fits:

1. as built;
2. a compact style (no box lines, two spaces between columns, then one);
3. the other columns wrap at word boundaries (when their longest words fit);
4. each row folds into two lines: its identities, then ``header value`` pairs, indented
   and wrapped (only a word longer than the line is folded, never an ellipsis); the
   caption follows, wrapped.

A pipe without ``COLUMNS`` is fitted to 80 columns like a terminal of that width (a
person reads it through ``less`` or in a log; names and ids stay whole on a row's first
line, so ``grep`` still finds them); ``COLUMNS`` widens it, and ``--json`` stays the
machine format.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.text import Text

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["fit", "print_table", "table_width"]

_NATURAL = 10_000
PIPE_WIDTH = 80
"""The width of output to a pipe or file when ``COLUMNS`` does not say."""


def table_width(console: Console) -> int:
    """The width tables must fit: the terminal's, or ``COLUMNS`` when set; else (a pipe
    or a file) :data:`PIPE_WIDTH`."""
    if console.is_terminal or os.environ.get("COLUMNS", "").strip().isdigit():
        return console.width
    return PIPE_WIDTH


def _cell_text(console: Console, cell: object) -> Text:
    if isinstance(cell, Text):
        return cell
    return console.render_str(str(cell))


def _widths(console: Console, table: Table) -> list[tuple[int, int]]:
    """(longest word, natural width) of each column, header included, padding excluded."""
    opts = console.options.update_width(_NATURAL)
    found = []
    for col in table.columns:
        cells = [col.header, *col.cells]
        sizes = [Measurement.get(console, opts, c) for c in cells]
        found.append((max(s.minimum for s in sizes), max(s.maximum for s in sizes)))
    return found


def _overhead(table: Table) -> int:
    pad = sum(table._get_padding_width(i) for i in range(len(table.columns)))
    return pad + table._extra_width


def fit(table: Table, keep: Collection[str], width: int | None, console: Console) -> RenderableType:
    """``table`` made to fit ``width`` columns (``None``: as is) with the columns whose
    header is in ``keep`` never cut or wrapped."""
    cols = table.columns
    ident = [str(c.header) in keep for c in cols]
    for c, is_id in zip(cols, ident, strict=True):
        if is_id:
            c.no_wrap, c.overflow = True, "fold"
    if width is None:
        return table
    widths = _widths(console, table)
    if sum(n for _, n in widths) + _overhead(table) <= width:
        return table
    table.box, table.show_edge, table.pad_edge = box.SIMPLE_HEAD, False, False
    table.title_justify = "left"
    id_total = sum(n for (_, n), is_id in zip(widths, ident, strict=True) if is_id)
    others = [i for i, is_id in enumerate(ident) if not is_id]
    # Two spaces between columns, then one; at each, first every column on one line,
    # then the other columns wrapped at word boundaries (their longest word still fits).
    for padding in ((0, 1, 0, 0), (0, 0, 0, 0)):
        table.padding = padding
        room = width - _overhead(table)
        if sum(n for _, n in widths) <= room:
            return table
    for padding in ((0, 1, 0, 0), (0, 0, 0, 0)):
        table.padding = padding
        left = width - _overhead(table) - id_total
        if left >= sum(widths[i][0] for i in others):
            # Widths set here, not by rich: it narrows the widest wrapping columns
            # below their longest word (an address folded as "127.0.0." / "1").
            for i, w in zip(others, _share(left, [widths[i] for i in others]), strict=True):
                cols[i].no_wrap, cols[i].overflow, cols[i].width = False, "fold", w
            return table
    table.padding = (0, 1, 0, 0)
    return _two_lines(table, ident, width, console)


def _share(room: int, ranges: list[tuple[int, int]]) -> list[int]:
    """Widths for columns of (longest word, natural width) in ``room`` >= the sum of
    their longest words: each gets its longest word, then the rest of the room in
    proportion to what each still lacks (never past its natural width)."""
    got = [lo for lo, _ in ranges]
    need = [max(0, hi - lo) for lo, hi in ranges]
    spare = room - sum(got)
    total = sum(need)
    if total <= spare:
        return [max(lo, hi) for lo, hi in ranges]
    extra = [spare * n // total for n in need]
    for i in sorted(range(len(need)), key=lambda j: need[j] - extra[j], reverse=True):
        if sum(extra) >= spare:
            break
        if extra[i] < need[i]:
            extra[i] += 1
    return [g + e for g, e in zip(got, extra, strict=True)]


def _two_lines(table: Table, ident: list[bool], width: int, console: Console) -> Group:
    cols = table.columns
    lines: list[RenderableType] = []
    if table.title:
        lines.append(_cell_text(console, table.title))
    heads = [str(c.header) for c in cols]
    lines.append(Text("  ".join(h for h, i in zip(heads, ident, strict=True) if i), style="bold"))
    for row in range(table.row_count):
        cells = [_cell_text(console, c._cells[row]) for c in cols]
        first = Text("  ").join(c for c, i in zip(cells, ident, strict=True) if i)
        rest = Text("  ").join(
            Text.assemble((h + " ", "dim"), c)
            for h, c, i in zip(heads, cells, ident, strict=True)
            if not i and c.plain
        )
        lines.append(first)
        if rest.plain:
            for part in rest.wrap(console, width - 4, overflow="fold"):
                lines.append(Text("    ") + part)
    if table.caption:
        lines.extend(_cell_text(console, table.caption).wrap(console, width, overflow="fold"))
    return Group(*lines)


def print_table(console: Console, table: Table, keep: Collection[str]) -> None:
    """Print ``table`` fitted to the console (see :func:`fit`)."""
    width = table_width(console)
    console.print(fit(table, keep, width, console), width=width)
