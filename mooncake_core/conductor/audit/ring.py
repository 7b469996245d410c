"""The ring the conductor's process writes audit items into and the writer process reads.

An anonymous shared memory file (``memfd``; nothing on disk) holding a ring of records,
each one value encoded by the C encoder of :mod:`mooncake_core._flat` and a kind
(:data:`DECISION`, :data:`UPDATE`, :data:`OUTCOME`). The layout and the memory ordering
are :mod:`mooncake_core._flat`'s (``native/mc_flat.c``, "A ring of packed records"):

- the writer (the conductor's process; its threads take turns under the GIL) packs a
  value straight into the ring and publishes it by advancing ``head``, in one C call
  (:meth:`SharedRing.push`): nothing is allocated, nothing stays alive for the garbage
  collector, no thread of this process touches it again;
- the reader (the writer process) reads records from its position on
  (:meth:`SharedRing.read`) and, once their rows are committed, advances ``tail`` (the
  writer's free space) and ``done`` (their count) (:meth:`SharedRing.release`).

``tail`` and ``done`` are what a writer process that replaces a dead one starts from:
everything after them is read again.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

from mooncake_core import _flat

DECISION, UPDATE, OUTCOME = 0, 1, 2
"""Kinds of records: a decision (its wire tuple), ``(request_id, ttft_s, tbt_s)``,
``(request_id, outcome, detail)``."""

_DONE_DECISIONS = _flat.RING_DONE + 8
_DONE_UPDATES = _flat.RING_DONE + 16
_SEEN = _flat.RING_DONE + 24

SOFT_END = 4 << 20
"""Where the writer goes back to the start of the ring whenever the reader has kept up:
the pages after it are touched (and their first-write faults paid) only under a backlog."""

RING_MIN = 1 << 20
RING_MAX = 64 << 20
"""Bounds of the ring's data area: 64 MiB holds ~46,000 decisions of 32 candidates."""


def ring_bytes(queue_max: int, per_item: int = 1536) -> int:
    """The data area for ``queue_max`` items of ``per_item`` bytes, within
    [:data:`RING_MIN`, :data:`RING_MAX`], a multiple of 8."""
    return max(RING_MIN, min(RING_MAX, queue_max * per_item)) & ~7


class SharedRing:
    """One side's view of the ring in the shared memory file ``fd``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        total = os.fstat(fd).st_size
        if total < _flat.RING_DATA + 8:
            raise ValueError(f"audit ring: a file of {total} bytes is too small")
        self._mm = mmap.mmap(fd, total)
        self.size = _flat.ring_get(self._mm, _flat.RING_SIZE)

    @classmethod
    def create(cls, data_bytes: int) -> SharedRing:
        """A new, empty ring with ``data_bytes`` of data area (the file is closed when
        the process exits, or by :meth:`close`)."""
        if data_bytes < 8 or data_bytes % 8:
            raise ValueError(f"audit ring: {data_bytes} bytes is not a positive multiple of 8")
        fd = os.memfd_create("mooncake-audit-ring", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, _flat.RING_DATA + data_bytes)
            mm = mmap.mmap(fd, _flat.RING_DATA + data_bytes)
            _flat.ring_set(mm, _flat.RING_SIZE, data_bytes, _flat.RING_SOFT, SOFT_END)
            mm.close()
            return cls(fd)
        except BaseException:
            os.close(fd)
            raise

    def push(self, kind: int, value: Any) -> int:
        """Pack ``value`` into the ring.

        Returns:
            Its sequence number (records ever written, from 1), or 0: the ring is full.

        Raises:
            TypeError, ValueError: ``value`` holds what the encoding does not carry, or
                is larger than the ring.
        """
        return _flat.ring_push(self._mm, kind, value)

    def read(self, pos: int) -> tuple[int, bytes, int] | None:
        """The record at byte position ``pos``: ``(kind, packed value, next
        position)`` (``_flat.unpack`` reads the value); ``None`` when nothing was
        written there yet.

        Raises:
            ValueError: ``pos`` or the record there is not one the writer made.
        """
        return _flat.ring_read(self._mm, pos)

    @property
    def written(self) -> int:
        """Records ever written."""
        return _flat.ring_get(self._mm, _flat.RING_COUNT)

    @property
    def head(self) -> int:
        """Bytes ever written."""
        return _flat.ring_get(self._mm, _flat.RING_HEAD)

    def released(self) -> tuple[int, int, int, int]:
        """``(tail, done, decisions, updates)``: the byte position and the count of the
        records the reader is done with, and how many of them were decisions and
        updates (latencies and outcomes)."""
        get = _flat.ring_get
        mm = self._mm
        return (
            get(mm, _flat.RING_TAIL),
            get(mm, _flat.RING_DONE),
            get(mm, _DONE_DECISIONS),
            get(mm, _DONE_UPDATES),
        )

    def release(self, pos: int, done: int, decisions: int, updates: int) -> None:
        """The reader is done with every record before byte ``pos`` (``done`` of them,
        ``decisions`` and ``updates`` of those, ever): their space is the writer's
        again. The four words are stored in one C call, the position last (a reader
        that replaces a dead one starts from them)."""
        _flat.ring_set(
            self._mm,
            _DONE_DECISIONS, decisions,
            _DONE_UPDATES, updates,
            _flat.RING_DONE, done,
            _flat.RING_TAIL, pos,
        )  # fmt: skip

    @property
    def seen(self) -> int:
        """The byte position up to which a reader has read (not necessarily released)."""
        return _flat.ring_get(self._mm, _SEEN)

    def see(self, pos: int) -> None:
        """The reader read every record before byte ``pos``: a reader that replaces it
        treats those as perhaps committed, the ones after as new."""
        _flat.ring_set(self._mm, _SEEN, pos)

    def close(self) -> None:
        """Unmap the ring and close its file (this side's)."""
        self._mm.close()
        os.close(self.fd)
