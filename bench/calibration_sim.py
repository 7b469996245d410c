"""Online calibration in the simulator: prediction error and TTFT with it off and on.

Usage: ``python bench/calibration_sim.py [--trace PATH] [--speeds 1,2] [--policies ...]``

The simulator's ground truth is made to differ from the Conductor's predictors
(``SimConfig.truth_*``): each truth below is run with ``conductor.calibrate`` off and
on, the same trace, policy and replay speed, TTFT only (``simulate_decode=false``,
admission ``none``, 16 prefill instances, as Fig. 5). Prints one row per (truth, speed,
policy): the median / p90 relative TTFT prediction error and the average TTFT, off ->
on. The truths are generic what-ifs, not fitted to a trace:

* ``exact``: the predictor is the truth (only transfers under contention differ);
* ``slow-uneven``: 1.5x slower than profiled, instances spread +-30%, 20% log-normal
  noise, 50 ms outside the instance per request;
* ``fast-noisy``: 0.7x the profile, 30% noise, 20 ms outside.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from mooncake_core.sim import SimConfig, load_trace, set_field, simulate
from mooncake_core.sim.experiments import default_trace

TRUTHS: dict[str, dict[str, float]] = {
    "exact": {},
    "slow-uneven": {
        "truth_prefill_scale": 1.5,
        "truth_prefill_spread": 0.3,
        "truth_prefill_noise": 0.2,
        "truth_overhead_s": 0.05,
    },
    "fast-noisy": {
        "truth_prefill_scale": 0.7,
        "truth_prefill_noise": 0.3,
        "truth_overhead_s": 0.02,
    },
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=None, help="JSONL trace (default: shared one)")
    ap.add_argument("--speeds", default="1,2", help="comma-separated replay speeds")
    ap.add_argument("--policies", default="kvcache_centric,adaptive")
    ap.add_argument("--truths", default=",".join(TRUTHS), help=f"of {', '.join(TRUTHS)}")
    ap.add_argument("--prefill", type=int, default=16)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = ap.parse_args(argv)
    path = args.trace or default_trace()
    if path is None:
        print("no trace found: pass --trace PATH", file=sys.stderr)
        return 2
    base_trace = load_trace(path)
    rows = []
    print(
        f"trace {path} ({len(base_trace)} requests), {args.prefill} prefill instances, "
        "TTFT only; relative TTFT prediction error |actual - predicted| / actual"
    )
    head = (
        f"{'truth':<12} {'speed':>5} {'policy':<16} {'err p50 off->on':>17} "
        f"{'err p90 off->on':>17} {'avg TTFT s off->on':>21} {'change':>7}"
    )
    print(head)
    print("-" * len(head))
    t0 = time.perf_counter()
    for truth in args.truths.split(","):
        for speed in (float(s) for s in args.speeds.split(",")):
            trace = load_trace(path, speed=speed) if speed != 1.0 else base_trace
            for policy in args.policies.split(","):
                out = {}
                for cal in (False, True):
                    cfg = SimConfig(
                        prefill_instances=args.prefill,
                        decode_instances=args.prefill,
                        simulate_decode=False,
                        **TRUTHS[truth],  # type: ignore[arg-type]
                    )
                    cfg = set_field(cfg, "conductor.policy", policy)
                    cfg = set_field(cfg, "conductor.admission", "none")
                    cfg = set_field(cfg, "conductor.calibrate", cal)
                    s = simulate(trace, cfg).summary(30.0, 0.2)
                    out[cal] = s
                off, on = out[False], out[True]
                change = on.avg_ttft_s / off.avg_ttft_s - 1
                print(
                    f"{truth:<12} {speed:>5g} {policy:<16} "
                    f"{off.ttft_err_p50:>7.1%} ->{on.ttft_err_p50:>7.1%} "
                    f"{off.ttft_err_p90:>7.1%} ->{on.ttft_err_p90:>7.1%} "
                    f"{off.avg_ttft_s:>9.3f} ->{on.avg_ttft_s:>9.3f} {change:>+7.1%}",
                    flush=True,
                )
                rows.append(
                    {
                        "truth": truth,
                        "speed": speed,
                        "policy": policy,
                        "off": off.as_dict(),
                        "on": on.as_dict(),
                    }
                )
    print(f"wall {time.perf_counter() - t0:.0f} s")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
