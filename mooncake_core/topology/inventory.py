"""The device inventory of one host: immutable records produced by discovery.

Everything here is plain data. :func:`~mooncake_core.topology.discover` fills it from sysfs,
:meth:`Inventory.to_dict` / :meth:`Inventory.from_dict` carry it through the ``--format full``
JSON file, and :func:`~mooncake_core.topology.build_matrix` turns it into the NIC preference
matrix.

A PCI path is the chain of sysfs directory names from the root complex down to the device,
e.g. ``("pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0")``: a root port, a
switch's upstream and downstream ports, the device. Two devices behind the same PCIe switch
share every component but the last one or two, which is what the distance in
:func:`pci_distance` measures.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import TopologyError

__all__ = [
    "Gpu",
    "InterfaceKind",
    "Inventory",
    "NetInterface",
    "NumaNode",
    "PciPath",
    "RdmaDevice",
    "RdmaPort",
    "natural_key",
    "pci_distance",
]

PciPath = tuple[str, ...]
InterfaceKind = Literal["physical", "veth", "loopback"]

_NVIDIA = "0x10de"


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders ``mlx5_2`` before ``mlx5_10`` (digit runs compare as numbers)."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part
    )


def pci_distance(a: PciPath, b: PciPath) -> int:
    """Number of PCI path components the two paths do not share.

    Args:
        a: PCI path of one device.
        b: PCI path of the other device.

    Returns:
        ``len(a) + len(b) - 2 * common_prefix``: 0 for the same function, 4 for two endpoints
        behind one switch (different downstream ports), more across switches and sockets.
    """
    common = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        common += 1
    return len(a) + len(b) - 2 * common


@dataclass(frozen=True, slots=True)
class NumaNode:
    """One NUMA node and the CPUs that belong to it."""

    id: int
    cpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RdmaPort:
    """One port of an RDMA device (``/sys/class/infiniband/<dev>/ports/<n>``)."""

    number: int
    state: str | None
    """Port state without its numeric prefix, e.g. ``ACTIVE`` or ``DOWN``."""
    rate_gbps: float | None
    """Signalling rate in Gb/s parsed from ``rate`` (``200 Gb/sec (4X HDR)`` -> 200.0)."""
    link_layer: str | None
    """``InfiniBand`` or ``Ethernet`` (RoCE)."""


@dataclass(frozen=True, slots=True)
class RdmaDevice:
    """An RDMA device (HCA) such as ``mlx5_0``."""

    name: str
    pci_path: PciPath | None
    numa_node: int | None
    ports: tuple[RdmaPort, ...]
    netdevs: tuple[str, ...]
    """Network interfaces on the same PCI function (the RoCE/IPoIB netdevs)."""


@dataclass(frozen=True, slots=True)
class NetInterface:
    """A network interface from ``/sys/class/net``."""

    name: str
    kind: InterfaceKind
    pci_path: PciPath | None
    """``None`` for veth and loopback (no PCI device behind them)."""
    numa_node: int | None
    operstate: str
    speed_mbps: int | None
    """Link speed in Mb/s; ``None`` when the kernel reports -1 or cannot say."""
    mtu: int | None
    ipv4: tuple[str, ...]
    """IPv4 interface addresses in CIDR notation, e.g. ``192.0.2.2/24``."""

    @property
    def ipv4_addresses(self) -> tuple[str, ...]:
        """The IPv4 addresses without prefix length."""
        return tuple(a.split("/", 1)[0] for a in self.ipv4)


@dataclass(frozen=True, slots=True)
class Gpu:
    """A display/3D-class PCI device (class ``0x03xxxx``)."""

    bus_id: str
    """PCI address ``domain:bus:device.function``, e.g. ``0000:1a:00.0``."""
    vendor: str
    """PCI vendor id, e.g. ``0x10de`` (NVIDIA)."""
    device: str | None
    pci_path: PciPath | None
    numa_node: int | None
    cuda_index: int | None
    """Index in ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` order; ``None`` for non-NVIDIA devices
    (a BMC's VGA controller must not shift the CUDA numbering)."""

    @property
    def is_cuda(self) -> bool:
        """Whether CUDA would enumerate this device."""
        return self.vendor == _NVIDIA


@dataclass(frozen=True, slots=True)
class Inventory:
    """Everything discovery found on one host, plus what it had to skip."""

    numa_nodes: tuple[NumaNode, ...]
    rdma_devices: tuple[RdmaDevice, ...]
    interfaces: tuple[NetInterface, ...]
    gpus: tuple[Gpu, ...]
    warnings: tuple[str, ...] = field(default=())
    """One line per skipped device or unreadable attribute, naming the path."""

    @property
    def uses_rdma(self) -> bool:
        """Whether NICs are named after RDMA devices (else after network interfaces)."""
        return bool(self.rdma_devices)

    def nic_names(self) -> tuple[str, ...]:
        """Names the matrix uses for NICs: RDMA devices if any exist, else interfaces."""
        if self.rdma_devices:
            return tuple(d.name for d in self.rdma_devices)
        return tuple(i.name for i in self.interfaces)

    def nic_addresses(self) -> dict[str, list[str]]:
        """IPv4 addresses (no prefix) of every NIC name of :meth:`nic_names`.

        An RDMA device's addresses are those of its netdevs.
        """
        by_iface = {i.name: list(i.ipv4_addresses) for i in self.interfaces}
        if not self.rdma_devices:
            return by_iface
        return {
            d.name: [a for n in d.netdevs for a in by_iface.get(n, [])] for d in self.rdma_devices
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (PCI paths joined with ``/``)."""
        return {
            "numa_nodes": [{"id": n.id, "cpus": list(n.cpus)} for n in self.numa_nodes],
            "rdma_devices": [
                {
                    "name": d.name,
                    "pci_path": _join(d.pci_path),
                    "numa_node": d.numa_node,
                    "ports": [
                        {
                            "number": p.number,
                            "state": p.state,
                            "rate_gbps": p.rate_gbps,
                            "link_layer": p.link_layer,
                        }
                        for p in d.ports
                    ],
                    "netdevs": list(d.netdevs),
                }
                for d in self.rdma_devices
            ],
            "interfaces": [
                {
                    "name": i.name,
                    "kind": i.kind,
                    "pci_path": _join(i.pci_path),
                    "numa_node": i.numa_node,
                    "operstate": i.operstate,
                    "speed_mbps": i.speed_mbps,
                    "mtu": i.mtu,
                    "ipv4": list(i.ipv4),
                }
                for i in self.interfaces
            ],
            "gpus": [
                {
                    "bus_id": g.bus_id,
                    "vendor": g.vendor,
                    "device": g.device,
                    "pci_path": _join(g.pci_path),
                    "numa_node": g.numa_node,
                    "cuda_index": g.cuda_index,
                }
                for g in self.gpus
            ],
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "inventory") -> Inventory:
        """Rebuild an inventory from :meth:`to_dict` output.

        Args:
            data: The decoded JSON object.
            source: Name used in error messages (usually the file path).

        Returns:
            The inventory.

        Raises:
            TopologyError: A key is missing or has the wrong type; the message names it.
        """
        r = _Reader(source)
        try:
            return cls(
                numa_nodes=tuple(
                    NumaNode(id=r.int_(n, "id"), cpus=tuple(r.int_list(n, "cpus")))
                    for n in r.list_(data, "numa_nodes")
                ),
                rdma_devices=tuple(
                    RdmaDevice(
                        name=r.str_(d, "name"),
                        pci_path=_split(r.opt_str(d, "pci_path")),
                        numa_node=r.opt_int(d, "numa_node"),
                        ports=tuple(
                            RdmaPort(
                                number=r.int_(p, "number"),
                                state=r.opt_str(p, "state"),
                                rate_gbps=r.opt_float(p, "rate_gbps"),
                                link_layer=r.opt_str(p, "link_layer"),
                            )
                            for p in r.list_(d, "ports")
                        ),
                        netdevs=tuple(r.str_list(d, "netdevs")),
                    )
                    for d in r.list_(data, "rdma_devices")
                ),
                interfaces=tuple(
                    NetInterface(
                        name=r.str_(i, "name"),
                        kind=r.kind(i),
                        pci_path=_split(r.opt_str(i, "pci_path")),
                        numa_node=r.opt_int(i, "numa_node"),
                        operstate=r.str_(i, "operstate"),
                        speed_mbps=r.opt_int(i, "speed_mbps"),
                        mtu=r.opt_int(i, "mtu"),
                        ipv4=tuple(r.str_list(i, "ipv4")),
                    )
                    for i in r.list_(data, "interfaces")
                ),
                gpus=tuple(
                    Gpu(
                        bus_id=r.str_(g, "bus_id"),
                        vendor=r.str_(g, "vendor"),
                        device=r.opt_str(g, "device"),
                        pci_path=_split(r.opt_str(g, "pci_path")),
                        numa_node=r.opt_int(g, "numa_node"),
                        cuda_index=r.opt_int(g, "cuda_index"),
                    )
                    for g in r.list_(data, "gpus")
                ),
                warnings=tuple(r.str_list(data, "warnings", required=False)),
            )
        except TopologyError:
            raise
        except (TypeError, AttributeError) as exc:
            raise TopologyError(f"{source}: malformed inventory ({exc})") from None


def _join(path: PciPath | None) -> str | None:
    return None if path is None else "/".join(path)


def _split(path: str | None) -> PciPath | None:
    return None if path is None else tuple(p for p in path.split("/") if p)


class _Reader:
    """Typed field access on decoded JSON with errors that name the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def _get(self, obj: Any, key: str, required: bool = True) -> Any:
        if not isinstance(obj, Mapping):
            raise TopologyError(f"{self.source}: expected an object holding {key!r}, got {obj!r}")
        if key not in obj:
            if required:
                raise TopologyError(f"{self.source}: missing key {key!r} in {dict(obj)!r}")
            return None
        return obj[key]

    def _bad(self, key: str, want: str, value: Any) -> TopologyError:
        return TopologyError(f"{self.source}: {key!r} must be {want}, got {value!r}")

    def list_(self, obj: Any, key: str) -> list[Any]:
        value = self._get(obj, key)
        if not isinstance(value, list):
            raise self._bad(key, "a list", value)
        return value

    def str_list(self, obj: Any, key: str, required: bool = True) -> list[str]:
        value = self._get(obj, key, required)
        if value is None and not required:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._bad(key, "a list of strings", value)
        return value

    def int_list(self, obj: Any, key: str) -> list[int]:
        value = self._get(obj, key)
        if not isinstance(value, list) or not all(_is_int(v) for v in value):
            raise self._bad(key, "a list of integers", value)
        return value

    def str_(self, obj: Any, key: str) -> str:
        value = self._get(obj, key)
        if not isinstance(value, str):
            raise self._bad(key, "a string", value)
        return value

    def opt_str(self, obj: Any, key: str) -> str | None:
        value = self._get(obj, key, required=False)
        if value is not None and not isinstance(value, str):
            raise self._bad(key, "a string or null", value)
        return value

    def int_(self, obj: Any, key: str) -> int:
        value = self._get(obj, key)
        if not _is_int(value):
            raise self._bad(key, "an integer", value)
        return int(value)

    def opt_int(self, obj: Any, key: str) -> int | None:
        value = self._get(obj, key, required=False)
        if value is not None and not _is_int(value):
            raise self._bad(key, "an integer or null", value)
        return value

    def opt_float(self, obj: Any, key: str) -> float | None:
        value = self._get(obj, key, required=False)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._bad(key, "a number or null", value)
        return float(value)

    def kind(self, obj: Any) -> InterfaceKind:
        value = self._get(obj, "kind")
        if value == "physical" or value == "veth" or value == "loopback":
            return value
        raise self._bad("kind", "physical, veth or loopback", value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
