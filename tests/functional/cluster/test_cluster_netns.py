"""Multi-host cluster checks in network namespaces: NIC state and MTU (the cluster over
SSH across three hosts is test_cluster_netns3.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster_netns_support import (
    netns_pair,
    netns_unavailable_reason,
)
from cluster_support import cli, make_config, write_config

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
