"""The TTFT bias has one sign on every surface (issue #20; docs/audit.md, "Prediction
error"): ``mooncake audit stats``, the Conductor's Prometheus gauge, ``mooncake top`` and
the dashboard's JSON API, all over the same decisions.

A real Conductor schedules the requests; each decision goes to a real SQLite audit
database through the writer, and each measured TTFT goes to both, as the front door
reports it (``on_actual`` and ``update_actual``). Three requests take longer than
predicted and one is faster, so the bias (+20 ms) differs from the MAE (30 ms): a surface
that showed the MAE, or dropped or flipped the sign, fails.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from mooncake_cli.main import app as cli_app
from mooncake_cli.top import TopApp
from mooncake_core.conductor import Conductor, ScheduleRequest
from mooncake_core.conductor.audit import AuditReader, AuditWriter, WriterOptions, upgrade
from mooncake_core.config import ClusterConfig
from mooncake_core.prediction_error import summarize
from mooncake_core.telemetry import (
    Collector,
    ComponentInfo,
    Target,
    TelemetryRegistry,
    serve_telemetry,
)
from mooncake_web import WebOptions, create_app

pytestmark = pytest.mark.integration

# actual - predicted per request, seconds: +40, +30, +30 and -20 ms.
ERRORS = (0.040, 0.030, 0.030, -0.020)
BIAS = sum(ERRORS) / len(ERRORS)  # +20 ms: slower than predicted on the whole
MAE = sum(abs(e) for e in ERRORS) / len(ERRORS)  # 30 ms


def _close(value: float | None) -> bool:
    return value is not None and value == pytest.approx(BIAS, abs=1e-9)


async def test_every_surface_reports_the_same_positive_ttft_bias(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    upgrade(url)
    cluster = ClusterConfig()
    conductor = Conductor.from_cluster(cluster)
    bs = cluster.hashing.block_size
    writer = AuditWriter.open(url, WriterOptions(batch_size=4))
    writer.start()
    now = time.time()
    for i, err in enumerate(ERRORS):
        keys = (1000 + i, 2000 + i)
        d = conductor.schedule(ScheduleRequest(f"req-{i}", keys, len(keys) * bs, 8), now + i)
        assert d.admitted and d.predicted_ttft_s is not None
        assert writer.submit_source(d)
        actual = d.predicted_ttft_s + err
        conductor.on_actual(d.request_id, actual)
        writer.update_actual(d.request_id, actual, None)
    writer.close()
    with AuditReader.open(url) as reader:
        pairs = [(r.decision.predicted_ttft_s, r.decision.actual_ttft_s) for r in reader.find()]
    stored = summarize(pairs)
    assert stored.count == 4 and _close(stored.bias_s)
    assert stored.mae_s == pytest.approx(MAE, abs=1e-9)

    # 1. mooncake audit stats: JSON and the table.
    cli = CliRunner(env={"COLUMNS": "250"})  # one line per table row
    res = cli.invoke(cli_app, ["audit", "stats", "--url", url, "--bucket", "1h", "--json"])
    assert res.exit_code == 0, res.output
    total = json.loads(res.stdout)["total"]
    assert _close(total["ttft_bias_s"]), total
    assert total["ttft_mae_s"] == pytest.approx(MAE, abs=1e-9)
    assert total["ttft_mre"] == pytest.approx(stored.mre, abs=1e-12)  # SQL == Python
    res = cli.invoke(cli_app, ["audit", "stats", "--url", url, "--bucket", "1h"])
    assert res.exit_code == 0, res.output
    row = next(line for line in res.stdout.splitlines() if "total" in line)
    assert row.rstrip(" │").endswith("+20 ms"), row

    reg = TelemetryRegistry(ComponentInfo("conductor", "conductor"), os_counters=None)
    reg.register("conductor", conductor.snapshot)
    with serve_telemetry(reg) as srv:
        # 2. Prometheus, scraped over HTTP.
        with urllib.request.urlopen(srv.url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        assert _close(fams["mooncake_conductor_ttft_bias_seconds"].samples[0].value), text
        assert (
            "positive: took longer than predicted"
            in fams["mooncake_conductor_ttft_bias_seconds"].documentation
        )

        # 3. mooncake top, Scheduler screen: with the conductor, and from the audit
        # database alone (the view's own mean over the last decisions).
        for targets, source in (
            ([Target("conductor", "conductor", srv.url)], "conductor+audit"),
            ([], "audit"),
        ):
            collector = Collector(targets, timeout_s=2.0, audit_url=url)
            top = TopApp(collector, interval_s=0.5, start_screen="scheduler")
            async with top.run_test(size=(80, 24)) as pilot:
                deadline = time.monotonic() + 20
                while top.view is None and time.monotonic() < deadline:
                    await pilot.pause(0.1)
                assert top.view is not None
                assert top.view.scheduler.source == source
                assert _close(top.view.scheduler.ttft_bias_s)
                await pilot.pause(0.1)
                summary = str(top.screen.query_one("#sched-summary").render())
            assert "TTFT error (actual − predicted): MAE 30ms, bias +20ms" in summary, summary

        # 4. The dashboard's JSON API.
        opts = WebOptions(
            master="127.0.0.1:1",  # never contacted: /api/scheduler does not use it
            secret_file=tmp_path / "no-secret",
            audit_url=url,
            targets=(f"conductor:conductor={srv.url}",),
            targets_only=True,
            anonymous_read=True,
        )
        web = TestClient(create_app(cluster, opts), base_url="http://127.0.0.1")
        doc = web.get("/api/scheduler").json()
        assert doc["source"] == "conductor+audit"
        assert _close(doc["ttft_bias_s"]), doc
        assert doc["ttft_mae_s"] == pytest.approx(MAE, abs=1e-9)
        web.close()
