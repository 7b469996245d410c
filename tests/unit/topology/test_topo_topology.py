"""Topology: the object the Transfer Engine asks for NICs and addresses."""

from __future__ import annotations

from pathlib import Path

import pytest

from mooncake_core.topology import Topology, TopologyError, discover

MATRIX = {
    "cpu:0": [["mlx5_0", "mlx5_1"], ["mlx5_2", "mlx5_3"]],
    "cuda:0": [["mlx5_0"], ["mlx5_1", "mlx5_2", "mlx5_3"]],
}


def test_preferred_and_secondary() -> None:
    topo = Topology.from_matrix(MATRIX)
    assert topo.nics == ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
    assert topo.preferred("cuda:0") == ("mlx5_0",)
    assert topo.secondary("cuda:0") == ("mlx5_1", "mlx5_2", "mlx5_3")
    assert topo.preferred("cpu:0") == ("mlx5_0", "mlx5_1")
    assert topo.locations == ("cpu:0", "cuda:0")
    assert topo.to_matrix() == MATRIX


def test_unknown_location_prefers_every_nic() -> None:
    topo = Topology.from_matrix(MATRIX)
    assert topo.preferred("cuda:5") == topo.nics
    assert topo.secondary("cuda:5") == ()


def test_addresses() -> None:
    topo = Topology.from_matrix(MATRIX, {"mlx5_0": ["10.0.0.1", "10.0.1.1"], "mlx5_1": []})
    assert topo.address_of("mlx5_0") == "10.0.0.1"
    assert topo.addresses_of("mlx5_0") == ("10.0.0.1", "10.0.1.1")
    assert topo.address_of("mlx5_1") is None
    assert topo.address_of("mlx5_3") is None
    with pytest.raises(TopologyError, match="unknown NIC 'eth9'"):
        topo.address_of("eth9")


def test_addresses_for_unknown_nics_are_rejected() -> None:
    with pytest.raises(TopologyError, match=r"not in the matrix: \['eth0'\]"):
        Topology.from_matrix(MATRIX, {"eth0": ["10.0.0.1"]})


def test_malformed_matrix_is_rejected() -> None:
    with pytest.raises(TopologyError, match="key 'cuda:0': NIC 'mlx5_0' is listed twice"):
        Topology.from_matrix({"cuda:0": [["mlx5_0"], ["mlx5_0"]]})


def test_from_inventory_carries_netdev_addresses(gpu8_root: Path, nic_only_root: Path) -> None:
    topo = Topology.from_inventory(discover(gpu8_root))
    assert topo.preferred("cuda:3") == ("mlx5_3",)
    assert topo.address_of("mlx5_3") == "192.168.3.1"
    eth = Topology.from_inventory(discover(nic_only_root))
    assert eth.nics == ("ens1f0", "ens2f0", "veth0")
    assert eth.addresses_of("ens1f0") == ("10.1.0.1", "10.2.0.1")
    assert eth.address_of("veth0") == "10.9.0.1"
    assert eth.address_of("ens2f0") is None


def test_from_inventory_knows_nics_no_location_ranks(malformed_root: Path) -> None:
    # Every NUMA node unreadable and no GPU: the matrix is empty, the NIC still usable.
    (malformed_root / "sys/devices/system/node/node1/cpulist").write_text("bad\n")
    (malformed_root / "sys/devices/pci0000:00/0000:00:06.0/class").write_text("0x020000\n")
    inv = discover(malformed_root)
    topo = Topology.from_inventory(inv)
    assert topo.entries == {}
    assert topo.nics == ("eth0",)
    assert topo.preferred("cpu:0") == ("eth0",)
