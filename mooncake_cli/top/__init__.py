"""``mooncake top``: the live TUI over :class:`mooncake_core.telemetry.ClusterView`."""

from .app import SCREENS_ORDER, TopApp
from .once import render_view, view_json

__all__ = ["SCREENS_ORDER", "TopApp", "render_view", "view_json"]
