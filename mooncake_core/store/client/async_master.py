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
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from mooncake_core.rpc import store_pb2 as pb
from mooncake_core.rpc import store_pb2_grpc as pb_grpc

from .. import convert as cv
from .. import events as ev
from .. import master_rpc as rpc
from ..auth import auth_metadata
from ..errors import AuthError, ErrorCode, StoreError, UnavailableError
from ..ha.follow import Failover, leader_hint
from ..ha.readiness import Readiness
from ..master_rpc import AsyncCall, Unary

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
        from ..ha.discovery import split_master_url

        endpoint, cluster = split_master_url(master)
        if endpoint is None:
            return cls(master, **kwargs)
        from ..ha.discovery import EtcdLeaderResolver

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
        from ..ha.discovery import EtcdLeaderResolver

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

    async def invoke(self, call: Unary[Any, T], request: Message) -> T:
        """Send ``call``'s ``request``, following the leader, and read the reply."""
        reply, resent = await self._call_counted(
            lambda: getattr(self._stub, call.method)(request, **self._kw)
        )
        return call.reply(reply, request, resent)

    async def _call(self, make: Callable[[], Awaitable[T]]) -> T:
        """:meth:`_call_counted` without the count."""
        return (await self._call_counted(make))[0]

    async def _call_counted(self, make: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """Run one unary call; on UNAVAILABLE (master down, or NOT_LEADER) follow the
        leader (the refusal's hint, else the resolver) with backoff for up to
        ``failover_timeout_s``. A client without a resolver follows hints only.

        Returns the reply and whether the request was sent more than once: a resent call
        may have been applied by the old leader before it died (its reply lost), which
        the surface's replies take into account (:mod:`.master_rpc`).
        """
        failover = Failover(self._failover_timeout, can_resolve=self._resolver is not None)
        resent = False
        while True:
            channel = self._channel
            try:
                return await make(), resent
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if channel is self._channel or (task is not None and task.cancelling()):
                    raise
                # Another task moved this client to a new leader and closed the channel
                # under this call: not our cancellation, send it again over the new one.
                resent = True
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
            resent = True

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

    # ------------------------------------------------- the calls (master_rpc)
    mount_segment = AsyncCall(rpc.MOUNT_SEGMENT)
    unmount_segment = AsyncCall(rpc.UNMOUNT_SEGMENT)
    drain_segment = AsyncCall(rpc.DRAIN_SEGMENT)
    undrain_segment = AsyncCall(rpc.UNDRAIN_SEGMENT)
    list_segment_objects = AsyncCall(rpc.LIST_SEGMENT_OBJECTS)
    add_replica_start = AsyncCall(rpc.ADD_REPLICA_START)
    add_replica_end = AsyncCall(rpc.ADD_REPLICA_END)
    add_replica_revoke = AsyncCall(rpc.ADD_REPLICA_REVOKE)
    drop_replica = AsyncCall(rpc.DROP_REPLICA)
    tier_offload_done = AsyncCall(rpc.TIER_OFFLOAD_DONE)
    tier_stage_done = AsyncCall(rpc.TIER_STAGE_DONE)
    tier_dropped = AsyncCall(rpc.TIER_DROPPED)
    put_start = AsyncCall(rpc.PUT_START)
    upsert = AsyncCall(rpc.UPSERT)
    put_end = AsyncCall(rpc.PUT_END)
    put_revoke = AsyncCall(rpc.PUT_REVOKE)
    put_commit = AsyncCall(rpc.PUT_COMMIT)
    batch_put_start = AsyncCall(rpc.BATCH_PUT_START)
    batch_upsert = AsyncCall(rpc.BATCH_UPSERT)
    batch_put_end = AsyncCall(rpc.BATCH_PUT_END)
    batch_put_commit = AsyncCall(rpc.BATCH_PUT_COMMIT)
    batch_put_revoke = AsyncCall(rpc.BATCH_PUT_REVOKE)
    get_replica_list = AsyncCall(rpc.GET_REPLICA_LIST)
    batch_get_replica_list = AsyncCall(rpc.BATCH_GET_REPLICA_LIST)
    exist = AsyncCall(rpc.EXIST)
    batch_exist = AsyncCall(rpc.BATCH_EXIST)
    stat = AsyncCall(rpc.STAT)
    list_keys = AsyncCall(rpc.LIST_KEYS)
    remove = AsyncCall(rpc.REMOVE)
    batch_remove = AsyncCall(rpc.BATCH_REMOVE)
    remove_by_prefix = AsyncCall(rpc.REMOVE_BY_PREFIX)
    remove_by_regex = AsyncCall(rpc.REMOVE_BY_REGEX)
    remove_all = AsyncCall(rpc.REMOVE_ALL)
    pin = AsyncCall(rpc.PIN)
    unpin = AsyncCall(rpc.UNPIN)
    list_pins = AsyncCall(rpc.LIST_PINS)
    get_snapshot = AsyncCall(rpc.GET_SNAPSHOT)

    # ------------------------------------------------------ by hand (BY_HAND)
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
