"""Build fake sysfs trees (real directories and relative symlinks, like the kernel's).

Each ``build_*`` function writes one host under ``root`` and returns ``root``; pass it to
``discover(root)``. Layouts mirror real sysfs:

    sys/devices/pci0000:00/0000:00:03.0/            PCI function (class, vendor, numa_node)
        virtio2/net/eth0/                           interface dir (device -> ../../../virtio2)
    sys/class/net/eth0 -> ../../devices/pci0000:00/0000:00:03.0/virtio2/net/eth0
    sys/bus/pci/devices/0000:00:03.0 -> ../../../devices/pci0000:00/0000:00:03.0
    sys/class/infiniband/mlx5_0 -> ../../devices/<pci...>/infiniband/mlx5_0
"""

from __future__ import annotations

import json
import os
from pathlib import Path

NVIDIA = "0x10de"
MELLANOX = "0x15b3"


class SysfsBuilder:
    """Writes sysfs entries under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "sys").mkdir(parents=True, exist_ok=True)

    def write(self, rel: str, text: str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
        return path

    def link(self, rel: str, target_rel: str) -> None:
        """Relative symlink ``rel`` -> ``target_rel`` (both relative to the root)."""
        link = self.root / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(self.root / target_rel, link.parent))

    def numa_node(self, node: int, cpulist: str) -> None:
        self.write(f"sys/devices/system/node/node{node}/cpulist", cpulist)

    def cpus_online(self, cpulist: str) -> None:
        self.write("sys/devices/system/cpu/online", cpulist)

    def pci(
        self,
        path: str,
        pci_class: str,
        vendor: str = "0x8086",
        device: str = "0x0001",
        numa: int | str = -1,
    ) -> str:
        """A PCI function at ``sys/devices/<path>``; returns its dir relative to the root."""
        rel = f"sys/devices/{path}"
        self.write(f"{rel}/class", pci_class)
        self.write(f"{rel}/vendor", vendor)
        self.write(f"{rel}/device", device)
        self.write(f"{rel}/numa_node", str(numa))
        self.link(f"sys/bus/pci/devices/{path.rsplit('/', 1)[-1]}", rel)
        return rel

    def netdev(
        self,
        name: str,
        device_rel: str | None,
        *,
        ifindex: int,
        iflink: int | None = None,
        operstate: str = "up",
        speed: str | None = None,
        mtu: str = "1500",
        arp_type: int = 1,
        devtype: str | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        """An interface: under its device when ``device_rel`` is given, else virtual."""
        base = f"{device_rel}/net/{name}" if device_rel else f"sys/devices/virtual/net/{name}"
        self.write(f"{base}/ifindex", str(ifindex))
        self.write(f"{base}/iflink", str(ifindex if iflink is None else iflink))
        self.write(f"{base}/operstate", operstate)
        self.write(f"{base}/mtu", mtu)
        self.write(f"{base}/type", str(arp_type))
        uevent = f"INTERFACE={name}\nIFINDEX={ifindex}"
        self.write(f"{base}/uevent", f"DEVTYPE={devtype}\n{uevent}" if devtype else uevent)
        if speed is not None:  # absent file reads like the kernel's EINVAL
            self.write(f"{base}/speed", speed)
        for name_extra in extra:
            (self.root / base / name_extra).mkdir(parents=True, exist_ok=True)
        if device_rel:
            self.link(f"{base}/device", device_rel)
        self.link(f"sys/class/net/{name}", base)

    def rdma(self, name: str, pci_rel: str, ports: list[tuple[str, str, str]]) -> None:
        """An RDMA device on PCI function ``pci_rel``; ports are (state, rate, link_layer)."""
        base = f"{pci_rel}/infiniband/{name}"
        for number, (state, rate, layer) in enumerate(ports, start=1):
            self.write(f"{base}/ports/{number}/state", state)
            self.write(f"{base}/ports/{number}/rate", rate)
            self.write(f"{base}/ports/{number}/link_layer", layer)
        self.link(f"{base}/device", pci_rel)
        self.link(f"sys/class/infiniband/{name}", base)

    def addresses(self, mapping: dict[str, list[str]]) -> None:
        (self.root / "ipv4.json").write_text(json.dumps(mapping))


def build_vm(root: Path) -> Path:
    """This 2-core VM: one NUMA node, a virtio NIC, two ifb devices, loopback, no GPU."""
    b = SysfsBuilder(root)
    b.numa_node(0, "0-1")
    b.cpus_online("0-1")
    b.pci("pci0000:00/0000:00:00.0", "0x060000")  # host bridge
    b.pci("pci0000:00/0000:00:01.0", "0xffff00", "0x1af4")
    b.pci("pci0000:00/0000:00:02.0", "0x018000", "0x1af4")  # virtio block
    nic = b.pci("pci0000:00/0000:00:03.0", "0x020000", "0x1af4")
    (root / nic / "virtio2").mkdir()
    b.netdev("eth0", f"{nic}/virtio2", ifindex=4, speed="-1", mtu="1400")
    b.netdev("ifb0", None, ifindex=2, operstate="down")
    b.netdev("ifb1", None, ifindex=3, operstate="down")
    b.netdev("lo", None, ifindex=1, operstate="unknown", mtu="65536", arp_type=772)
    b.addresses({"eth0": ["192.0.2.2/24"], "lo": ["127.0.0.1/8"]})
    return root


def build_8gpu(root: Path) -> Path:
    """Dual-socket server, 4 PCIe switches per socket, each holding one GPU and one NIC.

    Switch k (0..7) hangs off root port ``<socket root>/0000:BB:0k+1.0``; GPU k sits on bus
    base+2 and NIC mlx5_k on bus base+3 behind two downstream ports of the same switch.
    A BMC VGA (ASPEED) on bus 0x02 sorts before every GPU but must not take ``cuda:0``.
    A management NIC (eno1) has no RDMA device, so it is not in the RDMA-named matrix.
    """
    b = SysfsBuilder(root)
    b.numa_node(0, "0-23,48-71")
    b.numa_node(1, "24-47,72-95")
    b.cpus_online("0-95")
    b.pci("pci0000:00/0000:00:1c.0", "0x060400", numa=0)
    b.pci("pci0000:00/0000:00:1c.0/0000:02:00.0", "0x030000", "0x1a03", "0x2000", numa=0)
    eno = b.pci("pci0000:00/0000:00:1f.6", "0x020000", numa=0)
    b.netdev("eno1", eno, ifindex=2, speed="1000")
    ifindex = 10
    addresses: dict[str, list[str]] = {"eno1": ["10.0.0.5/24"]}
    for k in range(8):
        socket_ = k // 4
        root_complex = "pci0000:00" if socket_ == 0 else "pci0000:80"
        rc_bus = 0x00 if socket_ == 0 else 0x80
        base = rc_bus + 0x10 * (k % 4 + 1)
        port = f"{root_complex}/0000:{rc_bus:02x}:{k % 4 + 1:02x}.0"
        upstream = f"{port}/0000:{base:02x}:00.0"
        b.pci(port, "0x060400", numa=socket_)
        b.pci(upstream, "0x060400", "0x1000", numa=socket_)
        gpu_port = f"{upstream}/0000:{base + 1:02x}:00.0"
        nic_port = f"{upstream}/0000:{base + 1:02x}:01.0"
        b.pci(gpu_port, "0x060400", "0x1000", numa=socket_)
        b.pci(nic_port, "0x060400", "0x1000", numa=socket_)
        b.pci(f"{gpu_port}/0000:{base + 2:02x}:00.0", "0x030200", NVIDIA, "0x2330", numa=socket_)
        nic = b.pci(f"{nic_port}/0000:{base + 3:02x}:00.0", "0x020700", MELLANOX, numa=socket_)
        netdev = f"enp{base + 3}s0np0"
        b.netdev(netdev, nic, ifindex=ifindex + k, speed="400000", mtu="4200")
        b.rdma(f"mlx5_{k}", nic, [("4: ACTIVE", "400 Gb/sec (4X NDR)", "InfiniBand")])
        addresses[netdev] = [f"192.168.{k}.1/24"]
    b.netdev("lo", None, ifindex=1, operstate="unknown", mtu="65536", arp_type=772)
    b.addresses(addresses)
    return root


def build_nic_only(root: Path) -> Path:
    """Two NUMA nodes, one Ethernet NIC on each, no RDMA, no GPU; plus virtual interfaces:
    a veth (kept), a bridge, a macvlan and an ifb (all skipped)."""
    b = SysfsBuilder(root)
    b.numa_node(0, "0-7")
    b.numa_node(1, "8-15")
    nic0 = b.pci("pci0000:00/0000:00:02.0/0000:01:00.0", "0x020000", numa=0)
    nic1 = b.pci("pci0000:80/0000:80:02.0/0000:81:00.0", "0x020000", numa=1)
    b.netdev("ens1f0", nic0, ifindex=2, speed="25000", mtu="9000")
    b.netdev("ens2f0", nic1, ifindex=3, speed="-1", operstate="down")
    b.netdev("veth0", None, ifindex=7, iflink=6)
    b.netdev("docker0", None, ifindex=4, devtype="bridge", extra=("bridge",))
    b.netdev("mv0", None, ifindex=5, iflink=2, extra=("lower_ens1f0",))
    b.netdev("ifb0", None, ifindex=8)
    b.netdev("lo", None, ifindex=1, operstate="unknown", mtu="65536", arp_type=772)
    b.addresses({"ens1f0": ["10.1.0.1/16", "10.2.0.1/16"], "veth0": ["10.9.0.1/24"]})
    return root


def build_no_numa(root: Path) -> Path:
    """A kernel without NUMA node directories: all online CPUs form node 0."""
    b = SysfsBuilder(root)
    b.cpus_online("0-3")
    nic = b.pci("pci0000:00/0000:00:03.0", "0x020000")
    b.netdev("eth0", nic, ifindex=2, speed="10000")
    return root


def build_malformed(root: Path) -> Path:
    """Broken and missing files; every one must end as a warning, not a traceback."""
    b = SysfsBuilder(root)
    b.numa_node(0, "0-x")  # unparseable: node skipped
    b.numa_node(1, "2-3")
    (root / "sys/devices/system/node/node2").mkdir()  # no cpulist: node skipped
    good = b.pci("pci0000:00/0000:00:03.0", "0x020000", numa="banana")
    b.netdev("eth0", good, ifindex=2, speed="fast", mtu="abc")
    # A physical interface whose device link dangles (its PCI function vanished).
    b.netdev("eth1", "sys/devices/pci0000:00/0000:00:04.0", ifindex=3)
    dangling = root / "sys/devices/pci0000:00/0000:00:04.0/net/eth1/device"
    dangling.unlink()
    dangling.symlink_to("../../../0000:00:09.0")
    # A class/net entry that escapes the root.
    (root / "sys/class/net/evil").symlink_to("/proc/self")
    # An RDMA device without its device link.
    (root / "sys/class/infiniband/mlx5_9/ports/1").mkdir(parents=True)
    # A PCI device without a class file and a GPU with a garbage numa_node.
    (root / "sys/devices/pci0000:00/0000:00:05.0").mkdir(parents=True)
    b.link("sys/bus/pci/devices/0000:00:05.0", "sys/devices/pci0000:00/0000:00:05.0")
    b.pci("pci0000:00/0000:00:06.0", "0x030000", NVIDIA, numa="?")
    (root / "sys/bus/pci/devices/garbage").mkdir()
    return root
