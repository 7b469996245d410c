"""`mooncake audit` and `mooncake db` on a database filled by a test run."""

from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from mooncake_cli.main import app
from mooncake_core.conductor.audit import upgrade
from mooncake_core.conductor.audit.models import SCHEMA_REVISION as HEAD

ROOT = Path(__file__).resolve().parents[3]


def _err(res: Result) -> str:
    """stderr with rich's line wrapping undone."""
    return " ".join(res.stderr.split())


def _ok(cli: CliRunner, *args: str) -> str:
    res = cli.invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res.stdout


def test_ls_table_shows_instances_and_numbers(cli: CliRunner, audit_db: str) -> None:
    out = _ok(cli, "audit", "ls", "--url", audit_db)
    assert "audit decisions (4 of 4)" in out
    lines = out.splitlines()
    row_a = next(line for line in lines if "req-a" in line)
    for cell in (
        "2027-01-15T08:00:00.000Z",
        "kvcache_centric",
        "prefill-2",
        "decode-0",
        "12/14",
        "1.20 s",
        "1.50 s",
        "45 ms",
        "ok",
    ):
        assert cell in row_a, (cell, row_a)
    row_b = next(line for line in lines if "req-b" in line)
    assert "rejected: decode load predicted at 0.97 when prefill ends (limit 0.95)" in row_b
    row_c = next(line for line in lines if "req-c" in line)
    assert "(+8 blocks from prefill-2)" in row_c
    # newest first
    assert out.index("req-d") < out.index("req-c") < out.index("req-b") < out.index("req-a")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--rejected"], ["req-b"]),
        (["--instance", "decode-1"], ["req-c", "req-b"]),
        (["--policy", "round_robin"], ["req-d"]),
        (["--request", "req-a"], ["req-a"]),
        (["--since", "2027-01-15T08:00:30", "--until", "2027-01-15T08:01:30Z"], ["req-c", "req-b"]),
        (["--limit", "1"], ["req-d"]),
        (["--until", "10m"], []),  # the scenario is in 2027: nothing before 10 minutes ago
    ],
)
def test_ls_filters_json(
    cli: CliRunner, audit_db: str, args: list[str], expected: list[str]
) -> None:
    rows = json.loads(_ok(cli, "audit", "ls", "--url", audit_db, "--json", *args))
    assert [r["request_id"] for r in rows] == expected


def test_show_candidate_table(cli: CliRunner, audit_db: str) -> None:
    out = _ok(cli, "audit", "show", "req-a", "--url", audit_db)
    assert "decision #1 for req-a" in out
    assert "predicted 1.20 s, actual 1.50 s" in out
    assert "230 tokens, 14 blocks" in out
    row = next(line for line in out.splitlines() if "prefill-0" in line)
    for cell in (
        "2/14",
        "10 (0.31 s)",
        "0.80 s",
        "0.40 s",
        "1.51 s",
        "predicted TTFT 0.31 s higher",
    ):
        assert cell in row, (cell, row)
    chosen = next(line for line in out.splitlines() if "prefill-2" in line and "12/14" in line)
    assert "*" in chosen and "1.20 s" in chosen
    data = json.loads(_ok(cli, "audit", "show", "req-c", "--url", audit_db, "--json"))
    assert data["migration_source"] == "prefill-2"
    assert [c["instance"] for c in data["candidates"]] == ["prefill-1", "prefill-2", "decode-1"]


def test_explain_paragraph(cli: CliRunner, audit_db: str) -> None:
    out = _ok(cli, "audit", "explain", "req-a", "--url", audit_db)
    assert "prefill-2 was chosen for prefill because it held 12 of 14 prefix blocks" in out
    assert "The runner-up prefill-0 (predicted TTFT 1.51 s, 0.31 s slower)" in out
    assert "fetch 10 blocks from prefill-2 (0.31 s), queue 0.80 s" in out
    assert len(out.strip().splitlines()) == 1  # one paragraph


def test_unknown_request_fails_clearly(cli: CliRunner, audit_db: str) -> None:
    for cmd in ("show", "explain"):
        res = cli.invoke(app, ["audit", cmd, "nope", "--url", audit_db])
        assert res.exit_code == 1
        assert "no decision recorded for request 'nope'" in _err(res)


def test_stats_table(cli: CliRunner, audit_db: str) -> None:
    out = _ok(cli, "audit", "stats", "--url", audit_db, "--bucket", "1m")
    first = next(line for line in out.splitlines() if "2027-01-15T08:00:00.000Z" in line)
    for cell in ("50.0%", "85.7% (12/14)", "0.30 s", "20.0%", "+0.30 s"):
        assert cell in first, (cell, first)
    total = next(line for line in out.splitlines() if "total" in line)
    assert "25.0%" in total and "50.0% (14/28)" in total
    data = json.loads(_ok(cli, "audit", "stats", "--url", audit_db, "--bucket", "30s", "--json"))
    assert data["bucket_s"] == 30.0
    assert [b["decisions"] for b in data["buckets"]] == [1, 1, 1, 1]
    res = cli.invoke(app, ["audit", "stats", "--url", audit_db, "--bucket", "soon"])
    assert res.exit_code == 2 and "not a duration: 'soon'" in _err(res)


def test_export_csv_file_and_jsonl_stdout(cli: CliRunner, audit_db: str, tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    res = cli.invoke(
        app, ["audit", "export", "--format", "csv", "-o", str(target), "--url", audit_db]
    )
    assert res.exit_code == 0, res.output
    assert "wrote 4 decisions" in _err(res)
    rows = list(csv.DictReader(io.StringIO(target.read_text())))
    assert [r["request_id"] for r in rows] == ["req-a", "req-b", "req-c", "req-d"]
    out = _ok(cli, "audit", "export", "--format", "jsonl", "--rejected", "--url", audit_db)
    objs = [json.loads(x) for x in out.splitlines()]
    assert [o["request_id"] for o in objs] == ["req-b"]
    assert objs[0]["candidates"][0]["instance"] == "prefill-1"
    res = cli.invoke(app, ["audit", "export", "--format", "xml", "--url", audit_db])
    assert res.exit_code == 2


def test_audit_refuses_missing_and_old_databases(cli: CliRunner, tmp_path: Path) -> None:
    missing = f"sqlite:///{tmp_path / 'missing.db'}"
    res = cli.invoke(app, ["audit", "ls", "--url", missing])
    assert res.exit_code == 1
    assert "run `mooncake db upgrade`" in _err(res)
    assert not (tmp_path / "missing.db").exists()

    old = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(old, "0001")
    res = cli.invoke(app, ["audit", "ls", "--url", old])
    assert res.exit_code == 1 and "revision '0001'" in _err(res)

    out = _ok(cli, "db", "current", "--url", old)
    assert f"revision 0001, this version uses {HEAD}: needs `mooncake db upgrade`" in out
    assert cli.invoke(app, ["db", "current", "--url", old, "--check"]).exit_code == 1
    assert f"upgraded from 0001 to revision {HEAD}" in _ok(cli, "db", "upgrade", "--url", old)
    assert f"already at revision {HEAD}" in _ok(cli, "db", "upgrade", "--url", old)
    st = json.loads(_ok(cli, "db", "current", "--url", old, "--json", "--check"))
    assert (st["current"], st["up_to_date"]) == (HEAD, True)


def test_config_file_selects_the_database(cli: CliRunner, tmp_path: Path) -> None:
    cfg = tmp_path / "mooncake.yaml"
    cfg.write_text(f"state_dir: {tmp_path / 'state'}\n")
    assert "upgraded from empty" in _ok(cli, "db", "upgrade", "--config", str(cfg))
    db = tmp_path / "state" / "audit.db"
    assert db.exists()
    tables = {r[0] for r in sqlite3.connect(db).execute("SELECT name FROM sqlite_master")}
    assert {"decisions", "candidates"} <= tables
    assert json.loads(_ok(cli, "audit", "ls", "--config", str(cfg), "--json")) == []


@pytest.mark.integration
def test_mooncake_audit_ls_in_a_subprocess(audit_db: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "mooncake_cli",
            "audit",
            "ls",
            "--url",
            audit_db,
            "--instance",
            "prefill-2",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert "req-a" in res.stdout and "prefill-2" in res.stdout and "12/14" in res.stdout
    assert "req-b" not in res.stdout


def test_ls_title_counts_all_matches_when_the_page_is_full(cli: CliRunner, audit_db: str) -> None:
    assert "audit decisions (2 of 4)" in _ok(cli, "audit", "ls", "--url", audit_db, "--limit", "2")
    out = _ok(cli, "audit", "ls", "--url", audit_db, "--limit", "2", "--offset", "3")
    assert "audit decisions (1 of 4)" in out and "req-a" in out


def test_cli_reads_while_the_writer_writes(cli: CliRunner, tmp_path: Path) -> None:
    # WAL: readers never block the writer and never see a half-written batch.
    import threading

    from mooncake_core.conductor.audit import AuditWriter, WriterOptions, sample

    url = f"sqlite:///{tmp_path / 'live.db'}"
    upgrade(url)
    w = AuditWriter.open(url, WriterOptions(batch_size=50, flush_interval_s=0.01))
    w.start()
    done = threading.Event()

    def produce() -> None:
        for d, c in sample.synthetic(3000, t0=1.8e9, seed=3):
            w.submit(d, c)
        done.set()

    t = threading.Thread(target=produce)
    t.start()
    seen: list[int] = []
    while not done.is_set() or len(seen) < 3:
        rows = json.loads(_ok(cli, "audit", "ls", "--url", url, "--json", "--limit", "1"))
        seen.append(rows[0]["id"] if rows else 0)
        # A visible decision always has its candidates (same transaction).
        assert not rows or rows[0]["matched_prefix_blocks"] is not None
    t.join()
    w.close()
    assert seen == sorted(seen)  # ids only grow: each read sees whole batches
    assert w.snapshot().written == 3000
    rows = json.loads(_ok(cli, "audit", "ls", "--url", url, "--json", "--limit", "1"))
    assert rows[0]["id"] == 3000
