"""Multi-host cluster tests in network namespaces: NIC checks, a cluster over SSH."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from cluster_netns_support import (
    netns_pair,
    netns_unavailable_reason,
    ssh_rig,
    sshd_unavailable_reason,
)
from cluster_support import cli, free_port, has_command, kill_recorded, make_config, write_config

pytestmark = [pytest.mark.privileged, pytest.mark.integration]


@pytest.fixture(scope="module")
def netns_ok() -> None:
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(reason)


def test_check_reports_down_nic_and_mtu_mismatch(netns_ok: None, tmp_path: Path) -> None:
    with netns_pair(2) as rig:
        topo = tmp_path / "topology.json"
        topo.write_text(json.dumps({"cpu:0": [["mcv0a", "mcv1a"], []]}))
        path, cfg = make_config(tmp_path, address=rig.links[0].addr("a"))
        cfg["transfer"]["topology_file"] = str(topo)
        write_config(path, cfg)
        ns = ("ip", "netns", "exec", rig.ns("a"))

        good = cli("cluster", "check", "-c", str(path), "--json", prefix=ns)
        assert good.returncode == 0, good.stdout + good.stderr
        nics = [r for r in json.loads(good.stdout) if r["check"] == "nics"]
        assert nics[0]["ok"] and "mcv0a" in nics[0]["message"] and "mcv1a" in nics[0]["message"]

        rig.link_down(1, "a")
        bad = cli("cluster", "check", "-c", str(path), "--json", prefix=ns)
        assert bad.returncode == 1
        fails = [r for r in json.loads(bad.stdout) if not r["ok"]]
        assert [r["check"] for r in fails] == ["nics"]
        assert fails[0]["message"] == "NIC mcv1a on host local is DOWN"
        assert "ip link set mcv1a up" in fails[0]["fix"]
        up = cli("cluster", "up", "-c", str(path), "--detach", "--only", "master", prefix=ns)
        assert up.returncode == 1 and "NIC mcv1a on host local is DOWN" in " ".join(
            up.stdout.split()
        )

        rig.link_up(1, "a")
        rig.ip("a", "link", "set", "dev", "mcv1a", "mtu", "1400")
        mtu = cli("cluster", "check", "-c", str(path), "--json", prefix=ns)
        assert mtu.returncode == 1
        fails = [r for r in json.loads(mtu.stdout) if not r["ok"]]
        assert fails[0]["message"] == "MTU mismatch: local/mcv0a=1500, local/mcv1a=1400"
        assert "on local: ip link set mcv1a mtu 1500" in fails[0]["fix"]


SERVING_MISSING = [
    " ".join(p)
    for p in (("worker", "prefill"), ("worker", "decode"), ("conductor", "serve"))
    if not has_command(*p)
]
needs_store_node = pytest.mark.skipif(
    not has_command("store", "node"), reason="`mooncake store node` is not built yet"
)


@needs_store_node
@pytest.mark.slow
def test_two_host_cluster_over_ssh(tmp_path: Path) -> None:
    reason = sshd_unavailable_reason()
    if reason:
        pytest.skip(reason)
    with ssh_rig(tmp_path) as (rig, key):
        addr_a, addr_b = rig.links[0].addr("a"), rig.links[0].addr("b")
        path, cfg = make_config(tmp_path, address=addr_a)
        cfg["hosts"] = [
            {"name": "a", "address": addr_a, "ssh_user": "root", "ssh_key": str(key)},
            {"name": "b", "address": addr_b, "ssh_user": "root", "ssh_key": str(key)},
        ]
        for section in ("master", "conductor", "dashboard"):
            cfg[section]["host"] = "a"
        cfg["store_nodes"][0]["host"] = "a"
        cfg["store_nodes"][1]["host"] = "b"
        serving = not SERVING_MISSING
        if serving:
            # Prefill on b, decode and the front door on a: a request's KV crosses hosts.
            cfg["prefill_workers"] = [
                {
                    "name": "prefill-0",
                    "host": "b",
                    "rpc_port": free_port(),
                    "data_port": free_port(),
                }
            ]
            cfg["decode_workers"] = [
                {"name": "decode-0", "host": "a", "rpc_port": free_port(), "data_port": free_port()}
            ]
        write_config(path, cfg)
        ns = ("ip", "netns", "exec", rig.ns("a"))
        env_prefix = (
            "env",
            f"MOONCAKE_REMOTE_COMMAND={sys.executable} -m mooncake_cli",
            "MOONCAKE_SSH_KNOWN_HOSTS=none",
        )
        prefix = (*ns, *env_prefix)
        only: tuple[str, ...] = ("--only", "master", "--only", "store")
        if serving:
            only = (*only, "--only", "prefill", "--only", "decode", "--only", "conductor")
        try:
            up = cli(
                "cluster",
                "up",
                "-c",
                str(path),
                "--detach",
                "--ready-timeout",
                "120",
                *only,
                prefix=prefix,
                timeout=400,
            )
            assert up.returncode == 0, up.stdout + up.stderr
            recs = {
                p.stem: json.loads(p.read_text())
                for p in (Path(cfg["state_dir"]) / "run").glob("*.json")
            }
            placed = {n: (r["host"], r["remote"]) for n, r in recs.items()}
            assert placed["master"] == ("a", True)
            assert placed["store-0"] == ("a", True)
            assert placed["store-1"] == ("b", True)
            st = cli("cluster", "status", "-c", str(path), "--json", *only, prefix=prefix)
            assert st.returncode == 0, st.stdout + st.stderr
            data = json.loads(st.stdout)
            states = {r["name"]: r["state"] for r in data["components"]}
            assert set(states.values()) == {"healthy"} and set(states) == set(recs), states
            segs = {s["name"]: s["transport_address"] for s in data["store"]["segments"]}
            assert segs["store-1"].startswith(addr_b), segs

            # A client on host a writes an object onto host b's segment and reads it back.
            secret = (Path(cfg["state_dir"]) / "secret").read_bytes().strip()
            code = (
                "import sys\n"
                "from mooncake_core.store import ReplicateConfig\n"
                "from mooncake_core.store.client import Client\n"
                f"c = Client(master='{addr_a}:{cfg['master']['port']}', host='{addr_a}',"
                f" secret={secret!r}).setup()\n"
                "v = bytes(range(256)) * 4096\n"
                "c.put('cross/1', v, ReplicateConfig(preferred_segments=['store-1']))\n"
                "assert c.get('cross/1') == v\n"
                "print('ok')\n"
                "c.close()\n"
            )
            res = rig.run(
                "a", [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
            )
            assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]
            snap = json.loads(
                cli("cluster", "status", "-c", str(path), "--json", *only, prefix=prefix).stdout
            )
            used = {s["name"]: s["used"] for s in snap["store"]["segments"]}
            assert used["store-1"] >= 1 << 20 and used["store-0"] == 0, used

            if serving:
                assert placed["prefill-0"] == ("b", True) and placed["decode-0"] == ("a", True)
                req = (
                    "import httpx, json\n"
                    f"r = httpx.post('http://{addr_a}:{cfg['conductor']['http_port']}/v1/completions',"
                    " json={'prompt': 'across two hosts', 'max_tokens': 4}, timeout=60)\n"
                    "print(json.dumps(r.json()))\n"
                )
                out = rig.run(
                    "a", [sys.executable, "-c", req], capture_output=True, text=True, timeout=90
                )
                assert out.returncode == 0, out.stderr[-3000:]
                body = json.loads(out.stdout)
                assert body["usage"]["completion_tokens"] == 4, body
                assert (
                    body["timing"]["prefill"] == "prefill-0"
                    and body["timing"]["decode"] == "decode-0"
                )

            logs = cli("cluster", "logs", "store-1", "-c", str(path), "-n", "3", prefix=prefix)
            assert logs.returncode == 0 and "serving segment store-1" in logs.stdout, logs.stderr

            down = cli("cluster", "down", "-c", str(path), prefix=prefix)
            assert down.returncode == 0, down.stderr
            for rec in recs.values():
                gone = rig.run(
                    "a" if rec["host"] == "a" else "b",
                    [
                        "sh",
                        "-c",
                        f"ps -eo pgid=,stat= | awk '$1 == {rec['pgid']} && $2 !~ /^Z/' | grep -q . && exit 1 || exit 0",
                    ],
                )
                assert gone.returncode == 0, rec["name"]
        finally:
            cli("cluster", "down", "-c", str(path), prefix=prefix)
            kill_recorded(Path(cfg["state_dir"]))
        assert os.listdir(Path(cfg["state_dir"]) / "run") in (
            [],
            ["config.yaml", "secret"],
            ["secret", "config.yaml"],
        )
