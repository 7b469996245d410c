"""`mooncake sim ...` as a user runs it: real subprocesses on a small generated trace."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mooncake_cli", "sim", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """120 multi-turn requests over two minutes, in the public format."""
    rng = random.Random(5)
    p = tmp_path_factory.mktemp("trace") / "small.jsonl"
    sessions: list[list[int]] = []
    nxt = 0
    lines = []
    for i in range(120):
        if sessions and rng.random() < 0.5:
            s = rng.choice(sessions)
        else:
            s = []
            sessions.append(s)
        for _ in range(rng.randint(1, 8)):
            nxt += 1
            s.append(nxt)
        inp = len(s) * 512 - rng.randint(0, 300)
        lines.append(
            json.dumps(
                {
                    "timestamp": i * 1000,
                    "input_length": inp,
                    "output_length": rng.randint(2, 60),
                    "hash_ids": s,
                }
            )
        )
    p.write_text("\n".join(lines) + "\n")
    return p


def test_run_prints_json_summary_and_per_request_csv(trace: Path, tmp_path: Path) -> None:
    csv_path = tmp_path / "reqs.csv"
    args = ["run", "--trace", str(trace), "--prefill", "2", "--decode", "2"]
    res = run(*args, "--policy", "cache_aware", "--per-request", str(csv_path), "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["requests"] == 120 and data["served"] == 120
    assert 0 < data["avg_ttft_s"] < 60
    assert data["hit_rate"] > 0
    lines = csv_path.read_text().splitlines()
    assert len(lines) == 121 and lines[0].startswith("rid,arrival_s,input_length")


def test_same_run_in_two_processes_with_different_hash_seeds(trace: Path, tmp_path: Path) -> None:
    outs = []
    for hash_seed in ("1", "2"):
        p = tmp_path / f"r{hash_seed}.csv"
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        args = ["run", "--trace", str(trace), "--prefill", "3", "--decode", "2", "--seed", "4"]
        res = run(*args, "--policy", "random", "--per-request", str(p), "--json", env=env)
        assert res.returncode == 0, res.stderr
        outs.append(p.read_text())
    assert outs[0] == outs[1]


def test_fig5_writes_table_and_plots(trace: Path, tmp_path: Path) -> None:
    res = run("fig5", "--trace", str(trace), "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr
    md = (tmp_path / "fig5.md").read_text()
    for policy in ("random", "load_balance", "cache_aware", "kvcache_centric", "adaptive"):
        assert f"| {policy} |" in md
    assert (tmp_path / "fig5_ttft.png").read_bytes()[:4] == b"\x89PNG"
    rows = json.loads((tmp_path / "results.json").read_text())
    assert rows[0]["run"] == "random"
    # Not the paper's trace: no paper numbers beside ours; the lower bound beside each policy.
    assert all("paper_avg_ttft_s" not in r for r in rows) and "paper" not in md.split("Command")[1]
    for r in rows:
        assert r["avg_ttft_s"] >= r["lower_bound_s"] * 0.999
        assert r["vs_bound"] == pytest.approx(r["avg_ttft_s"] / r["lower_bound_s"])
    # A complete, rerunnable command line.
    assert f"Command: `mooncake sim fig5 --trace {trace} --seed 0 --profile llama3_70b_a800" in md


def test_sweep_any_field_and_bad_field(trace: Path, tmp_path: Path) -> None:
    res = run(
        "sweep",
        "--trace",
        str(trace),
        "--out",
        str(tmp_path),
        "--prefill",
        "2",
        "--decode",
        "1",
        "--field",
        "conductor.kvcache_balancing_threshold",
        "--values",
        "1,4",
        "--json",
    )
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [r["value"] for r in rows] == ["1", "4"]
    assert (tmp_path / "sweep_ttft.png").exists()
    bad = run("sweep", "--trace", str(trace), "--field", "conductor.nope", "--values", "1")
    assert bad.returncode == 1 and "unknown field 'conductor.nope'" in bad.stderr


def test_rejection_and_pd_ratio_small(trace: Path, tmp_path: Path) -> None:
    res = run("rejection", "--trace", str(trace), "--out", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "r" / "rejection_load.png").exists()
    assert "| early_reject_predictive |" in res.stdout
    res = run(
        "rejection",
        "--trace",
        str(trace),
        "--set",
        "decode_max_batch=1",
        "--json",
        "--out",
        str(tmp_path / "w"),
    )
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert rows[0]["run"] == "baseline" and rows[0]["rejected"] == rows[0]["wasted_prefills"]
    assert all("load_correlation" in r for r in rows)
    md = (tmp_path / "w" / "rejection.md").read_text()
    assert "what-if settings {'decode_max_batch': '1'}" in md
    assert all("paper_rejected" not in r for r in rows)
    assert (
        f"`mooncake sim rejection --trace {trace} --seed 0 --profile llama3_70b_a800 "
        f"--set decode_max_batch=1 --out {tmp_path / 'w'}`" in md
    )
    res = run("pd_ratio", "--trace", str(trace), "--nodes", "4", "--out", str(tmp_path / "p"))
    assert res.returncode == 0, res.stderr
    assert "| 2P:2D |" in res.stdout


def test_hitrate_small(trace: Path, tmp_path: Path) -> None:
    res = run(
        "hitrate",
        "--trace",
        str(trace),
        "--capacities",
        "0,5000,1e7",
        "--instances",
        "2",
        "--out",
        str(tmp_path),
        "--json",
    )
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    ideal = [r["global_pool_ideal"] for r in rows]
    assert ideal[0] == 0 and ideal == sorted(ideal)
    assert rows[-1]["global_pool_ideal"] == pytest.approx(rows[-1]["unlimited"])


def test_errors_name_the_flag_and_the_line(trace: Path, tmp_path: Path) -> None:
    missing = run("run", "--trace", str(tmp_path / "none.jsonl"))
    assert missing.returncode == 1 and "--trace" in missing.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text(trace.read_text().splitlines()[0] + '\n{"timestamp": 5}\n')
    res = run("run", "--trace", str(bad))
    assert res.returncode == 1 and "bad.jsonl:2" in res.stderr and "input_length" in res.stderr
    res = run("run", "--trace", str(trace), "--sample", "first:0")
    assert res.returncode == 1 and "--sample" in res.stderr
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "MOONCAKE_TRACE": str(tmp_path / "nope.jsonl"),
    }
    res = subprocess.run(
        [sys.executable, "-m", "mooncake_cli", "sim", "run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert res.returncode == 1 and "no trace found: pass --trace" in res.stderr


def test_grid_one_command_with_lower_bound(trace: Path, tmp_path: Path) -> None:
    doc = tmp_path / "page.md"
    doc.write_text("intro\n<!-- report:grid begin -->\nold table\n<!-- report:grid end -->\nrest\n")
    res = run(
        "grid",
        "--trace",
        str(trace),
        "--speeds",
        "1,4",
        "--gbps",
        "10",
        "--out",
        str(tmp_path),
        "--doc",
        str(doc),
        "--json",
    )
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [(r["speed"], r["gbps"], r["decode"]) for r in rows] == [
        (1.0, 10.0, "off"),
        (1.0, 10.0, "on"),
        (4.0, 10.0, "off"),
        (4.0, 10.0, "on"),
    ]
    for r in rows:
        # No policy beats the no-queue bound; the ratio is reported beside each policy.
        for p in ("kvcache_centric", "adaptive"):
            assert r[f"{p}_avg_ttft_s"] >= r["lower_bound_s"] * 0.999
            assert r[f"{p}_vs_bound"] == pytest.approx(r[f"{p}_avg_ttft_s"] / r["lower_bound_s"])
        assert "adaptive_vs_kvcache_centric_pct" in r
    md = (tmp_path / "grid.md").read_text()
    # A complete, rerunnable command line.
    assert (
        f"`mooncake sim grid --trace {trace} --seed 0 --profile llama3_70b_a800 --speeds 1,4 "
        f"--gbps 10 --decode off,on --policies kvcache_centric,adaptive --out {tmp_path}`" in md
    )
    # --doc wrote the same table into the page, between its markers, nothing else changed.
    page = doc.read_text()
    assert "old table" not in page and page.startswith("intro\n<!-- report:grid begin -->\n")
    assert page.endswith("<!-- report:grid end -->\nrest\n")
    assert md.split("\n", 2)[2].strip() in page
    bad = run("grid", "--trace", str(trace), "--speeds", "fast")
    assert bad.returncode != 0 and "--speeds" in bad.stderr and "Traceback" not in bad.stderr


def test_paper_numbers_only_beside_the_papers_trace(trace: Path, tmp_path: Path) -> None:
    from mooncake_core.sim.experiments import ExperimentOptions, is_paper_trace

    assert not is_paper_trace(trace)
    shared = ROOT.parent / "shared/traces/conversation_trace.jsonl"
    if shared.is_file():
        assert is_paper_trace(shared)
        assert ExperimentOptions(shared).paper_setting(1.0)
        # Sampled or at another speed it is not the paper's setting.
        assert not ExperimentOptions(shared, sample="first:100").paper_setting(1.0)
        assert not ExperimentOptions(shared, speed=3.0).paper_setting(2.0)
    # A copy of another trace under the paper trace's name is still not the paper's trace.
    fake = tmp_path / "conversation_trace.jsonl"
    fake.write_bytes(trace.read_bytes())
    assert not is_paper_trace(fake)


def test_run_reports_lower_bound_beside_the_policy(trace: Path) -> None:
    args = ["run", "--trace", str(trace), "--prefill", "2", "--decode", "2", "--json"]
    data = json.loads(run(*args, "--set", "simulate_decode=false").stdout)
    assert 0 < data["lower_bound_avg_ttft_s"] <= data["avg_ttft_s"] * (1 + 1e-9)
    assert data["vs_bound"] == pytest.approx(data["avg_ttft_s"] / data["lower_bound_avg_ttft_s"])
