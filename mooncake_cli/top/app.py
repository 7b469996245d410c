"""The ``mooncake top`` application: one App, four screens, a polling worker.

Threading: the collector's HTTP polls run in a thread worker (``thread=True``) so a
slow or dead component never blocks the UI. The worker never touches widgets: it posts
:class:`ViewUpdated` (``post_message`` is thread-safe) and the app's handler, on the UI
thread, owns ``self.view`` and redraws the active screen. Only one poll runs at a time:
a tick that finds a poll still running is skipped instead of queueing behind it.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType

from mooncake_core.telemetry import ClusterView, Collector

from .messages import ExplainReady, PollFailed, ViewUpdated
from .screens import ExplainScreen, NicsScreen, NodesScreen, SchedulerScreen, StoreScreen, TopScreen

__all__ = ["SCREENS_ORDER", "TopApp"]

SCREENS_ORDER = ("nics", "store", "scheduler", "nodes")


class TopApp(App[None]):
    """Live view of a Mooncake cluster.

    Args:
        collector: Polls the cluster (the app closes it on exit).
        interval_s: Seconds between polls.
        start_screen: Mode shown first (one of ``SCREENS_ORDER``).
    """

    CSS_PATH = "top.tcss"
    TITLE = "mooncake top"
    # The palette's footer hint would push "q Quit" off an 80-column footer.
    ENABLE_COMMAND_PALETTE = False
    MODES: ClassVar[dict[str, type[TopScreen]]] = {  # type: ignore[assignment]
        "nics": NicsScreen,
        "store": StoreScreen,
        "scheduler": SchedulerScreen,
        "nodes": NodesScreen,
    }
    DEFAULT_MODE = "nics"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("1", "switch_mode('nics')", "NICs"),
        Binding("2", "switch_mode('store')", "Store"),
        Binding("3", "switch_mode('scheduler')", "Sched"),
        Binding("4", "switch_mode('nodes')", "Nodes"),
        Binding("tab", "cycle(1)", "Next", show=False, priority=True),
        Binding("shift+tab", "cycle(-1)", "Prev", show=False, priority=True),
        Binding("p", "pause", "Pause"),
        Binding("r", "refresh_now", "Refresh", show=False),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(
        self, collector: Collector, interval_s: float = 1.0, start_screen: str = "nics"
    ) -> None:
        if start_screen not in SCREENS_ORDER:
            raise ValueError(f"unknown screen {start_screen!r}; one of {SCREENS_ORDER}")
        super().__init__()
        self.collector = collector
        self.interval_s = interval_s
        self.start_screen = start_screen
        self.view: ClusterView | None = None
        self.paused = False
        self.polls = 0
        self._polling = False

    def on_mount(self) -> None:
        if self.start_screen != self.DEFAULT_MODE:
            self.switch_mode(self.start_screen)
        self.set_interval(self.interval_s, self.poll)
        self.poll()

    def on_unmount(self) -> None:
        self.collector.close()

    # ------------------------------------------------------------------ polling

    def poll(self) -> None:
        """Start one poll in a worker unless paused or one is still running."""
        if self.paused or self._polling:
            return
        self._polling = True
        self.run_worker(self._poll_in_thread, thread=True, group="poll", exit_on_error=False)

    def _poll_in_thread(self) -> None:
        # Worker thread: no widget access here, only post_message.
        try:
            view = self.collector.poll()
        except Exception as exc:  # the collector itself broke: say so, keep running
            self.post_message(PollFailed(f"{type(exc).__name__}: {exc}"))
        else:
            self.post_message(ViewUpdated(view))

    def on_view_updated(self, message: ViewUpdated) -> None:
        self._polling = False
        self.polls += 1
        if self.paused:
            return
        self.view = message.view
        # A poll that ends while the app shuts down finds no screen left to draw on.
        if self.screen_stack and isinstance(self.screen, TopScreen):
            self.screen.show(message.view)

    def on_poll_failed(self, message: PollFailed) -> None:
        self._polling = False
        self.notify(message.error, title="poll failed", severity="error")

    # ------------------------------------------------------------------ actions

    def action_cycle(self, step: int) -> None:
        """Switch to the next (or previous) screen."""
        i = SCREENS_ORDER.index(self.current_mode) if self.current_mode in SCREENS_ORDER else 0
        self.switch_mode(SCREENS_ORDER[(i + step) % len(SCREENS_ORDER)])

    def action_pause(self) -> None:
        """Freeze (or resume) the display and the polling."""
        self.paused = not self.paused
        if isinstance(self.screen, TopScreen):
            self.screen.update_status()
        if not self.paused:
            self.poll()

    def action_refresh_now(self) -> None:
        """Poll now."""
        self.poll()

    # ------------------------------------------------------------------ explain

    def explain(self, request_id: str) -> None:
        """Open ``audit explain`` for ``request_id`` (read in a worker thread)."""
        feed = self.collector.audit
        if feed is None:
            self.notify("no audit database configured (--audit-db)", severity="warning")
            return

        def read() -> None:
            try:
                text = feed.explain(request_id) or f"no decision recorded for {request_id!r}"
            except Exception as exc:  # missing or old DB: show why in the modal
                text = f"cannot read the audit database: {exc}"
            self.post_message(ExplainReady(request_id, text))

        self.run_worker(read, thread=True, group="explain", exit_on_error=False)

    def on_explain_ready(self, message: ExplainReady) -> None:
        self.push_screen(ExplainScreen(message.request_id, message.text))
