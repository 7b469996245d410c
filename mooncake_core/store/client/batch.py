"""Batch calls of the store client, pipelined so master round trips overlap byte copies.

A batch of many bytes is cut into up to ``_MAX_CHUNKS`` chunks. While the Transfer
Engine moves chunk k (its copy threads run without the GIL), this thread already asks
the master about chunk k+1 and, for writes, tells it that chunk k-1 is complete::

    master:  PutStart c0 | PutStart c1       | PutEnd c0 + PutStart c2 | PutEnd c1 ...
    bytes:               | copy c0 ......... | copy c1 ............... | copy c2 ...

Each key still goes through PutStart -> all bytes -> PutEnd (PutRevoke on failure), so
readers never see a partial object; only the round trips of different keys overlap.
Small batches (under ``_PIPELINE_MIN`` bytes) take one chunk: two round trips in all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from mooncake_core.transfer import OpCode, Region

from ..errors import ErrorCode, InvalidArgumentError, StoreError, UnavailableError
from ..fast_packed import ReadRun
from ..objects import Replica
from ..results import GetResult, ReplicateConfig
from ..validation import plain_keys
from .data import (
    Buffers,
    DataPath,
    Flat,
    Op,
    Pending,
    bytes_of,
    lease_outlasted_error,
    outlasted,
    plan,
    unreadable_error,
    write_too_late,
)
from .grants import GrantPocket, HeldBatch

if TYPE_CHECKING:
    from .options import ClientOptions
    from .sync_master import SyncMaster

_MAX_CHUNKS = 4
MAX_BATCH_GRANTS = 256
"""Puts in a batch that may be granted its next batch (the master's ``MAX_BATCH``)."""
_PIPELINE_MIN = 8 << 20
"""Batches below this many bytes are not cut (a round trip costs more than the copy)."""

Where = tuple[Region, int] | StoreError
"""Where an item's bytes live (region, offset), or why its buffer was refused."""


def chunks(idx: Sequence[int], sizes: Sequence[int]) -> list[list[int]]:
    """Cut ``idx`` into at most ``_MAX_CHUNKS`` runs of about equal bytes (in order)."""
    total = sum(sizes[i] for i in idx)
    n = min(_MAX_CHUNKS, len(idx), total // (_PIPELINE_MIN // 2))
    if n <= 1:
        return [list(idx)] if idx else []
    out: list[list[int]] = [[]]
    goal, acc = total / n, 0
    for i in idx:
        if acc >= goal * len(out) and len(out) < n:
            out.append([])
        out[-1].append(i)
        acc += sizes[i]
    return [c for c in out if c]


def _flat(idx: Sequence[int], where: Sequence[Where], replicas: Sequence[Replica]) -> list[Flat]:
    """The items of ``idx`` as :meth:`DataPath.start_flat` takes them, or ``[]`` when a
    replica has more than one slice (then the ops are planned one by one)."""
    out: list[Flat] = []
    for i, rep in zip(idx, replicas, strict=True):
        if len(rep) != 1:
            return []
        s = rep[0]
        region, off = where[i]  # type: ignore[misc]
        out.append((region, off, s.segment, s.offset, s.length))
    return out


def same_len(what: str, keys: Sequence[object], other: Sequence[object]) -> None:
    """Raise INVALID_PARAMS unless ``other`` pairs one to one with ``keys``."""
    if len(keys) != len(other):
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS,
            f"{len(keys)} keys but {len(other)} {what}; they must match one to one",
        )


class BatchOps:
    """The batch methods of :class:`~mooncake_core.store.client.Client` (a mixin)."""

    if TYPE_CHECKING:
        _buffers: Buffers
        _grants: GrantPocket
        _staging_lock: threading.Lock
        options: ClientOptions

        @property
        def _m(self) -> SyncMaster: ...
        @property
        def _dp(self) -> DataPath: ...
        def _check_key(self, key: str) -> None: ...
        def _check_size(self, key: str, size: int) -> None: ...
        def _stage(self, size: int) -> Region: ...
        def _order(self, replicas: Sequence[Replica]) -> list[Replica]: ...
        def _revoke(self, keys: Sequence[str]) -> None: ...
        def _put_region(
            self,
            key: str,
            region: Region,
            off: int,
            size: int,
            config: ReplicateConfig | None,
            upsert: bool,
            avoid: Collection[str] = (),
        ) -> None: ...

    def _parts(self, idx: list[int], sizes: Sequence[int]) -> list[list[int]]:
        """The parts a batch of ``idx`` is moved in: :func:`chunks`, pipelined, unless
        every copy is made in this thread (same host), where one part saves the round
        trips (64 x 1 MiB over shm: put 5.4 -> 7.8 GB/s, get 9.7 -> 12.7)."""
        if idx and self._dp.copies_all_here():
            return [idx]
        return chunks(idx, sizes)

    def _find_all(self, ptrs: Sequence[int], sizes: Sequence[int]) -> list[Where]:
        return self._buffers.find_many(ptrs, sizes)

    # ------------------------------------------------------------------ writes
    def put_batch(
        self,
        keys: Sequence[str],
        values: Sequence[bytes | bytearray | memoryview],
        config: ReplicateConfig | None = None,
    ) -> list[StoreError | None]:
        """Store many values (copied through the staging buffer).

        Returns:
            ``None`` per stored key, else that key's error (the others are still stored).

        Raises:
            InvalidArgumentError: ``keys`` and ``values`` differ in length.
        """
        same_len("values", keys, values)
        views = [memoryview(v).cast("B") for v in values]
        with self._staging_lock:
            st = self._stage(max(1, sum(v.nbytes for v in views)))
            mem, pos, where = st.view(), 0, []
            for v in views:
                mem[pos : pos + v.nbytes] = v
                where.append((st, pos))
                pos += v.nbytes
            return self._put_many(keys, where, [v.nbytes for v in views], config)

    def batch_put_from(
        self,
        keys: Sequence[str],
        buffer_ptrs: Sequence[int],
        sizes: Sequence[int],
        config: ReplicateConfig | None = None,
    ) -> list[StoreError | None]:
        """``put_from`` for many keys, zero-copy; per-key results as in :meth:`put_batch`."""
        same_len("buffer_ptrs", keys, buffer_ptrs)
        same_len("sizes", keys, sizes)
        return self._put_many(keys, self._find_all(buffer_ptrs, sizes), list(sizes), config)

    def _put_many(
        self,
        keys: Sequence[str],
        where: Sequence[Where],
        sizes: Sequence[int],
        config: ReplicateConfig | None,
    ) -> list[StoreError | None]:
        out: list[StoreError | None] = [None] * len(keys)
        todo: list[int] = []
        plain = (
            plain_keys(keys, self.options.master_config.max_key_length)
            and all(type(n) is int and n > 0 for n in sizes)
            and not any(isinstance(w, StoreError) for w in where)
        )
        if plain:  # every check below surely passes
            todo = list(range(len(keys)))
        else:
            for i, (k, w, n) in enumerate(zip(keys, where, sizes, strict=True)):
                try:
                    self._check_key(k)
                    self._check_size(k, n)
                    if isinstance(w, StoreError):
                        raise w
                    todo.append(i)
                except StoreError as exc:
                    out[i] = exc
        parts = self._parts(todo, sizes)
        if not parts:
            return out
        # A batch of one part whose puts are all of one size may be granted its next
        # batch (one exchange with the master for that one, docs/store.md "Grants").
        size, count = sizes[parts[0][0]], len(parts[0])
        ask = (
            len(parts) == 1
            and len(parts[0]) <= MAX_BATCH_GRANTS
            and all(sizes[i] == size for i in parts[0])
        )
        if ask:
            parts = [self._put_granted_many(keys, where, size, config, parts[0], out)]
            if not parts[0]:
                return out

        def reserve(part: list[int]) -> tuple[list[tuple[int, tuple[Replica, ...]]], float]:
            asked = time.monotonic()
            res = self._m.batch_put_start([(keys[i], sizes[i]) for i in part], config)
            got = []
            for i, r in zip(part, res, strict=True):
                if isinstance(r, StoreError):
                    out[i] = r
                else:
                    got.append((i, r))
            return got, asked

        def write(
            reserved: tuple[list[tuple[int, tuple[Replica, ...]]], float],
        ) -> tuple[list[int], Pending]:
            got, asked = reserved
            timeout = self._m.write_window(self.options.master_config.put_timeout_s)
            now = time.monotonic()
            if got and write_too_late(keys[got[0][0]], asked, timeout, now) is not None:
                self._revoke([keys[i] for i, _ in got])
                for i, _ in got:
                    out[i] = write_too_late(keys[i], asked, timeout, now)
                got = []
            idx = [i for i, _ in got]
            return idx, self._start_writes(idx, where, [reps for _, reps in got])

        retry: list[tuple[int, set[str]]] = []

        def settle(idx: list[int], pending: Pending) -> list[int]:
            errors = self._dp.finish(pending)
            failed = [n for n, e in enumerate(errors) if e is not None]
            if failed:
                self._revoke([keys[idx[n]] for n in failed])
                for n in failed:
                    out[idx[n]] = UnavailableError(
                        ErrorCode.UNAVAILABLE,
                        f"put {keys[idx[n]]!r}: writing a replica failed ({errors[n]}); revoked",
                    )
                    if pending.failed[n]:
                        retry.append((idx[n], pending.failed[n]))
            return [i for i, e in zip(idx, errors, strict=True) if e is None]

        def complete(done: list[int]) -> None:
            if not done:
                return
            if ask and self._grants.wants_batch(size, count, config):
                got = self._commit_many(keys, done, (), size, count, config)
                for i, e in zip(done, got, strict=True):
                    out[i] = e
                return
            for i, e in zip(done, self._m.batch_put_end([keys[i] for i in done]), strict=True):
                out[i] = e

        cur = write(reserve(parts[0]))
        for step in range(len(parts)):
            nxt = reserve(parts[step + 1]) if step + 1 < len(parts) else None  # overlaps copy
            done = settle(*cur)
            if nxt is not None:
                cur = write(nxt)
            complete(done)  # overlaps copy k+1
        # A write whose target could not be reached is placed again around it, alone
        # (as a single put would be).
        for i, bad in retry:
            region, off = where[i]  # type: ignore[misc]
            try:
                self._put_region(keys[i], region, off, sizes[i], config, False, avoid=bad)
                out[i] = None
            except StoreError as exc:
                out[i] = exc
        return out

    def _start_writes(
        self, idx: list[int], where: Sequence[Where], replicas: Sequence[tuple[Replica, ...]]
    ) -> Pending:
        """Start writing item ``idx[n]`` (at ``where``) into ``replicas[n]``."""
        if all(len(reps) == 1 for reps in replicas):
            flat = self._dp.start_flat(OpCode.WRITE, _flat(idx, where, [r[0] for r in replicas]))
            if flat is not None:
                return flat
        groups: list[list[Op]] = []
        for i, reps in zip(idx, replicas, strict=True):
            region, off = where[i]  # type: ignore[misc]
            groups.append([o for r in reps for o in plan(OpCode.WRITE, region, off, r)])
        return self._dp.start(groups)

    def _commit_many(
        self,
        keys: Sequence[str],
        idx: list[int],
        grant_ids: Sequence[int],
        size: int,
        count: int,
        config: ReplicateConfig | None,
    ) -> list[StoreError | None]:
        """BatchPutCommit of ``idx``'s keys (at ``grant_ids``, or ended after their
        BatchPutStart when empty), keeping the grants it gets for a next batch of
        ``count`` puts of ``size`` bytes; the outcome per key."""
        asked = time.monotonic()  # the grants' transfer window counts from here
        errors, grants = self._m.batch_put_commit(
            [keys[i] for i in idx],
            grant_ids,
            size,
            next_count=count,
            config=config,
            release=self._grants.to_release_batch(),
        )
        if grants:
            ids = tuple(g for g, _ in grants)
            self._grants.keep_batch(
                HeldBatch(ids, size, config, tuple(r for _, r in grants), asked)
            )
        return errors

    def _put_granted_many(
        self,
        keys: Sequence[str],
        where: Sequence[Where],
        size: int,
        config: ReplicateConfig | None,
        idx: list[int],
        out: list[StoreError | None],
    ) -> list[int]:
        """Put ``idx``'s items through the grants held for such a batch, if any: write
        them, then commit their keys in one exchange. Returns the items to put the
        usual way: all when no grants fit, else those whose transfer failed or whose
        grant the master no longer knows (STALE: expired, or another master's)."""
        window = self._m.write_window(self.options.master_config.put_timeout_s)
        g = self._grants.take_batch(size, len(idx), config, time.monotonic(), window)
        if g is None:
            return idx
        n = len(idx)
        ids = g.grant_ids[:n]
        self._grants.drop_batch(g.grant_ids[n:])
        if write_too_late(keys[idx[0]], g.asked, window, time.monotonic()) is not None:
            self._grants.drop_batch(ids)
            return idx
        errors = self._dp.finish(self._start_writes(idx, where, g.replicas[:n]))
        sent = [k for k, e in enumerate(errors) if e is None]
        again = [idx[k] for k, e in enumerate(errors) if e is not None]
        self._grants.drop_batch([ids[k] for k in range(n) if errors[k] is not None])
        if not sent:
            return again
        got = self._commit_many(
            keys, [idx[k] for k in sent], [ids[k] for k in sent], size, n, config
        )
        for k, e in zip(sent, got, strict=True):
            if e is not None and e.code == ErrorCode.STALE:
                again.append(idx[k])
                continue
            if e is not None:
                self._grants.drop_batch([ids[k]])  # refused: the grant stays, unused
            out[idx[k]] = e
        return sorted(again)

    # ------------------------------------------------------------------- reads
    def get_batch(self, keys: Sequence[str]) -> list[bytes | StoreError]:
        """``get`` for many keys: one GetReplicaList, one transfer batch (plus fallbacks)."""
        with self._staging_lock:
            asked = time.monotonic()
            metas = self._metas(keys)
            sizes = [m.size if isinstance(m, GetResult) else 0 for m in metas]
            st = self._stage(max(1, sum(sizes)))
            where: list[Where] = []
            pos = 0
            for n in sizes:
                where.append((st, pos))
                pos += n
            idx = list(range(len(keys)))
            got = self._read_items(keys, where, sizes, [idx], dict(enumerate(metas)), asked)
            return [
                g if isinstance(g, StoreError) else bytes_of(st, w[1], g)  # type: ignore[index]
                for g, w in zip(got, where, strict=True)
            ]

    def batch_get_into(
        self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int]
    ) -> list[int | StoreError]:
        """``get_into`` for many keys; per key the object size or its error."""
        same_len("buffer_ptrs", keys, buffer_ptrs)
        same_len("sizes", keys, sizes)
        where = self._find_all(buffer_ptrs, sizes)
        ok = [i for i, w in enumerate(where) if not isinstance(w, StoreError)]
        return self._read_items(keys, where, sizes, self._parts(ok, sizes), None)

    def _metas(self, keys: Sequence[str]) -> Sequence[GetResult | StoreError]:
        if plain_keys(keys, self.options.master_config.max_key_length):
            return self._m.batch_get_replica_list(list(keys))
        out: list[GetResult | StoreError | None] = []
        ask: list[int] = []
        for i, k in enumerate(keys):
            try:
                self._check_key(k)
                ask.append(i)
                out.append(None)  # asked below
            except StoreError as exc:
                out.append(exc)
        if len(ask) == len(keys):
            return self._m.batch_get_replica_list(list(keys))
        if ask:
            res = self._m.batch_get_replica_list([keys[i] for i in ask])
            for i, r in zip(ask, res, strict=True):
                out[i] = r
        return out  # type: ignore[return-value]  # every None was replaced

    def _read_plain(
        self,
        keys: Sequence[str],
        where: Sequence[Where],
        caps: Sequence[int],
        idx: list[int],
        out: list[int | StoreError],
    ) -> tuple[dict[int, GetResult | StoreError], float, list[int]]:
        """Read ``idx``'s items whose object is one replica of one slice that fits the
        buffer: one call for every replica list, one copy each (into ``out``, as
        :meth:`_read_items` would). Returns the replica lists, when they were asked
        and the items left to :meth:`_read_items`'s general path."""
        at = time.monotonic()
        metas = self._metas([keys[i] for i in idx])
        if type(metas) is ReadRun:
            return self._read_run(keys, where, caps, idx, out, metas, at)
        rest: list[int] = []
        answers: list[tuple[int, int, float]] = []
        items: list[Flat] = []
        for i, m in zip(idx, metas, strict=True):
            if type(m) is GetResult and m.size <= caps[i] and len(m.replicas) == 1:
                (rep,) = m.replicas
                if len(rep) == 1:
                    s = rep[0]
                    region, off = where[i]  # type: ignore[misc]
                    items.append((region, off, s.segment, s.offset, s.length))
                    answers.append((i, m.size, m.lease_ttl_s))
                    continue
            rest.append(i)
        known = dict(zip(idx, metas, strict=True))
        if not self._copy_plain(keys, items, answers, at, out):
            return known, at, idx
        return {i: known[i] for i in rest}, at, rest

    def _read_run(
        self,
        keys: Sequence[str],
        where: Sequence[Where],
        caps: Sequence[int],
        idx: list[int],
        out: list[int | StoreError],
        run: ReadRun,
        at: float,
    ) -> tuple[dict[int, GetResult | StoreError], float, list[int]]:
        """:meth:`_read_plain` for replica lists that form a run (one size, one lease,
        one segment at a fixed step): no :class:`GetResult` made but for the items
        left to the general path (a buffer too small)."""
        size, name, start, step, lease = run.size, run.segment, run.start, run.step, run.lease_ttl_s
        fit = [k for k, i in enumerate(idx) if size <= caps[i]]
        items: list[Flat] = []
        for k in fit:
            region, off = where[idx[k]]  # type: ignore[misc]
            items.append((region, off, name, start + k * step, size))
        if not self._copy_plain(keys, items, [(idx[k], size, lease) for k in fit], at, out):
            return {i: run[k] for k, i in enumerate(idx)}, at, idx
        fits = set(fit)
        rest = [k for k in range(len(idx)) if k not in fits]
        return {idx[k]: run[k] for k in rest}, at, [idx[k] for k in rest]

    def _copy_plain(
        self,
        keys: Sequence[str],
        items: list[Flat],
        answers: list[tuple[int, int, float]],
        at: float,
        out: list[int | StoreError],
    ) -> bool:
        """Copy ``items`` (one slice each) and answer each in ``out``: ``answers[n]`` is
        item n's index, object size and lease (asked at ``at``). A failed copy is its
        one replica failing, an outlasted lease the general path's error. False
        (nothing done): :meth:`DataPath.start_flat` cannot make these copies here."""
        pending = self._dp.start_flat(OpCode.READ, items) if items else None
        if pending is None:
            return False
        errors = self._dp.finish(pending)
        now = time.monotonic()
        for (i, size, lease), err in zip(answers, errors, strict=True):
            if err is not None:
                out[i] = unreadable_error(keys[i], 1, [err])
            elif outlasted(at, lease, now):
                out[i] = lease_outlasted_error(keys[i], now - at, lease, 1)
            else:
                out[i] = size
        return True

    def _read_items(
        self,
        keys: Sequence[str],
        where: Sequence[Where],
        caps: Sequence[int],
        parts: list[list[int]],
        known: dict[int, GetResult | StoreError] | None,
        known_at: float = 0.0,
    ) -> list[int | StoreError]:
        """Read every item of ``parts`` into ``where``: chunks pipelined, then fallbacks.

        ``known``: the replica lists, asked for at ``known_at`` (monotonic). An item
        whose transfer ends after its lease is an UnavailableError (its bytes may have
        been reused)."""
        out: list[int | StoreError] = [w if isinstance(w, StoreError) else 0 for w in where]
        if known is None and len(parts) == 1:
            known, known_at, rest = self._read_plain(keys, where, caps, parts[0], out)
            parts = [rest] if rest else []
        metas: dict[int, GetResult] = {}
        asked: dict[int, float] = {}
        queues: dict[int, list[Replica]] = {}
        reasons: dict[int, list[str]] = {}

        def fetch(part: list[int]) -> list[int]:
            at = known_at if known is not None else time.monotonic()
            res: Sequence[GetResult | StoreError]
            if known is not None:
                res = [known[i] for i in part]
            else:
                res = self._metas([keys[i] for i in part])
            got = []
            for i, m in zip(part, res, strict=True):
                if isinstance(m, GetResult) and m.size > caps[i]:
                    m = InvalidArgumentError(
                        ErrorCode.INVALID_PARAMS,
                        f"get_into {keys[i]!r}: buffer of {caps[i]} bytes is smaller than the "
                        f"object ({m.size} bytes)",
                    )
                if isinstance(m, StoreError):
                    out[i] = m
                    continue
                metas[i], queues[i], reasons[i] = m, self._order(m.replicas), []
                asked[i] = at
                if queues[i]:  # no replica listed: the fallback loop reports it
                    got.append(i)
            return got

        def start(idx: list[int]) -> tuple[list[int], Pending]:
            reps = [queues[i].pop(0) for i in idx]
            flat = self._dp.start_flat(OpCode.READ, _flat(idx, where, reps))
            if flat is not None:
                return idx, flat
            groups = []
            for i, rep in zip(idx, reps, strict=True):
                region, off = where[i]  # type: ignore[misc]
                groups.append(plan(OpCode.READ, region, off, rep))
            return idx, self._dp.start(groups)

        def settle(idx: list[int], pending: Pending) -> None:
            done = self._dp.finish(pending)
            now = time.monotonic()
            for i, err in zip(idx, done, strict=True):
                if err is None:
                    lease = metas[i].lease_ttl_s
                    if outlasted(asked[i], lease, now):
                        out[i] = lease_outlasted_error(keys[i], now - asked[i], lease, 1)
                    else:
                        out[i] = metas[i].size
                    del queues[i]
                else:
                    reasons[i].append(err)

        if parts:
            cur = start(fetch(parts[0]))
            for step in range(len(parts)):
                nxt = fetch(parts[step + 1]) if step + 1 < len(parts) else None  # overlaps copy
                settle(*cur)
                if nxt is not None:
                    cur = start(nxt)
        while queues:  # items whose replica failed: try their next replica
            for i in [i for i, q in queues.items() if not q]:
                del queues[i]
                n = len(metas[i].replicas)
                out[i] = unreadable_error(keys[i], n, reasons[i] or ["no replica listed"])
            if queues:
                settle(*start(list(queues)))
        return out
