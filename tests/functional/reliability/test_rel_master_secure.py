"""A real master with a cluster secret: fuzzed gRPC requests, refused callers, no leaked secret."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_client_procs import Cluster, make_client, start_cluster

from mooncake_core.rpc import store_pb2 as pb
from mooncake_core.rpc import store_pb2_grpc as pb_grpc
from mooncake_core.store import ReplicateConfig
from mooncake_core.store.auth import auth_metadata, control_token
from mooncake_core.store.errors import ErrorCode

pytestmark = pytest.mark.integration
SECRET = b"rel-secret-7f3a9c2e41d8b6"
ON_N0 = ReplicateConfig(preferred_segments=("n0",))

# Unary RPCs of MasterService, each with its request type (WatchEvents streams: skipped).
_SERVICE = pb.DESCRIPTOR.services_by_name["MasterService"]
UNARY = {
    m.name: m.input_type
    for m in _SERVICE.methods
    if not m.server_streaming and not m.client_streaming
}
# Codes a handler may legitimately answer with; UNKNOWN/INTERNAL mean it crashed.
CLEAN_STATUS = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.OUT_OF_RANGE,
}

_text = st.one_of(
    st.text(max_size=24),
    st.sampled_from(["", "n0", "n0/dram", "k", "(", "[a-", "a" * 300, "\x00", "*", "../x"]),
)
_U64 = st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 4096, 2**63, 2**64 - 1]))


def _field(f: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    t = f.type
    if t == FieldDescriptor.TYPE_STRING:
        s: st.SearchStrategy[Any] = _text
    elif t == FieldDescriptor.TYPE_BYTES:
        s = st.binary(max_size=32)
    elif t == FieldDescriptor.TYPE_BOOL:
        s = st.booleans()
    elif f.name == "capacity":
        # Huge capacities hit a known master bug (test_rel_huge_capacities_break_snapshot);
        # kept below it so the rest of the surface is still fuzzed.
        s = st.integers(0, 2**40)
    elif t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        s = _U64
    elif t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        s = st.integers(0, 2**32 - 1)
    elif t in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64):
        s = st.integers(-(2**63), 2**63 - 1)
    elif t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32):
        s = st.integers(-(2**31), 2**31 - 1)
    elif t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        s = st.floats(
            allow_nan=True, allow_infinity=True, width=32 if t == FieldDescriptor.TYPE_FLOAT else 64
        )
    elif t == FieldDescriptor.TYPE_ENUM and f.enum_type is not None:
        s = st.sampled_from([v.number for v in f.enum_type.values])
    elif t == FieldDescriptor.TYPE_MESSAGE and f.message_type is not None and depth < 3:
        s = message(f.message_type, depth + 1)
    else:
        return st.nothing()
    if f.is_repeated:
        return st.lists(s, max_size=4)
    return s


def message(desc: Descriptor, depth: int = 0) -> st.SearchStrategy[Any]:
    """A strategy of ``desc`` messages with any subset of fields set to random values."""
    cls = message_factory.GetMessageClass(desc)
    fields = {f.name: _field(f, depth) for f in desc.fields}
    fields = {k: v for k, v in fields.items() if not v.is_empty}
    return st.fixed_dictionaries({}, optional=fields).map(lambda kw: _build(cls, kw))


def _build(cls: Any, kw: dict[str, Any]) -> Any:
    msg = cls()
    for k, v in kw.items():
        f = msg.DESCRIPTOR.fields_by_name[k]
        if f.is_repeated:
            getattr(msg, k).extend(v)
        elif f.type == FieldDescriptor.TYPE_MESSAGE:
            getattr(msg, k).CopyFrom(v)
        else:
            setattr(msg, k, v)
    return msg


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(tmp_path_factory.mktemp("rel_secure"), nodes=("n0",), secret=SECRET)
    yield c
    c.close()


@pytest.fixture(scope="module")
def channel(secure: Cluster) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(secure.address) as ch:
        yield ch


def _metrics(c: Cluster) -> str:
    port = c.master.match[3]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return str(r.read().decode())


def _auth_failures(c: Cluster, rpc: str) -> float:
    m = re.search(rf'master_auth_failures_total\{{rpc="{rpc}"\}} ([\d.e+]+)', _metrics(c))
    return float(m.group(1)) if m else 0.0


def _rpc(channel: grpc.Channel, name: str) -> Any:
    req_cls = message_factory.GetMessageClass(UNARY[name])
    resp = message_factory.GetMessageClass(_SERVICE.methods_by_name[name].output_type)
    return channel.unary_unary(
        f"/{_SERVICE.full_name}/{name}",
        request_serializer=req_cls.SerializeToString,
        response_deserializer=resp.FromString,
    )


@settings(
    derandomize=True,
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_rel_fuzzed_master_rpcs_answer_with_clear_codes(
    secure: Cluster, channel: grpc.Channel, data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(sorted(UNARY)), label="rpc")
    req = data.draw(message(UNARY[name]), label="request")
    try:
        resp = _rpc(channel, name)(req, metadata=auth_metadata(SECRET), timeout=10)
    except grpc.RpcError as e:
        assert e.code() in CLEAN_STATUS, f"{name}({req}) -> {e.code()}: {e.details()}"
        assert e.details(), f"{name}: status {e.code()} without a message"
        return
    # Errors travel in the reply: a known code, and a message whenever it is not OK.
    for err in _errors(resp):
        code = ErrorCode(err.code)
        assert code != ErrorCode.INTERNAL, f"{name}({req}) -> INTERNAL: {err.message}"
        if code != ErrorCode.OK:
            assert err.message, f"{name}: {code.name} without a message"


def _errors(resp: Any) -> list[Any]:
    out = []
    if "error" in resp.DESCRIPTOR.fields_by_name and resp.HasField("error"):
        out.append(resp.error)
    for f in resp.DESCRIPTOR.fields:
        if f.name == "errors":
            out.extend(resp.errors)
        elif f.name == "results" and f.message_type and "error" in f.message_type.fields_by_name:
            out.extend(r.error for r in resp.results)
    return out


def test_rel_master_healthy_after_fuzzing(secure: Cluster, channel: grpc.Channel) -> None:
    # Runs after the fuzz test (file order): the process is alive and still serves data.
    assert secure.master.proc.poll() is None, "".join(secure.master.log)[-3000:]
    with make_client(secure, secret=SECRET, transport="tcp") as c:
        # Fuzzed MountSegments left bogus segments (the master does not check transport
        # addresses); place on the real node.
        c.put("rel/after-fuzz", b"still here" * 100, ON_N0)
        assert c.get("rel/after-fuzz") == b"still here" * 100


@pytest.mark.parametrize(
    "rpc", ["ListKeys", "PutStart", "MountSegment", "GetSnapshot", "RemoveAll"]
)
def test_rel_master_refuses_and_counts_missing_and_wrong_tokens(
    secure: Cluster, channel: grpc.Channel, rpc: str
) -> None:
    before = _auth_failures(secure, rpc)
    call = _rpc(channel, rpc)
    for md in ((), auth_metadata(b"wrong-secret"), (("authorization", "Bearer "),)):
        with pytest.raises(grpc.RpcError) as ei:
            call(message_factory.GetMessageClass(UNARY[rpc])(), metadata=md, timeout=10)
        assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert _auth_failures(secure, rpc) == before + 3


def test_rel_secret_and_token_never_logged(secure: Cluster) -> None:
    # Exercise failures that log (refused calls, bad requests) before grepping.
    with make_client(secure, secret=SECRET, transport="tcp") as c:
        c.put("rel/leak", b"x" * 4096, ON_N0)
        assert c.get("rel/leak") == b"x" * 4096
    needles = [SECRET, control_token(SECRET).encode()]
    logs = {"master": "".join(secure.master.log)}
    logs.update({f"node {n}": "".join(p.log) for n, p in secure.nodes.items()})
    assert logs["master"], "the master logged nothing: the grep would prove nothing"
    for who, text in logs.items():
        for n in needles:
            assert n.decode() not in text, f"{who} log contains {n!r}"
    state = Path(secure.config).parent
    for f in state.rglob("*"):
        if f.is_file() and f.name != "secret":
            body = f.read_bytes()
            for n in needles:
                assert n not in body, f"{f} contains {n!r}"


@pytest.mark.xfail(
    strict=True,
    reason="master bug: MountSegment accepts capacity up to 2**64-1 with no bound; once the "
    "segments' total exceeds uint64, GetSnapshot (and every client's segment lookup) fails "
    "with UNKNOWN 'Value out of range' until the segments go away",
)
def test_rel_huge_capacities_break_snapshot(tmp_path: Path) -> None:
    c = start_cluster(tmp_path, nodes=())
    try:
        with grpc.insecure_channel(c.address) as ch:
            stub = pb_grpc.MasterServiceStub(ch)
            for i in range(2):
                req = pb.MountSegmentRequest(
                    client_id=f"fuzz{i}",
                    name=f"big{i}",
                    capacity=2**64 - 1,
                    transport_address="127.0.0.1:1",
                )
                r = stub.MountSegment(req, timeout=10)
                if r.error.code != ErrorCode.OK:
                    return  # refused with a clear error: the fix
            stub.GetSnapshot(pb.SnapshotRequest(), timeout=10)  # UNKNOWN today
    finally:
        c.close()
