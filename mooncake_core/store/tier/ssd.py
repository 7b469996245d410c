"""The SSD tier: objects evicted from DRAM kept as checksummed files in a directory.

One file per object, named by the XXH3-64 of its key::

    <dir>/ab/ab12cd34ef567890.obj
    +--------+-----------+------------+-------------+-----------+-----------+------+
    | MCSSD1 | key_len   | data_len   | xxh3(data)  | crc32(hdr)| key bytes | data |
    | 8 B    | u32 LE    | u64 LE     | u64 LE      | u32 LE    |           |      |
    +--------+-----------+------------+-------------+-----------+-----------+------+

A read checks the header CRC, the key (two keys may share a hash), the length against
the file size and the data checksum; any mismatch is a **miss** plus a ``corrupt``
count and the file is deleted: the tier never returns wrong bytes. Files are written to
a temporary name and renamed, so a crash leaves either the whole old file or the new one.

Space: a byte ``capacity``; when a write would take usage above
``high_watermark * capacity``, least recently used files go until usage is below
``low_watermark * capacity`` (files being written are not candidates). The index is
rebuilt from the directory on start (recency from file mtimes), so the tier survives a
node restart.

Evicted keys: every file the tier deletes to make room is remembered by key until
:meth:`SsdTier.take_evicted` collects them (a store node reports them to the master, which
then stops counting on those copies). Keys of files found by the start-up scan are read
from their headers.

Promotion: :meth:`SsdTier.get` counts hits per key; the ``promote`` flag of the result
turns true on the ``promote_after``-th hit, telling the caller to copy the object back
to DRAM (the tier keeps its copy until evicted or removed).

Blocking file I/O: callers on an event loop run these methods in a worker thread.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import xxhash

MAGIC = b"MCSSD1\x00\x00"
_HDR = struct.Struct("<8sIQQ")  # magic, key_len, data_len, xxh3(data)
_CRC = struct.Struct("<I")
HEADER_SIZE = _HDR.size + _CRC.size


@dataclass(frozen=True, slots=True)
class SsdTierOptions:
    """Where the tier lives and how it evicts."""

    directory: Path
    """Directory of the files (created if missing)."""
    capacity: int
    """Bytes of files (headers included) the tier may hold."""
    high_watermark: float = 0.95
    """Usage ratio that triggers eviction."""
    low_watermark: float = 0.85
    """Eviction stops below this ratio."""
    promote_after: int = 2
    """A read says ``promote`` on this many hits of the same key."""
    fsync: bool = False
    """fsync each file before renaming it (survives power loss, slower)."""

    def __post_init__(self) -> None:
        if self.capacity <= 0:
            raise ValueError(f"SSD tier capacity must be positive, got {self.capacity}")
        if not 0 < self.low_watermark <= self.high_watermark <= 1:
            raise ValueError(
                f"SSD tier watermarks need 0 < low <= high <= 1, got "
                f"{self.low_watermark} and {self.high_watermark}"
            )
        if self.promote_after < 1:
            raise ValueError(f"promote_after must be >= 1, got {self.promote_after}")


@dataclass(frozen=True, slots=True)
class SsdRead:
    """The bytes of one object and whether it should go back to DRAM now."""

    data: bytes
    promote: bool


@dataclass(frozen=True, slots=True)
class SsdMiss:
    """Why :meth:`SsdTier.fetch` returned no bytes: no file, or a damaged one (deleted)."""

    corrupt: bool

    @property
    def reason(self) -> str:
        """``corrupt`` or ``miss`` (the words the node sends to the master)."""
        return "corrupt" if self.corrupt else "miss"


@dataclass(frozen=True, slots=True)
class SsdTierSnapshot:
    """Read-model of the tier."""

    files: int
    used_bytes: int
    capacity_bytes: int
    offloads: int
    hits: int
    misses: int
    corrupt: int
    evictions: int
    promotions: int


class SsdTier:
    """A directory of checksummed object files with a size limit and LRU eviction.

    Args:
        options: directory, capacity, watermarks, promotion threshold.

    Thread-safe: one lock guards the index; file reads happen outside it.
    """

    def __init__(self, options: SsdTierOptions) -> None:
        self.options = options
        self.directory = options.directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._index: OrderedDict[str, int] = OrderedDict()  # file name -> bytes; LRU first
        self._keys: dict[str, str] = {}  # file name -> key, where known
        self._evicted: list[str] = []  # keys evicted and not yet collected
        self._hits: dict[str, int] = {}
        self._used = 0
        self._offloads = self._hit_count = self._misses = 0
        self._corrupt = self._evictions = self._promotions = 0
        self._scan()

    # ---------------------------------------------------------------- public
    def put(self, key: str, data: bytes | bytearray | memoryview) -> bool:
        """Store (or replace) ``key``'s bytes, evicting least recently used files first.

        Returns:
            False when the object alone exceeds the high watermark (not stored).

        Raises:
            OSError: the file could not be written (the tier is unchanged).
        """
        raw_key = key.encode()
        view = memoryview(data).cast("B")
        size = HEADER_SIZE + len(raw_key) + len(view)
        o = self.options
        if size > o.high_watermark * o.capacity:
            return False
        name = self._name(key)
        hdr = _HDR.pack(MAGIC, len(raw_key), len(view), xxhash.xxh3_64_intdigest(view))
        path = self._path(name)
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_suffix(f".tmp{threading.get_ident()}")
        with open(tmp, "wb") as f:
            f.write(hdr + _CRC.pack(zlib.crc32(hdr)) + raw_key)
            f.write(view)
            if o.fsync:
                f.flush()
                os.fsync(f.fileno())
        with self._lock:
            old = self._index.pop(name, None)
            if old is not None:
                self._used -= old
            self._make_room(size)
            os.replace(tmp, path)
            self._index[name] = size
            self._keys[name] = key
            self._used += size
            self._hits.pop(name, None)
            self._offloads += 1
        return True

    def get(self, key: str) -> SsdRead | None:
        """The object's bytes, verified; None on a miss or a corrupt file (counted)."""
        got = self.fetch(key)
        return None if isinstance(got, SsdMiss) else got

    def fetch(self, key: str) -> SsdRead | SsdMiss:
        """Like :meth:`get`, but a miss says whether the file was missing or damaged.

        Returns:
            The verified bytes, or :class:`SsdMiss` (``corrupt``: the file failed a check,
            was counted and deleted).
        """
        name = self._name(key)
        with self._lock:
            if name not in self._index:
                self._misses += 1
                return SsdMiss(corrupt=False)
            self._index.move_to_end(name)
        try:
            data = self._read(self._path(name), key)
        except FileNotFoundError:
            # Evicted or removed by another thread between the lookup and the open:
            # an ordinary miss (the index no longer has it, or has a newer file).
            with self._lock:
                self._misses += 1
            return SsdMiss(corrupt=False)
        with self._lock:
            if data is None:
                self._corrupt += 1
                self._misses += 1
                self._forget(name)
                return SsdMiss(corrupt=True)
            self._hit_count += 1
            hits = self._hits.get(name, 0) + 1
            self._hits[name] = hits
            promote = hits == self.options.promote_after
            if promote:
                self._promotions += 1
        return SsdRead(data, promote)

    def contains(self, key: str) -> bool:
        """Whether a file for ``key`` is indexed (not verified)."""
        with self._lock:
            return self._name(key) in self._index

    def remove(self, key: str) -> bool:
        """Delete ``key``'s file. Returns whether there was one."""
        with self._lock:
            return self._forget(self._name(key))

    def take_evicted(self) -> list[str]:
        """Keys whose files were evicted to make room since the last call (then cleared).

        Files of unknown key (an unreadable header found by the start-up scan) are not
        listed.
        """
        with self._lock:
            out, self._evicted = self._evicted, []
            return out

    def keys(self) -> list[str]:
        """Keys of the indexed files, least recently used first (where known)."""
        with self._lock:
            return [self._keys[n] for n in self._index if n in self._keys]

    def snapshot(self) -> SsdTierSnapshot:
        """Counters and usage."""
        with self._lock:
            return SsdTierSnapshot(
                len(self._index),
                self._used,
                self.options.capacity,
                self._offloads,
                self._hit_count,
                self._misses,
                self._corrupt,
                self._evictions,
                self._promotions,
            )

    def path_of(self, key: str) -> Path:
        """Where ``key``'s file lives (for operators and tests)."""
        return self._path(self._name(key))

    # --------------------------------------------------------------- private
    @staticmethod
    def _name(key: str) -> str:
        return f"{xxhash.xxh3_64_intdigest(key.encode()):016x}"

    def _path(self, name: str) -> Path:
        return self.directory / name[:2] / f"{name}.obj"

    def _read(self, path: Path, key: str) -> bytes | None:
        # None: damaged. FileNotFoundError propagates (not damage: the file went away).
        # Header first, then the data straight into its own bytes object (no slicing copy).
        try:
            with open(path, "rb") as f:
                hdr = _header(f.read(HEADER_SIZE))
                if hdr is None:
                    return None
                klen, dlen, digest = hdr
                if os.fstat(f.fileno()).st_size != HEADER_SIZE + klen + dlen:
                    return None
                if f.read(klen) != key.encode():
                    return None  # another key with the same hash, or a damaged key
                data = f.read(dlen)
        except FileNotFoundError:
            raise
        except OSError:
            return None
        if len(data) != dlen or xxhash.xxh3_64_intdigest(data) != digest:
            return None
        return data

    def _forget(self, name: str) -> bool:
        size = self._index.pop(name, None)
        self._hits.pop(name, None)
        self._keys.pop(name, None)
        with contextlib.suppress(FileNotFoundError):
            self._path(name).unlink()
        if size is None:
            return False
        self._used -= size
        return True

    def _make_room(self, incoming: int) -> None:
        o = self.options
        if self._used + incoming <= o.high_watermark * o.capacity:
            return
        target = o.low_watermark * o.capacity - incoming
        while self._index and self._used > target:
            name = next(iter(self._index))
            key = self._keys.get(name)
            if key is not None:
                self._evicted.append(key)
            self._forget(name)
            self._evictions += 1

    def _scan(self) -> None:
        found = []
        for p in self.directory.glob("*/*"):
            if p.suffix == ".obj":
                st = p.stat()
                found.append((st.st_mtime_ns, p.stem, st.st_size))
            elif ".tmp" in p.suffix:
                p.unlink(missing_ok=True)  # a write interrupted by a crash
        for _, name, size in sorted(found):
            self._index[name] = size
            self._used += size
            key = _read_key(self._path(name))
            if key is not None:
                self._keys[name] = key


def _header(head: bytes) -> tuple[int, int, int] | None:
    """``(key_len, data_len, data digest)`` of a file header, or None when it is damaged."""
    if len(head) < HEADER_SIZE:
        return None
    magic, klen, dlen, digest = _HDR.unpack_from(head, 0)
    (crc,) = _CRC.unpack_from(head, _HDR.size)
    if magic != MAGIC or crc != zlib.crc32(head[: _HDR.size]):
        return None
    return klen, dlen, digest


def _read_key(path: Path) -> str | None:
    """The key stored in a file's header, or None when the header is unreadable."""
    try:
        with open(path, "rb") as f:
            hdr = _header(f.read(HEADER_SIZE))
            return None if hdr is None else f.read(hdr[0]).decode()
    except (OSError, UnicodeDecodeError):
        return None
