"""A real master with a cluster secret: fuzzed gRPC requests, refused callers, no leaked secret."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rel_proto_fuzz import CLEAN_STATUS, message
from store_client_procs import Cluster, make_client, start_cluster, stop

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
    # Capacities stay below 2**40: a fuzzed MountSegment with an empty transport_address
    # (metadata only) is accepted, and a huge one would draw the later tests' puts onto it. Huge capacities have their own test (test_rel_huge_capacities_are_refused).
    req = data.draw(message(UNARY[name], over={"capacity": st.integers(0, 2**40)}), label="request")
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


def _undrain_real_node(secure: Cluster, channel: grpc.Channel, timeout: float = 30.0) -> None:
    """Undo a fuzzed DrainSegment or UnmountSegment of the real node: an authenticated
    caller may drain or unmount it (short names like "n0" are common fuzz strings) and the
    master rightly obeys. An expired segment comes back when the node's heartbeat finds the
    master forgot it and remounts; until then it is UNMOUNTING or unknown, and the call is
    repeated. An operator unmount leaves the client known, so the node never remounts on
    its own (an operator brings it back by restarting it): after 5 s without the segment
    the node is restarted, as an operator would."""
    deadline = time.monotonic() + timeout
    missing_since: float | None = None
    while True:
        r = _rpc(channel, "UndrainSegment")(
            pb.SegmentRequest(name="n0"), metadata=auth_metadata(SECRET), timeout=10
        )
        if r.error.code == ErrorCode.OK:
            return
        retry = r.error.code in (ErrorCode.INVALID_STATE, ErrorCode.SEGMENT_NOT_FOUND)
        assert retry and time.monotonic() < deadline, r.error.message
        if r.error.code != ErrorCode.SEGMENT_NOT_FOUND:
            missing_since = None
        elif missing_since is None:
            missing_since = time.monotonic()
        elif time.monotonic() - missing_since > 5.0:
            stop(secure.nodes.pop("n0"))
            secure.start_node("n0")
            missing_since = None
        time.sleep(0.25)


def test_rel_master_healthy_after_fuzzing(secure: Cluster, channel: grpc.Channel) -> None:
    # Runs after the fuzz test (file order): the process is alive and still serves data.
    assert secure.master.proc.poll() is None, "".join(secure.master.log)[-3000:]
    _undrain_real_node(secure, channel)
    with make_client(secure, secret=SECRET, transport="tcp") as c:
        # Fuzzed MountSegments may have left metadata-only segments (empty transport
        # address); place on the real node.
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


def test_rel_secret_and_token_never_logged(secure: Cluster, channel: grpc.Channel) -> None:
    # Exercise failures that log (refused calls, bad requests) before grepping.
    _undrain_real_node(secure, channel)
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


def test_rel_huge_capacities_are_refused(tmp_path: Path) -> None:
    """Found by the fuzzer: capacities near 2**64 used to overflow the snapshot's totals,
    breaking GetSnapshot and every client's segment lookup."""
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
                assert r.error.code == ErrorCode.INVALID_PARAMS
                assert "segment capacity must be in" in r.error.message
            snap = stub.GetSnapshot(pb.SnapshotRequest(), timeout=10)
            assert snap.total_capacity_bytes == 0 and len(snap.segments) == 0
    finally:
        c.close()
