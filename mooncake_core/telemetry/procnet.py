"""OS per-interface counters: ``/proc/net/dev`` parsing and address -> interface lookup."""

from __future__ import annotations

import fcntl
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

__all__ = ["IfaceCounters", "iface_addresses", "parse_proc_net_dev", "read_proc_net_dev"]

_SIOCGIFADDR = 0x8915


@dataclass(frozen=True, slots=True)
class IfaceCounters:
    """Cumulative counters of one interface as the kernel reports them.

    Attributes:
        iface: Interface name (``lo``, ``eth0``...).
        rx_bytes: Bytes received.
        rx_packets: Packets received.
        rx_errors: Receive errors.
        rx_dropped: Received packets dropped.
        tx_bytes: Bytes sent.
        tx_packets: Packets sent.
        tx_errors: Transmit errors.
        tx_dropped: Packets dropped on transmit.
    """

    iface: str
    rx_bytes: int
    rx_packets: int
    rx_errors: int
    rx_dropped: int
    tx_bytes: int
    tx_packets: int
    tx_errors: int
    tx_dropped: int


def parse_proc_net_dev(text: str) -> tuple[IfaceCounters, ...]:
    """Parse the text of ``/proc/net/dev``.

    The file has two header lines, then ``name: 16 numbers`` per interface (8 receive
    columns then 8 transmit columns). Older kernels glue a long name to the first
    number (``eth0:123``), so the split is on the colon, not on whitespace.

    Args:
        text: The whole file.

    Returns:
        One entry per interface, in file order.

    Raises:
        ValueError: A data line without a colon or with fewer than 16 numbers (the
            message quotes the line).
    """
    out: list[IfaceCounters] = []
    for line in text.splitlines():
        if "|" in line or not line.strip():
            continue  # the two header lines use '|' between column groups
        name, sep, rest = line.partition(":")
        if not sep:
            raise ValueError(f"/proc/net/dev line without ':': {line!r}")
        fields = rest.split()
        if len(fields) < 16:
            raise ValueError(f"/proc/net/dev line with {len(fields)} fields, want 16: {line!r}")
        try:
            n = [int(f) for f in fields[:16]]
        except ValueError:
            raise ValueError(f"/proc/net/dev line with a non-integer field: {line!r}") from None
        out.append(
            IfaceCounters(
                iface=name.strip(),
                rx_bytes=n[0],
                rx_packets=n[1],
                rx_errors=n[2],
                rx_dropped=n[3],
                tx_bytes=n[8],
                tx_packets=n[9],
                tx_errors=n[10],
                tx_dropped=n[11],
            )
        )
    return tuple(out)


def read_proc_net_dev(path: Path = Path("/proc/net/dev")) -> tuple[IfaceCounters, ...]:
    """Read and parse the OS counters (empty when the file does not exist, e.g. not Linux).

    Args:
        path: The file to read (tests pass a fixture).

    Returns:
        The counters per interface.
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        return ()
    return parse_proc_net_dev(text)


def iface_addresses() -> dict[str, str]:
    """IPv4 address -> interface name for every interface that has one (Linux).

    The Transfer Engine names its NICs by address; the OS counts by interface, so this
    map puts the two side by side. Interfaces without an IPv4 address are skipped.

    Returns:
        The map (empty where the ioctl is not available).
    """
    out: dict[str, str] = {}
    try:
        names = socket.if_nameindex()
    except OSError:
        return out
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in names:
            req = struct.pack("256s", name.encode()[:15])
            try:
                res = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, req)
            except OSError:
                continue
            out[socket.inet_ntoa(res[20:24])] = name
    return out
