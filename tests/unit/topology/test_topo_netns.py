"""Discovery inside a network namespace (what the multi-host transfer tests rely on).

Two ways into a namespace: ``ip netns exec`` remounts /sys for it; a forked ``setns`` child
keeps the host's /sys, so discovery must reconcile sysfs with the kernel's own list.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:  # tests/ is importable from the repository root
    sys.path.insert(0, str(_ROOT))

from tests.netns_util import NetnsPair, netns_pair, netns_unavailable_reason  # noqa: E402

pytestmark = [pytest.mark.privileged, pytest.mark.integration]


@pytest.fixture(scope="module")
def rig() -> Iterator[NetnsPair]:
    reason = netns_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with netns_pair(n_links=2) as pair:
        yield pair


def test_discover_under_ip_netns_exec(rig: NetnsPair) -> None:
    proc = rig.run(
        "a",
        [
            sys.executable,
            "-c",
            "from mooncake_cli.main import main; main()",
            "topo",
            "discover",
            "--format",
            "full",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    ifaces = {i["name"]: i for i in doc["inventory"]["interfaces"]}
    assert set(ifaces) == {link.dev_a for link in rig.links}
    for link in rig.links:
        iface = ifaces[link.dev_a]
        assert iface["kind"] == "veth"
        assert iface["ipv4"] == [f"{link.addr_a}/{link.prefixlen}"]
    assert doc["inventory"]["warnings"] == []
    names = sorted(link.dev_a for link in rig.links)
    # veths have no NUMA node and no PCI path: every location prefers every NIC.
    assert "cpu:0" in doc["matrix"]
    assert all(entry == [names, []] for entry in doc["matrix"].values())


def _discover_to(path: str) -> None:
    from mooncake_core.topology import Topology, discover

    inv = discover()
    topo = Topology.from_inventory(inv)
    Path(path).write_text(
        json.dumps(
            {
                "interfaces": [[i.name, i.kind, list(i.ipv4)] for i in inv.interfaces],
                "nics": list(topo.nics),
                "addresses": {n: topo.address_of(n) for n in topo.nics},
                "warnings": list(inv.warnings),
            }
        )
    )


def test_discover_after_setns_without_sysfs_remount(rig: NetnsPair, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    child = rig.spawn("b", _discover_to, str(out))
    child.join(timeout=60)
    assert child.exitcode == 0
    result = json.loads(out.read_text())
    assert sorted(result["nics"]) == sorted(link.dev_b for link in rig.links)
    for link in rig.links:
        assert [link.dev_b, "veth", [f"{link.addr_b}/{link.prefixlen}"]] in result["interfaces"]
        assert result["addresses"][link.dev_b] == link.addr_b
    # The host's interfaces (seen through the host's /sys) were dropped, and said so.
    assert any("not in this network namespace" in w for w in result["warnings"])
