"""Live TTFT prediction error on the embedded cluster, with the online calibration.

Usage: ``python bench/calibration_live.py [--model smollm2|tiny] [--limit 200] [--warmup 50]
[--speed 1] [--concurrency 8] [--max-output 8] [--admission none] [--trace PATH]
[--workdir DIR]``

Brings up the embedded cluster (``mooncake cluster up --detach``) from a config on free
127.0.0.1 ports (``tests/functional/cluster/cluster_support.make_config``), replays the
trace through ``mooncake loadgen`` (default: the shared conversation trace, lengths / 32:
mixed prompt lengths with prefix reuse), then reads ``mooncake audit stats --since`` the
first decision after the warm-up and prints the relative TTFT prediction error
``|actual - predicted| / actual``: median and p90 of what the Conductor predicted
(calibrated) and of what the uncalibrated models predicted for the same decisions
(``model_ttft_s``). Target (issue 20): median <= 25%, p90 <= 60% after <= 50 requests.
The cluster is taken down at the end; the state (audit DB, logs) stays in ``--workdir``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests/functional/cluster"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_support import make_config, write_config
from live_cluster import mooncake, must

from mooncake_core.sim.experiments import default_trace


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("smollm2", "tiny"), default="smollm2")
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-output", type=int, default=8)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument(
        "--admission",
        default=None,
        help="conductor admission (default: the config's); 'none' measures every request",
    )
    args = ap.parse_args(argv)
    trace = args.trace or default_trace()
    if trace is None:
        print("no trace found: pass --trace PATH", file=sys.stderr)
        return 2
    work = args.workdir or Path(f"/tmp/mooncake-calibration-{int(time.time())}")
    work.mkdir(parents=True, exist_ok=True)
    path, cfg = make_config(work, workers=True, real_model=args.model == "smollm2")
    if args.admission is not None:
        cfg["conductor"]["admission"] = args.admission
        write_config(path, cfg)
    c = str(path)
    t0 = time.monotonic()
    try:
        must(mooncake("cluster", "up", "-c", c, "--detach", "--ready-timeout", "600"), "cluster up")
        up_s = time.monotonic() - t0
        load = must(
            mooncake(
                "loadgen", "-c", c, "--trace", str(trace), "--limit", str(args.limit),
                "--speed", str(args.speed), "--concurrency", str(args.concurrency),
                "--max-output", str(args.max_output), "--json",
            ),
            "loadgen",
        )  # fmt: skip
        rep = json.loads(load)
        rows = [
            json.loads(line)
            for line in must(mooncake("audit", "export", "-c", c), "export").splitlines()
        ]
        rows.sort(key=lambda r: r["id"])
        if len(rows) <= args.warmup:
            sys.exit(f"only {len(rows)} decisions, warm-up is {args.warmup}")
        since = datetime.fromtimestamp(rows[args.warmup]["time"], UTC).isoformat()
        stats_cmd = ("audit", "stats", "-c", c, "--since", since)
        st = json.loads(must(mooncake(*stats_cmd, "--json"), "audit stats"))
        table = must(mooncake(*stats_cmd, "--bucket", "1h"), "audit stats")
    finally:
        mooncake("cluster", "down", "-c", c, timeout=300)
    print(table)
    tot = st["total"]
    lines = [
        ("model", args.model),
        ("trace", f"{trace} (first {args.limit}, speed {args.speed:g}, lengths / 32)"),
        ("loadgen", f"concurrency {args.concurrency}, max output {args.max_output}"),
        ("admission", cfg["conductor"]["admission"]),
        ("cluster up (s)", f"{up_s:.0f}"),
        ("completed / rejected / errors", f"{rep['completed']} / {rep['rejected']} / {rep['errors']}"),
        ("TTFT p50 / p90 (client)", f"{rep['ttft_p50_s'] * 1000:.0f} / {rep['ttft_p90_s'] * 1000:.0f} ms"),
        ("warm-up (requests)", str(args.warmup)),
        ("measured after warm-up", str(tot["measured"])),
        ("calibrated: median / p90", f"{pct(st['ttft_rel_p50'])} / {pct(st['ttft_rel_p90'])}"),
        (
            "uncalibrated: median / p90",
            f"{pct(st['model_ttft_rel_p50'])} / {pct(st['model_ttft_rel_p90'])}",
        ),
        ("TTFT bias (actual - predicted)", f"{tot['ttft_bias_s'] * 1000:+.0f} ms"),
        ("target", "median <= 25%, p90 <= 60%"),
        ("state", str(work)),
    ]  # fmt: skip
    w = max(len(k) for k, _ in lines)
    for k, v in lines:
        print(f"{k:<{w}}  {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
