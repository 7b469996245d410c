"""Blocking master calls for the store client's data path.

The store :class:`~mooncake_core.store.client.Client` offers a synchronous API (the
upstream Python shape). Every put and get needs one or two master round trips; a
blocking gRPC channel called from the user's thread costs about half of what a hop
through the asyncio loop that runs :class:`MasterClient` costs (measured 0.7 ms vs
1.4 ms per call on the loaded 2-core machine), so the hot calls use this wrapper and
only mounting and heartbeats go through ``MasterClient`` on the background loop.

Its calls, their requests and their replies come from the master's RPC surface
(``master_rpc.py``), as ``MasterClient``'s do: the same signatures, the same errors
(the :class:`StoreError` classes the core raises) and the same rules for a resent call.

With an HA master group the address is ``etcd://host:port[/cluster]``: the leader is read
from etcd's leader key (``ha/discovery.py``) and followed on change, like
``MasterClient.from_etcd`` does (a
follower's NOT_LEADER refusal names the leader in ``mooncake-leader`` trailing metadata;
a dead leader is replaced by asking etcd again), with backoff for up to the call timeout.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from mooncake_core.rpc import store_pb2 as pb
from mooncake_core.rpc import store_pb2_grpc as pb_grpc

from .. import convert as cv
from .. import master_rpc as rpc
from ..auth import auth_metadata
from ..errors import AuthError, ErrorCode, UnavailableError
from ..fast_control import FastLost, FastRefused, FastUnknownOp, FastUnsent
from ..fast_control_client import UNIX, FastChannels, FastConnection, unix_reachable
from ..ha.discovery import SyncLeaderResolver, split_master_url
from ..ha.follow import Failover, leader_hint
from ..master_rpc import SyncCall, Unary
from ..results import GetResult

R = TypeVar("R")
U = TypeVar("U")

log = logging.getLogger(__name__)


class _AskGrpc(enum.Enum):
    """A packed call that did not happen over the fast channel: send it over gRPC."""

    ASK_GRPC = enum.auto()


ASK_GRPC = _AskGrpc.ASK_GRPC


@dataclass(slots=True)
class FastSent:
    """A call sent on the fast channel whose reply is not read yet."""

    name: str
    address: str
    """The gRPC address of the master it went to."""
    target: str
    """That master's fast channel."""
    conn: FastConnection
    request: object
    call_id: int = 0


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
        fast_unix: on the master's host, use the fast channel's abstract Unix socket
            (``fast_unix`` in its readiness) instead of its TCP port.
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
        fast_unix: bool = True,
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
        self._fast_unix = fast_unix
        self._fast_at: dict[str, str] = {}
        """gRPC address -> its master's fast channel address, once learnt."""
        self._fast_off: dict[str, float] = {}
        """gRPC address -> monotonic time before which its fast channel is not tried."""
        self._put_timeout: dict[str, float] = {}
        """gRPC address -> its master's ``put_timeout_s``, learnt with its fast channel."""
        self.fast_calls = 0
        """Calls answered over the fast channel."""
        self._unpacked: set[str] = set()
        """Fast-channel addresses whose master lacks the packed ops (an older master)."""
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

    def _call_packed(self, name: str, req: object, decode: Callable[[bytes], U]) -> U | _AskGrpc:
        """``name``, a packed op, over the fast channel, its reply decoded; ``ASK_GRPC``:
        ask gRPC instead (then ``_tls.retried`` says whether the call may have been
        applied). A decoded reply may be ``None`` (PutCommit without a grant)."""
        if not self._packed_usable():
            return ASK_GRPC
        raw = self._call_fast(name, req)
        if raw is None:
            return ASK_GRPC
        if not isinstance(raw, bytes):  # unreachable: packed ops answer bytes
            raise TypeError(f"{name}: the fast channel answered {type(raw).__name__}")
        return self._decoded(name, raw, decode)

    def _decoded(self, name: str, raw: bytes, decode: Callable[[bytes], U]) -> U | _AskGrpc:
        """``decode(raw)``, a packed op's reply; ``ASK_GRPC`` (logged): it does not
        decode, ask gRPC (``_tls.retried``: the master may have applied it)."""
        try:
            return decode(raw)
        except ValueError as exc:
            log.warning("store client %s: %s: %s; asking gRPC", self.client_id, name, exc)
            self._tls.retried = True
            return ASK_GRPC

    def _packed_usable(self) -> bool:
        """Whether a packed op may go over the fast channel now (a new call: resets
        ``_tls.retried``)."""
        self._tls.retried = False
        if self._fast is None:
            return False
        target = self._fast_address(self.address)
        return target is not None and target not in self._unpacked

    def _call(self, name: str, req: object, *, resent: bool = False, fast: bool = False) -> Any:
        """One unary call of method ``name``; on UNAVAILABLE follow the leader (the
        NOT_LEADER hint, else etcd) with backoff until ``timeout_s`` has passed. A fixed
        address does not retry. ``fast``: try the fast channel first.

        ``self._tls.retried`` tells the caller whether the request was sent more than once
        (``resent``: this call already resends one whose outcome is unknown).
        """
        self._tls.retried = resent
        if fast and self._fast is not None:
            reply = self._call_fast(name, req)
            if reply is not None:
                return reply
        fn = getattr(self._stub, name)
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
            fn = getattr(self._stub, name)
            self._tls.retried = True

    def _call_fast(self, name: str, req: object) -> object | None:
        """``name`` over the fast channel; ``None``: ask gRPC instead (nothing was done,
        or the outcome is unknown: then ``_tls.retried`` is set, as for a resend)."""
        sent = self._send_fast(name, req)
        return None if sent is None else self._receive_fast(sent)

    def _send_fast(self, name: str, req: object) -> FastSent | None:
        """Send ``name`` over the fast channel without waiting; ``None``: ask gRPC."""
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
        sent = FastSent(name, address, target, conn, req)
        try:
            sent.call_id = conn.send(name, req)  # type: ignore[arg-type]
        except FastUnsent as exc:
            self._fast_failed(sent, exc)
            return None
        return sent

    def _receive_fast(self, sent: FastSent) -> object | None:
        """The reply to what :meth:`_send_fast` sent; ``None``: ask gRPC (see
        :meth:`_call_fast`)."""
        try:
            reply = sent.conn.receive(sent.name, sent.call_id)
        except (FastUnknownOp, FastRefused, FastLost) as exc:
            self._fast_failed(sent, exc)
            return None
        self.fast_calls += 1
        return reply

    def _fast_failed(self, sent: FastSent, exc: Exception) -> None:
        if isinstance(exc, FastUnknownOp):
            self._unpacked.add(sent.target)  # nothing was done; an older master
        elif isinstance(exc, FastRefused):
            # Not serving (a follower, an unconfirmed lease): gRPC follows the leader.
            self._fast_at.pop(sent.address, None)
        else:
            assert self._fast is not None
            self._fast.drop(sent.conn)
            self._fast_at.pop(sent.address, None)
            if isinstance(exc, FastLost):
                self._tls.retried = True  # it may have been applied

    def lookup_start(self, key: str) -> FastSent | None:
        """Ask where ``key`` is (:meth:`get_replica_list`) over the fast channel without
        waiting for the answer, so the caller can read meanwhile; ``None``: the fast
        channel cannot take it now (call :meth:`get_replica_list`)."""
        if not self._packed_usable():
            return None
        packed = rpc.GET_REPLICA_LIST.packed
        assert packed is not None
        return self._send_fast(packed.name, rpc.GET_REPLICA_LIST.request(self.client_id, key))

    def lookup_finish(self, sent: FastSent) -> GetResult | None:
        """The answer to :meth:`lookup_start` (with its ``version``); ``None``: the
        fast channel failed meanwhile (call :meth:`get_replica_list`).

        Raises:
            StoreError: the master's answer (no such key, not ready, ...).
        """
        raw = self._receive_fast(sent)
        if raw is None:
            return None
        packed = rpc.GET_REPLICA_LIST.packed
        assert packed is not None and isinstance(raw, bytes)
        got = self._decoded(sent.name, raw, lambda b: packed.read(sent.request, b))
        return None if isinstance(got, _AskGrpc) else got

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
        if r is not None and r.put_timeout_s > 0:
            self._put_timeout[address] = r.put_timeout_s
        if r is None or not (r.serving and r.fast_port):
            self._fast_off[address] = time.monotonic() + self.FAST_RETRY_S
            return None
        target = f"{address.rpartition(':')[0]}:{r.fast_port}"
        # On the master's host the same channel answers on a Unix socket, ~20 us a round
        # trip cheaper than loopback TCP; elsewhere its random name is not found.
        if self._fast_unix and r.fast_unix and unix_reachable(r.fast_unix, min(1.0, self._timeout)):
            target = UNIX + r.fast_unix
        self._fast_at[address] = target
        return target

    def write_window(self, own_s: float) -> float:
        """How long after asking for a PutStart a write may still start a transfer: the
        smaller of ``own_s`` (this client's ``put_timeout_s``) and the master's, when
        its readiness said it (docs/store.md, "Writes never land in another object's
        bytes")."""
        theirs = self._put_timeout.get(self.address)
        return own_s if theirs is None else min(own_s, theirs)

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

    # ------------------------------------------------- the calls (master_rpc)
    def invoke(self, call: Unary[Any, R], request: Message) -> R:
        """Send ``call``'s ``request``: its packed op or its op over the fast channel when
        the master has one, else gRPC, following the leader; then read the reply."""
        self._tls.retried = False
        if call.packed is not None:
            packed = call.packed
            got = self._call_packed(packed.name, request, lambda b: packed.read(request, b))
            if not isinstance(got, _AskGrpc):
                return got
        reply = self._call(call.method, request, resent=self._tls.retried, fast=call.fast > 0)
        return call.reply(reply, request, self._tls.retried)

    mount_segment = SyncCall(rpc.MOUNT_SEGMENT)
    unmount_segment = SyncCall(rpc.UNMOUNT_SEGMENT)
    drain_segment = SyncCall(rpc.DRAIN_SEGMENT)
    undrain_segment = SyncCall(rpc.UNDRAIN_SEGMENT)
    list_segment_objects = SyncCall(rpc.LIST_SEGMENT_OBJECTS)
    add_replica_start = SyncCall(rpc.ADD_REPLICA_START)
    add_replica_end = SyncCall(rpc.ADD_REPLICA_END)
    add_replica_revoke = SyncCall(rpc.ADD_REPLICA_REVOKE)
    drop_replica = SyncCall(rpc.DROP_REPLICA)
    tier_offload_done = SyncCall(rpc.TIER_OFFLOAD_DONE)
    tier_stage_done = SyncCall(rpc.TIER_STAGE_DONE)
    tier_dropped = SyncCall(rpc.TIER_DROPPED)
    put_start = SyncCall(rpc.PUT_START)
    upsert = SyncCall(rpc.UPSERT)
    put_end = SyncCall(rpc.PUT_END)
    put_revoke = SyncCall(rpc.PUT_REVOKE)
    put_commit = SyncCall(rpc.PUT_COMMIT)
    batch_put_start = SyncCall(rpc.BATCH_PUT_START)
    batch_upsert = SyncCall(rpc.BATCH_UPSERT)
    batch_put_end = SyncCall(rpc.BATCH_PUT_END)
    batch_put_commit = SyncCall(rpc.BATCH_PUT_COMMIT)
    batch_put_revoke = SyncCall(rpc.BATCH_PUT_REVOKE)
    get_replica_list = SyncCall(rpc.GET_REPLICA_LIST)
    batch_get_replica_list = SyncCall(rpc.BATCH_GET_REPLICA_LIST)
    exist = SyncCall(rpc.EXIST)
    batch_exist = SyncCall(rpc.BATCH_EXIST)
    stat = SyncCall(rpc.STAT)
    list_keys = SyncCall(rpc.LIST_KEYS)
    remove = SyncCall(rpc.REMOVE)
    batch_remove = SyncCall(rpc.BATCH_REMOVE)
    remove_by_prefix = SyncCall(rpc.REMOVE_BY_PREFIX)
    remove_by_regex = SyncCall(rpc.REMOVE_BY_REGEX)
    remove_all = SyncCall(rpc.REMOVE_ALL)
    pin = SyncCall(rpc.PIN)
    unpin = SyncCall(rpc.UNPIN)
    list_pins = SyncCall(rpc.LIST_PINS)
    get_snapshot = SyncCall(rpc.GET_SNAPSHOT)
