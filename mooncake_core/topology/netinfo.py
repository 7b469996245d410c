"""What the kernel says about network interfaces that sysfs does not: IPv4 addresses,
drivers, and which interfaces exist in *this* network namespace.

sysfs shows the interfaces of the namespace it was mounted in, which is not always the
caller's (a process that entered a namespace with ``setns`` without remounting ``/sys``).
The system view therefore lists interfaces through ``if_nameindex()`` and ioctls on a socket,
both of which answer for the caller's namespace.

The source is injectable so fixture trees can carry addresses: a fixture root may hold an
``ipv4.json`` file mapping interface names to CIDR addresses (see ``docs/topology.md``).
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import ipaddress
import json
import shutil
import socket
import struct
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import TopologyError

__all__ = [
    "ADDRESS_FILE",
    "KernelLink",
    "NetSource",
    "NetView",
    "json_net_view",
    "static_net_view",
    "system_net_view",
]

ADDRESS_FILE = "ipv4.json"
"""Name of the optional address file at the root of a fixture tree."""

# ioctl numbers from <linux/sockios.h>; stable kernel ABI.
_SIOCGIFFLAGS = 0x8913
_SIOCGIFADDR = 0x8915
_SIOCGIFNETMASK = 0x891B
_SIOCGIFMTU = 0x8921
_SIOCETHTOOL = 0x8946
_ETHTOOL_GDRVINFO = 0x00000003
_IFF_UP = 0x1
_IFF_RUNNING = 0x40
_IFREQ_SIZE = 40  # struct ifreq on 64-bit Linux: 16-byte name + 24-byte union
_DRVINFO_SIZE = 196  # struct ethtool_drvinfo


@dataclass(frozen=True, slots=True)
class KernelLink:
    """One interface as seen through sockets rather than sysfs."""

    name: str
    ipv4: tuple[str, ...] = ()
    """CIDR interface addresses, e.g. ``10.0.0.1/24``."""
    driver: str | None = None
    """Driver name from ethtool (``veth``, ``virtio_net``, ``mlx5_core``...)."""
    mtu: int | None = None
    up: bool | None = None
    """Administratively up and running (``IFF_UP | IFF_RUNNING``)."""


@dataclass(frozen=True, slots=True)
class NetView:
    """Interfaces known to the kernel of the calling namespace.

    ``complete`` says whether ``links`` lists *every* interface of the namespace (the system
    view) or only adds facts about some of them (a fixture's address file).
    """

    links: Mapping[str, KernelLink] = field(default_factory=dict)
    complete: bool = False

    def ipv4(self, name: str) -> tuple[str, ...]:
        """CIDR addresses of ``name`` (empty if unknown)."""
        link = self.links.get(name)
        return link.ipv4 if link else ()


NetSource = Callable[[], NetView]
"""Anything that returns a :class:`NetView` when called (injected into discovery)."""


def static_net_view(addresses: Mapping[str, Sequence[str]]) -> NetView:
    """A partial view carrying only addresses (for tests and fixture trees).

    Args:
        addresses: Interface name -> CIDR addresses (``10.0.0.1/24``; a bare address
            means ``/32``).

    Returns:
        The view, with ``complete=False`` so sysfs stays authoritative for the interface set.

    Raises:
        TopologyError: An address is not IPv4; the message names interface and value.
    """
    links = {}
    for name, addrs in addresses.items():
        cidrs = []
        for addr in addrs:
            try:
                iface = ipaddress.ip_interface(addr)
            except ValueError:
                raise TopologyError(f"interface {name!r}: {addr!r} is not an address") from None
            if iface.version != 4:
                raise TopologyError(f"interface {name!r}: {addr!r} is not IPv4")
            cidrs.append(str(iface))
        links[name] = KernelLink(name=name, ipv4=tuple(cidrs))
    return NetView(links=links, complete=False)


def json_net_view(path: Path) -> NetView:
    """Read a fixture address file ``{"eth0": ["192.0.2.2/24"], ...}``.

    Args:
        path: The JSON file.

    Returns:
        A partial view with those addresses.

    Raises:
        TopologyError: The file is unreadable, not JSON, or not a mapping of lists of
            strings; the message names the file and the bad entry.
    """
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read address file ({exc.strerror})") from None
    except ValueError as exc:
        raise TopologyError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise TopologyError(f"{path}: must be an object of interface -> [addresses]")
    for name, addrs in data.items():
        if not isinstance(addrs, list) or not all(isinstance(a, str) for a in addrs):
            raise TopologyError(f"{path}: {name!r} must be a list of strings, got {addrs!r}")
    try:
        return static_net_view(data)
    except TopologyError as exc:
        raise TopologyError(f"{path}: {exc}") from None


def system_net_view() -> NetView:
    """Ask the kernel about every interface of the calling network namespace.

    Addresses come from ``ip -j -4 addr`` when iproute2 is installed (it reports secondary
    addresses too), otherwise from ``SIOCGIFADDR`` (primary address only).

    Returns:
        A complete view (``complete=True``).
    """
    names = [name for _, name in socket.if_nameindex()]
    by_ip = _ip_json_addresses()
    links: dict[str, KernelLink] = {}
    with _socket() as sock:
        for name in names:
            flags = _ioctl_int(sock, _SIOCGIFFLAGS, name, "h")
            ipv4 = by_ip.get(name, ()) if by_ip is not None else _ioctl_ipv4(sock, name)
            links[name] = KernelLink(
                name=name,
                ipv4=ipv4,
                driver=_ethtool_driver(sock, name),
                mtu=_ioctl_int(sock, _SIOCGIFMTU, name, "i"),
                up=None
                if flags is None
                else (flags & (_IFF_UP | _IFF_RUNNING)) == (_IFF_UP | _IFF_RUNNING),
            )
    return NetView(links=links, complete=True)


@contextlib.contextmanager
def _socket() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        yield sock
    finally:
        sock.close()


def _ip_json_addresses() -> dict[str, tuple[str, ...]] | None:
    """Addresses from ``ip -j -4 addr show``; ``None`` if iproute2 is absent or fails."""
    ip = shutil.which("ip")
    if ip is None:
        return None
    try:
        proc = subprocess.run(
            [ip, "-j", "-4", "addr", "show"], capture_output=True, timeout=5, check=True
        )
        data = json.loads(proc.stdout or b"[]")
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    result: dict[str, tuple[str, ...]] = {}
    for entry in data if isinstance(data, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("ifname"), str):
            continue
        addrs = [
            f"{a['local']}/{a.get('prefixlen', 32)}"
            for a in entry.get("addr_info", [])
            if isinstance(a, dict) and a.get("family") == "inet" and "local" in a
        ]
        result[entry["ifname"]] = tuple(addrs)
    return result


def _ifreq(name: str) -> bytes:
    return struct.pack(f"16s{_IFREQ_SIZE - 16}x", name.encode()[:15])


def _ioctl_int(sock: socket.socket, request: int, name: str, fmt: str) -> int | None:
    try:
        res = fcntl.ioctl(sock.fileno(), request, _ifreq(name))
    except OSError:
        return None
    return int(struct.unpack_from(fmt, res, 16)[0])


def _ioctl_ipv4(sock: socket.socket, name: str) -> tuple[str, ...]:
    try:
        addr = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, _ifreq(name))
        mask = fcntl.ioctl(sock.fileno(), _SIOCGIFNETMASK, _ifreq(name))
    except OSError:  # EADDRNOTAVAIL: no IPv4 address
        return ()
    # struct sockaddr_in starts at offset 16; sin_addr is at +4 inside it.
    ip = socket.inet_ntoa(addr[20:24])
    prefix = bin(int.from_bytes(mask[20:24], "big")).count("1")
    return (f"{ip}/{prefix}",)


def _ethtool_driver(sock: socket.socket, name: str) -> str | None:
    # The ifreq carries a pointer to a caller-owned ethtool_drvinfo buffer.
    buf = array.array("B", struct.pack("I", _ETHTOOL_GDRVINFO) + bytes(_DRVINFO_SIZE - 4))
    addr, _ = buf.buffer_info()
    req = struct.pack(f"16sP{_IFREQ_SIZE - 16 - struct.calcsize('P')}x", name.encode()[:15], addr)
    try:
        fcntl.ioctl(sock.fileno(), _SIOCETHTOOL, req)
    except OSError:
        return None
    driver = buf.tobytes()[4:36].split(b"\0", 1)[0].decode(errors="replace")
    return driver or None
