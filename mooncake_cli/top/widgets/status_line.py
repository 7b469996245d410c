"""One line under the content: cluster health, refresh age, pause, sort and filter."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

__all__ = ["StatusLine"]


class StatusLine(Static):
    """Shows what the screen is showing; the screen calls :meth:`show`."""

    def show(
        self, up: int, total: int, age_s: float | None, paused: bool, sort: str, filt: str
    ) -> None:
        """Redraw the line.

        Args:
            up: Components answering.
            total: Components polled.
            age_s: Seconds since the view was built (None: no view yet).
            paused: Whether refresh is paused.
            sort: Sort column.
            filt: Filter text.
        """
        t = Text()
        style = "bold green" if up == total and total else "bold red"
        t.append(f" {up}/{total} healthy ", style=style)
        t.append(" waiting for first poll" if age_s is None else f" refreshed {age_s:.0f}s ago")
        if paused:
            t.append("  PAUSED", style="bold yellow")
        if sort:
            t.append(f"  sort: {sort}")
        if filt:
            t.append(f"  filter: {filt}", style="bold cyan")
        self.update(t)
