"""Scheduler screen over a real Conductor (served on /telemetry) and a real audit DB."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_top_live import svg_text

from mooncake_cli.top import TopApp
from mooncake_cli.top.screens import ExplainScreen
from mooncake_cli.top.widgets import DecisionTable, QueueTable
from mooncake_core.conductor import BlockStored, Conductor, ScheduleRequest, Tier
from mooncake_core.conductor.audit import AuditWriter, WriterOptions, upgrade
from mooncake_core.config import ClusterConfig
from mooncake_core.telemetry import (
    Collector,
    ComponentInfo,
    Target,
    TelemetryRegistry,
    exposition,
    serve_telemetry,
)

pytestmark = pytest.mark.integration

# Conductor-style ids (cmpl-<boot ms, hex>-<n>): a long shared prefix, so a cut id makes
# every row look alike.
RID = "cmpl-19adf5c2a3b-{}"


@pytest.fixture
def conductor_and_audit(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    upgrade(url)
    cluster = ClusterConfig()
    conductor = Conductor.from_cluster(cluster)
    prefix = tuple(range(1, 11))
    conductor.apply(BlockStored(cluster.prefill_workers[0].name, Tier.HBM, prefix))
    bs = cluster.hashing.block_size
    writer = AuditWriter.open(url, WriterOptions(batch_size=4))
    writer.start()
    now = time.time()
    for i in range(6):
        keys = (*prefix, 100 + i, 200 + i)
        d = conductor.schedule(ScheduleRequest(RID.format(i), keys, len(keys) * bs + 3, 16), now)
        assert writer.submit_source(d)
    writer.update_actual(RID.format(0), 0.25, 0.02)
    writer.close()
    reg = TelemetryRegistry(ComponentInfo("conductor", "conductor"))
    reg.register("conductor", conductor.snapshot)
    reg.register("audit", writer.snapshot, kind="audit_writer")
    with serve_telemetry(reg) as srv:
        yield reg, srv.url, url


def test_conductor_metrics_parse(conductor_and_audit):
    reg, _, _ = conductor_and_audit
    fams = {f.name: f for f in text_string_to_metric_families(exposition(reg).decode())}
    assert fams["mooncake_conductor_decisions"].samples[0].value == 6
    assert fams["mooncake_audit_written"].samples[0].value == 6
    queued = {s.labels["instance"] for s in fams["mooncake_conductor_prefill_queued"].samples}
    assert queued == {w.name for w in ClusterConfig().prefill_workers}


async def test_scheduler_screen_and_explain(conductor_and_audit):
    _, base, url = conductor_and_audit
    collector = Collector([Target("conductor", "conductor", base)], timeout_s=1.0, audit_url=url)
    app = TopApp(collector, interval_s=0.5, start_screen="scheduler")
    async with app.run_test(size=(80, 24)) as pilot:
        decisions = app.screen.query_one(DecisionTable)
        deadline = time.monotonic() + 20
        while decisions.row_count < 6 and time.monotonic() < deadline:
            await pilot.pause(0.1)
        assert decisions.row_count == 6
        sched = app.view.scheduler
        assert sched.source == "conductor+audit" and sched.decisions_total == 6
        assert sched.policy == "kvcache_centric"
        queues = app.screen.query_one(QueueTable)
        assert queues.row_count == 2  # one prefill and one decode instance
        summary = str(app.screen.query_one("#sched-summary").render())
        assert "kvcache_centric" in summary and "6 total" in summary
        # Every request id on the screen is whole (80 columns), none cut to the prefix.
        deadline = time.monotonic() + 10
        while True:
            await pilot.pause(0.2)
            screen = "\n".join(svg_text(app.export_screenshot()))
            shown = re.findall(r"cmpl-19adf5c2a3b\S*", screen)
            if shown or time.monotonic() > deadline:
                break
        assert shown, screen
        assert set(shown) <= {RID.format(i) for i in range(6)}, screen
        # Select the first request and open its explanation.
        for _ in range(6):
            if decisions.selected_key == RID.format(0):
                break
            await pilot.press("down")
        await pilot.press("enter")
        deadline = time.monotonic() + 10
        while not isinstance(app.screen, ExplainScreen) and time.monotonic() < deadline:
            await pilot.pause(0.1)
        assert isinstance(app.screen, ExplainScreen)
        assert app.screen.request_id == RID.format(0)
        assert "was chosen for prefill" in app.screen.text
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert not isinstance(app.screen, ExplainScreen)
        # The filter searches every visible column, the result too.
        assert app.view is not None
        admitted = [d for d in app.view.scheduler.last_decisions if d.admitted]
        assert admitted
        await pilot.press("slash", *"ok", "enter")
        await _rows(pilot, decisions, len(admitted))
        await pilot.press("slash", "backspace", "backspace", "enter")
        await _rows(pilot, decisions, 6)
        # Too short for every row: a vertical scrollbar, and still 80 columns wide with
        # it (no horizontal scrollbar eating a row; the table was 2 columns too wide).
        await pilot.resize_terminal(80, 16)
        await pilot.pause(0.3)
        assert decisions.max_scroll_y > 0, (decisions.virtual_size, decisions.size)
        assert decisions.max_scroll_x == 0, (decisions.virtual_size, decisions.size)


async def _rows(pilot, table: DecisionTable, n: int) -> None:
    deadline = time.monotonic() + 10
    while table.row_count != n and time.monotonic() < deadline:
        await pilot.pause(0.1)
    assert table.row_count == n, (table.filter_text, table.row_count, n)
