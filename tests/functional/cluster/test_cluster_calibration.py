"""Online calibration live: the embedded cluster (tiny model) under `mooncake loadgen`, and
`mooncake audit stats` comparing the calibrated TTFT predictions with what the
uncalibrated models predicted for the same decisions.

The workload is a small trace in the public format written here: prompts from 30 to
~1300 tokens (mixed lengths) behind four shared system prompts (prefix reuse). The test
asserts errors, not timings: after a warm-up, the calibrated median and p90 relative
errors must be below the uncalibrated ones on the same requests (without calibration the
two columns are equal, so the test fails) and the median under a loose ceiling. Issue
20's targets are measured by bench/calibration_live.py (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cluster_support import audit_rows, cli, kill_recorded, make_config, replay

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

REQUESTS = 60
WARMUP = 24


def write_trace(path: Path, n: int, seed: int = 3) -> None:
    """``n`` requests at ~3/s: one of four 4-block system prompts + 0..76 unique blocks."""
    rng = random.Random(seed)
    t_ms = 0.0
    next_id = 1000
    lines = []
    for _ in range(n):
        t_ms += rng.expovariate(3.0) * 1000
        system = rng.randrange(4)
        own = int(2 ** rng.uniform(0, 6.25)) - 1  # 0..75 blocks, log-uniform-ish
        ids = [system * 4 + k for k in range(4)] + list(range(next_id, next_id + own))
        next_id += own
        lines.append(
            json.dumps(
                {
                    "timestamp": int(t_ms),
                    "input_length": 512 * len(ids),
                    "output_length": 96,
                    "hash_ids": ids,
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")


def test_calibrated_ttft_error_is_far_below_the_uncalibrated(tmp_path: Path) -> None:
    path, cfg = make_config(tmp_path, workers=True)
    trace = tmp_path / "trace.jsonl"
    write_trace(trace, REQUESTS)
    c = str(path)
    try:
        rep = replay(c, trace, REQUESTS, concurrency=8, max_output=3)
        assert rep["completed"] >= REQUESTS - 2, rep

        # The warm-up boundary: the decision time of the first request after it.
        rows = audit_rows(c)
        assert len(rows) == REQUESTS
        since = datetime.fromtimestamp(rows[WARMUP]["time"], UTC).isoformat()
        st = cli("audit", "stats", "-c", c, "--since", since, "--json")
        assert st.returncode == 0, st.stderr
        stats = json.loads(st.stdout)
        table = cli("audit", "stats", "-c", c, "--since", since)
        print(table.stdout)
    finally:
        cli("cluster", "down", "-c", c, timeout=120)
        kill_recorded(Path(cfg["state_dir"]))

    measured = stats["total"]["measured"]
    assert measured >= REQUESTS - WARMUP - 2 and stats["model_measured"] == measured
    cal50, cal90 = stats["ttft_rel_p50"], stats["ttft_rel_p90"]
    raw50, raw90 = stats["model_ttft_rel_p50"], stats["model_ttft_rel_p90"]
    print(f"after {WARMUP} warm-up requests ({time.strftime('%X')}): calibrated median "
          f"{cal50:.1%} p90 {cal90:.1%}; uncalibrated median {raw50:.1%} p90 {raw90:.1%}")  # fmt: skip
    # The uncalibrated models miss the RPCs, the audit commit and the worker's own speed.
    # Calibration must learn them: on the same decisions its errors are below the
    # uncalibrated ones (with calibration off both columns are equal and this fails) and
    # its median stays inside a ceiling a broken fit would exceed. Issue 20's targets
    # (median <= 25%, p90 <= 60%) are numbers, so they are measured on a quiet machine by
    # bench/calibration_live.py and recorded in docs/benchmarks.md, not asserted here:
    # a short request's relative error is mostly the machine's scheduling jitter, and a
    # loaded CI machine measured 34.5% / 64.5% (uncalibrated 54.6% / 86.9%) where a quiet
    # one measures 12-17% / 32-34%.
    assert cal50 < raw50 and cal90 < raw90
    assert cal50 <= 0.5, f"calibrated median error {cal50:.1%} > 50%"
