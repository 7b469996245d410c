"""What every ``top`` screen shares: header, body, filter bar, status line, footer."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, ClassVar, cast

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Header, Input

from mooncake_core.telemetry import ClusterView

from ..widgets import FilterBar, SortableTable, StatusLine

if TYPE_CHECKING:
    from ..app import TopApp

__all__ = ["TopScreen"]


class TopScreen(Screen[None]):
    """Subclasses yield their widgets from :meth:`body` and draw them in :meth:`draw`.

    The app calls :meth:`show` with each new view; a screen that becomes active again
    draws the app's latest view at once (it missed the updates while hidden).
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "sort", "Sort"),
        Binding("slash", "filter", "Filter", key_display="/"),
    ]
    SCREEN_TITLE = ""

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield from self.body()
        yield FilterBar()
        yield StatusLine(id="status")
        yield Footer()

    def body(self) -> ComposeResult:
        """The screen's own widgets."""
        raise NotImplementedError

    def main_table(self) -> SortableTable:
        """The table that ``s`` sorts and ``/`` filters."""
        raise NotImplementedError

    def draw(self, view: ClusterView) -> None:
        """Update the screen's widgets from ``view``."""
        raise NotImplementedError

    @property
    def top(self) -> TopApp:
        """The app, typed."""
        return cast("TopApp", self.app)

    def on_mount(self) -> None:
        self.sub_title = self.SCREEN_TITLE
        self.main_table().focus()

    def on_screen_resume(self) -> None:
        if self.top.view is not None:
            self.show(self.top.view)
        else:
            self.update_status()

    def show(self, view: ClusterView) -> None:
        """Draw ``view`` and the status line."""
        self.draw(view)
        self.update_status()

    def update_status(self) -> None:
        """Redraw the status line only (pause, sort and filter changes)."""
        view = self.top.view
        table = self.main_table()
        self.query_one(StatusLine).show(
            up=view.nodes_up if view else 0,
            total=len(view.nodes) if view else len(self.top.collector.targets),
            age_s=None if view is None else max(0.0, time.time() - view.taken_at),
            paused=self.top.paused,
            sort=table.sort_label,
            filt=table.filter_text,
        )

    def action_sort(self) -> None:
        """Sort the main table by its next column."""
        self.main_table().cycle_sort()
        self.update_status()

    def action_filter(self) -> None:
        """Open the filter input."""
        bar = self.query_one(FilterBar)
        bar.value = self.main_table().filter_text
        bar.open()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.main_table().set_filter(event.value)
        self.update_status()
