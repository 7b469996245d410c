"""With a cluster secret every hop authenticates: workers refuse unauthenticated RPCs,
and the whole path (Store, KV stream, CPP peer calls) still serves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from serving_cluster import TINY_MODEL, run_cluster

from mooncake_core.worker.service import probe_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]


def test_serving_with_a_cluster_secret_and_profiled_predictors(tmp_path: Path) -> None:
    # `mooncake worker profile` fits the predictors the conductor then loads.
    cfg = tmp_path / "model.yaml"
    cfg.write_text(yaml.safe_dump({"model": TINY_MODEL}))
    prof = tmp_path / "profile"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mooncake_cli",
            "worker",
            "profile",
            "--config",
            str(cfg),
            "--out",
            str(prof),
            "--repeats",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["prefill_points"] > 0 and summary["decode_points"] > 0
    secret = b"serving-test-secret"
    cpp = (
        "--cpp-threshold",
        "60",
        "--cpp-chunk",
        "16",
        "--prefill-model",
        summary["prefill_model"],
        "--decode-model",
        summary["decode_model"],
    )
    with run_cluster(
        tmp_path,
        prefill=2,
        decode=1,
        secret=secret,
        conductor_args=cpp,
        decode_cache_blocks=16,  # 256 tokens of KV on the decode worker
    ) as cl:
        addr = f"127.0.0.1:{cl.config['prefill_workers'][0]['rpc_port']}"
        assert not probe_worker(addr, 1.0)  # no token: refused
        assert probe_worker(addr, 1.0, secret)
        prefix = "a shared prefix, long enough for three blocks of KV..."
        for prompt in (prefix + "1", prefix + "2", "y" * 80):  # the last one runs on CPP
            r = httpx.post(
                cl.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 3}, timeout=60
            )
            assert r.status_code == 200, r.text
        # A prompt whose KV cannot fit the decode pool: overload, 429 (not a 503).
        r = httpx.post(
            cl.url + "/v1/completions", json={"prompt": "z" * 300, "max_tokens": 2}, timeout=60
        )
        assert r.status_code == 429, r.text
        # Refused by admission now that the decode pool's capacity is registered live
        # (its predicted decode load is over 1 for this prompt alone), or, when admission
        # let it through, at Prepare by the decode worker.
        msg = r.json()["error"]["message"]
        assert msg.startswith(("decode_load_predicted:", "decode_kv_full")), msg
        assert r.headers["Retry-After"]
        fd = httpx.get(cl.url + "/health").json()["front_door"]
        assert fd["completed"] == 3 and fd["cpp"] == 1
        # one refusal (kv_full also counts those that came at Prepare)
        assert fd["rejected"] == 1 and fd["rejected_by_reason"] in (
            {"decode_load_predicted": 1},
            {"decode_kv_full": 1},
        ), fd
        assert fd["reused_tokens"] >= 48 and fd["stored_blocks"] >= 3
