"""The real Conductor's decisions, through the writer, read back by the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from mooncake_cli.main import app
from mooncake_core.conductor import BlockStored, Conductor, ScheduleRequest, Tier
from mooncake_core.conductor.audit import AuditReader, AuditWriter, WriterOptions, upgrade
from mooncake_core.config import ClusterConfig

NOW = 1_800_000_000.0


def test_conductor_decisions_are_audited_and_explained(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    upgrade(url)
    cluster = ClusterConfig()
    conductor = Conductor.from_cluster(cluster)
    prefill = [w.name for w in cluster.prefill_workers]
    # The first prefill instance already holds 10 blocks of the prompt's prefix.
    prefix = tuple(range(1, 11))
    conductor.apply(BlockStored(prefill[0], Tier.HBM, prefix))
    bs = cluster.hashing.block_size

    writer = AuditWriter.open(url, WriterOptions(batch_size=4))
    writer.start()
    decisions = []
    for i in range(6):
        keys = (*prefix, 100 + i, 200 + i)
        d = conductor.schedule(ScheduleRequest(f"req-{i}", keys, len(keys) * bs + 3, 16), NOW + i)
        decisions.append(d)
        assert writer.submit_source(d)
    writer.update_actual("req-0", 0.25, 0.02)
    writer.close()
    snap = writer.snapshot()
    assert (snap.written, snap.failed, snap.dropped) == (6, 0, 0)

    with AuditReader.open(url) as reader:
        rows = reader.find()
        entry = reader.get("req-0")
    assert [r.decision.request_id for r in rows] == [f"req-{i}" for i in reversed(range(6))]
    assert entry is not None
    first = decisions[0]
    assert entry.decision.chosen_prefill == first.prefill
    assert entry.decision.chosen_decode == first.decode
    assert entry.decision.admitted == first.admitted
    assert entry.decision.prompt_blocks == 12
    assert entry.decision.actual_ttft_s == 0.25
    assert [c.instance for c in entry.candidates] == [c.instance for c in first.candidates]
    chosen = [c for c in entry.candidates if c.chosen and c.role == "prefill"]
    assert [c.instance for c in chosen] == [first.prefill]

    cli = CliRunner()
    res = cli.invoke(app, ["audit", "explain", "req-0", "--url", url])
    assert res.exit_code == 0, res.output
    assert f"{first.prefill} was chosen for prefill" in res.stdout
    assert f"held {first.local_blocks} of 12 prefix blocks" in res.stdout
    res = cli.invoke(app, ["audit", "ls", "--url", url, "--json", "--instance", first.prefill])
    assert res.exit_code == 0, res.output
    listed = json.loads(res.stdout)
    assert {r["request_id"] for r in listed} == {
        d.request_id for d in decisions if d.prefill == first.prefill
    }
