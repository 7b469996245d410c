"""Build an :class:`Inventory` from a sysfs tree.

Where each fact comes from (paths relative to the sysfs root)::

    NUMA nodes   sys/devices/system/node/node<N>/cpulist
                 (no node dirs: one node 0 with sys/devices/system/cpu/online)
    RDMA         sys/class/infiniband/<dev>/{device -> PCI function, ports/<n>/{state,rate,
                 link_layer}, device/net/<netdev>}
    interfaces   sys/class/net/<if>/{device -> PCI function, operstate, speed, mtu, type,
                 iflink, ifindex, uevent}; IPv4 from the injected NetSource
    GPUs         sys/bus/pci/devices/<bus id>/{class 0x03xxxx, vendor, device}
    NUMA of a device: numa_node of its PCI function (-1 means unknown)

A device whose essential files are missing or malformed is skipped with a warning in
``Inventory.warnings``; only an unusable root raises.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from .inventory import (
    Gpu,
    InterfaceKind,
    Inventory,
    NetInterface,
    NumaNode,
    RdmaDevice,
    RdmaPort,
    natural_key,
)
from .netinfo import ADDRESS_FILE, NetSource, NetView, json_net_view, system_net_view
from .sysfs import SysfsTree, parse_cpulist

__all__ = ["discover"]

_NODE_DIR = re.compile(r"^node(\d+)$")
_BDF = re.compile(r"^([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")
_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec")
_ARPHRD_LOOPBACK = 772
_NVIDIA = "0x10de"


def discover(
    sysfs_root: Path = Path("/"),
    include_loopback: bool = False,
    net: NetSource | None = None,
) -> Inventory:
    """Discover NUMA nodes, RDMA devices, network interfaces and GPUs.

    Args:
        sysfs_root: Directory holding ``sys/`` (``/`` on the real machine, a fixture tree in
            tests).
        include_loopback: Also report ``lo`` (useful when every process runs on one host).
        net: Source of IPv4 addresses and namespace membership. Default: the kernel (via
            sockets) when ``sysfs_root`` is ``/``; otherwise ``<root>/ipv4.json`` if present,
            else no addresses.

    Returns:
        The inventory; skipped devices are explained in its ``warnings``.

    Raises:
        TopologyError: ``sysfs_root`` is missing or has no ``sys/`` directory, or the
            fixture address file is malformed.
    """
    tree = SysfsTree(sysfs_root)
    view = (net or _default_net_source(sysfs_root))()
    numa = _numa_nodes(tree)
    interfaces = _interfaces(tree, view, include_loopback)
    rdma = _rdma_devices(tree)
    gpus = _gpus(tree)
    return Inventory(
        numa_nodes=numa,
        rdma_devices=rdma,
        interfaces=interfaces,
        gpus=gpus,
        warnings=tuple(tree.warnings),
    )


def _default_net_source(root: Path) -> NetSource:
    if root.resolve() == Path("/"):
        return system_net_view
    address_file = root / ADDRESS_FILE
    if address_file.exists():
        return lambda: json_net_view(address_file)
    return NetView


def _numa_nodes(tree: SysfsTree) -> tuple[NumaNode, ...]:
    nodes: list[NumaNode] = []
    node_dirs = [
        (int(m.group(1)), p)
        for p in tree.entries("sys/devices/system/node")
        if (m := _NODE_DIR.match(p.name))
    ]
    for node_id, path in sorted(node_dirs):
        cpus = _cpulist(tree, path / "cpulist")
        if cpus is None:
            tree.warn(f"{tree.display(path)}: NUMA node {node_id} skipped")
            continue
        nodes.append(NumaNode(id=node_id, cpus=cpus))
    if node_dirs:
        return tuple(nodes)
    # Kernels built without NUMA have no node directories: all CPUs form node 0.
    online = tree.path("sys/devices/system/cpu/online")
    cpus = _cpulist(tree, online)
    return (NumaNode(id=0, cpus=cpus or ()),)


def _cpulist(tree: SysfsTree, path: Path) -> tuple[int, ...] | None:
    text = tree.read(path)
    if text is None:
        tree.warn(f"{tree.display(path)}: missing or unreadable")
        return None
    try:
        return parse_cpulist(text)
    except ValueError as exc:
        tree.warn(f"{tree.display(path)}: {exc}")
        return None


def _interfaces(tree: SysfsTree, view: NetView, include_loopback: bool) -> tuple[NetInterface, ...]:
    found: list[NetInterface] = []
    seen: set[str] = set()
    for entry in tree.entries("sys/class/net"):
        seen.add(entry.name)
        if view.complete and entry.name not in view.links:
            tree.warn(
                f"{tree.display(entry)}: not in this network namespace "
                "(/sys is mounted for another one); skipped"
            )
            continue
        iface = _interface(tree, entry, view, include_loopback)
        if iface is not None:
            found.append(iface)
    if view.complete:
        # Interfaces of this namespace that sysfs does not show (setns without a /sys
        # remount): keep the ones we can classify from the driver alone.
        for name, link in view.links.items():
            if name in seen:
                continue
            kind: InterfaceKind
            if link.driver == "veth":
                kind = "veth"
            elif name == "lo":
                kind = "loopback"
            else:
                tree.warn(f"interface {name}: not in sysfs and driver {link.driver!r}; skipped")
                continue
            if kind == "loopback" and not include_loopback:
                continue
            found.append(
                NetInterface(
                    name=name,
                    kind=kind,
                    pci_path=None,
                    numa_node=None,
                    operstate="unknown" if link.up is None else ("up" if link.up else "down"),
                    speed_mbps=None,
                    mtu=link.mtu,
                    ipv4=link.ipv4,
                )
            )
    return tuple(sorted(found, key=lambda i: natural_key(i.name)))


def _interface(
    tree: SysfsTree, entry: Path, view: NetView, include_loopback: bool
) -> NetInterface | None:
    name = entry.name
    if tree.resolve(entry) is None:
        tree.warn(f"{tree.display(entry)}: interface {name} skipped")
        return None
    if tree.read_int(entry / "type") == _ARPHRD_LOOPBACK or name == "lo":
        if not include_loopback:
            return None
        return _make_interface(tree, entry, view, "loopback", None, None)
    device = entry / "device"
    if device.is_symlink():
        resolved = tree.resolve(device)
        if resolved is None:
            tree.warn(f"{tree.display(entry)}: interface {name} skipped")
            return None
        location = tree.pci_location(resolved)
        pci_path, pci_dir = location if location else (None, None)
        return _make_interface(tree, entry, view, "physical", pci_path, tree.numa_node(pci_dir))
    if not _is_veth(tree, entry, view):
        return None  # bridges, ifb, tun, macvlan...: not NICs that carry our traffic
    return _make_interface(tree, entry, view, "veth", None, None)


def _is_veth(tree: SysfsTree, entry: Path, view: NetView) -> bool:
    link = view.links.get(entry.name)
    if link is not None and link.driver is not None:
        return link.driver == "veth"
    # Without ethtool (fixtures): a veth is a plain Ethernet device with no DEVTYPE whose
    # iflink names its peer; macvlan/ipvlan have lower_* links, ifb/dummy/tun iflink==ifindex.
    uevent = tree.read(entry / "uevent") or ""
    if "DEVTYPE=" in uevent or any(p.name.startswith("lower_") for p in _children(entry)):
        return False
    ifindex = tree.read_int(entry / "ifindex", warn=False)
    iflink = tree.read_int(entry / "iflink", warn=False)
    return ifindex is not None and iflink is not None and ifindex != iflink


def _children(path: Path) -> list[Path]:
    try:
        return list(path.iterdir())
    except OSError:
        return []


def _make_interface(
    tree: SysfsTree,
    entry: Path,
    view: NetView,
    kind: InterfaceKind,
    pci_path: tuple[str, ...] | None,
    numa_node: int | None,
) -> NetInterface:
    speed = tree.read_int(entry / "speed")
    return NetInterface(
        name=entry.name,
        kind=kind,
        pci_path=pci_path,
        numa_node=numa_node,
        operstate=tree.read(entry / "operstate") or "unknown",
        speed_mbps=speed if speed is not None and speed > 0 else None,
        mtu=tree.read_int(entry / "mtu"),
        ipv4=view.ipv4(entry.name),
    )


def _rdma_devices(tree: SysfsTree) -> tuple[RdmaDevice, ...]:
    devices: list[RdmaDevice] = []
    for entry in tree.entries("sys/class/infiniband"):
        device = entry / "device"
        resolved = tree.resolve(device) if device.is_symlink() or device.exists() else None
        if resolved is None:
            tree.warn(f"{tree.display(entry)}: RDMA device {entry.name} has no PCI device; skipped")
            continue
        location = tree.pci_location(resolved)
        pci_path, pci_dir = location if location else (None, None)
        ports = []
        for port_dir in sorted(
            tree.entries(f"sys/class/infiniband/{entry.name}/ports"),
            key=lambda p: natural_key(p.name),
        ):
            if not port_dir.name.isdigit():
                continue
            state = tree.read(port_dir / "state")
            rate = tree.read(port_dir / "rate")
            match = _RATE.match(rate or "")
            ports.append(
                RdmaPort(
                    number=int(port_dir.name),
                    state=state.split(":", 1)[-1].strip() if state else None,
                    rate_gbps=float(match.group(1)) if match else None,
                    link_layer=tree.read(port_dir / "link_layer"),
                )
            )
        netdevs = sorted((p.name for p in _children(resolved / "net")), key=natural_key)
        devices.append(
            RdmaDevice(
                name=entry.name,
                pci_path=pci_path,
                numa_node=tree.numa_node(pci_dir),
                ports=tuple(ports),
                netdevs=tuple(netdevs),
            )
        )
    return tuple(sorted(devices, key=lambda d: natural_key(d.name)))


def _gpus(tree: SysfsTree) -> tuple[Gpu, ...]:
    candidates: list[tuple[tuple[int, ...], Gpu]] = []
    for entry in tree.entries("sys/bus/pci/devices"):
        bdf = _BDF.match(entry.name.lower())
        if bdf is None:
            tree.warn(f"{tree.display(entry)}: not a PCI address; skipped")
            continue
        pci_class = tree.read_int(entry / "class", base=16)
        if pci_class is None:
            tree.warn(f"{tree.display(entry)}: class missing or unreadable; skipped")
            continue
        if pci_class >> 16 != 0x03:  # display controller (VGA, 3D, other)
            continue
        vendor = tree.read(entry / "vendor")
        if vendor is None:
            tree.warn(f"{tree.display(entry)}: display device without vendor; skipped")
            continue
        resolved = tree.resolve(entry)
        location = tree.pci_location(resolved) if resolved else None
        pci_path, pci_dir = location if location else (None, entry)
        gpu = Gpu(
            bus_id=entry.name.lower(),
            vendor=vendor.lower(),
            device=tree.read(entry / "device"),
            pci_path=pci_path,
            numa_node=tree.numa_node(pci_dir),
            cuda_index=None,
        )
        candidates.append((tuple(int(g, 16) for g in bdf.groups()), gpu))
    # CUDA_DEVICE_ORDER=PCI_BUS_ID: NVIDIA devices numbered by (domain, bus, device, fn).
    ordered: list[Gpu] = []
    index = 0
    for _, gpu in sorted(candidates, key=lambda c: c[0]):
        if gpu.vendor == _NVIDIA:
            gpu = replace(gpu, cuda_index=index)
            index += 1
        ordered.append(gpu)
    return tuple(ordered)
