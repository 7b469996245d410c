"""Async client of the master's control plane: typed methods, core dataclasses back.

Used by the store ``Client`` (data path through the Transfer Engine) and by the CLI.
Errors carried in replies are raised as the same :class:`StoreError` subclasses the
core raises; transport failures become :class:`UnavailableError`, a refused token
:class:`AuthError`.

Example::

    async with MasterClient("127.0.0.1:50051", client_id="node-0") as mc:
        await mc.mount_segment("node-0/dram", 256 << 20, transport_address="127.0.0.1:17001")
        replicas = await mc.put_start("key", 4096)
        ...  # write the bytes through the Transfer Engine
        await mc.put_end("key")
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from mooncake_core.rpc import store_pb2 as pb
from mooncake_core.rpc import store_pb2_grpc as pb_grpc

from . import convert as cv
from . import events as ev
from .auth import auth_metadata
from .errors import AuthError, ErrorCode, StoreError, UnavailableError
from .ha.follow import Failover, leader_hint
from .ha.readiness import Readiness
from .objects import ObjectInfo, Replica
from .pins import Pin
from .results import GetResult, ListKeysResult, MasterSnapshot, RemoveManyResult, ReplicateConfig
from .segment import SegmentSnapshot

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WatchedEvent:
    """One event from ``WatchEvents``; ``event.at`` is the master's wall-clock time."""

    seq: int
    event: ev.Event


def default_client_id() -> str:
    """``<host>-<pid>-<random>``: unique per process, readable in listings."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


UNRESOLVED_LEADER = "unix:/nonexistent/mooncake-leader-not-resolved-yet"
"""Channel target of an HA client before its first leader lookup: fails at once, locally."""


class MasterClient:
    """Typed async wrapper over the MasterService stubs.

    Args:
        address: ``host:port`` of the master.
        client_id: identity used for heartbeats, segment ownership and local_first.
        secret: cluster secret; sends the derived bearer token when set.
        timeout_s: deadline of each unary call.
        resolver: finds the current leader's address (HA); ``None``: ``address`` only.
        failover_timeout_s: how long a call follows leader changes before failing.
        owns_resolver: close ``resolver`` (it has a ``close`` coroutine) with the client.
    """

    def __init__(
        self,
        address: str,
        *,
        client_id: str | None = None,
        secret: bytes | None = None,
        timeout_s: float = 10.0,
        resolver: Callable[[], Awaitable[str]] | None = None,
        failover_timeout_s: float = 15.0,
        owns_resolver: bool = False,
    ) -> None:
        self.address = address
        self.client_id = client_id or default_client_id()
        self._metadata = auth_metadata(secret)
        self._timeout = timeout_s
        self._resolver = resolver
        self._failover_timeout = failover_timeout_s
        self._channel = grpc.aio.insecure_channel(address, options=cv.GRPC_OPTIONS)
        self._stub = pb_grpc.MasterServiceStub(self._channel)
        self._owned_resolver: Any = resolver if owns_resolver else None
        self.leader_changes = 0
        """How many times this client switched to another master."""
        self.watch_start_seq: int | None = None
        """Sequence number after which the last ``watch_events`` stream started."""

    async def __aenter__(self) -> MasterClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @classmethod
    def for_target(cls, master: str, **kwargs: Any) -> MasterClient:
        """A client of ``master``: ``host:port``, or ``etcd://host:port[/cluster]`` for the
        HA leader (looked up in etcd on the first call and followed on every change).

        No I/O happens here (safe from synchronous code on an event loop); under HA the
        first call finds the leader through the ``UNAVAILABLE`` path of every call.

        Args:
            master: the master target, e.g. ``ClusterConfig.master_target``.
            kwargs: as the constructor (client_id, secret, timeout_s, failover_timeout_s).
        """
        from .client_master import split_master_url

        endpoint, cluster = split_master_url(master)
        if endpoint is None:
            return cls(master, **kwargs)
        from .ha.discovery import EtcdLeaderResolver

        resolver = EtcdLeaderResolver(endpoint, cluster)
        return cls(UNRESOLVED_LEADER, resolver=resolver, owns_resolver=True, **kwargs)

    @classmethod
    async def from_etcd(
        cls,
        endpoint: str,
        *,
        cluster: str = "default",
        wait_s: float = 15.0,
        **kwargs: object,
    ) -> MasterClient:
        """A client that finds the HA leader through etcd and follows it on change.

        Args:
            endpoint: etcd URL (``etcd://host:port`` or ``http://host:port``).
            cluster: the masters' cluster name.
            wait_s: how long to wait for a leader to be elected.
            kwargs: as the constructor (client_id, secret, timeout_s, failover_timeout_s).

        Raises:
            UnavailableError: no leader within ``wait_s``.
        """
        from .ha.discovery import EtcdLeaderResolver

        resolver = EtcdLeaderResolver(endpoint, cluster)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                address = await resolver()
                break
            except UnavailableError:
                if time.monotonic() > deadline:
                    await resolver.close()
                    raise
                await asyncio.sleep(0.1)
        return cls(address, resolver=resolver, owns_resolver=True, **kwargs)  # type: ignore[arg-type]

    async def close(self) -> None:
        """Close the channel (and the etcd connection of :meth:`from_etcd`)."""
        await self._channel.close(None)
        owned = getattr(self, "_owned_resolver", None)
        if owned is not None:
            await owned.close()

    async def _call(self, make: Callable[[], Awaitable[T]]) -> T:
        """Run one unary call; on UNAVAILABLE (master down, or NOT_LEADER) follow the
        leader (the refusal's hint, else the resolver) with backoff for up to
        ``failover_timeout_s``. A client without a resolver follows hints only.

        A retried call may have been applied by the old leader before it died (its
        reply lost): PutEnd can then answer INVALID_STATE (already complete) and
        PutStart OBJECT_ALREADY_EXISTS; callers treat those as "done before".
        """
        failover = Failover(self._failover_timeout, can_resolve=self._resolver is not None)
        while True:
            channel = self._channel
            try:
                return await make()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if channel is self._channel or (task is not None and task.cancelling()):
                    raise
                # Another task moved this client to a new leader and closed the channel
                # under this call: not our cancellation, send it again over the new one.
                continue
            except grpc.aio.AioRpcError as exc:
                err = self._transport_error(exc)
                if exc.code() != grpc.StatusCode.UNAVAILABLE:
                    raise err from None
                hint = leader_hint(exc.trailing_metadata())
                wait = failover.after_unavailable(hint, time.monotonic())
                if wait is None:
                    raise err from None
            await asyncio.sleep(wait)
            address = hint
            if address is None and self._resolver is not None:
                try:
                    address = await self._resolver()
                except StoreError:
                    continue
            if address and address != self.address:
                await self._switch(address)

    async def _switch(self, address: str) -> None:
        log.info("master client %s: following the leader to %s", self.client_id, address)
        old = self._channel
        self.address = address
        self._channel = grpc.aio.insecure_channel(address, options=cv.GRPC_OPTIONS)
        self._stub = pb_grpc.MasterServiceStub(self._channel)
        self.leader_changes += 1
        await old.close(None)

    def _transport_error(self, exc: grpc.aio.AioRpcError) -> StoreError:
        code = exc.code()
        text = f"master at {self.address}: {code.name}: {exc.details()}"
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return AuthError(ErrorCode.UNAUTHENTICATED, text)
        return UnavailableError(ErrorCode.UNAVAILABLE, text)

    @property
    def _kw(self) -> dict[str, object]:
        return {"metadata": self._metadata, "timeout": self._timeout}

    # ------------------------------------------------------- segments, clients
    async def mount_segment(
        self,
        name: str,
        capacity: int,
        *,
        transport_address: str = "",
        location: str = "cpu:0",
        ssd_capacity: int = 0,
    ) -> SegmentSnapshot:
        """Lend a segment this client hosts. Raises ConflictError if the name is taken.

        Args:
            name: cluster-unique segment name.
            capacity: DRAM bytes lent.
            transport_address: where the Transfer Engine reaches the segment.
            location: memory location (topology matrix key).
            ssd_capacity: bytes of SSD tier this client keeps behind the segment (0: no
                SSD tier). With it the master sends this client OffloadRequested and
                StageRequested events for the segment.
        """
        req = pb.MountSegmentRequest(
            client_id=self.client_id,
            name=name,
            capacity=capacity,
            transport_address=transport_address,
            location=location,
            ssd_capacity=ssd_capacity,
        )
        r = await self._call(lambda: self._stub.MountSegment(req, **self._kw))
        cv.raise_for(r.error)
        return cv.segment_from_pb(r.segment)

    async def unmount_segment(self, name: str) -> None:
        """Start unmounting one of this client's segments (readable during the grace)."""
        req = pb.SegmentRequest(client_id=self.client_id, name=name)
        r = await self._call(lambda: self._stub.UnmountSegment(req, **self._kw))
        cv.raise_for(r.error)

    async def drain_segment(self, name: str) -> None:
        """Stop placing on a segment (operator action)."""
        r = await self._call(
            lambda: self._stub.DrainSegment(pb.SegmentRequest(name=name), **self._kw)
        )
        cv.raise_for(r.error)

    async def undrain_segment(self, name: str) -> None:
        """Put a DRAINING/DRAINED segment back into placement (operator action)."""
        r = await self._call(
            lambda: self._stub.UndrainSegment(pb.SegmentRequest(name=name), **self._kw)
        )
        cv.raise_for(r.error)

    async def list_segment_objects(
        self, segment: str, *, start_after: str = "", limit: int = 1000
    ) -> ListKeysResult:
        """One page, in key order, of the objects with a readable replica on ``segment``."""
        req = pb.ListSegmentObjectsRequest(segment=segment, start_after=start_after, limit=limit)
        r = await self._call(lambda: self._stub.ListSegmentObjects(req, **self._kw))
        return cv.list_from_pb(r)

    async def add_replica_start(
        self,
        key: str,
        *,
        exclude_segments: Sequence[str] = (),
        target_segment: str | None = None,
    ) -> Replica:
        """Allocate one more (invisible until :meth:`add_replica_end`) replica of ``key``."""
        req = pb.AddReplicaStartRequest(
            key=key, exclude_segments=list(exclude_segments), target_segment=target_segment or ""
        )
        r = await self._call(lambda: self._stub.AddReplicaStart(req, **self._kw))
        cv.raise_for(r.error)
        return cv.replicas_from_pb([r.replica])[0]

    async def add_replica_end(self, key: str) -> None:
        """Make the replica being added to ``key`` readable."""
        req = pb.KeyRequest(client_id=self.client_id, key=key)
        r = await self._call(lambda: self._stub.AddReplicaEnd(req, **self._kw))
        cv.raise_for(r.error)

    async def add_replica_revoke(self, key: str) -> None:
        """Abandon the replica being added to ``key``."""
        req = pb.KeyRequest(client_id=self.client_id, key=key)
        r = await self._call(lambda: self._stub.AddReplicaRevoke(req, **self._kw))
        cv.raise_for(r.error)

    async def drop_replica(self, key: str, segment: str) -> bool:
        """Drop ``key``'s replica on ``segment``; False: freed when the read lease ends."""
        req = pb.DropReplicaRequest(key=key, segment=segment)
        r = await self._call(lambda: self._stub.DropReplica(req, **self._kw))
        cv.raise_for(r.error)
        return r.freed

    # ---------------------------------------------------------------- SSD tier
    async def tier_offload_done(
        self, key: str, segment: str, token: int, ok: bool, reason: str = ""
    ) -> None:
        """Report the outcome of an ``OffloadRequested`` for one of this client's segments.

        Args:
            key: the object.
            segment: the segment named in the request (this client must own it).
            token: the request's token (the object version that was copied).
            ok: whether the SSD file was written.
            reason: why not, when ``ok`` is False (for the master's log and counters).

        Raises:
            ConflictError: STALE, the object was rewritten or lost its replica on
                ``segment`` meanwhile (delete the file); INVALID_STATE, the segment is
                not this client's or has no SSD tier.
            NotFoundError: no such object (delete the file) or segment.
        """
        req = pb.TierDoneRequest(
            client_id=self.client_id, key=key, segment=segment, token=token, ok=ok, reason=reason
        )
        r = await self._call(lambda: self._stub.TierOffloadDone(req, **self._kw))
        cv.raise_for(r.error)

    async def tier_stage_done(
        self, key: str, segment: str, request_id: int, ok: bool, reason: str = ""
    ) -> None:
        """Report the outcome of a ``StageRequested`` (bytes copied into the replica, or
        ``ok=False`` with ``reason`` ``miss`` / ``corrupt``).

        Raises:
            ConflictError: STALE, no such stage is pending any more (it timed out, or
                the object went away): the range is no longer the node's to fill;
                INVALID_STATE, the segment is not this client's.
            NotFoundError: no such object or segment.
        """
        req = pb.TierDoneRequest(
            client_id=self.client_id,
            key=key,
            segment=segment,
            token=request_id,
            ok=ok,
            reason=reason,
        )
        r = await self._call(lambda: self._stub.TierStageDone(req, **self._kw))
        cv.raise_for(r.error)

    async def tier_dropped(self, segment: str, keys: Sequence[str]) -> int:
        """Tell the master this client's SSD tier no longer holds ``keys`` for ``segment``
        (evicted for room, or found corrupt). Keys the master does not know, or knows
        without an SSD copy there, are ignored.

        Returns:
            Objects removed because that was their last copy.

        Raises:
            NotFoundError: no such segment.
            ConflictError: INVALID_STATE, the segment is not this client's.
        """
        req = pb.TierDroppedRequest(client_id=self.client_id, segment=segment, keys=list(keys))
        r = await self._call(lambda: self._stub.TierDropped(req, **self._kw))
        cv.raise_for(r.error)
        return r.removed

    async def heartbeat(self, timeout_s: float | None = None) -> bool:
        """Tell the master this client is alive; False: it forgot us, remount segments.

        Args:
            timeout_s: this call's deadline (default: the client's ``timeout_s``).
        """
        req = pb.HeartbeatRequest(client_id=self.client_id)
        kw = {"metadata": self._metadata, "timeout": timeout_s or self._timeout}
        r = await self._call(lambda: self._stub.Heartbeat(req, **kw))
        cv.raise_for(r.error)
        return r.known

    async def _follow_leader(self) -> bool:
        """Ask the resolver for the leader now; True if this client moved to it."""
        if self._resolver is None:
            return False
        try:
            address = await self._resolver()
        except StoreError:
            return False
        if address == self.address:
            return False
        await self._switch(address)
        return True

    async def keep_alive(
        self,
        interval_s: float = 1.0,
        on_forgotten: Callable[[], Awaitable[bool | None]] | None = None,
    ) -> None:
        """Heartbeat every ``interval_s`` until cancelled (run it as a task).

        Args:
            interval_s: ``MasterConfig.heartbeat_interval_s``.
            on_forgotten: awaited when the master answers ``known=False`` (it expired
                this client or restarted): remount the segments there. When it returns
                False (a mount was refused, e.g. the old segment is still in its
                unmount grace), it is awaited again after each following beat until it
                returns True or None: the first beat re-registers the client, so the
                master would never say ``known=False`` again. It is also awaited after
                the first good beat that follows a failed one: the lost reply may have
                been the ``known=False`` (the master registered the client when the
                beat arrived, after the client's deadline), so remounting must not
                wait for a signal that already went by. Mounting is idempotent.

        Each beat has a deadline of ``2 x interval_s`` (at least 1 s): a paused or
        partitioned master cannot hold the loop for a whole RPC timeout. After a failed
        beat an HA client asks etcd for the leader at once and, if it changed, beats
        there without waiting (a failover costs the client about one beat, not the
        call timeout). Transport errors are logged and retried at the next beat, so a
        master restart does not end the loop.
        """
        deadline = max(2 * interval_s, 1.0)
        pending = False  # a remount is owed: the last on_forgotten returned False
        while True:
            try:
                known = await self.heartbeat(deadline)
                if (not known or pending) and on_forgotten is not None:
                    pending = await on_forgotten() is False
            except StoreError as exc:
                log.warning("heartbeat of %s failed: %s", self.client_id, exc)
                pending = True  # the lost reply may have said known=False
                if await self._follow_leader():
                    continue
            await asyncio.sleep(interval_s)

    # ------------------------------------------------------------------ writes
    async def put_start(
        self, key: str, size: int, config: ReplicateConfig | None = None
    ) -> tuple[Replica, ...]:
        """Allocate replicas for a new object; write them, then :meth:`put_end`."""
        req = pb.PutStartRequest(
            client_id=self.client_id, key=key, size=size, config=cv.config_to_pb(config)
        )
        r = await self._call(lambda: self._stub.PutStart(req, **self._kw))
        cv.raise_for(r.error)
        return cv.replicas_from_pb(r.replicas)

    async def upsert(
        self, key: str, size: int, config: ReplicateConfig | None = None
    ) -> tuple[Replica, ...]:
        """Like :meth:`put_start`, replacing an existing complete object."""
        req = pb.PutStartRequest(
            client_id=self.client_id, key=key, size=size, config=cv.config_to_pb(config)
        )
        r = await self._call(lambda: self._stub.Upsert(req, **self._kw))
        cv.raise_for(r.error)
        return cv.replicas_from_pb(r.replicas)

    async def put_end(self, key: str) -> None:
        """Make a written object readable."""
        req = pb.KeyRequest(client_id=self.client_id, key=key)
        cv.raise_for((await self._call(lambda: self._stub.PutEnd(req, **self._kw))).error)

    async def put_revoke(self, key: str) -> None:
        """Abandon a write and free its space."""
        req = pb.KeyRequest(client_id=self.client_id, key=key)
        cv.raise_for((await self._call(lambda: self._stub.PutRevoke(req, **self._kw))).error)

    async def batch_put_start(
        self, items: Sequence[tuple[str, int]], config: ReplicateConfig | None = None
    ) -> list[tuple[Replica, ...] | StoreError]:
        """:meth:`put_start` for each ``(key, size)``; errors are returned per item."""
        return await self._batch_put(items, config, upsert=False)

    async def batch_upsert(
        self, items: Sequence[tuple[str, int]], config: ReplicateConfig | None = None
    ) -> list[tuple[Replica, ...] | StoreError]:
        """:meth:`upsert` for each ``(key, size)``."""
        return await self._batch_put(items, config, upsert=True)

    async def _batch_put(
        self, items: Sequence[tuple[str, int]], config: ReplicateConfig | None, *, upsert: bool
    ) -> list[tuple[Replica, ...] | StoreError]:
        req = pb.BatchPutStartRequest(
            client_id=self.client_id,
            items=[pb.BatchPutStartRequest.Item(key=k, size=s) for k, s in items],
            config=cv.config_to_pb(config),
        )
        method = self._stub.BatchUpsert if upsert else self._stub.BatchPutStart
        r = await self._call(lambda: method(req, **self._kw))
        out: list[tuple[Replica, ...] | StoreError] = []
        for x in r.results:
            e = cv.error_from_pb(x.error)
            out.append(e if e is not None else cv.replicas_from_pb(x.replicas))
        return out

    async def batch_put_end(self, keys: Sequence[str]) -> list[StoreError | None]:
        """:meth:`put_end` for each key; ``None`` where it succeeded."""
        req = pb.BatchKeysRequest(client_id=self.client_id, keys=list(keys))
        r = await self._call(lambda: self._stub.BatchPutEnd(req, **self._kw))
        return [cv.error_from_pb(e) for e in r.errors]

    async def batch_put_revoke(self, keys: Sequence[str]) -> list[StoreError | None]:
        """:meth:`put_revoke` for each key."""
        req = pb.BatchKeysRequest(client_id=self.client_id, keys=list(keys))
        r = await self._call(lambda: self._stub.BatchPutRevoke(req, **self._kw))
        return [cv.error_from_pb(e) for e in r.errors]

    # ------------------------------------------------------------------- reads
    async def get_replica_list(self, key: str) -> GetResult:
        """Where to read ``key``; grants a read lease."""
        r = await self._call(
            lambda: self._stub.GetReplicaList(pb.GetReplicaListRequest(key=key), **self._kw)
        )
        return cv.get_result_from_pb(key, r)

    async def batch_get_replica_list(self, keys: Sequence[str]) -> list[GetResult | StoreError]:
        """:meth:`get_replica_list` for each key; errors per item."""
        req = pb.BatchKeysRequest(client_id=self.client_id, keys=list(keys))
        r = await self._call(lambda: self._stub.BatchGetReplicaList(req, **self._kw))
        out: list[GetResult | StoreError] = []
        for k, x in zip(keys, r.results, strict=True):
            e = cv.error_from_pb(x.error)
            out.append(e if e is not None else cv.get_result_from_pb(k, x))
        return out

    async def exist(self, key: str) -> bool:
        """Whether ``key`` is readable (no lease, no recency update)."""
        r = await self._call(lambda: self._stub.Exist(pb.ExistRequest(key=key), **self._kw))
        cv.raise_for(r.error)
        return r.exists

    async def batch_exist(self, keys: Sequence[str]) -> list[bool]:
        """:meth:`exist` for each key."""
        req = pb.BatchKeysRequest(client_id=self.client_id, keys=list(keys))
        return list((await self._call(lambda: self._stub.BatchExist(req, **self._kw))).exists)

    async def stat(self, key: str) -> ObjectInfo:
        """Describe one object (no lease, no recency update)."""
        r = await self._call(lambda: self._stub.Stat(pb.StatRequest(key=key), **self._kw))
        return cv.stat_from_pb(r)

    async def list_keys(
        self, prefix: str = "", start_after: str = "", limit: int = 1000
    ) -> ListKeysResult:
        """One page of keys in key order."""
        req = pb.ListKeysRequest(prefix=prefix, start_after=start_after, limit=limit)
        return cv.list_from_pb(await self._call(lambda: self._stub.ListKeys(req, **self._kw)))

    async def iter_keys(self, prefix: str = "", page: int = 1000) -> AsyncIterator[str]:
        """Every key under ``prefix``, fetched page by page."""
        after = ""
        while True:
            res = await self.list_keys(prefix, after, page)
            for e in res.entries:
                yield e.key
            if res.next_start_after is None:
                return
            after = res.next_start_after

    # ---------------------------------------------------------------- removals
    async def remove(self, key: str, *, force: bool = False) -> None:
        """Remove one object (refused while leased unless ``force``)."""
        req = pb.RemoveRequest(key=key, force=force)
        cv.raise_for((await self._call(lambda: self._stub.Remove(req, **self._kw))).error)

    async def batch_remove(
        self, keys: Sequence[str], *, force: bool = False
    ) -> list[StoreError | None]:
        """:meth:`remove` for each key."""
        req = pb.BatchKeysRequest(client_id=self.client_id, keys=list(keys), force=force)
        r = await self._call(lambda: self._stub.BatchRemove(req, **self._kw))
        return [cv.error_from_pb(e) for e in r.errors]

    async def remove_by_prefix(self, prefix: str, *, force: bool = False) -> RemoveManyResult:
        """Remove every removable object under ``prefix``."""
        req = pb.RemoveByPrefixRequest(prefix=prefix, force=force)
        return _many(await self._call(lambda: self._stub.RemoveByPrefix(req, **self._kw)))

    async def remove_by_regex(self, pattern: str, *, force: bool = False) -> RemoveManyResult:
        """Remove every removable object whose key matches ``pattern`` (Python ``re.search``)."""
        req = pb.RemoveByRegexRequest(pattern=pattern, force=force)
        return _many(await self._call(lambda: self._stub.RemoveByRegex(req, **self._kw)))

    async def remove_all(self, *, force: bool = False) -> RemoveManyResult:
        """Remove every removable object."""
        req = pb.RemoveAllRequest(force=force)
        return _many(await self._call(lambda: self._stub.RemoveAll(req, **self._kw)))

    # -------------------------------------------------------------------- pins
    async def pin(
        self, target: str, *, prefix: bool = False, hard: bool = False, ttl_s: float | None = None
    ) -> Pin:
        """Pin a key or a prefix; ``expires_at`` is on this process's monotonic clock."""
        req = pb.PinRequest(target=target, prefix=prefix, hard=hard)
        if ttl_s is not None:
            req.ttl_s = ttl_s
        r = await self._call(lambda: self._stub.Pin(req, **self._kw))
        cv.raise_for(r.error)
        return cv.pin_from_pb(r.pin, time.monotonic())

    async def unpin(self, target: str, *, prefix: bool = False) -> Pin:
        """Clear the pin on exactly this key or prefix; returns it."""
        req = pb.UnpinRequest(target=target, prefix=prefix)
        r = await self._call(lambda: self._stub.Unpin(req, **self._kw))
        cv.raise_for(r.error)
        return cv.pin_from_pb(r.pin, time.monotonic())

    async def list_pins(self) -> list[Pin]:
        """Live pins (keys, then prefixes, sorted)."""
        r = await self._call(lambda: self._stub.ListPins(pb.ListPinsRequest(), **self._kw))
        now = time.monotonic()
        return [cv.pin_from_pb(p, now) for p in r.pins]

    # -------------------------------------------------------- read-model, events
    async def get_snapshot(self) -> MasterSnapshot:
        """The master's read-model."""
        r = await self._call(lambda: self._stub.GetSnapshot(pb.SnapshotRequest(), **self._kw))
        return cv.snapshot_from_pb(r)

    async def get_readiness(self) -> Readiness:
        """This master's role and catch-up state (answered by followers too; not
        redirected to the leader)."""
        try:
            r = await self._stub.GetReadiness(pb.ReadinessRequest(), **self._kw)
        except grpc.aio.AioRpcError as exc:
            raise self._transport_error(exc) from None
        return cv.readiness_from_pb(r)

    async def watch_events(
        self, started: asyncio.Event | None = None
    ) -> AsyncGenerator[WatchedEvent, None]:
        """Every event from now on, until the master stops (then the iterator ends).

        Args:
            started: set once the master has registered the subscription; events
                from then on are delivered (and ``self.watch_start_seq`` says where
                the stream starts: resync with ListKeys, then apply what follows).

        Raises:
            UnavailableError: the stream broke or this subscriber fell behind.
            AuthError: the token was refused.
        """
        if self._resolver is not None:
            # Subscribe at the current leader (a resubscription after a failover must
            # not go back to the dead one). A new leader's seq starts again at 0:
            # resynchronise with ListKeys after WatchStarted, as after any resubscribe.
            await self._follow_leader()
        call = self._stub.WatchEvents(pb.WatchEventsRequest(), metadata=self._metadata)
        try:
            async for msg in call:
                if msg.WhichOneof("kind") == "started":
                    self.watch_start_seq = msg.started.last_seq
                    if started is not None:
                        started.set()
                    continue
                yield WatchedEvent(msg.seq, cv.event_from_pb(msg))
        except grpc.aio.AioRpcError as exc:
            raise self._transport_error(exc) from None
        finally:
            call.cancel()


def _many(r: pb.RemoveManyResponse) -> RemoveManyResult:
    cv.raise_for(r.error)
    return RemoveManyResult(r.removed, r.skipped)
