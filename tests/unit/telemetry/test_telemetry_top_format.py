"""Formatting and row building of ``mooncake top`` (pure functions, no app)."""

from __future__ import annotations

from mooncake_cli.top.gauges import bar, spark
from mooncake_cli.top.widgets.nic_table import _row as nic_row
from mooncake_cli.top.widgets.node_table import _row as node_row
from mooncake_core.telemetry import NicView, NodeView


def _nic(**kw: object) -> NicView:
    base: dict[str, object] = dict(
        node="n",
        nic="10.0.0.1",
        iface="eth0",
        te_tx_bps=2e9,
        te_rx_bps=None,
        os_tx_bps=2.5e9,
        os_rx_bps=0.0,
        share=0.5,
        errors=0,
        retries=0,
        errors_per_s=0.0,
        paused=False,
        slow=False,
        history=(0.0, 1.0, 2.0),
    )
    base.update(kw)
    return NicView(**base)  # type: ignore[arg-type]


def test_gauges():
    # Numbers: tests/unit/fmt (mooncake_core.fmt, shared with the CLI and the dashboard).
    assert bar(0.5, 4) == "██░░"
    assert spark((0.0, 1.0, 2.0), 4) == " ▁▄█"
    assert spark((0.0, 0.0), 2) == "▁▁"


def test_nic_row_flags_slow_and_paused():
    cells = [str(c) for c in nic_row(_nic()).cells]
    assert cells[:8] == ["n", "10.0.0.1/eth0", "2.00G", "-", "2.50G", "0", "50%", "0"]
    # The flag is in the Trend cell: the node's name stays as it is (a fixed-width Node
    # column cut it; an auto-width one widened the table past 80 columns).
    assert str(nic_row(_nic(slow=True)).cells[0]) == "n"
    assert str(nic_row(_nic(slow=True)).cells[8]) == "SLOW"
    assert str(nic_row(_nic(slow=True, paused=True)).cells[8]) == "PAUSED"
    assert nic_row(_nic(slow=True)).cells[0].style == "bold yellow"  # type: ignore[union-attr]


def test_node_row_down_shows_reason():
    n = NodeView("s", "store", "http://x", False, 10.0, "refused", "", None, None, "", "-", 0.01)
    cells = [str(c) for c in node_row(n, now=25.0).cells]
    assert cells[2] == "unreachable" and cells[5] == "15s" and cells[7] == "refused"
