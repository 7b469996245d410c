"""The master's unary RPC surface, described once.

Each unary call a client makes to ``MasterService`` is one :class:`Unary` in
:data:`SURFACE`: the gRPC method, how its request is built from the Python arguments,
how its reply becomes the Python result (errors raised as the core's
:class:`~.errors.StoreError` classes), and whether the fast control channel carries it
(its op code, and the packed op answering it, if any). From this table:

- the async :class:`~.client.async_master.MasterClient` and the blocking
  :class:`~.client.sync_master.SyncMaster` get their methods (:class:`AsyncCall`,
  :class:`SyncCall`: one line per call in each class, no per-call body);
- the fast channel's op table is made (:data:`~.fast_control.OPS`);
- a test checks it against ``store.proto``'s service and the servicer's handlers.

Not here, because they are not plain unary calls: ``Heartbeat`` (a per-call deadline,
the client's liveness loop), ``GetReadiness`` (answered by any master, never sent on
to the leader) and ``WatchEvents`` (a stream): :data:`BY_HAND` names them.

A call sent again after a leader switch, or after a fast call whose reply was lost, may
have been applied by its first copy: ``resent`` tells :attr:`Unary.reply` so, and a
few replies mean something else then (``PutEnd``'s "already complete" is success;
``PutStart``'s "exists" and ``Remove``'s "not found" are outcomes unknown).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, overload

from google.protobuf.message import Message

from mooncake_core.rpc import store_pb2 as pb

from . import convert as cv
from .errors import ErrorCode, StoreError, UnavailableError
from .fast_packed import (
    unpack_batch_commit,
    unpack_commit,
    unpack_errors,
    unpack_placements,
    unpack_read_batch,
    unpack_read_versioned,
)
from .objects import Replica
from .pins import Pin
from .results import GetResult, RemoveManyResult, ReplicateConfig
from .segment import SegmentSnapshot

__all__ = ["BY_HAND", "SURFACE", "AsyncCall", "SyncCall", "Unary"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Packed(Generic[R]):
    """The fast channel's packed op answering a call (:mod:`.fast_packed`).

    Attributes:
        name: the op's name (the servicer's handler of that name returns the bytes).
        code: its op code on the fast channel (part of the wire protocol).
        read: the result from the request and the reply's bytes (``ValueError`` when
            they do not parse).
    """

    name: str
    code: int
    read: Callable[[Any, bytes], R]


@dataclass(frozen=True, slots=True)
class Unary(Generic[P, R]):
    """One unary call of ``MasterService``.

    Attributes:
        method: the gRPC method (the servicer's handler of the same name serves it).
        request: the request from the client's id and the call's arguments.
        reply: the result from the reply, the request and ``resent``; raises the
            :class:`StoreError` a reply carries.
        doc: what the call does (the clients' method docstring).
        fast: its op code on the fast control channel (0: gRPC only). Codes are part
            of the wire protocol: never renumbered.
        packed: the fast channel's packed op answering it instead (blocking client).
    """

    method: str
    request: Callable[Concatenate[str, P], Message]
    reply: Callable[[Any, Any, bool], R]
    doc: str
    fast: int = 0
    packed: Packed[R] | None = None


# ------------------------------------------------------------------ replies
def _none(r: Any, q: Any, resent: bool) -> None:
    cv.raise_for(r.error)


def _errors(r: Any, q: Any, resent: bool) -> list[StoreError | None]:
    return [cv.error_from_pb(e) for e in r.errors]


def _many(r: Any, q: Any, resent: bool) -> RemoveManyResult:
    cv.raise_for(r.error)
    return RemoveManyResult(r.removed, r.skipped)


def _pin(r: Any, q: Any, resent: bool) -> Pin:
    cv.raise_for(r.error)
    return cv.pin_from_pb(r.pin, time.monotonic())


def _raise_unless_own(error: pb.Error, code: ErrorCode, what: str, key: str, resent: bool) -> None:
    """``raise_for``, except that ``code`` after a resend is an unknown outcome.

    A resent PutStart meets this client's own PROCESSING write (OBJECT_ALREADY_EXISTS,
    until ``put_timeout_s`` discards it), a resent Remove the absence it made itself
    (OBJECT_NOT_FOUND). Neither says what it seems to.
    """
    err = cv.error_from_pb(error)
    if err is None:
        return
    if resent and err.code == code:
        raise UnavailableError(
            ErrorCode.UNAVAILABLE,
            f"{what} {key!r}: resent after a leader switch and answered {code.name}; "
            "the first attempt may have taken effect (outcome unknown)",
        )
    raise err


def _placed(r: Any, q: Any, resent: bool) -> tuple[Replica, ...]:
    _raise_unless_own(r.error, ErrorCode.OBJECT_ALREADY_EXISTS, "put", q.key, resent)
    return cv.replicas_from_pb(r.replicas)


def _placed_many(r: Any, q: Any, resent: bool) -> list[tuple[Replica, ...] | StoreError]:
    out: list[tuple[Replica, ...] | StoreError] = []
    for x in r.results:
        e = cv.error_from_pb(x.error)
        out.append(e if e is not None else cv.replicas_from_pb(x.replicas))
    return out


def _ended(r: Any, q: Any, resent: bool) -> None:
    # A resent PutEnd may have been applied by the old leader: "already complete"
    # (INVALID_STATE) is success then. Nobody else can complete a key this client holds
    # in PROCESSING before put_timeout_s discards it, far longer than a retry window.
    err = cv.error_from_pb(r.error)
    if err is None or (resent and err.code == ErrorCode.INVALID_STATE):
        return
    raise err


def _ended_many(r: Any, q: Any, resent: bool) -> list[StoreError | None]:
    errs = _errors(r, q, resent)
    if resent:
        errs = [None if e is not None and e.code == ErrorCode.INVALID_STATE else e for e in errs]
    return errs


def _committed(r: Any, q: Any, resent: bool) -> tuple[int, tuple[Replica, ...]] | None:
    err = cv.error_from_pb(r.error)
    if err is not None:
        if resent and not q.grant_id and err.code == ErrorCode.INVALID_STATE:
            return None  # as PutEnd: the old leader completed it
        if resent and q.grant_id and err.code in (ErrorCode.STALE, ErrorCode.OBJECT_ALREADY_EXISTS):
            # The first copy may have stored it (and used up the grant).
            raise UnavailableError(
                ErrorCode.UNAVAILABLE,
                f"put {q.key!r}: resent after a leader switch and answered "
                f"{err.code.name}; the first attempt may have taken effect (outcome unknown)",
            )
        raise err
    if not r.grant_id:
        return None
    return int(r.grant_id), cv.replicas_from_pb(r.replicas)


def _batch_committed(
    r: Any, q: Any, resent: bool
) -> tuple[list[StoreError | None], list[tuple[int, tuple[Replica, ...]]]]:
    errs = _errors(r, q, resent)
    if resent and q.grant_ids:
        # The first copy may have stored a key (and used up its grant).
        unknown = (ErrorCode.STALE, ErrorCode.OBJECT_ALREADY_EXISTS)
        errs = [
            UnavailableError(
                ErrorCode.UNAVAILABLE,
                f"put {k!r}: resent after a leader switch and answered {e.code.name}; "
                "the first attempt may have taken effect (outcome unknown)",
            )
            if e is not None and e.code in unknown
            else e
            for k, e in zip(q.keys, errs, strict=True)
        ]
    elif resent:
        errs = _ended_many(r, q, resent)
    return errs, [(int(g.grant_id), cv.replicas_from_pb(g.replicas)) for g in r.grants]


def _removed(r: Any, q: Any, resent: bool) -> None:
    _raise_unless_own(r.error, ErrorCode.OBJECT_NOT_FOUND, "remove", q.key, resent)


def _only(results: Sequence[T | StoreError]) -> T:
    """The one result of a packed single call; its error raised. (A packed op is only
    ever a first attempt: a lost one is resent over gRPC, whose reply reads a resend.)"""
    (only,) = results
    if isinstance(only, StoreError):
        raise only
    return only


def _read(r: Any, q: Any, resent: bool) -> GetResult:
    return cv.get_result_from_pb(q.key, r)


def _reads(r: Any, q: Any, resent: bool) -> list[GetResult | StoreError]:
    out: list[GetResult | StoreError] = []
    for k, x in zip(q.keys, r.results, strict=True):
        e = cv.error_from_pb(x.error)
        out.append(e if e is not None else cv.get_result_from_pb(k, x))
    return out


def _exists(r: Any, q: Any, resent: bool) -> bool:
    cv.raise_for(r.error)
    return bool(r.exists)


def _replica(r: Any, q: Any, resent: bool) -> Replica:
    cv.raise_for(r.error)
    return cv.replicas_from_pb([r.replica])[0]


def _freed(r: Any, q: Any, resent: bool) -> bool:
    cv.raise_for(r.error)
    return bool(r.freed)


def _removed_count(r: Any, q: Any, resent: bool) -> int:
    cv.raise_for(r.error)
    return int(r.removed)


def _segment(r: Any, q: Any, resent: bool) -> SegmentSnapshot:
    cv.raise_for(r.error)
    return cv.segment_from_pb(r.segment)


# ----------------------------------------------------------------- requests
def _put_start(
    client_id: str,
    key: str,
    size: int,
    config: ReplicateConfig | None = None,
    *,
    avoid: Sequence[str] = (),
) -> pb.PutStartRequest:
    return pb.PutStartRequest(
        client_id=client_id,
        key=key,
        size=size,
        config=cv.config_to_pb(config),
        avoid_segments=list(avoid),
    )


def _put_commit(
    client_id: str,
    key: str,
    grant_id: int = 0,
    size: int = 0,
    *,
    next_size: int = 0,
    config: ReplicateConfig | None = None,
    release: int = 0,
) -> pb.PutCommitRequest:
    return pb.PutCommitRequest(
        client_id=client_id,
        key=key,
        grant_id=grant_id,
        size=size,
        next_size=next_size,
        config=cv.config_to_pb(config),
        release_grant_id=release,
    )


def _batch_put_commit(
    client_id: str,
    keys: Sequence[str],
    grant_ids: Sequence[int] = (),
    size: int = 0,
    *,
    next_count: int = 0,
    config: ReplicateConfig | None = None,
    release: Sequence[int] = (),
) -> pb.BatchPutCommitRequest:
    return pb.BatchPutCommitRequest(
        client_id=client_id,
        keys=list(keys),
        grant_ids=list(grant_ids),
        size=size,
        next_count=next_count,
        config=cv.config_to_pb(config),
        release_grant_ids=list(release),
    )


def _batch_put_start(
    client_id: str, items: Sequence[tuple[str, int]], config: ReplicateConfig | None = None
) -> pb.BatchPutStartRequest:
    return pb.BatchPutStartRequest(
        client_id=client_id,
        items=[pb.BatchPutStartRequest.Item(key=k, size=s) for k, s in items],
        config=cv.config_to_pb(config),
    )


def _key(client_id: str, key: str) -> pb.KeyRequest:
    return pb.KeyRequest(client_id=client_id, key=key)


def _keys(client_id: str, keys: Sequence[str]) -> pb.BatchKeysRequest:
    return pb.BatchKeysRequest(client_id=client_id, keys=list(keys))


def _keys_force(client_id: str, keys: Sequence[str], *, force: bool = False) -> pb.BatchKeysRequest:
    return pb.BatchKeysRequest(client_id=client_id, keys=list(keys), force=force)


def _mount(
    client_id: str,
    name: str,
    capacity: int,
    *,
    transport_address: str = "",
    location: str = "cpu:0",
    ssd_capacity: int = 0,
) -> pb.MountSegmentRequest:
    return pb.MountSegmentRequest(
        client_id=client_id,
        name=name,
        capacity=capacity,
        transport_address=transport_address,
        location=location,
        ssd_capacity=ssd_capacity,
    )


def _own_segment(client_id: str, name: str) -> pb.SegmentRequest:
    return pb.SegmentRequest(client_id=client_id, name=name)


def _any_segment(client_id: str, name: str) -> pb.SegmentRequest:
    return pb.SegmentRequest(name=name)


def _segment_objects(
    client_id: str, segment: str, *, start_after: str = "", limit: int = 1000
) -> pb.ListSegmentObjectsRequest:
    return pb.ListSegmentObjectsRequest(segment=segment, start_after=start_after, limit=limit)


def _add_replica(
    client_id: str,
    key: str,
    *,
    exclude_segments: Sequence[str] = (),
    target_segment: str | None = None,
) -> pb.AddReplicaStartRequest:
    return pb.AddReplicaStartRequest(
        key=key, exclude_segments=list(exclude_segments), target_segment=target_segment or ""
    )


def _drop_replica(client_id: str, key: str, segment: str) -> pb.DropReplicaRequest:
    return pb.DropReplicaRequest(key=key, segment=segment)


def _tier_done(
    client_id: str, key: str, segment: str, token: int, ok: bool, reason: str = ""
) -> pb.TierDoneRequest:
    return pb.TierDoneRequest(
        client_id=client_id, key=key, segment=segment, token=token, ok=ok, reason=reason
    )


def _stage_done(
    client_id: str, key: str, segment: str, request_id: int, ok: bool, reason: str = ""
) -> pb.TierDoneRequest:
    return _tier_done(client_id, key, segment, request_id, ok, reason)


def _tier_dropped(client_id: str, segment: str, keys: Sequence[str]) -> pb.TierDroppedRequest:
    return pb.TierDroppedRequest(client_id=client_id, segment=segment, keys=list(keys))


def _get(client_id: str, key: str) -> pb.GetReplicaListRequest:
    return pb.GetReplicaListRequest(key=key)


def _exist(client_id: str, key: str) -> pb.ExistRequest:
    return pb.ExistRequest(key=key)


def _stat(client_id: str, key: str) -> pb.StatRequest:
    return pb.StatRequest(key=key)


def _list_keys(
    client_id: str, prefix: str = "", start_after: str = "", limit: int = 1000
) -> pb.ListKeysRequest:
    return pb.ListKeysRequest(prefix=prefix, start_after=start_after, limit=limit)


def _remove(client_id: str, key: str, *, force: bool = False) -> pb.RemoveRequest:
    return pb.RemoveRequest(key=key, force=force)


def _by_prefix(client_id: str, prefix: str, *, force: bool = False) -> pb.RemoveByPrefixRequest:
    return pb.RemoveByPrefixRequest(prefix=prefix, force=force)


def _by_regex(client_id: str, pattern: str, *, force: bool = False) -> pb.RemoveByRegexRequest:
    return pb.RemoveByRegexRequest(pattern=pattern, force=force)


def _all(client_id: str, *, force: bool = False) -> pb.RemoveAllRequest:
    return pb.RemoveAllRequest(force=force)


def _pin_req(
    client_id: str,
    target: str,
    *,
    prefix: bool = False,
    hard: bool = False,
    ttl_s: float | None = None,
) -> pb.PinRequest:
    req = pb.PinRequest(target=target, prefix=prefix, hard=hard)
    if ttl_s is not None:
        req.ttl_s = ttl_s
    return req


def _unpin_req(client_id: str, target: str, *, prefix: bool = False) -> pb.UnpinRequest:
    return pb.UnpinRequest(target=target, prefix=prefix)


def _nothing(message: type[Message]) -> Callable[[str], Message]:
    return lambda client_id: message()


# ------------------------------------------------------------------ the surface
MOUNT_SEGMENT = Unary(
    "MountSegment", _mount, _segment,
    "Lend a segment this client hosts (``ConflictError`` if the name is taken); with "
    "``ssd_capacity`` the master sends this client the SSD tier's requests for it.",
)  # fmt: skip
UNMOUNT_SEGMENT = Unary(
    "UnmountSegment", _own_segment, _none,
    "Start unmounting one of this client's segments (readable during the grace).",
)  # fmt: skip
DRAIN_SEGMENT = Unary(
    "DrainSegment", _any_segment, _none, "Stop placing on a segment (operator action)."
)
UNDRAIN_SEGMENT = Unary(
    "UndrainSegment", _any_segment, _none,
    "Put a DRAINING/DRAINED segment back into placement (operator action).",
)  # fmt: skip
LIST_SEGMENT_OBJECTS = Unary(
    "ListSegmentObjects", _segment_objects, lambda r, q, resent: cv.list_from_pb(r),
    "One page, in key order, of the objects with a readable replica on ``segment``.",
)  # fmt: skip
ADD_REPLICA_START = Unary(
    "AddReplicaStart", _add_replica, _replica,
    "Allocate one more (invisible until ``add_replica_end``) replica of ``key``.",
)  # fmt: skip
ADD_REPLICA_END = Unary(
    "AddReplicaEnd", _key, _none, "Make the replica being added to ``key`` readable."
)
ADD_REPLICA_REVOKE = Unary(
    "AddReplicaRevoke", _key, _none, "Abandon the replica being added to ``key``."
)
DROP_REPLICA = Unary(
    "DropReplica", _drop_replica, _freed,
    "Drop ``key``'s replica on ``segment``; False: freed when the read lease ends.",
)  # fmt: skip
TIER_OFFLOAD_DONE = Unary(
    "TierOffloadDone", _tier_done, _none,
    "Report an ``OffloadRequested``'s outcome (``token``: the object version copied). "
    "``ConflictError`` STALE: the object changed meanwhile, delete the file.",
)  # fmt: skip
TIER_STAGE_DONE = Unary(
    "TierStageDone", _stage_done, _none,
    "Report a ``StageRequested``'s outcome (bytes copied into the replica; ``reason`` "
    "``miss`` / ``corrupt`` when not ok). ``ConflictError`` STALE: no such stage now.",
)  # fmt: skip
TIER_DROPPED = Unary(
    "TierDropped", _tier_dropped, _removed_count,
    "This client's SSD tier no longer holds ``keys`` for ``segment``; returns the "
    "objects removed because that was their last copy.",
)  # fmt: skip
PUT_START = Unary(
    "PutStart", _put_start, _placed,
    "Allocate replicas for a new object; write them, then ``put_end``. ``avoid``: "
    "segments this client could not reach (a retry), placed around.",
    fast=5,
    packed=Packed("PutStartPacked", 18, lambda q, b: _only(unpack_placements(1, b))),
)  # fmt: skip
UPSERT = Unary(
    "Upsert", _put_start, _placed, "Like ``put_start``, replacing a complete object.", fast=6,
    packed=Packed("UpsertPacked", 19, lambda q, b: _only(unpack_placements(1, b))),
)  # fmt: skip
PUT_END = Unary("PutEnd", _key, _ended, "Make a written object readable.", fast=7)
PUT_REVOKE = Unary("PutRevoke", _key, _none, "Abandon a write and free its space.", fast=8)
PUT_COMMIT = Unary(
    "PutCommit", _put_commit, _committed,
    "End a put: ``grant_id`` 0, ``key``'s PutStart (as ``put_end``); else store ``key`` "
    "at that grant's replicas, written by this client. ``next_size``: also grant this "
    "client's next put of that size (returns ``(grant id, replicas)`` or None); "
    "``release``: a grant it will not use.",
    fast=23,
    packed=Packed("PutCommitPacked", 24, lambda q, b: _only([unpack_commit(b)])),
)  # fmt: skip
BATCH_PUT_START = Unary(
    "BatchPutStart", _batch_put_start, _placed_many,
    "``put_start`` for each ``(key, size)``; errors are returned per item.",
    fast=9,
    packed=Packed("BatchPutStartPacked", 16, lambda q, b: unpack_placements(len(q.items), b)),
)  # fmt: skip
BATCH_UPSERT = Unary(
    "BatchUpsert", _batch_put_start, _placed_many, "``upsert`` for each ``(key, size)``.",
    fast=10,
    packed=Packed("BatchUpsertPacked", 17, lambda q, b: unpack_placements(len(q.items), b)),
)  # fmt: skip
BATCH_PUT_END = Unary(
    "BatchPutEnd", _keys, _ended_many, "``put_end`` for each key; ``None`` where it succeeded.",
    fast=11,
    packed=Packed("BatchPutEndPacked", 21, lambda q, b: unpack_errors(len(q.keys), b)),
)  # fmt: skip
BATCH_PUT_COMMIT = Unary(
    "BatchPutCommit", _batch_put_commit, _batch_committed,
    "End a batch's puts: no ``grant_ids``, ``keys`` were started by ``batch_put_start`` "
    "(as ``batch_put_end``); else store each key at its grant's replicas (``size`` "
    "bytes, written by this client). ``next_count``: also grant this client's next "
    "batch of that many puts of ``size`` bytes. Returns the per-key outcomes (``None`` "
    "where stored) and the grants (``(grant id, replicas)``, all or none); "
    "``release``: grants it will not use.",
    fast=25,
    packed=Packed("BatchPutCommitPacked", 26, lambda q, b: unpack_batch_commit(len(q.keys), b)),
)  # fmt: skip
BATCH_PUT_REVOKE = Unary("BatchPutRevoke", _keys, _errors, "``put_revoke`` for each key.", fast=12)
GET_REPLICA_LIST = Unary(
    "GetReplicaList", _get, _read, "Where to read ``key``; grants a read lease.", fast=3,
    packed=Packed(
        "GetReplicaListVersioned", 22, lambda q, b: _only([unpack_read_versioned(q.key, b)])
    ),
)  # fmt: skip
BATCH_GET_REPLICA_LIST = Unary(
    "BatchGetReplicaList", _keys, _reads, "``get_replica_list`` for each key; errors per item.",
    fast=4,
    packed=Packed("BatchGetReplicaListRun", 27, lambda q, b: unpack_read_batch(q.keys, b)),
)  # fmt: skip
EXIST = Unary(
    "Exist", _exist, _exists, "Whether ``key`` is readable (no lease, no recency update).",
    fast=1,
)  # fmt: skip
BATCH_EXIST = Unary(
    "BatchExist", _keys, lambda r, q, resent: list(r.exists), "``exist`` for each key.", fast=2
)
STAT = Unary(
    "Stat", _stat, lambda r, q, resent: cv.stat_from_pb(r),
    "Describe one object (no lease, no recency update).",
)  # fmt: skip
LIST_KEYS = Unary(
    "ListKeys", _list_keys, lambda r, q, resent: cv.list_from_pb(r),
    "One page of keys in key order.",
)  # fmt: skip
REMOVE = Unary(
    "Remove", _remove, _removed, "Remove one object (refused while leased unless ``force``).",
    fast=13,
)  # fmt: skip
BATCH_REMOVE = Unary("BatchRemove", _keys_force, _errors, "``remove`` for each key.", fast=14)
REMOVE_BY_PREFIX = Unary(
    "RemoveByPrefix", _by_prefix, _many, "Remove every removable object under ``prefix``."
)
REMOVE_BY_REGEX = Unary(
    "RemoveByRegex", _by_regex, _many,
    "Remove every removable object whose key matches ``pattern`` (RE2 search).",
)  # fmt: skip
REMOVE_ALL = Unary("RemoveAll", _all, _many, "Remove every removable object.")
PIN = Unary(
    "Pin", _pin_req, _pin,
    "Pin a key or a prefix; ``expires_at`` is on this process's monotonic clock.",
)  # fmt: skip
UNPIN = Unary("Unpin", _unpin_req, _pin, "Clear the pin on exactly this key or prefix; returns it.")
LIST_PINS = Unary(
    "ListPins", _nothing(pb.ListPinsRequest),
    lambda r, q, resent: [cv.pin_from_pb(p, time.monotonic()) for p in r.pins],
    "Live pins (keys, then prefixes, sorted).",
)  # fmt: skip
GET_SNAPSHOT = Unary(
    "GetSnapshot", _nothing(pb.SnapshotRequest), lambda r, q, resent: cv.snapshot_from_pb(r),
    "The master's read-model (segments with their transport addresses).",
)  # fmt: skip

SURFACE: tuple[Unary[Any, Any], ...] = (
    MOUNT_SEGMENT, UNMOUNT_SEGMENT, DRAIN_SEGMENT, UNDRAIN_SEGMENT, LIST_SEGMENT_OBJECTS,
    ADD_REPLICA_START, ADD_REPLICA_END, ADD_REPLICA_REVOKE, DROP_REPLICA,
    TIER_OFFLOAD_DONE, TIER_STAGE_DONE, TIER_DROPPED,
    PUT_START, UPSERT, PUT_END, PUT_REVOKE, PUT_COMMIT,
    BATCH_PUT_START, BATCH_UPSERT, BATCH_PUT_END, BATCH_PUT_COMMIT, BATCH_PUT_REVOKE,
    GET_REPLICA_LIST, BATCH_GET_REPLICA_LIST, EXIST, BATCH_EXIST, STAT, LIST_KEYS,
    REMOVE, BATCH_REMOVE, REMOVE_BY_PREFIX, REMOVE_BY_REGEX, REMOVE_ALL,
    PIN, UNPIN, LIST_PINS, GET_SNAPSHOT,
)  # fmt: skip
"""Every unary call, in the order above."""
BY_HAND = ("Heartbeat", "GetReadiness", "WatchEvents")
"""``MasterService`` methods the clients write by hand (see the module's docstring)."""


# ------------------------------------------------------------ client methods
class _SyncInvoker(Protocol):
    client_id: str

    def invoke(self, call: Unary[Any, R], request: Message) -> R: ...


class _AsyncInvoker(Protocol):
    client_id: str

    def invoke(self, call: Unary[Any, R], request: Message) -> Awaitable[R]: ...


class SyncCall(Generic[P, R]):
    """A blocking client's method for one :class:`Unary` (a descriptor).

    ``put_end = SyncCall(PUT_END)`` in a class with ``client_id`` and ``invoke(call,
    request)`` makes ``client.put_end(key)`` build the request, send it through
    ``invoke`` (which follows the leader and picks the channel) and return the result.
    """

    def __init__(self, call: Unary[P, R]) -> None:
        self.call = call
        self.__doc__ = call.doc

    @overload
    def __get__(self, obj: None, owner: type) -> SyncCall[P, R]: ...
    @overload
    def __get__(self, obj: _SyncInvoker, owner: type) -> Callable[P, R]: ...
    def __get__(self, obj: _SyncInvoker | None, owner: type) -> Any:
        if obj is None:
            return self
        call = self.call

        def method(*args: P.args, **kwargs: P.kwargs) -> R:
            return obj.invoke(call, call.request(obj.client_id, *args, **kwargs))

        method.__doc__ = call.doc
        return method


class AsyncCall(Generic[P, R]):
    """An async client's method for one :class:`Unary` (a descriptor; as :class:`SyncCall`,
    a coroutine function: ``asyncio.create_task(client.exist(key))`` works)."""

    def __init__(self, call: Unary[P, R]) -> None:
        self.call = call
        self.__doc__ = call.doc

    @overload
    def __get__(self, obj: None, owner: type) -> AsyncCall[P, R]: ...
    @overload
    def __get__(self, obj: _AsyncInvoker, owner: type) -> Callable[P, Coroutine[Any, Any, R]]: ...
    def __get__(self, obj: _AsyncInvoker | None, owner: type) -> Any:
        if obj is None:
            return self
        call = self.call

        async def method(*args: P.args, **kwargs: P.kwargs) -> R:
            return await obj.invoke(call, call.request(obj.client_id, *args, **kwargs))

        method.__doc__ = call.doc
        return method
