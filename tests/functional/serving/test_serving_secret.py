"""With a cluster secret every hop authenticates: workers refuse unauthenticated RPCs,
and the whole path (Store, KV stream, CPP peer calls) still serves."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from serving_cluster import run_cluster

from mooncake_core.worker.service import probe_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]


def test_serving_with_a_cluster_secret(tmp_path: Path) -> None:
    secret = b"serving-test-secret"
    cpp = ("--cpp-threshold", "60", "--cpp-chunk", "16")
    with run_cluster(tmp_path, prefill=2, decode=1, secret=secret, conductor_args=cpp) as cl:
        addr = f"127.0.0.1:{cl.config['prefill_workers'][0]['rpc_port']}"
        assert not probe_worker(addr, 1.0)  # no token: refused
        assert probe_worker(addr, 1.0, secret)
        prefix = "a shared prefix, long enough for three blocks of KV..."
        for prompt in (prefix + "1", prefix + "2", "y" * 80):  # the last one runs on CPP
            r = httpx.post(
                cl.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 3}, timeout=60
            )
            assert r.status_code == 200, r.text
        fd = httpx.get(cl.url + "/health").json()["front_door"]
        assert fd["completed"] == 3 and fd["cpp"] == 1
        assert fd["reused_tokens"] >= 48 and fd["stored_blocks"] >= 3
