"""Discovery on fixture sysfs trees: exact inventories, skipped devices, warnings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mooncake_core.topology import (
    Inventory,
    KernelLink,
    NetInterface,
    NetView,
    NumaNode,
    TopologyError,
    discover,
    parse_cpulist,
)


def test_vm_inventory_matches_this_vm(vm_root: Path) -> None:
    inv = discover(vm_root)
    assert inv.numa_nodes == (NumaNode(id=0, cpus=(0, 1)),)
    assert inv.rdma_devices == ()
    assert inv.gpus == ()
    assert inv.interfaces == (
        NetInterface(
            name="eth0",
            kind="physical",
            pci_path=("pci0000:00", "0000:00:03.0"),  # virtio2 sits below the PCI function
            numa_node=None,  # numa_node -1
            operstate="up",
            speed_mbps=None,  # speed -1
            mtu=1400,
            ipv4=("192.0.2.2/24",),
        ),
    )
    assert inv.warnings == ()


def test_loopback_skipped_unless_asked(vm_root: Path) -> None:
    assert "lo" not in [i.name for i in discover(vm_root).interfaces]
    inv = discover(vm_root, include_loopback=True)
    lo = next(i for i in inv.interfaces if i.name == "lo")
    assert (lo.kind, lo.pci_path, lo.mtu, lo.ipv4) == ("loopback", None, 65536, ("127.0.0.1/8",))


def test_veth_kept_other_virtual_interfaces_skipped(nic_only_root: Path) -> None:
    inv = discover(nic_only_root)
    assert [(i.name, i.kind) for i in inv.interfaces] == [
        ("ens1f0", "physical"),
        ("ens2f0", "physical"),
        ("veth0", "veth"),
    ]  # docker0 (bridge), mv0 (macvlan), ifb0 and lo are gone
    veth = inv.interfaces[2]
    assert (veth.pci_path, veth.numa_node, veth.ipv4) == (None, None, ("10.9.0.1/24",))
    ens1, ens2 = inv.interfaces[:2]
    assert (ens1.numa_node, ens1.speed_mbps, ens1.mtu) == (0, 25000, 9000)
    assert ens1.ipv4 == ("10.1.0.1/16", "10.2.0.1/16")
    assert ens1.ipv4_addresses == ("10.1.0.1", "10.2.0.1")
    assert (ens2.numa_node, ens2.operstate, ens2.speed_mbps, ens2.ipv4) == (1, "down", None, ())


def test_net_driver_overrides_sysfs_heuristic(nic_only_root: Path) -> None:
    # ethtool's driver name, when known, beats the sysfs heuristic in both directions.
    view = NetView(
        links={
            "veth0": KernelLink(name="veth0", driver="tun"),
            "ifb0": KernelLink(name="ifb0", driver="veth"),
        }
    )
    inv = discover(nic_only_root, net=lambda: view)
    assert [(i.name, i.kind) for i in inv.interfaces] == [
        ("ens1f0", "physical"),
        ("ens2f0", "physical"),
        ("ifb0", "veth"),
    ]


def test_complete_net_view_reconciles_namespaces(nic_only_root: Path) -> None:
    # sysfs mounted for another namespace (setns without remount): interfaces the kernel
    # does not list are dropped with a warning, veths only the kernel knows are added.
    view = NetView(
        links={
            "ens1f0": KernelLink(name="ens1f0", ipv4=("10.1.0.1/16",)),
            "vpeer": KernelLink(
                name="vpeer", ipv4=("10.5.0.2/24",), driver="veth", mtu=1500, up=True
            ),
            "tun7": KernelLink(name="tun7", driver="tun"),
            "lo": KernelLink(name="lo", ipv4=("127.0.0.1/8",)),
        },
        complete=True,
    )
    inv = discover(nic_only_root, net=lambda: view)
    assert [(i.name, i.kind, i.operstate, i.ipv4) for i in inv.interfaces] == [
        ("ens1f0", "physical", "up", ("10.1.0.1/16",)),
        ("vpeer", "veth", "up", ("10.5.0.2/24",)),
    ]
    assert "/sys/class/net/ens2f0: not in this network namespace" in inv.warnings[1]
    assert inv.warnings[-1] == "interface tun7: not in sysfs and driver 'tun'; skipped"


def test_8gpu_gpus_in_pci_bus_order_and_bmc_vga_not_cuda(gpu8_root: Path) -> None:
    inv = discover(gpu8_root)
    assert [(g.bus_id, g.cuda_index) for g in inv.gpus] == [
        ("0000:02:00.0", None),  # ASPEED BMC VGA: display class, not CUDA
        ("0000:12:00.0", 0),
        ("0000:22:00.0", 1),
        ("0000:32:00.0", 2),
        ("0000:42:00.0", 3),
        ("0000:92:00.0", 4),
        ("0000:a2:00.0", 5),
        ("0000:b2:00.0", 6),
        ("0000:c2:00.0", 7),
    ]
    assert [g.numa_node for g in inv.gpus if g.is_cuda] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert inv.gpus[1].pci_path == (
        "pci0000:00",
        "0000:00:01.0",
        "0000:10:00.0",
        "0000:11:00.0",
        "0000:12:00.0",
    )


def test_gpu_order_is_numeric_across_domains(tmp_path: Path) -> None:
    from topo_sysfs_builder import NVIDIA, SysfsBuilder

    b = SysfsBuilder(tmp_path)
    b.pci("pci0001:00/0001:00:00.0", "0x030200", NVIDIA)
    b.pci("pci0000:00/0000:af:00.0", "0x030200", NVIDIA)
    b.pci("pci0000:00/0000:1b:00.0", "0x030000", NVIDIA)
    inv = discover(tmp_path)
    assert [(g.bus_id, g.cuda_index) for g in inv.gpus] == [
        ("0000:1b:00.0", 0),
        ("0000:af:00.0", 1),
        ("0001:00:00.0", 2),
    ]


def test_8gpu_rdma_devices(gpu8_root: Path) -> None:
    inv = discover(gpu8_root)
    assert [d.name for d in inv.rdma_devices] == [f"mlx5_{k}" for k in range(8)]
    dev = inv.rdma_devices[5]
    assert dev.numa_node == 1
    assert dev.netdevs == ("enp163s0np0",)
    assert dev.pci_path is not None and dev.pci_path[-1] == "0000:a3:00.0"
    (port,) = dev.ports
    assert (port.number, port.state, port.rate_gbps, port.link_layer) == (
        1,
        "ACTIVE",
        400.0,
        "InfiniBand",
    )
    assert inv.nic_names() == tuple(f"mlx5_{k}" for k in range(8))
    assert inv.nic_addresses()["mlx5_5"] == ["192.168.5.1"]


def test_no_numa_dirs_means_node0_with_online_cpus(no_numa_root: Path) -> None:
    inv = discover(no_numa_root)
    assert inv.numa_nodes == (NumaNode(id=0, cpus=(0, 1, 2, 3)),)
    assert inv.warnings == ()


def test_malformed_tree_gives_warnings_not_tracebacks(malformed_root: Path) -> None:
    inv = discover(malformed_root)
    assert inv.numa_nodes == (NumaNode(id=1, cpus=(2, 3)),)
    assert [i.name for i in inv.interfaces] == ["eth0"]
    eth0 = inv.interfaces[0]
    assert (eth0.numa_node, eth0.speed_mbps, eth0.mtu) == (None, None, None)
    assert inv.rdma_devices == ()
    assert [(g.bus_id, g.cuda_index, g.numa_node) for g in inv.gpus] == [("0000:00:06.0", 0, None)]
    assert list(inv.warnings) == [
        "/sys/devices/system/node/node0/cpulist: bad cpulist range '0-x'",
        "/sys/devices/system/node/node0: NUMA node 0 skipped",
        "/sys/devices/system/node/node2/cpulist: missing or unreadable",
        "/sys/devices/system/node/node2: NUMA node 2 skipped",
        "/sys/devices/pci0000:00/0000:00:03.0/numa_node: not an integer: 'banana'",
        "/sys/class/net/eth0/speed: not an integer: 'fast'",
        "/sys/class/net/eth0/mtu: not an integer: 'abc'",
        "/sys/class/net/eth1/device: broken link (No such file or directory)",
        "/sys/class/net/eth1: interface eth1 skipped",
        inv.warnings[9],  # names the resolved /proc path, which varies
        "/sys/class/net/evil: interface evil skipped",
        "/sys/class/infiniband/mlx5_9: RDMA device mlx5_9 has no PCI device; skipped",
        "/sys/bus/pci/devices/0000:00:05.0: class missing or unreadable; skipped",
        "/sys/devices/pci0000:00/0000:00:06.0/numa_node: not an integer: '?'",
        "/sys/bus/pci/devices/garbage: not a PCI address; skipped",
    ]
    assert inv.warnings[9].startswith("/sys/class/net/evil: points outside the sysfs root")


@pytest.mark.parametrize("garbage", ["", "\udcff\x00-1,zz", "0x" + "9" * 40])
def test_any_corrupted_file_or_link_never_raises(nic_only_root: Path, garbage: str) -> None:
    """Corrupt every file (and dangle every symlink) of a tree, one at a time."""
    from mooncake_core.topology import Topology, build_matrix

    sysfs = nic_only_root / "sys"
    for path in sorted(sysfs.rglob("*")):
        if path.is_symlink():
            target = path.readlink()
            path.unlink()
            path.symlink_to("nowhere")
            try:
                Topology.from_inventory(discover(nic_only_root))
            finally:
                path.unlink()
                path.symlink_to(target)
        elif path.is_file():
            original = path.read_bytes()
            path.write_bytes(garbage.encode("utf-8", "surrogateescape"))
            try:
                inv = discover(nic_only_root)
                build_matrix(inv)
                Topology.from_inventory(inv)
            finally:
                path.write_bytes(original)


def test_missing_root_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="does not exist"):
        discover(tmp_path / "nope")
    with pytest.raises(TopologyError, match="has no sys/ directory"):
        discover(tmp_path)


def test_empty_sysfs_root_gives_node0_and_a_warning(tmp_path: Path) -> None:
    (tmp_path / "sys").mkdir()
    inv = discover(tmp_path)
    assert inv.numa_nodes == (NumaNode(id=0, cpus=()),)
    assert inv.warnings == ("/sys/devices/system/cpu/online: missing or unreadable",)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ('["eth0"]', "must be an object"),
        ('{"eth0": "192.0.2.1"}', "'eth0' must be a list of strings"),
        ('{"eth0": ["fe80::1/64"]}', "'fe80::1/64' is not IPv4"),
        ('{"eth0": ["300.1.1.1"]}', "'300.1.1.1' is not an address"),
    ],
)
def test_bad_address_file_is_a_clear_error(vm_root: Path, content: str, message: str) -> None:
    (vm_root / "ipv4.json").write_text(content)
    with pytest.raises(TopologyError, match=message) as info:
        discover(vm_root)
    assert "ipv4.json" in str(info.value)


def test_no_address_file_means_no_addresses(vm_root: Path) -> None:
    (vm_root / "ipv4.json").unlink()
    assert discover(vm_root).interfaces[0].ipv4 == ()


def test_inventory_json_round_trip(gpu8_root: Path, malformed_root: Path) -> None:
    for root in (gpu8_root, malformed_root):
        inv = discover(root, include_loopback=True)
        data = json.loads(json.dumps(inv.to_dict()))
        assert Inventory.from_dict(data) == inv


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("gpus"), "missing key 'gpus'"),
        (lambda d: d["interfaces"][0].update(kind="tun"), "'kind' must be physical, veth or"),
        (lambda d: d["numa_nodes"][0].update(cpus=["0"]), "'cpus' must be a list of integers"),
        (lambda d: d["gpus"][1].update(cuda_index="0"), "'cuda_index' must be an integer or null"),
    ],
)
def test_inventory_from_dict_names_the_bad_key(gpu8_root: Path, mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    data = discover(gpu8_root).to_dict()
    mutate(data)
    with pytest.raises(TopologyError, match=message):
        Inventory.from_dict(data, "f.json")


def test_parse_cpulist() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpulist("") == ()
    for bad in ("3-1", "a", "1-", "1,,2"):
        with pytest.raises(ValueError, match="cpulist"):
            parse_cpulist(bad)
