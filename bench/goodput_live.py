"""Live goodput under overload: baseline, early_reject and early_reject_predictive.

Usage: ``python bench/goodput_live.py [--factors 2 4] [--seconds 30] [--ttft-slo 2]
[--workdir DIR]``

For each admission strategy a fresh embedded cluster (tiny model, one prefill and one
decode worker, real KV capacities registered by the decode worker) is brought up with
``mooncake cluster up --detach`` from a config on free 127.0.0.1 ports
(``tests/functional/cluster/cluster_support.make_config``), with the TTFT SLO set to
``--ttft-slo``. The cluster's capacity is measured first, once, closed loop (baseline
admission, 2 requests open at a time): completed requests per second. Each strategy then
gets the same synthetic prefix-heavy workload (``mooncake loadgen``: 4 shared prefixes of
512 tokens, 64-token suffixes, 16 output tokens) open loop at ``factor x capacity``
requests per second for ``--seconds``.

Reported per run, from loadgen and the audit (``mooncake audit export``):

- goodput: requests per second that completed within both SLOs (loadgen's ``goodput_rps``);
- 429 before prefill: refused by admission (no work spent);
- rejected after prefill: admitted, prefilled (the audit has its measured TTFT), then
  refused or failed; ``wasted prefill s`` sums their measured TTFTs (queue included, an
  upper bound of the prefill work thrown away);
- TTFT p50 / p90 of the completed requests.

The state of each run (audit DB, logs) stays in ``--workdir``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests/functional/cluster"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_support import kill_recorded, make_config, write_config
from live_cluster import mooncake, must

ADMISSIONS = ("baseline", "early_reject", "early_reject_predictive")
WORKLOAD = ["--prefixes", "4", "--prefix-tokens", "512", "--suffix-tokens", "64"]
MAX_OUTPUT = "16"


def run(
    work: Path, admission: str, ttft_slo: float, load_args: list[str]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One fresh cluster, one loadgen run; returns loadgen's report and the audit rows."""
    work.mkdir(parents=True, exist_ok=True)
    path, cfg = make_config(work, workers=True)
    cfg["conductor"]["admission"] = admission
    cfg["conductor"]["ttft_slo_s"] = ttft_slo
    write_config(path, cfg)
    c = str(path)
    try:
        must(mooncake("cluster", "up", "-c", c, "--detach", "--ready-timeout", "180"), "cluster up")
        out = must(
            mooncake(
                "loadgen", "-c", c, *WORKLOAD, "--max-output", MAX_OUTPUT, *load_args, "--json"
            ),
            "loadgen",
        )
        report = json.loads(out)
        rows = [
            json.loads(line)
            for line in must(mooncake("audit", "export", "-c", c, "--format", "jsonl"), "export")
            .strip()
            .splitlines()
        ]
    finally:
        mooncake("cluster", "down", "-c", c, timeout=180)
        kill_recorded(Path(cfg["state_dir"]))
    return report, rows


def wasted(rows: list[dict[str, Any]]) -> tuple[int, float]:
    """Requests prefilled then not completed, and the sum of their measured TTFTs."""
    lost = [
        r
        for r in rows
        if r["admitted"] and r["actual_ttft_s"] is not None and r["outcome"] != "completed"
    ]
    return len(lost), sum(r["actual_ttft_s"] for r in lost)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--factors", type=float, nargs="+", default=[2.0, 4.0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--ttft-slo", type=float, default=2.0)
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args(argv)
    work = args.workdir or Path(f"/tmp/mooncake-goodput-{int(time.time())}")
    t0 = time.monotonic()

    cap_report, _ = run(
        work / "capacity",
        "baseline",
        args.ttft_slo,
        ["--rate", "1000", "--limit", "60", "--concurrency", "2"],
    )
    capacity = cap_report["completed"] / cap_report["wall_s"]
    print(f"capacity (closed loop, 2 open): {capacity:.2f} requests/s", file=sys.stderr)

    lines = [
        f"capacity {capacity:.2f} requests/s (closed loop, 2 open, baseline); "
        f"TTFT SLO {args.ttft_slo:g} s; {args.seconds:g} s per run",
        "",
        "| offered | admission | goodput (req/s) | completed | 429 before prefill "
        "| rejected after prefill | wasted prefill s | TTFT p50 / p90 (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for factor in args.factors:
        rate = factor * capacity
        limit = max(20, int(rate * args.seconds))
        for adm in ADMISSIONS:
            rep, rows = run(
                work / f"{adm}-{factor:g}x",
                adm,
                args.ttft_slo,
                ["--rate", f"{rate:.3f}", "--limit", str(limit), "--concurrency", "512"],
            )
            n_lost, lost_s = wasted(rows)
            before = sum(1 for r in rows if not r["admitted"])
            p50, p90 = rep["ttft_p50_s"], rep["ttft_p90_s"]
            ttft = "-" if p50 is None else f"{p50:.2f} / {p90:.2f}"
            lines.append(
                f"| {factor:g}x ({rate:.1f}/s, {limit}) | {adm} | {rep['goodput_rps']:.2f} "
                f"| {rep['completed']} | {before} | {n_lost} | {lost_s:.1f} | {ttft} |"
            )
            print(lines[-1], file=sys.stderr)
    print("\n".join(lines))
    print(f"\n({time.monotonic() - t0:.0f} s; state in {work})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
