"""The complete cluster across three hosts over SSH from one ``mooncake.yaml`` (issue 23).

Three network-namespace hosts on one switch, each with its own sshd. The operator runs
``mooncake cluster up`` on h0, which starts every component over SSH where the config
places it: master (and with etcd on, etcd and two HA masters) and the dashboard on h0,
the conductor, a store node and the prefill worker on h1, a store node and the decode
worker on h2. A completion is answered (its KV crosses from h1 to h2); the operator's
``mooncake audit ls`` and the dashboard on h0 both show that decision, read from the one
audit database the config names (a path every host mounts; the namespaces share this
machine's filesystem); ``cluster status`` is healthy; a Store client on h0 writes onto
h2's segment and reads it back; ``cluster logs`` reads a remote component's log;
``cluster down`` stops every process group on every host.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
import yaml
from cluster_netns_support import netns_unavailable_reason, ssh_switch, sshd_unavailable_reason
from cluster_support import (
    cli,
    group_gone,
    kill_recorded,
    missing_commands,
    write_config,
)

from mooncake_core.config import load_config

pytestmark = [pytest.mark.privileged, pytest.mark.integration, pytest.mark.slow]

MISSING = missing_commands(
    ("store", "node"), ("worker", "prefill"), ("worker", "decode"), ("conductor", "serve"), ("web",)
)


DOC = Path(__file__).resolve().parents[3] / "docs" / "operations.md"
MARK = (
    "<!-- three-host example: tests/functional/cluster/test_cluster_netns3.py runs this block -->"
)


def _example() -> dict:
    """The three-host ``mooncake.yaml`` of docs/operations.md, as written there."""
    text = DOC.read_text()
    block = text[text.index(MARK) :].split("```yaml\n", 1)[1].split("```", 1)[0]
    cfg = yaml.safe_load(block)
    assert isinstance(cfg, dict)
    return cfg


def _on_h0(rig: object, code: str, timeout: float = 90) -> str:
    res = rig.run(0, [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)  # type: ignore[attr-defined]
    assert res.returncode == 0, res.stderr[-3000:]
    return str(res.stdout)


@pytest.mark.skipif(bool(MISSING), reason=f"not built yet: mooncake {', mooncake '.join(MISSING)}")
@pytest.mark.parametrize("etcd", [False, True], ids=["etcd-off", "etcd-on"])
def test_three_host_cluster_over_ssh(tmp_path: Path, etcd: bool) -> None:
    reason = netns_unavailable_reason() or sshd_unavailable_reason()
    if reason:
        pytest.skip(reason)
    if etcd and shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (Debian: etcd-server)")
    with ssh_switch(tmp_path, 3) as (rig, key):
        a0, a1, a2 = rig.addrs
        cfg = _example()
        # As written, but for what a lab of namespaces changes: addresses and key, a
        # temporary state_dir and audit path (one filesystem stands in for the shared
        # mount), the tiny model (time).
        for host, addr in zip(cfg["hosts"], rig.addrs, strict=True):
            host.update(address=addr, ssh_key=str(key))
        cfg["state_dir"] = str(tmp_path / "state")
        shared = tmp_path / "shared"
        shared.mkdir()
        cfg["audit"]["url"] = f"sqlite:///{shared / 'audit.db'}"
        cfg["model"] = {"name": "mooncake-tiny", "layers": 2, "hidden": 64, "intermediate": 128}
        if not etcd:
            del cfg["etcd"]
        path = tmp_path / "lab.yaml"
        write_config(path, cfg)
        eff = load_config(path)  # the ports the file leaves at their defaults
        prefix = (
            "ip",
            "netns",
            "exec",
            rig.hosts[0],
            "env",
            f"MOONCAKE_REMOTE_COMMAND={sys.executable} -m mooncake_cli",
            "MOONCAKE_SSH_KNOWN_HOSTS=none",
        )
        try:
            t0 = time.monotonic()
            up = cli(
                "cluster", "up", "-c", str(path), "--detach", "--ready-timeout", "180",
                prefix=prefix, timeout=600,
            )  # fmt: skip
            assert up.returncode == 0, up.stdout + up.stderr
            print(
                f"3-host cluster (etcd {'on' if etcd else 'off'}) up in {time.monotonic() - t0:.1f} s"
            )
            recs = {
                p.stem: json.loads(p.read_text())
                for p in (Path(cfg["state_dir"]) / "run").glob("*.json")
            }
            placed = {n: r["host"] for n, r in recs.items()}
            assert placed["conductor"] == placed["prefill-0"] == placed["store-0"] == "h1"
            assert placed["decode-0"] == placed["store-1"] == "h2"
            assert placed["dashboard"] == "h0"
            masters = [n for n in placed if n.startswith("master")]
            assert {placed[m] for m in masters} == {"h0"}
            assert len(masters) == (2 if etcd else 1)
            assert ("etcd" in placed) == etcd
            st = cli("cluster", "status", "-c", str(path), "--json", prefix=prefix)
            assert st.returncode == 0, st.stdout + st.stderr
            data = json.loads(st.stdout)
            states = {r["name"]: r["state"] for r in data["components"]}
            assert set(states) == set(recs) and set(states.values()) == {"healthy"}, states
            segs = {s["name"]: s["transport_address"] for s in data["store"]["segments"]}
            assert segs["store-0"].startswith(a1) and segs["store-1"].startswith(a2), segs

            if not etcd:
                # A Store client on h0 writes onto h2's segment and reads it back.
                secret = (Path(cfg["state_dir"]) / "secret").read_bytes().strip()
                assert (
                    _on_h0(
                        rig,
                        "from mooncake_core.store import ReplicateConfig\n"
                        "from mooncake_core.store.client import Client\n"
                        f"c = Client(master='{a0}:{eff.master.port}', host='{a0}',"
                        f" secret={secret!r}).setup()\n"
                        "v = bytes(range(256)) * 4096\n"
                        "c.put('cross/1', v, ReplicateConfig(preferred_segments=['store-1']))\n"
                        "assert c.get('cross/1') == v\n"
                        "print('ok')\n"
                        "c.close()\n",
                    ).strip()
                    == "ok"
                )
                st = cli("cluster", "status", "-c", str(path), "--json", prefix=prefix)
                used = {s["name"]: s["used"] for s in json.loads(st.stdout)["store"]["segments"]}
                assert used["store-1"] >= 1 << 20 and used["store-0"] == 0, used
                logs = cli("cluster", "logs", "store-1", "-c", str(path), "-n", "3", prefix=prefix)
                assert logs.returncode == 0 and "serving segment store-1" in logs.stdout, (
                    logs.stderr
                )

            # A client on the operator's host: the front door on h1, the KV h1 -> h2.
            front = f"http://{a1}:{eff.conductor.http_port}"
            body = json.loads(
                _on_h0(
                    rig,
                    "import httpx, json\n"
                    f"r = httpx.post('{front}/v1/completions',"
                    " json={'prompt': 'across three hosts', 'max_tokens': 4}, timeout=60)\n"
                    "print(json.dumps(r.json()))\n",
                )
            )
            assert body["usage"]["completion_tokens"] == 4, body
            assert (body["timing"]["prefill"], body["timing"]["decode"]) == (
                "prefill-0",
                "decode-0",
            )
            rid = body["id"]

            # The operator's `mooncake audit ls` on h0 reads the one database the config
            # names, and shows the decision the conductor on h1 wrote there.
            deadline = time.monotonic() + 30
            while True:
                audit = cli("audit", "ls", "-c", str(path), "--json", prefix=prefix)
                assert audit.returncode == 0, audit.stderr
                if rid in audit.stdout or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert f"audit database: {cfg['audit']['url']}" in audit.stderr
            row = next(r for r in json.loads(audit.stdout) if r["request_id"] == rid)
            assert row["chosen_prefill"] == "prefill-0" and row["chosen_decode"] == "decode-0"

            # The dashboard on h0, logged in with the cluster's token, shows it too.
            tok = cli("web", "--print-token", "-c", str(path), prefix=prefix)
            assert tok.returncode == 0, tok.stderr
            dash = f"http://{a0}:{eff.dashboard.port}"
            seen = json.loads(
                _on_h0(
                    rig,
                    "import httpx, json\n"
                    f"c = httpx.Client(base_url='{dash}', timeout=30)\n"
                    f"assert c.get('/api/audit/decisions/{rid}').status_code == 401\n"
                    f"c.post('/api/auth/login', json={{'token': '{tok.stdout.strip()}'}})"
                    ".raise_for_status()\n"
                    f"r = c.get('/api/audit/decisions/{rid}')\n"
                    "print(json.dumps({'status': r.status_code, 'body': r.json()}))\n",
                )
            )
            assert seen["status"] == 200, seen
            assert seen["body"]["decision"]["request_id"] == rid, seen
            assert seen["body"]["decision"]["chosen_decode"] == "decode-0"

            down = cli("cluster", "down", "-c", str(path), prefix=prefix, timeout=300)
            assert down.returncode == 0, down.stderr
            assert not list((Path(cfg["state_dir"]) / "run").glob("*.json"))
            # Namespaces share this machine's process table: every group is gone.
            assert [r["name"] for r in recs.values() if not group_gone(r["pgid"])] == []
        finally:
            cli("cluster", "down", "-c", str(path), prefix=prefix, timeout=300)
            kill_recorded(Path(cfg["state_dir"]))
