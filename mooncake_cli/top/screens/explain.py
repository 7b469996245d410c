"""Modal: ``audit explain`` text of one request."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

__all__ = ["ExplainScreen"]


class ExplainScreen(ModalScreen[None]):
    """Shows the explanation; Escape or q closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
    ]

    def __init__(self, request_id: str, text: str) -> None:
        super().__init__()
        self.request_id = request_id
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="explain-box"):
            yield Static(
                f"[b]audit explain {self.request_id}[/b]  (Esc to close)", id="explain-title"
            )
            yield Static(self.text, id="explain-text", markup=False)

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
