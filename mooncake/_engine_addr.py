"""Sans-IO helpers of ``mooncake.engine``: metadata strings, local address ranges, maps.

Nothing here does I/O: the adapter feeds in the strings (``/proc/self/maps``, the
metadata argument) and acts on the answers, so each rule has an exact unit test.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

P2P = "p2p"
HTTP = "http"


def parse_metadata(metadata_server: str, metadata_type: str | None = None) -> tuple[str, str]:
    """``(kind, address)`` of upstream's metadata argument.

    ``P2PHANDSHAKE`` is peer-to-peer (peers are named ``host:port``); ``http://...``
    is upstream's HTTP metadata server (``mooncake_http_metadata_server``). With
    ``initialize_ext`` the type comes separately (``"http"`` + ``"host:port/metadata"``).

    Raises:
        ValueError: etcd, redis or anything else (named in the message).
    """
    s = (metadata_server or "").strip()
    kind = (metadata_type or "").strip().lower()
    if s.upper() == "P2PHANDSHAKE" or kind in ("p2p", "p2phandshake"):
        return P2P, ""
    if kind == HTTP and s and "://" not in s:
        s = "http://" + s
    if s.startswith(("http://", "https://")) and kind in ("", HTTP):
        return HTTP, s
    shown = f"{kind}:{s}" if kind else s
    raise ValueError(
        f"metadata server {shown!r} is not supported here "
        "(use P2PHANDSHAKE or an http:// metadata server; etcd and redis are not served)"
    )


def split_hostname(name: str) -> tuple[str, int | None]:
    """``host`` and the port of ``host[:port]`` (None without one)."""
    host, sep, port = name.rpartition(":")
    if sep and host and port.isdigit() and not host.endswith(":"):
        return host, int(port)
    return name, None


@dataclass
class AddressMap(Generic[T]):
    """Disjoint ``[start, start + length)`` ranges of this process, each with a value.

    ``find(addr, n)`` answers the range holding ``addr`` and all of ``[addr, addr + n)``,
    or None: a transfer's local side must lie inside one registered range.
    """

    _starts: list[int] = field(default_factory=list)
    _items: list[tuple[int, int, T]] = field(default_factory=list)

    def add(self, start: int, length: int, value: T) -> None:
        """Add a range.

        Raises:
            ValueError: Empty, negative, or overlapping a range already here.
        """
        if start <= 0 or length <= 0:
            raise ValueError(f"empty range {start:#x}+{length}")
        i = bisect.bisect_right(self._starts, start)
        if i > 0:
            s, n, _ = self._items[i - 1]
            if s + n > start:
                raise ValueError(f"{start:#x}+{length} overlaps {s:#x}+{n}")
        if i < len(self._starts) and start + length > self._starts[i]:
            s, n, _ = self._items[i]
            raise ValueError(f"{start:#x}+{length} overlaps {s:#x}+{n}")
        self._starts.insert(i, start)
        self._items.insert(i, (start, length, value))

    def remove(self, start: int) -> T | None:
        """Remove the range starting exactly at ``start``; its value, or None."""
        i = bisect.bisect_left(self._starts, start)
        if i < len(self._starts) and self._starts[i] == start:
            del self._starts[i]
            return self._items.pop(i)[2]
        return None

    def get(self, start: int) -> T | None:
        """The value of the range starting exactly at ``start``."""
        i = bisect.bisect_left(self._starts, start)
        if i < len(self._starts) and self._starts[i] == start:
            return self._items[i][2]
        return None

    def find(self, addr: int, n: int) -> tuple[int, T] | None:
        """``(start, value)`` of the range holding ``[addr, addr + n)``, or None."""
        if addr < 0 or n < 0:
            return None
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0:
            return None
        s, length, value = self._items[i]
        if addr < s + length and addr + n <= s + length:
            return s, value
        return None

    def __len__(self) -> int:
        return len(self._items)


def host_memory_ok(addr: int, n: int, maps: str) -> bool:
    """Whether ``[addr, addr + n)`` is readable and writable host memory per ``maps``.

    ``maps`` is the text of ``/proc/self/maps``. Ranges may span adjacent mappings. A
    CUDA device pointer lies in address space the driver reserves without access
    (``---p``), so it is not host memory here.
    """
    if addr <= 0 or n <= 0:
        return False
    spans: list[tuple[int, int]] = []
    for line in maps.splitlines():
        parts = line.split(None, 2)
        if len(parts) < 2 or "-" not in parts[0]:
            continue
        lo_s, _, hi_s = parts[0].partition("-")
        perms = parts[1]
        if len(perms) < 2 or perms[0] != "r" or perms[1] != "w":
            continue
        try:
            spans.append((int(lo_s, 16), int(hi_s, 16)))
        except ValueError:
            continue
    spans.sort()
    pos, end = addr, addr + n
    for lo, hi in spans:
        if hi <= pos:
            continue
        if lo > pos:
            return False
        pos = hi
        if pos >= end:
            return True
    return False
