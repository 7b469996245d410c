"""Simulator speed: the full conversation trace through kvcache_centric, audit off.

Usage: ``python bench/sim_speed.py [--trace PATH] [--policy kvcache_centric] [--no-decode]``

Prints a table: requests, simulated seconds, wall seconds, requests simulated per second
and events per second. Target (issue 6): the 12,031-request conversation trace in under
60 s on the 2-core development machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from mooncake_core.sim import SimConfig, load_trace, set_field, simulate
from mooncake_core.sim.experiments import default_trace


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=None, help="JSONL trace (default: shared one)")
    ap.add_argument("--policy", default="kvcache_centric")
    ap.add_argument("--admission", default="none")
    ap.add_argument("--prefill", type=int, default=16)
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--no-decode", action="store_true", help="TTFT only (skip decode batches)")
    args = ap.parse_args(argv)
    path = args.trace or default_trace()
    if path is None:
        print("no trace found: pass --trace PATH", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    trace = load_trace(path)
    load_s = time.perf_counter() - t0
    cfg = SimConfig(
        prefill_instances=args.prefill,
        decode_instances=args.decode,
        simulate_decode=not args.no_decode,
        audit=False,
    )
    cfg = set_field(cfg, "conductor.policy", args.policy)
    cfg = set_field(cfg, "conductor.admission", args.admission)
    t1 = time.perf_counter()
    res = simulate(trace, cfg)
    run_s = time.perf_counter() - t1
    s = res.summary(cfg.conductor.ttft_slo_s, cfg.conductor.tbt_slo_s)
    events = int(res.counters["events"])
    rows = [
        ("trace", str(path)),
        ("requests", f"{len(trace)}"),
        ("policy / admission", f"{args.policy} / {args.admission}"),
        ("cluster", f"{args.prefill}P+{args.decode}D, decode {'off' if args.no_decode else 'on'}"),
        ("simulated span (s)", f"{s.makespan_s:.0f}"),
        ("load trace (s)", f"{load_s:.2f}"),
        ("simulate (s)", f"{run_s:.2f}"),
        ("requests simulated / s", f"{len(trace) / run_s:.0f}"),
        ("events / s", f"{events / run_s:.0f}"),
        ("avg TTFT (s)", f"{s.avg_ttft_s:.3f}"),
        ("target", "< 60 s: " + ("met" if run_s + load_s < 60 else "MISSED")),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
