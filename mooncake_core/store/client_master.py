"""Blocking master calls for the store client's data path.

The store :class:`~mooncake_core.store.client.Client` offers a synchronous API (the
upstream Python shape). Every put and get needs one or two master round trips; a
blocking gRPC channel called from the user's thread costs about half of what a hop
through the asyncio loop that runs :class:`MasterClient` costs (measured 0.7 ms vs
1.4 ms per call on the loaded 2-core machine), so the hot calls use this wrapper and
only mounting and heartbeats go through ``MasterClient`` on the background loop.

Replies are converted with the master's own converters (``convert.py``), so errors are
the same :class:`StoreError` classes the core raises.

With an HA master group the address is ``etcd://host:port[/cluster]``: the leader is read
from etcd's leader key and followed on change, like ``MasterClient.from_etcd`` does (a
follower's NOT_LEADER refusal names the leader in ``mooncake-leader`` trailing metadata;
a dead leader is replaced by asking etcd again), with backoff for up to the call timeout.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from typing import TypeVar

import grpc

from mooncake_core.rpc import store_pb2 as pb
from mooncake_core.rpc import store_pb2_grpc as pb_grpc

from . import convert as cv
from .auth import auth_metadata
from .errors import AuthError, ErrorCode, StoreError, UnavailableError
from .fast_control import OP_BY_NAME, FastLost, FastRefused, FastUnknownOp, FastUnsent
from .fast_control_client import FastChannels
from .fast_packed import unpack_placements, unpack_reads
from .ha.follow import Failover, leader_address, leader_hint
from .objects import ObjectInfo, Replica
from .pins import Pin
from .results import GetResult, ListKeysResult, MasterSnapshot, RemoveManyResult, ReplicateConfig

T = TypeVar("T")
U = TypeVar("U")

log = logging.getLogger(__name__)

ETCD_SCHEME = "etcd://"


def split_master_url(master: str) -> tuple[str | None, str]:
    """Split ``etcd://host:port[/cluster]`` into the etcd URL and the cluster name.

    Args:
        master: ``host:port`` (a fixed master) or ``etcd://host:port[/cluster]``.

    Returns:
        ``(None, master)`` for a fixed address, else ``("http://host:port", cluster)``
        (cluster ``default`` when not given).

    Raises:
        ValueError: an ``etcd://`` URL without a host.
    """
    if not master.startswith(ETCD_SCHEME):
        return None, master
    host, _, cluster = master[len(ETCD_SCHEME) :].partition("/")
    if not host:
        raise ValueError(f"master URL {master!r} has no etcd host (want etcd://HOST:PORT)")
    return f"http://{host}", cluster.strip("/") or "default"


class SyncLeaderResolver:
    """Blocking read of the HA leader's gRPC address from etcd (its JSON gateway).

    Args:
        endpoint: etcd client URL (``http://host:port``).
        cluster: the masters' cluster name.
        timeout_s: deadline of one etcd request.
    """

    def __init__(self, endpoint: str, cluster: str = "default", timeout_s: float = 2.0) -> None:
        from .ha.replication import HaKeys

        self.endpoint = endpoint
        self._key = base64.b64encode(HaKeys(cluster).leader).decode()
        self._timeout = timeout_s

    def __call__(self) -> str:
        """The leader's ``host:port``.

        Raises:
            UnavailableError: etcd unreachable or no leader elected right now.
        """
        body = json.dumps({"key": self._key}).encode()
        req = urllib.request.Request(self.endpoint + "/v3/kv/range", data=body)
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as r:
                data = json.loads(r.read())
        except (OSError, ValueError) as exc:
            raise UnavailableError(
                ErrorCode.UNAVAILABLE, f"leader lookup at {self.endpoint}: {exc}"
            ) from None
        kvs = data.get("kvs") or []
        if not kvs:
            raise UnavailableError(ErrorCode.UNAVAILABLE, "no master leader elected (yet)")
        try:
            return leader_address(base64.b64decode(kvs[0]["value"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise UnavailableError(ErrorCode.UNAVAILABLE, f"leader lookup: {exc}") from None


class SyncMaster:
    """Blocking wrapper over the MasterService stubs (thread-safe: gRPC channels are).

    Args:
        address: ``host:port`` of the master, or ``etcd://host:port[/cluster]`` to find
            the HA leader through etcd and follow it on change.
        client_id: identity sent with writes (placement, ownership).
        secret: cluster secret; the derived bearer token is sent when set.
        timeout_s: deadline of each call; a call that meets a dead or deposed leader
            follows the new one for up to this long before raising.
        fast: send the hot calls over the master's fast control channel when it has one
            (``fast_control``); every other call, and every hot call the fast channel
            cannot serve (a follower, a lost connection), goes over gRPC.
    """

    FAST_RETRY_S = 5.0
    """After a master's fast channel could not be reached, gRPC only for this long."""

    def __init__(
        self,
        address: str,
        client_id: str,
        secret: bytes | None,
        timeout_s: float = 10.0,
        *,
        fast: bool = True,
    ) -> None:
        endpoint, cluster = split_master_url(address)
        self._resolver = SyncLeaderResolver(endpoint, cluster) if endpoint else None
        self.client_id = client_id
        self._md = auth_metadata(secret)
        self._timeout = timeout_s
        self._lock = threading.Lock()
        self._tls = threading.local()
        self.leader_changes = 0
        """How many times calls moved to a new leader."""
        self.address = "" if self._resolver is not None else address
        self._channel: grpc.Channel | None = None
        self._fast = FastChannels(secret, timeout_s) if fast else None
        self._fast_at: dict[str, str] = {}
        """gRPC address -> its master's fast channel address, once learnt."""
        self._fast_off: dict[str, float] = {}
        """gRPC address -> monotonic time before which its fast channel is not tried."""
        self.fast_calls = 0
        self._unpacked: set[str] = set()
        """Fast-channel addresses whose master lacks the packed ops (an older master)."""
        """Calls answered over the fast channel."""
        if self._resolver is None:
            self._open(address)

    def _open(self, address: str) -> None:
        self.address = address
        self._channel = grpc.insecure_channel(address, options=cv.GRPC_OPTIONS)
        self._stub = pb_grpc.MasterServiceStub(self._channel)

    def close(self) -> None:
        """Close the channel (and the fast channel's connections)."""
        if self._fast is not None:
            self._fast.close()
        if self._channel is not None:
            self._channel.close()

    def _switch(self, address: str) -> None:
        # Several user threads may fail over at once: only the first one swaps channels.
        with self._lock:
            if address == self.address:
                return
            old = self._channel
            log.info("store client %s: following the leader to %s", self.client_id, address)
            self._open(address)
            self.leader_changes += 1
        if old is not None:
            old.close()

    def _call_packed(self, name: str, req: object, decode: Callable[[bytes], U]) -> U | None:
        """``name``, a packed op, over the fast channel, its reply decoded; ``None``: ask
        gRPC instead (then ``_tls.retried`` says whether the call may have been applied)."""
        self._tls.retried = False
        if self._fast is None:
            return None
        target = self._fast_address(self.address)
        if target is None or target in self._unpacked:
            return None
        raw = self._call_fast(name, req)
        if raw is None:
            return None
        if not isinstance(raw, bytes):  # unreachable: packed ops answer bytes
            raise TypeError(f"{name}: the fast channel answered {type(raw).__name__}")
        try:
            return decode(raw)
        except ValueError as exc:
            log.warning("store client %s: %s: %s; asking gRPC", self.client_id, name, exc)
            self._tls.retried = True  # the master may have applied it
            return None

    def _call(self, fn: Callable[..., T], req: object, *, resent: bool = False) -> T:
        """One unary call; on UNAVAILABLE follow the leader (the NOT_LEADER hint, else
        etcd) with backoff until ``timeout_s`` has passed. A fixed address does not retry.

        ``fn`` is a method of the current stub; after a switch the same method of the new
        stub is used. ``self._tls.retried`` tells the caller whether a retry happened
        (``resent``: this call already resends one whose outcome is unknown).
        """
        name = next((n for n, v in vars(self._stub).items() if v is fn), "")
        self._tls.retried = resent
        if self._fast is not None and name in OP_BY_NAME:
            reply = self._call_fast(name, req)
            if reply is not None:
                return reply  # type: ignore[return-value]
        failover = Failover(self._timeout, can_resolve=self._resolver is not None)
        while True:
            try:
                return fn(req, metadata=self._md, timeout=self._timeout)
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                details = exc.details() if hasattr(exc, "details") else str(exc)
                text = f"master at {self.address}: {getattr(code, 'name', 'ERROR')}: {details}"
                if code == grpc.StatusCode.UNAUTHENTICATED:
                    raise AuthError(ErrorCode.UNAUTHENTICATED, text) from None
                trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
                hint = leader_hint(trailing)
                wait = None
                if code == grpc.StatusCode.UNAVAILABLE:
                    wait = failover.after_unavailable(hint, time.monotonic())
                if wait is None:
                    raise UnavailableError(ErrorCode.UNAVAILABLE, text) from None
            time.sleep(wait)
            address = hint
            if address is None and self._resolver is not None:
                try:
                    address = self._resolver()
                except UnavailableError:
                    continue
            if address and address != self.address:
                self._switch(address)
            if name:
                fn = getattr(self._stub, name)
            self._tls.retried = True

    def _call_fast(self, name: str, req: object) -> object | None:
        """``name`` over the fast channel; ``None``: ask gRPC instead (nothing was done,
        or the outcome is unknown: then ``_tls.retried`` is set, as for a resend)."""
        assert self._fast is not None
        address = self.address
        target = self._fast_address(address)
        if target is None:
            return None
        try:
            conn = self._fast.get(target)
        except (FastUnsent, FastRefused) as exc:
            log.info(
                "store client %s: fast channel unavailable (%s); using gRPC", self.client_id, exc
            )
            self._fast_off[address] = time.monotonic() + self.FAST_RETRY_S
            self._fast_at.pop(address, None)
            return None
        try:
            reply = conn.call(name, req)  # type: ignore[arg-type]
        except FastUnknownOp:
            self._unpacked.add(target)  # nothing was done; an older master
            return None
        except FastRefused:
            # Not serving (a follower, an unconfirmed lease): gRPC follows the leader.
            self._fast_at.pop(address, None)
            return None
        except (FastUnsent, FastLost) as exc:
            self._fast.drop(conn)
            self._fast_at.pop(address, None)
            if isinstance(exc, FastLost):
                self._tls.retried = True  # it may have been applied
            return None
        self.fast_calls += 1
        return reply

    def _fast_address(self, address: str) -> str | None:
        """The fast channel of the master at ``address``, learnt from its readiness."""
        target = self._fast_at.get(address)
        if target is not None or not address:
            return target
        if time.monotonic() < self._fast_off.get(address, 0.0):
            return None
        try:
            # Short: a paused or dead master must not cost a whole call timeout here on
            # top of the gRPC call that follows.
            r = self._stub.GetReadiness(
                pb.ReadinessRequest(), metadata=self._md, timeout=min(1.0, self._timeout)
            )
        except grpc.RpcError:
            r = None
        if r is None or not (r.serving and r.fast_port):
            self._fast_off[address] = time.monotonic() + self.FAST_RETRY_S
            return None
        target = f"{address.rpartition(':')[0]}:{r.fast_port}"
        self._fast_at[address] = target
        return target

    def wait_ready(self, timeout_s: float) -> None:
        """Block until the channel (to the leader, with etcd) connects.

        Raises:
            UnavailableError: the master did not answer within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        if self._resolver is not None:
            while True:
                try:
                    self._switch(self._resolver())
                    break
                except UnavailableError as exc:
                    if time.monotonic() >= deadline:
                        raise UnavailableError(
                            ErrorCode.UNAVAILABLE,
                            f"no master leader via {self._resolver.endpoint} within "
                            f"{timeout_s:g}s: {exc.message}",
                        ) from None
                    time.sleep(0.1)
        channel = self._channel
        if channel is None:  # unreachable: _open ran in __init__ or in the loop above
            raise UnavailableError(ErrorCode.UNAVAILABLE, "master channel not opened")
        try:
            grpc.channel_ready_future(channel).result(
                timeout=max(0.01, deadline - time.monotonic())
            )
        except grpc.FutureTimeoutError:
            raise UnavailableError(
                ErrorCode.UNAVAILABLE,
                f"master at {self.address} not reachable within {timeout_s:g}s",
            ) from None

    # ------------------------------------------------------------------ writes
    def put_start(
        self,
        key: str,
        size: int,
        config: ReplicateConfig | None,
        *,
        upsert: bool = False,
        avoid: Sequence[str] = (),
    ) -> tuple[Replica, ...]:
        """PutStart (or Upsert): allocate replicas for ``key``; ``avoid``: segments this
        client could not reach (a retry), placed around and reported to the master."""
        req = pb.PutStartRequest(
            client_id=self.client_id,
            key=key,
            size=size,
            config=cv.config_to_pb(config),
            avoid_segments=list(avoid),
        )
        fn = self._stub.Upsert if upsert else self._stub.PutStart
        r = self._call(fn, req)
        self._raise_unless_own(r.error, ErrorCode.OBJECT_ALREADY_EXISTS, "put", key)
        return cv.replicas_from_pb(r.replicas)

    def _raise_unless_own(self, error: pb.Error, code: ErrorCode, what: str, key: str) -> None:
        """``raise_for``, except that ``code`` after a resend is an unknown outcome.

        A call resent after a leader switch may have been applied by the old leader (its
        reply lost): a resent PutStart then meets this client's own PROCESSING write
        (OBJECT_ALREADY_EXISTS, until ``put_timeout_s`` discards it), a resent Remove
        the absence it made itself (OBJECT_NOT_FOUND). Neither says what it seems to.
        """
        err = cv.error_from_pb(error)
        if err is None:
            return
        if self._tls.retried and err.code == code:
            raise UnavailableError(
                ErrorCode.UNAVAILABLE,
                f"{what} {key!r}: resent after a leader switch and answered {code.name}; "
                "the first attempt may have taken effect (outcome unknown)",
            )
        raise err

    def batch_put_start(
        self,
        items: Sequence[tuple[str, int]],
        config: ReplicateConfig | None,
        *,
        upsert: bool = False,
    ) -> list[tuple[Replica, ...] | StoreError]:
        """BatchPutStart (or BatchUpsert); one result or error per item."""
        req = pb.BatchPutStartRequest(
            client_id=self.client_id,
            items=[pb.BatchPutStartRequest.Item(key=k, size=s) for k, s in items],
            config=cv.config_to_pb(config),
        )
        packed = "BatchUpsertPacked" if upsert else "BatchPutStartPacked"
        got = self._call_packed(packed, req, lambda b: unpack_placements(len(items), b))
        if got is not None:
            return got
        fn = self._stub.BatchUpsert if upsert else self._stub.BatchPutStart
        r = self._call(fn, req, resent=self._tls.retried)
        out: list[tuple[Replica, ...] | StoreError] = []
        for x in r.results:
            e = cv.error_from_pb(x.error)
            out.append(e if e is not None else cv.replicas_from_pb(x.replicas))
        return out

    def put_end(self, key: str) -> None:
        """PutEnd: the object becomes readable.

        A PutEnd retried across a failover may have been applied by the old leader (its
        reply lost): the new leader then answers INVALID_STATE "already complete", which
        is success here. Safe because nobody else can complete a key this client holds
        in PROCESSING (PutStart refuses it) before ``put_timeout_s`` discards it, far
        longer than one call's retry window.
        """
        req = pb.KeyRequest(client_id=self.client_id, key=key)
        err = cv.error_from_pb(self._call(self._stub.PutEnd, req).error)
        if err is None or (self._tls.retried and err.code == ErrorCode.INVALID_STATE):
            return
        raise err

    def put_revoke(self, key: str) -> None:
        """PutRevoke: abandon a write and free its space."""
        req = pb.KeyRequest(client_id=self.client_id, key=key)
        cv.raise_for(self._call(self._stub.PutRevoke, req).error)

    def batch_put_end(self, keys: Sequence[str]) -> list[StoreError | None]:
        """BatchPutEnd; ``None`` where it succeeded (INVALID_STATE after a failover retry
        counts as success, as in :meth:`put_end`)."""
        req = pb.BatchKeysRequest(client_id=self.client_id, keys=list(keys))
        errs = [cv.error_from_pb(e) for e in self._call(self._stub.BatchPutEnd, req).errors]
        if self._tls.retried:
            errs = [
                None if e is not None and e.code == ErrorCode.INVALID_STATE else e for e in errs
            ]
        return errs

    def batch_put_revoke(self, keys: Sequence[str]) -> list[StoreError | None]:
        """BatchPutRevoke; ``None`` where it succeeded."""
        req = pb.BatchKeysRequest(client_id=self.client_id, keys=list(keys))
        return [cv.error_from_pb(e) for e in self._call(self._stub.BatchPutRevoke, req).errors]

    # ------------------------------------------------------------------- reads
    def get_replica_list(self, key: str) -> GetResult:
        """GetReplicaList: where to read ``key`` (grants a lease)."""
        r = self._call(self._stub.GetReplicaList, pb.GetReplicaListRequest(key=key))
        return cv.get_result_from_pb(key, r)

    def batch_get_replica_list(self, keys: Sequence[str]) -> list[GetResult | StoreError]:
        """BatchGetReplicaList; one result or error per key."""
        req = pb.BatchKeysRequest(client_id=self.client_id, keys=list(keys))
        got = self._call_packed("BatchGetReplicaListPacked", req, lambda b: unpack_reads(keys, b))
        if got is not None:
            return got
        r = self._call(self._stub.BatchGetReplicaList, req, resent=self._tls.retried)
        out: list[GetResult | StoreError] = []
        for k, x in zip(keys, r.results, strict=True):
            e = cv.error_from_pb(x.error)
            out.append(e if e is not None else cv.get_result_from_pb(k, x))
        return out

    def exist(self, key: str) -> bool:
        """Exist (no lease, no recency update)."""
        r = self._call(self._stub.Exist, pb.ExistRequest(key=key))
        cv.raise_for(r.error)
        return bool(r.exists)

    def batch_exist(self, keys: Sequence[str]) -> list[bool]:
        """BatchExist."""
        req = pb.BatchKeysRequest(client_id=self.client_id, keys=list(keys))
        return list(self._call(self._stub.BatchExist, req).exists)

    def stat(self, key: str) -> ObjectInfo:
        """Stat (no lease, no recency update)."""
        return cv.stat_from_pb(self._call(self._stub.Stat, pb.StatRequest(key=key)))

    def list_keys(self, prefix: str, start_after: str, limit: int) -> ListKeysResult:
        """One page of keys in key order."""
        req = pb.ListKeysRequest(prefix=prefix, start_after=start_after, limit=limit)
        return cv.list_from_pb(self._call(self._stub.ListKeys, req))

    # ---------------------------------------------------------------- removals
    def remove(self, key: str, force: bool) -> None:
        """Remove one object."""
        r = self._call(self._stub.Remove, pb.RemoveRequest(key=key, force=force))
        self._raise_unless_own(r.error, ErrorCode.OBJECT_NOT_FOUND, "remove", key)

    def batch_remove(self, keys: Sequence[str], force: bool) -> list[StoreError | None]:
        """BatchRemove; ``None`` where it succeeded."""
        req = pb.BatchKeysRequest(client_id=self.client_id, keys=list(keys), force=force)
        return [cv.error_from_pb(e) for e in self._call(self._stub.BatchRemove, req).errors]

    def remove_by_prefix(self, prefix: str, force: bool) -> RemoveManyResult:
        """RemoveByPrefix."""
        req = pb.RemoveByPrefixRequest(prefix=prefix, force=force)
        return _many(self._call(self._stub.RemoveByPrefix, req))

    def remove_by_regex(self, pattern: str, force: bool) -> RemoveManyResult:
        """RemoveByRegex (RE2 ``search`` on the master)."""
        req = pb.RemoveByRegexRequest(pattern=pattern, force=force)
        return _many(self._call(self._stub.RemoveByRegex, req))

    def remove_all(self, force: bool) -> RemoveManyResult:
        """RemoveAll."""
        return _many(self._call(self._stub.RemoveAll, pb.RemoveAllRequest(force=force)))

    # -------------------------------------------------------------------- pins
    def pin(self, target: str, prefix: bool, hard: bool, ttl_s: float | None) -> Pin:
        """Pin a key or a prefix."""
        req = pb.PinRequest(target=target, prefix=prefix, hard=hard)
        if ttl_s is not None:
            req.ttl_s = ttl_s
        r = self._call(self._stub.Pin, req)
        cv.raise_for(r.error)
        return cv.pin_from_pb(r.pin, time.monotonic())

    def unpin(self, target: str, prefix: bool) -> Pin:
        """Clear the pin on exactly this key or prefix."""
        r = self._call(self._stub.Unpin, pb.UnpinRequest(target=target, prefix=prefix))
        cv.raise_for(r.error)
        return cv.pin_from_pb(r.pin, time.monotonic())

    def list_pins(self) -> list[Pin]:
        """Live pins."""
        r = self._call(self._stub.ListPins, pb.ListPinsRequest())
        now = time.monotonic()
        return [cv.pin_from_pb(p, now) for p in r.pins]

    def snapshot(self) -> MasterSnapshot:
        """The master's read-model (segments with their transport addresses)."""
        return cv.snapshot_from_pb(self._call(self._stub.GetSnapshot, pb.SnapshotRequest()))


def _many(r: pb.RemoveManyResponse) -> RemoveManyResult:
    cv.raise_for(r.error)
    return RemoveManyResult(r.removed, r.skipped)
