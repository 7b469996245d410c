"""Replication through etcd: the leader's journal records are etcd keys; followers tail them.

Key layout under ``/mooncake/<cluster>/master/``::

    leader                 {"id", "address", "metrics"}   (attached to the leader's lease)
    log/<first seq:020d>   JSON list of records first..last (one key per group commit)
    snap/meta              {"seq": S, "chunks": n}          snapshot covering seq <= S
    snap/<S:020d>/<i:06d>  JSON list of records (chunk i of that snapshot)

Every leader write is a transaction guarded by the leader key's create revision, so a
master that lost its lease (partitioned, paused) can never append: its transaction fails
and it steps down. A follower polls ``log/`` from the key after the last seq it applied;
when that key is gone (compacted away) it reloads the snapshot first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .etcd import EtcdClient, prefix_end
from .image import MetadataImage, Record

log = logging.getLogger(__name__)

CHUNK_BYTES = 512 << 10  # etcd refuses requests over 1.5 MiB by default


@dataclass(frozen=True, slots=True)
class HaKeys:
    """etcd keys of one master cluster."""

    cluster: str = "default"

    @property
    def base(self) -> str:
        """Common prefix."""
        return f"/mooncake/{self.cluster}/master/"

    @property
    def leader(self) -> bytes:
        """The leader key (value: JSON with id and addresses)."""
        return (self.base + "leader").encode()

    @property
    def log_prefix(self) -> bytes:
        """Prefix of the log keys."""
        return (self.base + "log/").encode()

    def log_key(self, seq: int) -> bytes:
        """Key of the log batch whose first record has ``seq``."""
        return self.log_prefix + f"{seq:020d}".encode()

    @property
    def snap_meta(self) -> bytes:
        """Key of the current snapshot's description."""
        return (self.base + "snap/meta").encode()

    def snap_chunk(self, seq: int, i: int) -> bytes:
        """Key of chunk ``i`` of the snapshot at ``seq``."""
        return (self.base + f"snap/{seq:020d}/{i:06d}").encode()


class FencedOut(RuntimeError):
    """A leader write was refused: another master holds the leader key now."""


class EtcdLog:
    """The leader's record sink: group-commits records into etcd, fenced by leadership.

    Args:
        etcd: client.
        keys: key layout.
        fence: create revision of our leader key.
        last_seq: seq of the last record already in etcd.
        on_fenced: called once if a write is refused (the master must step down).
    """

    def __init__(
        self,
        etcd: EtcdClient,
        keys: HaKeys,
        fence: int,
        last_seq: int,
        on_fenced: Callable[[], None],
    ) -> None:
        self._etcd = etcd
        self._keys = keys
        self._fence = fence
        self._on_fenced = on_fenced
        self.last_seq = last_seq
        self.durable_seq = last_seq
        self.since_snapshot = 0
        self.snapshot_every = 50_000
        self._buf: list[Record] = []
        self._cond = asyncio.Condition()
        self._wake = asyncio.Event()
        self._failed: Exception | None = None
        self._task = asyncio.create_task(self._flush_loop(), name="etcd-log-flush")
        self._compacting: asyncio.Task[None] | None = None

    def append(self, records: list[Record]) -> int:
        """Number the records and queue them for the next etcd write. Returns the last seq."""
        for rec in records:
            self.last_seq += 1
            rec["s"] = self.last_seq
        if records:
            self._buf.extend(records)
            self.since_snapshot += len(records)
            self._wake.set()
        return self.last_seq

    async def wait_durable(self, seq: int) -> None:
        """Return once ``seq`` is stored in etcd.

        Raises:
            FencedOut: leadership was lost before it could be stored.
        """
        async with self._cond:
            await self._cond.wait_for(lambda: self.durable_seq >= seq or self._failed is not None)
        if self.durable_seq < seq:
            raise FencedOut(f"record {seq} not replicated: {self._failed}")

    async def _flush_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._buf:
                value, n = _batch(self._buf)
                batch, self._buf = self._buf[:n], self._buf[n:]
                try:
                    ok = await self._retrying_put(self._keys.log_key(batch[0]["s"]), value)
                except Exception as exc:  # etcd unreachable for too long
                    ok, reason = False, exc
                else:
                    reason = FencedOut("the leader key changed hands")
                if not ok:
                    self._failed = reason
                    async with self._cond:
                        self._cond.notify_all()
                    self._on_fenced()
                    return
                self.durable_seq = batch[-1]["s"]
                async with self._cond:
                    self._cond.notify_all()

    async def _retrying_put(self, key: bytes, value: bytes) -> bool:
        for attempt in range(20):
            try:
                return await self._etcd.put_if_created_at(
                    self._keys.leader, self._fence, [(key, value)]
                )
            except Exception:
                if attempt == 19:
                    raise
                await asyncio.sleep(0.1)
        return False

    def maybe_compact(self, image: MetadataImage) -> None:
        """Start a snapshot into etcd when enough records accumulated (call under the
        service lock, so the image and ``last_seq`` agree)."""
        if self.since_snapshot < self.snapshot_every or self._compacting is not None:
            return
        self.since_snapshot = 0
        seq = self.last_seq
        records = list(image.records())
        self._compacting = asyncio.create_task(self._compact(seq, records))

    async def _compact(self, seq: int, records: list[Record]) -> None:
        try:
            await self.wait_durable(seq)
            chunks = _chunks(records)
            for i, chunk in enumerate(chunks):
                await self._fenced_put(self._keys.snap_chunk(seq, i), chunk)
            meta = json.dumps({"seq": seq, "chunks": len(chunks)}).encode()
            await self._fenced_put(self._keys.snap_meta, meta)
            # Keep the last batch that starts at or before seq: it may run past seq.
            old = await self._etcd.range(self._keys.log_prefix, self._keys.log_key(seq + 1))
            if len(old.kvs) > 1:
                await self._etcd.delete_range(self._keys.log_prefix, old.kvs[-1].key)
            snap_dir = (self._keys.base + "snap/").encode()
            await self._etcd.delete_range(snap_dir + b"0", self._keys.snap_chunk(seq, 0))
            log.info("etcd log compacted at seq %d (%d chunks)", seq, len(chunks))
        except Exception:
            log.exception("etcd snapshot at seq %d failed; the log stays uncompacted", seq)
        finally:
            self._compacting = None

    async def _fenced_put(self, key: bytes, value: bytes) -> None:
        if not await self._etcd.put_if_created_at(self._keys.leader, self._fence, [(key, value)]):
            raise FencedOut("the leader key changed hands during compaction")

    async def close(self) -> None:
        """Flush what is queued (best effort) and stop."""
        if self._buf and self._failed is None:
            with contextlib.suppress(FencedOut):
                await self.wait_durable(self.last_seq)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        if self._compacting is not None:
            self._compacting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._compacting


def _batch(records: list[Record]) -> tuple[bytes, int]:
    """JSON of the longest prefix of ``records`` under CHUNK_BYTES (at least one record),
    and its length: etcd refuses requests over 1.5 MiB."""
    parts: list[str] = []
    size = 0
    for rec in records:
        text = json.dumps(rec, separators=(",", ":"))
        if parts and size + len(text) > CHUNK_BYTES:
            break
        parts.append(text)
        size += len(text) + 1
    return ("[" + ",".join(parts) + "]").encode(), len(parts)


def _chunks(records: list[Record]) -> list[bytes]:
    out: list[bytes] = []
    cur: list[str] = []
    size = 0
    for rec in records:
        text = json.dumps(rec, separators=(",", ":"))
        if cur and size + len(text) > CHUNK_BYTES:
            out.append(("[" + ",".join(cur) + "]").encode())
            cur, size = [], 0
        cur.append(text)
        size += len(text) + 1
    out.append(("[" + ",".join(cur) + "]").encode())
    return out


class LogFollower:
    """Keeps a :class:`MetadataImage` up to date from the etcd log.

    Args:
        etcd: client.
        keys: key layout.
        image: the image to update (starts empty).
    """

    def __init__(self, etcd: EtcdClient, keys: HaKeys, image: MetadataImage | None = None):
        self._etcd = etcd
        self._keys = keys
        self.image = image or MetadataImage()
        self._next_key = keys.log_prefix
        self._started = False

    async def sync(self) -> int:
        """Apply every record etcd holds beyond the image's seq.

        Returns:
            Records applied.
        """
        applied = 0
        if not self._started:
            self._started = True
            if await self._etcd.get(self._keys.snap_meta) is not None:
                await self._load_snapshot()
        end = prefix_end(self._keys.log_prefix)
        while True:
            r = await self._etcd.range(self._next_key, end, limit=64)
            if not r.kvs:
                return applied
            for kv in r.kvs:
                batch: list[Any] = json.loads(kv.value)
                self._next_key = kv.key + b"\x00"
                if not batch or batch[-1]["s"] <= self.image.applied_seq:
                    continue
                if batch[0]["s"] > self.image.applied_seq + 1:
                    # The records we miss were compacted into a snapshot: start over from it.
                    await self._load_snapshot()
                    self._next_key = self._keys.log_prefix
                    applied += 1
                    break
                for rec in batch:
                    if rec["s"] > self.image.applied_seq:
                        self.image.apply(rec)
                        applied += 1
            else:
                if not r.more:
                    return applied

    async def _load_snapshot(self) -> None:
        kv = await self._etcd.get(self._keys.snap_meta)
        if kv is None:
            raise RuntimeError("the etcd log has a gap and no snapshot covers it")
        meta = json.loads(kv.value)
        image = MetadataImage()
        for i in range(int(meta["chunks"])):
            chunk = await self._etcd.get(self._keys.snap_chunk(int(meta["seq"]), i))
            if chunk is None:
                raise RuntimeError(f"snapshot {meta['seq']} lost chunk {i} (compacted again?)")
            image.apply_all(json.loads(chunk.value))
        image.applied_seq = int(meta["seq"])
        self.image = image
