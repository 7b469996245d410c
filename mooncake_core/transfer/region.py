"""Registered local memory: resolving user buffers to addresses, and shm-backed buffers."""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import secrets
import threading
from typing import Any

from ._c import native as _native
from .request import TransferError

SHM_DIR = "/dev/shm"


class Region:
    """A registered range of local memory (returned by ``TransferEngine.register_memory``).

    Attributes:
        address: Start address.
        length: Bytes.
        location: Memory location (``cpu:0``; ``cuda:N`` is refused at registration).
        name: Segment name it is exposed under, or None for a private buffer.
        shm_path: Shared-memory file behind it, when allocated by the engine.
        segment_id: Id on this engine's data plane when exposed.
    """

    def __init__(
        self,
        address: int,
        length: int,
        location: str,
        name: str | None,
        keepalive: Any,
        shm_path: str | None = None,
    ) -> None:
        self.address = address
        self.length = length
        self.location = location
        self.name = name
        self.shm_path = shm_path
        self.segment_id: int | None = None
        self._keepalive = keepalive
        self._inflight = 0
        self._lock = threading.Lock()
        self.registered = True

    def __repr__(self) -> str:
        return f"Region(name={self.name!r}, length={self.length}, location={self.location!r})"

    def view(self) -> memoryview:
        """A writable memoryview of the region (for tests and small copies)."""
        if isinstance(self._keepalive, memoryview):
            return self._keepalive.cast("B")[: self.length]
        if isinstance(self._keepalive, mmap.mmap):
            return memoryview(self._keepalive)[: self.length]
        import ctypes

        return memoryview((ctypes.c_char * self.length).from_address(self.address)).cast("B")

    def acquire(self, n: int) -> None:
        """Count ``n`` slices in flight (unregister is refused meanwhile)."""
        with self._lock:
            if not self.registered:
                raise TransferError(f"{self!r} is not registered")
            self._inflight += n

    def release(self, n: int) -> None:
        """``n`` slices are no longer in flight."""
        with self._lock:
            self._inflight -= n

    @property
    def inflight(self) -> int:
        """Slices in flight that touch this region."""
        with self._lock:
            return self._inflight


def resolve_buffer(obj: Any, length: int | None) -> tuple[int, int, Any]:
    """Address, length and keep-alive object of a user buffer.

    Accepts an int address (``length`` required), a CPU torch tensor, or any writable
    C-contiguous buffer (bytearray, mmap, numpy array, memoryview).

    Raises:
        TransferError: Read-only, non-contiguous, CUDA, or a bad length.
    """
    if isinstance(obj, bool):
        raise TransferError("register_memory: a bool is not a buffer")
    if isinstance(obj, int):
        if length is None or length <= 0 or obj <= 0:
            raise TransferError(
                f"register_memory: raw address {obj:#x} needs a positive length, got {length}"
            )
        return obj, length, None
    if hasattr(obj, "data_ptr") and hasattr(obj, "is_contiguous"):  # torch.Tensor
        if getattr(obj, "is_cuda", False) or str(getattr(obj, "device", "cpu")) != "cpu":
            raise TransferError(
                f"register_memory: only CPU tensors are supported, got {obj.device}"
            )
        if not obj.is_contiguous():
            raise TransferError("register_memory: tensor is not contiguous")
        total = int(obj.numel() * obj.element_size())
        addr, keep = int(obj.data_ptr()), obj
    else:
        try:
            addr, total, readonly = _native.buffer_address(obj)
        except (TypeError, ValueError, BufferError) as exc:
            raise TransferError(
                f"register_memory: {type(obj).__name__} is not usable: {exc}"
            ) from exc
        if readonly:
            raise TransferError(f"register_memory: {type(obj).__name__} buffer is read-only")
        keep = obj if isinstance(obj, mmap.mmap) else memoryview(obj)  # pins bytearray size
    if length is not None:
        if length <= 0 or length > total:
            raise TransferError(f"register_memory: length {length} outside buffer of {total} bytes")
        total = length
    if total <= 0:
        raise TransferError("register_memory: empty buffer")
    return addr, total, keep


# A segment file, or an initiator's ledger of one (``.peer-<pid>-<token>``, see shm.py):
# both go when the segment's owner (the first pid) is dead.
_SHM_NAME = re.compile(r"^mooncake-(\d+)-[0-9a-f]{16}(?:\.peer-\d+-[0-9a-f]{8})?$")
_swept = False


def sweep_stale_shm(directory: str = SHM_DIR) -> int:
    """Remove segment files left by engines that died without cleaning up.

    A SIGKILLed engine cannot unlink its ``mooncake-<pid>-<token>`` file, and /dev/shm
    is RAM: left alone, crashed processes leak memory until reboot. A file is removed only
    when it is ours (same uid) and its pid no longer exists; a reused pid keeps the file
    (conservative). Engines in another PID namespace sharing this /dev/shm would look dead:
    give them their own /dev/shm.

    Returns:
        How many files were removed.
    """
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    uid = os.getuid()
    for name in names:
        m = _SHM_NAME.match(name)
        if m is None:
            continue
        path = os.path.join(directory, name)
        try:
            if os.stat(path).st_uid != uid:
                continue
        except OSError:
            continue
        if pid_gone(int(m.group(1))):
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed += 1
    return removed


def pid_gone(pid: int) -> bool:
    """True only when no process ``pid`` exists (one we may not signal still counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def allocate_shm(length: int) -> tuple[mmap.mmap, str]:
    """A zero-filled buffer backed by a file in /dev/shm (mode 0600).

    Returns:
        The mapping and the file path (the caller unlinks it).

    Raises:
        TransferError: Bad length or no shared memory available.
    """
    if length <= 0:
        raise TransferError(f"allocate_memory: length must be > 0, got {length}")
    global _swept
    if not _swept:  # once per process, before this process adds its own
        _swept = True
        sweep_stale_shm()
    path = os.path.join(SHM_DIR, f"mooncake-{os.getpid()}-{secrets.token_hex(8)}")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise TransferError(f"allocate_memory: cannot create {path}: {exc}") from exc
    try:
        os.ftruncate(fd, length)
        buf = mmap.mmap(
            fd,
            length,
            mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
            mmap.PROT_READ | mmap.PROT_WRITE,
        )
    except OSError as exc:
        os.unlink(path)
        raise TransferError(f"allocate_memory: cannot map {length} bytes: {exc}") from exc
    finally:
        os.close(fd)
    return buf, path
