"""Copy one replica's bytes into another replica's slices, through a Transfer Engine.

The node drain (:mod:`.drain`) asks the master for a new replica of an object, then
needs the bytes moved from the replica on the draining node into it. This module does
only that: read every slice of the source replica into a registered staging buffer,
then write the buffer into every slice of the target replica. It uses the store client's
data path (:class:`~mooncake_core.store.client.data.DataPath`), so segments on this host
are reached over shm and others over tcp, exactly as a store client would.

It is synchronous (the engine calls block); the async drain runs it in a thread. It
does not talk to the master: the caller passes the segment table (name -> transport
address and owner) it read from a snapshot, via :meth:`ReplicaCopier.set_segments`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from mooncake_core.store.client.data import DataPath, plan
from mooncake_core.transfer import OpCode, Region, TransferEngine

if TYPE_CHECKING:
    from mooncake_core.config.models import TransferConfig
    from mooncake_core.store import Replica, SegmentSnapshot

_MIN_STAGING = 1 << 20


class CopyError(RuntimeError):
    """Bytes could not be moved (the message names the failing side and why)."""


class ReplicaCopier:
    """Moves replica bytes with its own Transfer Engine (a pure user: hosts no segment).

    Args:
        config: Transfer Engine settings.
        secret: cluster secret for the data-plane handshake, or None.
        host: address this engine binds (its data server is not used by peers).
        timeout_s: longest wait for one transfer batch.

    Raises:
        TransferError: the engine could not start.
    """

    def __init__(
        self,
        config: TransferConfig,
        *,
        secret: bytes | None = None,
        host: str = "127.0.0.1",
        timeout_s: float = 30.0,
    ) -> None:
        self._engine = TransferEngine(config, nics=(host,), port=0, secret=secret).start()
        self._table: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()
        self._data = DataPath(self._engine, {}, self._segments_now, timeout_s)
        self._staging: Region | None = None
        self.copied_bytes = 0

    def _segments_now(self) -> dict[str, tuple[str, str]]:
        with self._lock:
            return dict(self._table)

    def set_segments(self, segments: Iterable[SegmentSnapshot]) -> None:
        """Replace the segment table (from a fresh master snapshot)."""
        table = {s.name: (s.transport_address, s.client_id) for s in segments}
        with self._lock:
            self._table = table

    def _stage(self, size: int) -> Region:
        st = self._staging
        if st is None or st.length < size:
            if st is not None:
                self._engine.unregister_memory(st)
                self._staging = None
            n = max(_MIN_STAGING, 1 << max(0, size - 1).bit_length())
            self._staging = st = self._engine.register_memory(bytearray(n))
        return st

    def copy(self, size: int, source: Replica, target: Replica) -> None:
        """Read ``source`` (``size`` bytes) and write the same bytes into ``target``.

        Args:
            size: object size in bytes (the sum of either replica's slice lengths).
            source: a readable replica of the object.
            target: the replica to fill (allocated by AddReplicaStart).

        Raises:
            ValueError: the replicas' lengths do not match ``size``.
            CopyError: a read or write failed (the target then holds partial bytes and
                must be revoked, not committed).
        """
        for name, rep in (("source", source), ("target", target)):
            total = sum(s.length for s in rep)
            if total != size:
                raise ValueError(f"{name} replica holds {total} bytes, object has {size}")
        region = self._stage(size)
        (err,) = self._data.run([plan(OpCode.READ, region, 0, source)])
        if err is not None:
            raise CopyError(f"reading the source replica failed: {err}")
        (err,) = self._data.run([plan(OpCode.WRITE, region, 0, target)])
        if err is not None:
            raise CopyError(f"writing the new replica failed: {err}")
        self.copied_bytes += size

    def close(self) -> None:
        """Stop the engine (idempotent)."""
        self._engine.close()

    def __enter__(self) -> ReplicaCopier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
