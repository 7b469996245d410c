"""The master's fast control channel: the hot Store calls without a gRPC round trip.

One unary call through Python gRPC costs 600-800 us on the test machine, while the
master's own work for a lookup or a put is 5-15 us (docs/benchmarks.md, "Control
path"). The calls every ``put`` and ``get`` makes (exist, replica lookup, put
start/end/revoke, remove, and their batch forms) therefore also travel over a plain
TCP connection with a small framing of their own. The messages are the very protobuf
messages of ``store.proto`` and the master answers them with the very handlers that
serve gRPC (:class:`~.master_servicer.MasterServicer`): locking, journaling (a reply
waits until its change is durable), events, metrics and errors are the same by
construction. Everything else (mounts, heartbeats, admin, event streams, HA) stays on
gRPC.

Wire format, both directions: a 9-byte header ``>IBI`` (payload length, kind, call
id), then the payload.

* The first frame a client sends is ``HELLO`` with the control token of
  :func:`~.auth.control_token` as payload (empty without a cluster secret). The master
  answers ``OK``, or ``AUTH_FAILED`` and closes. Nothing else is read before it.
* A request's kind is its op code (:data:`OPS`), its payload the serialized request.
  (A client may send a request and do other work before it reads the reply: the
  store client reads a cached replica location while its lookup is under way.)
  The call id is the caller's; the reply carries it back, so calls may be pipelined.
  The reply's payload is the serialized response, except for the packed ops (batch
  replica lookups and batch put starts), whose replies are :mod:`.fast_packed`'s flat
  layout: per-key protobuf objects cost more than the master's work for the key. The
  single lookup's (``GetReplicaListVersioned``) also carries the version of the
  object's replica set (``ObjectMeta.version``, with the master's run id).
* A reply's kind is a status: ``OK`` (payload: the serialized response), ``REFUSED``
  (the master does not serve now: an HA follower, a leader whose lease is not
  confirmed; payload: why, in words; nothing was done, the client asks gRPC, which
  follows the leader) or ``BAD`` (unknown op, undecodable request, frame too large;
  payload: why).

A frame larger than :data:`MAX_FRAME` (the gRPC message limit) is refused and the
connection closed before its payload is buffered.

This module is the protocol (frames, the op table, the outcomes of a call); the master's
side is :mod:`.fast_control_server`, the client's :mod:`.fast_control_client`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from google.protobuf.message import Message

from mooncake_core.rpc import store_pb2 as pb

from .master_rpc import SURFACE

HEADER = struct.Struct(">IBI")
"""Payload length, kind (op code or status), call id."""
MAX_FRAME = 64 << 20
"""Largest payload either side accepts (the gRPC message limit of ``convert``)."""
MAX_HELLO = 256
"""Largest HELLO payload: nothing bigger is buffered before a connection is trusted."""
MAX_IN_FLIGHT = 64
"""Calls one connection may have running before the master stops reading from it."""

HELLO = 0
OK, REFUSED, BAD, AUTH_FAILED = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class Op:
    """One call of the fast channel: its handler's name and message types.

    ``response`` is ``None`` for a packed op: its handler returns the reply's bytes
    (:mod:`.fast_packed`), and the client decodes them.
    """

    code: int
    name: str
    request: type[Message]
    response: type[Message] | None
    rpc: str
    """The RPC this op serves (a packed op's is its protobuf twin's): the name its
    calls are counted under."""


_SERVICE = pb.DESCRIPTOR.services_by_name["MasterService"]


def _types(method: str) -> tuple[type[Message], type[Message]]:
    m = _SERVICE.methods_by_name[method]
    return getattr(pb, m.input_type.name), getattr(pb, m.output_type.name)


KEPT_OPS: tuple[Op, ...] = (
    Op(15, "BatchGetReplicaListPacked", pb.BatchKeysRequest, None, "BatchGetReplicaList"),
    Op(20, "GetReplicaListPacked", pb.GetReplicaListRequest, None, "GetReplicaList"),
)
"""Ops no call of this version sends, still answered for clients of an earlier one
(GetReplicaList's packed op is now ``GetReplicaListVersioned``, 22; BatchGetReplicaList's
``BatchGetReplicaListRun``, 27)."""

OPS: tuple[Op, ...] = tuple(
    sorted(
        [Op(c.fast, c.method, *_types(c.method), c.method) for c in SURFACE if c.fast]
        + [
            Op(c.packed.code, c.packed.name, _types(c.method)[0], None, c.method)
            for c in SURFACE
            if c.packed is not None
        ]
        + list(KEPT_OPS),
        key=lambda op: op.code,
    )
)
"""The hot calls: the calls of :data:`~.master_rpc.SURFACE` with a fast op code (and
the packed ops answering some of them), message types from ``store.proto``."""
OP_BY_CODE = {op.code: op for op in OPS}
OP_BY_NAME = {op.name: op for op in OPS}


def frame(kind: int, call_id: int, payload: bytes) -> bytes:
    """One frame: header and payload."""
    return HEADER.pack(len(payload), kind, call_id) + payload


# ------------------------------------------------------------- what a call can end in
class FastRefused(Exception):
    """The master does not serve the fast channel now; nothing was done."""


class FastUnsent(Exception):
    """The call never reached the master (no connection): nothing was done."""


class FastUnknownOp(Exception):
    """The master does not know this op (an older master); nothing was done."""


class FastLost(Exception):
    """The call was sent but no reply came: the master may or may not have applied it."""
