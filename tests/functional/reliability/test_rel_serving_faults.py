"""A secured serving cluster (master, 2 nodes, conductor, 1 prefill, 2 decode): a decode
worker SIGKILLed mid-request, worker RPC authentication, and no secret in any log or audit row.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import message_factory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rel_proto_fuzz import CLEAN_STATUS, message
from serving_cluster import Cluster, run_cluster

from mooncake_core.rpc import worker_pb2 as wpb
from mooncake_core.rpc import worker_pb2_grpc as wpbg
from mooncake_core.store.auth import auth_metadata, control_token
from mooncake_core.worker.service import probe_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]
SECRET = b"rel-serving-secret-51c0ffee9d"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("rel_serving")
    with run_cluster(tmp, prefill=1, decode=2, secret=SECRET) as cl:
        yield cl


def _audit_row(cl: Cluster, rid: str, timeout: float = 10) -> tuple[Any, ...] | None:
    db = Path(cl.config["state_dir"]) / "audit.db"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if db.exists():
            with sqlite3.connect(db) as con:
                row = con.execute(
                    "select admitted, chosen_decode, actual_ttft_s, actual_tbt_s from decisions "
                    "where request_id = ?",
                    (rid,),
                ).fetchone()
            if row is not None:
                return tuple(row)
        time.sleep(0.1)
    return None


def _complete(cl: Cluster, prompt: str, max_tokens: int = 4) -> httpx.Response:
    body = {"prompt": prompt, "max_tokens": max_tokens}
    return httpx.post(cl.url + "/v1/completions", json=body, timeout=60)


@pytest.mark.parametrize("role", ["prefill_workers", "decode_workers"])
def test_rel_worker_rpc_refuses_missing_and_wrong_token(cluster: Cluster, role: str) -> None:
    addr = f"127.0.0.1:{cluster.config[role][0]['rpc_port']}"
    assert probe_worker(addr, 2.0, SECRET)
    assert not probe_worker(addr, 2.0)
    assert not probe_worker(addr, 2.0, b"wrong-secret")
    with grpc.insecure_channel(addr) as ch:
        stub = wpbg.WorkerStub(ch)
        for md in ((), auth_metadata(b"wrong-secret")):
            with pytest.raises(grpc.RpcError) as ei:
                stub.Health(wpb.HealthRequest(), metadata=md, timeout=5)
            assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_rel_decode_worker_killed_mid_request(cluster: Cluster) -> None:
    r = _complete(cluster, "warm up the path")
    assert r.status_code == 200, r.text
    events: list[str] = []
    victim = None
    status = None
    t0 = time.monotonic()
    try:
        with httpx.stream(
            "POST",
            cluster.url + "/v1/completions",
            json={"prompt": "kill me while I decode", "max_tokens": 900, "stream": True},
            timeout=60,
        ) as resp:
            status = resp.status_code
            for line in resp.iter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(line[6:])
                if victim is None:
                    rid = json.loads(line[6:])["id"]
                    row = _audit_row(cluster, rid)
                    assert row is not None and row[1], f"no audit row naming a decode for {rid}"
                    victim = row[1]
                    cluster.procs[victim].send_signal(signal.SIGKILL)
                    cluster.procs[victim].wait(10)
    except httpx.HTTPError as e:  # a dropped connection is an error the caller sees
        events.append(f"transport error: {e!r}")
    elapsed = time.monotonic() - t0
    assert status == 200 and victim is not None
    # The caller learns that it failed (an error event, then the stream closes), in time.
    body = [e for e in events if e != "[DONE]"]
    assert "error" in body[-1], (
        f"stream ended without an error after its worker died: {events[-3:]}"
    )
    assert len(body) < 900, "all 900 tokens arrived: the kill came too late to test anything"
    assert elapsed < 45, f"failure took {elapsed:.1f}s to reach the caller"

    # The conductor stops routing to the dead worker: new requests succeed on the other.
    deadline = time.monotonic() + 20
    ok = 0
    while ok < 5:
        r = _complete(cluster, f"after the kill {ok} {time.monotonic()}")
        if r.status_code == 200:
            row = _audit_row(cluster, r.json()["id"])
            assert row is not None and row[1] != victim, (victim, row)
            ok += 1
        elif time.monotonic() > deadline:
            raise AssertionError(f"no recovery 20s after {victim} died: {r.status_code} {r.text}")


def test_rel_secret_never_in_cluster_logs_or_audit(cluster: Cluster) -> None:
    r = _complete(cluster, "one more for the logs")
    assert r.status_code == 200, r.text
    needles = [SECRET, control_token(SECRET).encode()]
    scanned = 0
    for root in (cluster.logs, Path(cluster.config["state_dir"])):
        assert root is not None
        for f in root.rglob("*"):
            if f.is_file():
                body = f.read_bytes()
                scanned += len(body)
                for n in needles:
                    assert n not in body, f"{f} contains {n!r}"
    with sqlite3.connect(Path(cluster.config["state_dir"]) / "audit.db") as con:
        tables = [t for (t,) in con.execute("select name from sqlite_master where type='table'")]
        for t in tables:
            for row in con.execute(f'select * from "{t}"'):  # table names come from sqlite_master
                text = repr(row)
                for n in needles:
                    assert n.decode() not in text, f"audit table {t} holds {n!r}"
    assert scanned > 10_000, "too little log/state to prove anything"


_WSVC = wpb.DESCRIPTOR.services_by_name["Worker"]


def _worker_call(ch: grpc.Channel, name: str, req: Any) -> list[Any]:
    m = _WSVC.methods_by_name[name]
    resp = message_factory.GetMessageClass(m.output_type)
    path = f"/{_WSVC.full_name}/{name}"
    kw: dict[str, Any] = {
        "request_serializer": type(req).SerializeToString,
        "response_deserializer": resp.FromString,
    }
    md = auth_metadata(SECRET)
    if m.server_streaming:
        call = ch.unary_stream(path, **kw)(req, metadata=md, timeout=10)
        out = []
        for ev in call:  # a few events prove the stream works; then let it go
            out.append(ev)
            if len(out) >= 3:
                call.cancel()
                break
        return out
    return [ch.unary_unary(path, **kw)(req, metadata=md, timeout=10)]


def test_rel_worker_stage_forward_validates_its_request(cluster: Cluster) -> None:
    """Found by the fuzzer: an empty request used to reach numpy.frombuffer (UNKNOWN)."""
    w = cluster.config["prefill_workers"][0]
    addr = f"127.0.0.1:{w['rpc_port']}"
    with grpc.insecure_channel(addr) as ch, pytest.raises(grpc.RpcError) as ei:
        _worker_call(ch, "StageForward", wpb.StageForwardRequest())
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT, ei.value.details()


# Runs last in the module: a crash here cannot take the other tests' workers down.
@settings(
    derandomize=True,
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_rel_fuzzed_worker_rpcs_answer_with_clear_codes(
    cluster: Cluster, data: st.DataObject
) -> None:
    live = [
        w
        for role in ("prefill_workers", "decode_workers")
        for w in cluster.config[role]
        if cluster.procs[w["name"]].poll() is None  # the kill test took one decode worker
    ]
    w = data.draw(st.sampled_from(live), label="worker")
    # StageForward has its own validation test (test_rel_worker_stage_forward_validates_its_request);
    # random activation bytes never match rows * hidden, so fuzzing it only repeats that check.
    names = sorted(m.name for m in _WSVC.methods if m.name != "StageForward")
    name = data.draw(st.sampled_from(names), label="rpc")
    # Small token ids and counts: the point is the handlers' validation, not a 2**32-token
    # prompt that would legitimately take minutes on the CPU model.
    over = {
        "tokens": st.integers(0, 300) | st.integers(0, 2**32 - 1),
        "max_tokens": st.integers(0, 8),
        "num_tokens": st.integers(0, 64) | st.integers(0, 2**32 - 1),
        # Watch streams three reports `interval_s` apart; longer would only hit the test's
        # own 10 s deadline.
        "interval_s": st.floats(0.0, 1.0),
    }
    req = data.draw(message(_WSVC.methods_by_name[name].input_type, over=over), label="request")
    with grpc.insecure_channel(f"127.0.0.1:{w['rpc_port']}") as ch:
        try:
            _worker_call(ch, name, req)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED:
                return
            assert e.code() in CLEAN_STATUS | {grpc.StatusCode.UNAVAILABLE}, (
                f"{w['name']} {name}({req}) -> {e.code()}: {e.details()}"
            )
            assert e.details(), f"{name}: status {e.code()} without a message"
    assert cluster.procs[w["name"]].poll() is None, f"{w['name']} died on {name}({req})"
