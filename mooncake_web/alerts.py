"""Alerts of the Overview page, derived from one ClusterView (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from mooncake_core.fmt import pct
from mooncake_core.telemetry import ClusterView

__all__ = ["USAGE_WARN", "Alert", "alerts"]

USAGE_WARN = 0.9
"""Segment usage above which an alert is raised (the eviction high watermark)."""


@dataclass(frozen=True, slots=True)
class Alert:
    """One thing an operator should look at.

    Attributes:
        level: ``critical`` or ``warning``.
        subject: Component, NIC or segment concerned.
        text: What is wrong, in words.
    """

    level: str
    subject: str
    text: str


def alerts(view: ClusterView) -> list[Alert]:
    """Everything abnormal in ``view``: components down, NICs paused or slow, segments
    nearly full or draining, no master answering. Critical first.

    Args:
        view: The cluster view.

    Returns:
        The alerts, critical ones first, each group in view order.
    """
    out: list[Alert] = []
    for n in view.nodes:
        if not n.up:
            out.append(
                Alert("critical", n.name, f"{n.role} is unreachable ({n.error or 'no answer'})")
            )
    if not view.store.available:
        out.append(Alert("critical", "store", "no master answered; store figures unknown"))
    for nic in view.nics:
        if nic.paused:
            out.append(Alert("critical", f"{nic.node}/{nic.nic}", "NIC paused after failures"))
    for nic in view.nics:
        if nic.slow and not nic.paused:
            out.append(Alert("warning", f"{nic.node}/{nic.nic}", "NIC far slower than its peers"))
    for seg in view.store.segments:
        if seg.usage >= USAGE_WARN:
            out.append(
                Alert("warning", seg.name, f"segment {pct(seg.usage)} full (eviction watermark)")
            )
        if seg.state not in ("OK", "MOUNTED"):
            out.append(Alert("warning", seg.name, f"segment {seg.state}"))
    return out
