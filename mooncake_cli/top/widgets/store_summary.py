"""Store totals: capacity and usage per tier, objects, pins, evictions/s, hit rate."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from mooncake_core.fmt import pct, per_s, size
from mooncake_core.telemetry import StoreView

from ..gauges import bar

__all__ = ["StoreSummary", "store_text"]


def store_text(s: StoreView) -> Text:
    """The summary as rich text (also used by ``--once``)."""
    if not s.available:
        t = Text("store: no master answered", style="bold red")
        if s.hit_rate is not None:
            t.append(f"\nprefix hit rate {pct(s.hit_rate)}")
        return t
    ratio = s.used / s.capacity if s.capacity else 0.0
    t = Text()
    t.append("used ", style="bold")
    t.append(bar(ratio, 20), style="red" if ratio > 0.9 else "green")
    t.append(f" {size(s.used, compact=True)}/{size(s.capacity, compact=True)} ({pct(ratio)})\n")
    for tier, cap, used in s.tiers:
        t.append(f"  {tier:<5}", style="bold")
        t.append(
            f" {size(used, compact=True)}/{size(cap, compact=True)} ({pct(used / cap if cap else 0)})\n"
        )
    t.append(f"objects {s.keys} ({s.processing} writing)  clients {s.clients}  ")
    t.append(f"pins {s.key_pins} keys, {s.prefix_pins} prefixes\n")
    t.append(f"evictions {per_s(s.evictions_per_s)}/s ({s.evicted_total} total)  ")
    t.append(f"hit rate {pct(s.hit_rate)}")
    return t


class StoreSummary(Static):
    """The screen calls :meth:`show` with the store view."""

    def show(self, s: StoreView) -> None:
        """Redraw."""
        self.update(store_text(s))
