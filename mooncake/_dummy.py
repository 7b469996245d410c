"""Dummy clients (``setup_dummy``): attach to a ``mooncake_client`` process.

The ``mooncake_client`` (:mod:`mooncake.client_main`) hosts the segment; a dummy client
asks it which master it serves (``GET /dummy_client``) and runs a segment-less store
client against that master, so the objects it writes live in the standalone client's
memory. ``alloc_from_mem_pool`` hands out pieces of a local pool of ``mem_pool_size``
bytes (anonymous memory, committed page by page as it is touched) for the ``*_from`` /
``*_into`` calls.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import threading
import urllib.error
import urllib.request

from mooncake_core.store.errors import ErrorCode, InvalidArgumentError, UnavailableError

from .client_main import DISCOVERY_PATH

_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)
_ALIGN = 64
ATTACH_TIMEOUT_S = 10.0


def attach_info(server_address: str, timeout: float = ATTACH_TIMEOUT_S) -> dict[str, str]:
    """What the ``mooncake_client`` at ``server_address`` (``host:port``) serves.

    Raises:
        UnavailableError: nothing answers there, or it is not a ``mooncake_client``.
    """
    url = f"http://{server_address}{DISCOVERY_PATH}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            info = json.loads(resp.read(65536))
    except (OSError, urllib.error.URLError, ValueError) as exc:
        raise UnavailableError(
            ErrorCode.UNAVAILABLE,
            f"setup_dummy: no mooncake_client answers at {server_address} ({exc})",
        ) from None
    if not isinstance(info, dict) or not isinstance(info.get("master_server_address"), str):
        raise UnavailableError(
            ErrorCode.UNAVAILABLE, f"setup_dummy: {server_address} is not a mooncake_client"
        )
    return {str(k): str(v) for k, v in info.items()}


class MemPool:
    """``mem_pool_size`` bytes of anonymous memory, handed out by a bump allocator."""

    def __init__(self, size: int) -> None:
        if size <= 0:
            raise InvalidArgumentError(ErrorCode.INVALID_PARAMS, "mem_pool_size must be > 0")
        self.size = size
        self._map: mmap.mmap | None = None
        self._base = 0
        self._used = 0
        self._lock = threading.Lock()

    def alloc(self, size: int) -> int:
        """The address of ``size`` fresh bytes (64-byte aligned), or 0 when full."""
        if size <= 0:
            return 0
        with self._lock:
            if self._map is None:
                flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE
                self._map = mmap.mmap(-1, self.size, flags=flags)
                self._base = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
            start = (self._used + _ALIGN - 1) // _ALIGN * _ALIGN
            if start + size > self.size:
                return 0
            self._used = start + size
            return self._base + start
