"""The grants a client holds for its next puts (docs/store.md, "Grants"). Sans-IO.

The master may answer the call that completes a put with a *grant*: replicas allocated
for this client's next put of the same size and options. That put writes them and
commits the key in one exchange (``PutCommit``) instead of PutStart, then PutEnd. A
batch of puts of one size is granted its next batch the same way (``BatchPutCommit``).
:class:`GrantPocket` keeps at most one unused grant and one batch's; those it will not
use (another size, too old) are named in the next commit for the master to free.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from ..objects import Replica
from ..results import ReplicateConfig

_MAX_UNUSED = 8
_MAX_UNUSED_BATCH = 512  # older ones: the master expires them


@dataclass(frozen=True, slots=True)
class HeldGrant:
    """A grant this client holds."""

    grant_id: int
    size: int
    config: ReplicateConfig | None
    replicas: tuple[Replica, ...]
    asked: float
    """This process's monotonic clock before it asked: the put's transfer window
    (``put_timeout_s``) counts from here, as a PutStart's does."""


@dataclass(frozen=True, slots=True)
class HeldBatch:
    """The grants this client holds for its next batch: one per put, in order."""

    grant_ids: tuple[int, ...]
    size: int
    config: ReplicateConfig | None
    replicas: tuple[tuple[Replica, ...], ...]
    asked: float
    """As :attr:`HeldGrant.asked`."""


class GrantPocket:
    """At most one unused grant and one batch's grants, and the grants to give back
    (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: HeldGrant | None = None
        self._unused: list[int] = []
        self._batch: HeldBatch | None = None
        self._unused_batch: list[int] = []

    def take(
        self, size: int, config: ReplicateConfig | None, now: float, window_s: float
    ) -> HeldGrant | None:
        """The held grant if it fits a put of ``size`` bytes with ``config`` and is
        younger than half the transfer window (then no longer held); a grant that does
        not fit is given back with the next commit."""
        with self._lock:
            g = self._held
            if g is None:
                return None
            self._held = None
            if g.size == size and g.config == config and now - g.asked < window_s / 2:
                return g
            self._unused.append(g.grant_id)
            del self._unused[:-_MAX_UNUSED]
            return None

    def wants(self, size: int, config: ReplicateConfig | None) -> bool:
        """Whether to ask for a grant for the next put like this one (none held that
        fits it already)."""
        with self._lock:
            g = self._held
            return g is None or g.size != size or g.config != config

    def keep(self, g: HeldGrant) -> None:
        """Hold ``g`` (the one held before, if any, is given back)."""
        with self._lock:
            if self._held is not None:
                self._unused.append(self._held.grant_id)
                del self._unused[:-_MAX_UNUSED]
            self._held = g

    def drop(self, grant_id: int) -> None:
        """Give ``grant_id`` back with the next commit (its writer will not use it)."""
        with self._lock:
            self._unused.append(grant_id)
            del self._unused[:-_MAX_UNUSED]  # older ones: the master expires them

    def to_release(self) -> int:
        """A grant to give back with this commit (0: none)."""
        with self._lock:
            return self._unused.pop() if self._unused else 0

    def take_all(self) -> list[int]:
        """Every single grant held or to give back (the client is closing)."""
        with self._lock:
            out = list(self._unused)
            if self._held is not None:
                out.append(self._held.grant_id)
            self._held, self._unused = None, []
            return out

    # ------------------------------------------------------------- batches
    def take_batch(
        self, size: int, count: int, config: ReplicateConfig | None, now: float, window_s: float
    ) -> HeldBatch | None:
        """The batch grants held, if there are at least ``count`` for puts of ``size``
        bytes with ``config`` and they are younger than half the transfer window (then
        no longer held; the caller gives back those it does not use). Grants that do
        not fit are given back with the next batch commit."""
        with self._lock:
            g = self._batch
            if g is None:
                return None
            self._batch = None
            if (
                g.size == size
                and g.config == config
                and len(g.grant_ids) >= count
                and now - g.asked < window_s / 2
            ):
                return g
            self._give_back(g.grant_ids)
            return None

    def wants_batch(self, size: int, count: int, config: ReplicateConfig | None) -> bool:
        """Whether to ask for grants for the next batch like this one."""
        with self._lock:
            g = self._batch
            return g is None or g.size != size or g.config != config or len(g.grant_ids) < count

    def keep_batch(self, g: HeldBatch) -> None:
        """Hold ``g`` for the next batch (what was held before is given back)."""
        with self._lock:
            if self._batch is not None:
                self._give_back(self._batch.grant_ids)
            self._batch = g

    def drop_batch(self, grant_ids: Sequence[int]) -> None:
        """Give ``grant_ids`` back with the next batch commit."""
        with self._lock:
            self._give_back(grant_ids)

    def _give_back(self, grant_ids: Sequence[int]) -> None:
        self._unused_batch += grant_ids
        del self._unused_batch[:-_MAX_UNUSED_BATCH]

    def to_release_batch(self) -> list[int]:
        """The batch grants to give back with this batch commit."""
        with self._lock:
            out, self._unused_batch = self._unused_batch, []
            return out

    def take_all_batch(self) -> list[int]:
        """Every batch grant held or to give back (the client is closing)."""
        with self._lock:
            out = self._unused_batch
            if self._batch is not None:
                out += self._batch.grant_ids
            self._batch, self._unused_batch = None, []
            return out
