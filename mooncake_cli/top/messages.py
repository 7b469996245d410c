"""Messages of the ``top`` app (dataclasses; posted by workers, handled by the app)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from mooncake_core.telemetry import ClusterView

__all__ = ["ExplainReady", "PollFailed", "ViewUpdated"]


@dataclass
class ViewUpdated(Message):
    """The poll worker built a new view."""

    view: ClusterView


@dataclass
class PollFailed(Message):
    """The poll itself failed (not a component: the collector)."""

    error: str


@dataclass
class ExplainReady(Message):
    """``audit explain`` text for a request, read in a worker."""

    request_id: str
    text: str
