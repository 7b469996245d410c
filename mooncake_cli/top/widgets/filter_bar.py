"""The ``/`` filter input: hidden until asked for, posts its text as it changes."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.widgets import Input

__all__ = ["FilterBar"]


class FilterBar(Input):
    """An :class:`Input` that hides itself on Enter or Escape (the text stays applied)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close filter", show=False)]

    def __init__(self) -> None:
        super().__init__(placeholder="filter rows (Enter/Esc to close, empty clears)")
        self.display = False

    def open(self) -> None:
        """Show and focus the input."""
        self.display = True
        self.focus()

    def action_close(self) -> None:
        """Hide and give focus back to the screen."""
        self.display = False
        self.screen.focus_next()

    def on_input_submitted(self) -> None:
        self.action_close()
