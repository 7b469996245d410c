"""``mooncake top`` against live processes: a master, two store nodes, a TE pair.

Tests run in file order on one module-scoped cluster; the kill test comes last.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from mooncake_cli.main import app as cli
from mooncake_cli.top import TopApp
from mooncake_cli.top.widgets import NicTable, NodeTable, SegmentTable, SortableTable
from mooncake_core.telemetry import Collector

pytestmark = pytest.mark.integration

INTERVAL = 0.5


def _app(live) -> TopApp:
    # A generous timeout: on a loaded 2-core machine a slow answer must not read as unreachable
    # (a killed process is refused at once, whatever the timeout).
    return TopApp(Collector(live.targets, timeout_s=3.0, window_s=3.0), interval_s=INTERVAL)


async def _until(pilot, cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await pilot.pause(0.1)


def _cells(table: SortableTable) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def svg_text(svg: str) -> list[str]:
    """The screen's text lines from an exported SVG screenshot (blank lines dropped)."""
    lines: dict[float, list[str]] = {}
    for m in re.finditer(r'<text [^>]*y="([\d.]+)"[^>]*>([^<]*)</text>', svg):
        lines.setdefault(float(m.group(1)), []).append(
            html.unescape(m.group(2)).replace("\xa0", " ")
        )
    text = ["".join(lines[y]).rstrip() for y in sorted(lines)]
    return [t for t in text if t.strip()]


def _normalised(table: SortableTable, volatile: set[str]) -> list[str]:
    """Rows as text with numbers replaced by '#' and volatile columns by '*'."""
    labels = [c.label for c in table.COLUMNS]
    out = [" | ".join(labels)]
    for row in _cells(table):
        cells = [
            "*" if labels[i] in volatile else re.sub(r"\d+", "#", v) for i, v in enumerate(row)
        ]
        out.append(" | ".join(cells))
    return out


async def test_nic_screen_shows_live_rates_and_fits_80x24(live):
    app = _app(live)
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.current_mode == "nics"

        def moving() -> bool:
            v = app.view
            return v is not None and any(
                n.node == "te-reader" and (n.te_rx_bps or 0) > 0 for n in v.nics
            )

        await _until(pilot, moving)
        await pilot.pause(0.3)
        table = app.screen.query_one(NicTable)
        rows = {r[0]: r for r in _cells(table)}
        reader = rows["te-reader"]
        assert reader[1] == "127.0.0.1/lo"
        assert reader[3] not in ("0", "-")  # TE rx bytes/s of the reading side
        assert reader[6] == "100%"  # its only NIC carries all its traffic
        assert rows["te-target"][2] not in ("0", "-")  # the target sends what the reader reads
        assert table.virtual_size.width <= 80, "NIC table wider than an 80-column terminal"


async def test_screens_switch_and_show_each_component(live):
    app = _app(live)
    async with app.run_test(size=(80, 24)) as pilot:
        await _until(pilot, lambda: app.view is not None and app.view.store.available)
        await pilot.press("2")
        assert app.current_mode == "store"
        seg = app.screen.query_one(SegmentTable)
        await _until(pilot, lambda: seg.row_count == 2)
        # Segments are named after their node; the client id may carry a suffix.
        assert sorted(r[0] for r in _cells(seg)) == ["store-a", "store-b"]
        assert sorted(r[1][:7] for r in _cells(seg)) == ["store-a", "store-b"]

        # ... and that id is shown whole at 80 columns (it was cut to `store-a-1`).
        def ids_whole() -> bool:
            shot = "\n".join(svg_text(app.export_screenshot()))
            segments = app.view.store.segments if app.view else ()
            return all(re.search(rf"(?<!\S){re.escape(s.client)}(?!\S)", shot) for s in segments)

        try:
            await _until(pilot, ids_whole, timeout=10)
        except AssertionError:
            raise AssertionError("\n".join(svg_text(app.export_screenshot()))) from None
        await pilot.press("3")
        assert app.current_mode == "scheduler"
        await pilot.press("4")
        assert app.current_mode == "nodes"
        nodes = app.screen.query_one(NodeTable)
        await _until(pilot, lambda: nodes.row_count == 5)
        assert {r[0]: r[2] for r in _cells(nodes)} == dict.fromkeys(
            ["master", "store-a", "store-b", "te-target", "te-reader"], "healthy"
        )
        versions = {r[0]: r[3] for r in _cells(nodes)}
        assert versions["master"] == versions["store-a"]  # one spelling (was `mooncak`)
        await pilot.press("tab")
        assert app.current_mode == "nics"
        await pilot.press("shift+tab")
        assert app.current_mode == "nodes"
        # sort, filter, pause
        await pilot.press("s")
        assert nodes.sort_label == "Role"
        await pilot.press("slash", *"te-", "enter")
        assert nodes.filter_text == "te-"
        assert sorted(r[0] for r in _cells(nodes)) == ["te-reader", "te-target"]
        await pilot.press("p")
        polls = app.polls
        await pilot.pause(3 * INTERVAL)
        assert app.paused and app.polls <= polls + 1  # at most the poll already in flight
        await pilot.press("p")
        await _until(pilot, lambda: app.polls > polls + 1)


SNAPSHOTS = {
    # screen key -> (table type, volatile columns, expected normalised text)
    "1": (
        NicTable,
        {"TE tx", "TE rx", "OS tx", "OS rx", "Share", "Trend"},
        [
            "Node | NIC/iface | TE tx | TE rx | OS tx | OS rx | Share | Err | Trend",
            # Store nodes serve their Transfer Engine's NIC on /telemetry too.
            "store-a | #.#.#.#/lo | * | * | * | * | * | # | *",
            "store-b | #.#.#.#/lo | * | * | * | * | * | # | *",
            "te-reader | #.#.#.#/lo | * | * | * | * | * | # | *",
            "te-target | #.#.#.#/lo | * | * | * | * | * | # | *",
        ],
    ),
    "2": (
        SegmentTable,
        {"Client", "Use", "Used", "Keys"},  # the client id may carry a pid suffix
        [
            "Segment | Client | Tier | State | Cap | Used | Use | Keys",
            "store-a | * | dram | MOUNTED | #.#MiB | * | * | *",
            "store-b | * | dram | MOUNTED | #.#MiB | * | * | *",
        ],
    ),
    "4": (
        NodeTable,
        {"Uptime", "Seen", "Poll", "Detail", "Version"},
        [
            "Name | Role | Health | Version | Uptime | Seen | Poll | Detail",
            "master | master | healthy | * | * | * | * | *",
            "store-a | store | healthy | * | * | * | * | *",
            "store-b | store | healthy | * | * | * | * | *",
            "te-reader | transfer | healthy | * | * | * | * | *",
            "te-target | transfer | healthy | * | * | * | * | *",
        ],
    ),
}


async def test_screen_snapshots(live):
    app = _app(live)
    async with app.run_test(size=(80, 24)) as pilot:
        await _until(pilot, lambda: app.view is not None and len(app.view.nics) == 4)
        for key, (kind, volatile, expected) in SNAPSHOTS.items():
            await pilot.press(key)
            table = app.screen.query_one(kind)
            try:
                await _until(pilot, lambda t=table, e=expected, v=volatile: _normalised(t, v) == e)
            except AssertionError:
                assert _normalised(table, volatile) == expected  # shows the diff
            assert table.virtual_size.width <= 80, f"screen {key} wider than 80 columns"
            screen = svg_text(app.export_screenshot())
            assert "mooncake top" in screen[0]  # header
            assert "q Quit" in screen[-1] and "1 NICs" in screen[-1]  # footer of keys
        await pilot.press("3")
        text = str(app.screen.query_one("#sched-summary").render())
        assert "no conductor telemetry and no audit database" in text


def test_once_json_with_cli_runner(live):
    args = ["top", "--once", "--json", "--targets-only", "--interval", "0.5", "--timeout", "3"]
    res = CliRunner().invoke(cli, [*args, "--config", str(live.config), *live.target_args()])
    assert res.exit_code == 0, res.output
    view = json.loads(res.output)
    assert [n["name"] for n in view["nodes"]] == [t.name for t in live.targets]
    assert all(n["up"] for n in view["nodes"])
    assert view["store"]["available"] and len(view["store"]["segments"]) == 2
    reader = next(n for n in view["nics"] if n["node"] == "te-reader")
    assert reader["te_rx_bps"] > 0


def test_once_rich_in_a_subprocess(live):
    cmd = [sys.executable, "-m", "mooncake_cli", "top", "--once", "--targets-only"]
    cmd += ["--interval", "0.5", "--timeout", "3", "--config", str(live.config)]
    cmd += live.target_args()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "Nodes (5/5 healthy)" in out
    assert "te-reader" in out and "127.0.0.1/lo" in out
    assert "Store segments" in out and "store-a" in out
    assert "OS interfaces" in out and " lo " in out


def test_once_reports_bad_target(live):
    res = CliRunner().invoke(cli, ["top", "--once", "--targets-only", "--target", "oops"])
    assert res.exit_code == 2
    assert "NAME=URL" in res.output


async def test_killed_node_shows_down_at_the_next_poll(live):
    app = _app(live)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        nodes = app.screen.query_one(NodeTable)
        await _until(pilot, lambda: nodes.row_count == 5 and app.view.nodes_up == 5)
        live.kill("store-b")
        killed_at = time.monotonic()
        polls = app.polls
        # The first poll that *starts* after the kill must see it down: wait for two.
        await _until(pilot, lambda: app.polls >= polls + 2)
        state = {r[0]: r[2] for r in _cells(nodes)}
        assert state["store-b"] == "unreachable"
        assert state["master"] == "healthy" and state["te-reader"] == "healthy"
        node = next(n for n in app.view.nodes if n.name == "store-b")
        assert node.error == "refused" and node.last_seen is not None
        # Loose bound on a loaded machine: two poll rounds (a refused connect is immediate).
        assert time.monotonic() - killed_at < 2 * INTERVAL + 5
        # The UI still answers while a component is down.
        await pilot.press("1")
        await asyncio.sleep(0)
        assert app.current_mode == "nics"
