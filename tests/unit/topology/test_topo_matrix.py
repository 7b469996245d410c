"""The NIC preference matrix: exact values on the fixtures, validation of matrix files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mooncake_core.topology import (
    Inventory,
    NetInterface,
    NumaNode,
    TopologyError,
    build_matrix,
    discover,
    load_matrix,
    natural_key,
    pci_distance,
    validate_matrix,
)

NICS = [f"mlx5_{k}" for k in range(8)]


def test_8gpu_each_gpu_prefers_the_nic_on_its_switch(gpu8_root: Path) -> None:
    matrix = build_matrix(discover(gpu8_root))
    for i in range(8):
        assert matrix[f"cuda:{i}"] == [[f"mlx5_{i}"], [n for n in NICS if n != f"mlx5_{i}"]]


def test_8gpu_each_socket_prefers_its_four_nics(gpu8_root: Path) -> None:
    matrix = build_matrix(discover(gpu8_root))
    assert matrix["cpu:0"] == [NICS[:4], NICS[4:]]
    assert matrix["cpu:1"] == [NICS[4:], NICS[:4]]
    assert list(matrix) == ["cpu:0", "cpu:1"] + [f"cuda:{i}" for i in range(8)]


def test_vm_matrix(vm_root: Path) -> None:
    assert build_matrix(discover(vm_root)) == {"cpu:0": [["eth0"], []]}
    assert build_matrix(discover(vm_root, include_loopback=True)) == {"cpu:0": [["eth0", "lo"], []]}


def test_nic_only_matrix_uses_interfaces(nic_only_root: Path) -> None:
    assert build_matrix(discover(nic_only_root)) == {
        "cpu:0": [["ens1f0"], ["ens2f0", "veth0"]],
        "cpu:1": [["ens2f0"], ["ens1f0", "veth0"]],
    }


def _iface(name: str, pci: tuple[str, ...] | None, numa: int | None) -> NetInterface:
    return NetInterface(name, "physical", pci, numa, "up", None, 1500, ())


def test_numa_node_without_nics_prefers_all_and_gpu_ties_share_preference() -> None:
    from mooncake_core.topology import Gpu

    root = ("pci0000:00", "0000:00:01.0", "0000:01:00.0")
    inv = Inventory(
        numa_nodes=(NumaNode(0, (0,)), NumaNode(1, (1,))),
        rdma_devices=(),
        interfaces=(
            _iface("eth10", (*root, "0000:02:01.0", "0000:04:00.0"), 0),
            _iface("eth2", (*root, "0000:02:02.0", "0000:05:00.0"), 0),
            _iface("eth3", ("pci0000:80", "0000:80:01.0"), 0),
        ),
        gpus=(Gpu("0000:03:00.0", "0x10de", None, (*root, "0000:02:00.0", "0000:03:00.0"), 0, 0),),
    )
    assert build_matrix(inv) == {
        "cpu:0": [["eth2", "eth3", "eth10"], []],
        "cpu:1": [["eth2", "eth3", "eth10"], []],  # no NIC on node 1: all preferred
        "cuda:0": [["eth2", "eth10"], ["eth3"]],  # both behind the GPU's switch
    }


def test_gpu_with_only_veth_prefers_all() -> None:
    from mooncake_core.topology import Gpu

    inv = Inventory(
        numa_nodes=(NumaNode(0, (0,)),),
        rdma_devices=(),
        interfaces=(
            NetInterface("veth1", "veth", None, None, "up", None, 1500, ()),
            NetInterface("veth0", "veth", None, None, "up", None, 1500, ()),
        ),
        gpus=(Gpu("0000:03:00.0", "0x10de", None, ("pci0000:00", "0000:03:00.0"), None, 0),),
    )
    assert build_matrix(inv)["cuda:0"] == [["veth0", "veth1"], []]


def test_no_nic_gives_empty_matrix(tmp_path: Path) -> None:
    (tmp_path / "sys/devices/system/node/node0").mkdir(parents=True)
    (tmp_path / "sys/devices/system/node/node0/cpulist").write_text("0\n")
    assert build_matrix(discover(tmp_path)) == {}


def test_pci_distance() -> None:
    switch = ("pci0000:00", "0000:00:01.0", "0000:10:00.0")
    gpu = (*switch, "0000:11:00.0", "0000:12:00.0")
    nic = (*switch, "0000:11:01.0", "0000:13:00.0")
    assert pci_distance(gpu, gpu) == 0
    assert pci_distance(gpu, nic) == 4
    assert pci_distance(gpu, ("pci0000:00", "0000:00:02.0", "0000:20:00.0")) == 6
    assert pci_distance(gpu, ("pci0000:80", "0000:80:01.0")) == 7


def test_natural_key_orders_numbers_numerically() -> None:
    names = ["mlx5_10", "mlx5_2", "eth1", "mlx5_1"]
    assert sorted(names, key=natural_key) == ["eth1", "mlx5_1", "mlx5_2", "mlx5_10"]


def test_load_matrix_accepts_plain_and_full_files(tmp_path: Path, gpu8_root: Path) -> None:
    inv = discover(gpu8_root)
    matrix = build_matrix(inv)
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(matrix))
    full = tmp_path / "full.json"
    full.write_text(json.dumps({"matrix": matrix, "inventory": inv.to_dict()}))
    assert load_matrix(plain) == matrix
    assert load_matrix(full) == matrix


def test_load_matrix_upstream_example(tmp_path: Path) -> None:
    path = tmp_path / "topo.json"
    path.write_text(
        '{"cpu:0": [["mlx5_0","mlx5_1"], ["mlx5_2","mlx5_3"]],'
        ' "cuda:0": [["mlx5_0"], ["mlx5_1","mlx5_2","mlx5_3"]]}'
    )
    assert load_matrix(path)["cuda:0"] == [["mlx5_0"], ["mlx5_1", "mlx5_2", "mlx5_3"]]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[]", "must be a JSON object, got a list"),
        ('{"gpu0": [["a"], []]}', "key 'gpu0': not a location"),
        ('{"cuda:x": [["a"], []]}', "key 'cuda:x': not a location"),
        ('{"cpu:0": [["a"]]}', r"key 'cpu:0': must be \[\[preferred NICs\], \[secondary NICs\]\]"),
        ('{"cpu:0": ["a", "b"]}', "key 'cpu:0': must be"),
        ('{"cpu:0": [["a"], [7]]}', "key 'cpu:0': NIC names must be non-empty strings, got 7"),
        ('{"cpu:0": [[""], []]}', "key 'cpu:0': NIC names must be non-empty strings"),
        ('{"cpu:1": [["a"], ["a"]]}', "key 'cpu:1': NIC 'a' is listed twice"),
        ('{"cpu:0": [[], []]}', "key 'cpu:0': lists no NIC"),
        ("{oops", "not valid JSON"),
    ],
)
def test_load_matrix_names_the_bad_key(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "topo.json"
    path.write_text(content)
    with pytest.raises(TopologyError, match=message) as info:
        load_matrix(path)
    assert str(info.value).startswith(str(path))


def test_load_matrix_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="cannot read topology file"):
        load_matrix(tmp_path / "absent.json")


def test_validate_matrix_returns_a_copy() -> None:
    data = {"cpu:0": [["a"], ["b"]]}
    clean = validate_matrix(data)
    clean["cpu:0"][0].append("c")
    assert data == {"cpu:0": [["a"], ["b"]]}
