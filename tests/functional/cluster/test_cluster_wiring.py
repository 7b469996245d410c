"""`cluster up` wires what the config says (issue 23): a cluster on a host address other
than 127.0.0.1 (master, store nodes, conductor and dashboard bound to and probed at
127.0.0.2), the conductor's settings from ``mooncake.yaml`` on its command line, ``~`` in
``ssd_dir`` expanded, and ``mooncake audit`` naming the database it reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cluster_support import kill_recorded, make_config, missing_commands, write_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ADDR = "127.0.0.2"
MISSING = missing_commands(
    ("store", "node"), ("worker", "prefill"), ("worker", "decode"), ("conductor", "serve"), ("web",)
)


def _reachable(address: str) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind((address, 0))
        except OSError:
            return False
    return True


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Path, dict, dict[str, str]]]:
    if not _reachable(ADDR):
        pytest.skip(f"{ADDR} is not a local address here")
    path, cfg = make_config(tmp_path, address=ADDR, workers=True)
    home = tmp_path / "home"
    home.mkdir()
    cfg["store_nodes"][0]["ssd_dir"] = "~/ssd-0"
    cfg["store_nodes"][0]["ssd_size"] = 8 << 20
    cfg["conductor"].update(cpp_threshold=2048, cpp_chunk_tokens=128, store_kv=False, profile=False)
    write_config(path, cfg)
    env = {**os.environ, "HOME": str(home), "COLUMNS": "250", "PYTHONUNBUFFERED": "1"}
    yield path, cfg, env
    _cli(env, tmp_path, "cluster", "down", "-c", str(path))
    kill_recorded(Path(cfg["state_dir"]))


def _cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mooncake_cli", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=cwd,
    )


@pytest.mark.skipif(bool(MISSING), reason=f"not built yet: mooncake {', mooncake '.join(MISSING)}")
def test_cluster_up_on_127_0_0_2_with_settings_from_the_config(
    cluster: tuple[Path, dict, dict[str, str]], tmp_path: Path
) -> None:
    path, cfg, env = cluster
    t0 = time.monotonic()
    up = _cli(env, tmp_path, "cluster", "up", "-c", str(path), "--detach", "--ready-timeout", "120")
    took = time.monotonic() - t0
    assert up.returncode == 0, up.stderr[-3000:]
    print(f"cluster up on {ADDR} (every role): {took:.1f} s")

    st = _cli(env, tmp_path, "cluster", "status", "-c", str(path), "--json")
    assert st.returncode == 0, st.stdout + st.stderr
    states = {r["name"]: r["state"] for r in json.loads(st.stdout)["components"]}
    names = ("master", "store-0", "store-1", "prefill-0", "decode-0", "conductor", "dashboard")
    assert states == dict.fromkeys(names, "healthy")

    url = f"http://{ADDR}:{cfg['conductor']['http_port']}/v1/completions"
    resp = httpx.post(url, json={"prompt": "hello 127.0.0.2", "max_tokens": 4}, timeout=120)
    assert resp.status_code == 200, resp.text
    request_id = resp.json()["id"]

    # Every component answers on the host's address, not on loopback's 127.0.0.1.
    dash = httpx.get(f"http://{ADDR}:{cfg['dashboard']['port']}/health", timeout=10)
    assert dash.status_code == 200, dash.text
    front = httpx.get(f"http://{ADDR}:{cfg['conductor']['http_port']}/health", timeout=10)
    assert front.status_code == 200, front.text
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{cfg['dashboard']['port']}/health", timeout=5)
    # Reads need a login by default (anonymous_read off): key names and the audit trail
    # are not for whoever reaches the port; the page sends a browser to /login.
    dash_url = f"http://{ADDR}:{cfg['dashboard']['port']}"
    keys = httpx.get(f"{dash_url}/api/store/objects", timeout=10)
    assert keys.status_code == 401 and "login required" in keys.text, keys.text
    page = httpx.get(f"{dash_url}/store", timeout=10)
    assert page.status_code in (302, 303, 307) and "/login" in page.headers["location"]

    runs = Path(cfg["state_dir"]) / "run"
    recs = {p.stem: json.loads(p.read_text()) for p in runs.glob("*.json")}
    dash_argv = recs["dashboard"]["argv"]
    assert dash_argv[dash_argv.index("--host") + 1] == ADDR
    argv = recs["conductor"]["argv"]
    assert argv[argv.index("--cpp-threshold") + 1] == "2048"
    assert argv[argv.index("--cpp-chunk") + 1] == "128"
    assert "--no-store-kv" in argv and "--no-profile" in argv

    # `~` in ssd_dir is the node's home, not a directory literally called `~`.
    assert (Path(env["HOME"]) / "ssd-0").is_dir()
    assert not (tmp_path / "~").exists()

    # `mooncake audit` says which database it reads: the one the conductor writes.
    db = Path(cfg["state_dir"]) / "audit.db"
    deadline = time.monotonic() + 30
    while True:  # the audit writer flushes every flush_interval_s
        audit = _cli(env, tmp_path, "audit", "ls", "-c", str(path), "--json")
        assert audit.returncode == 0, audit.stderr
        assert f"audit database: sqlite:///{db}" in audit.stderr
        if request_id in audit.stdout or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    assert request_id in audit.stdout, audit.stdout[-2000:]
