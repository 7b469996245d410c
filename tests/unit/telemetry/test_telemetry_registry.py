"""Registry document, Prometheus text (parsed back), and the HTTP helpers."""

from __future__ import annotations

import json
import urllib.request
from enum import Enum

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mooncake_core.telemetry import (
    SCHEMA,
    ComponentInfo,
    IfaceCounters,
    TelemetryRegistry,
    exposition,
    serve_telemetry,
    telemetry_routes,
    to_plain,
)
from mooncake_core.transfer import NicStats, TransferSnapshot, TransportStats


def _nic(addr: str, sent: int, recv: int, errors: int = 0) -> NicStats:
    return NicStats(addr, sent, recv, 3, 4, errors, 1, False, None, 0, 0, 0, 2)


TE = TransferSnapshot(
    segment_name="127.0.0.1:1/x",
    taken_at=1.0,
    nics=(_nic("127.0.0.1", 1000, 2000, errors=5), _nic("10.0.0.1", 10, 20)),
    transports=(TransportStats("tcp", 7, 1, 3000, 9),),
    endpoints=2,
    pending_requests=0,
)
CONDUCTOR = {
    "policy": "kvcache_centric",
    "decisions": 12,
    "admitted": 10,
    "rejected": [["decode overloaded", 2]],
    "in_flight": 1,
    "ttft_mae_s": 0.25,
    "prefill": [{"name": "prefill-0", "queued": 2, "running": 1, "queue_time_s": 0.5}],
    "decode": [{"name": "decode-0", "batch": 3, "max_batch": 8, "context_tokens": 99}],
}
OS = (IfaceCounters("lo", 100, 1, 0, 0, 200, 2, 0, 0),)


def _registry() -> TelemetryRegistry:
    reg = TelemetryRegistry(
        ComponentInfo("store-0", "store", version="0.1", pid=42, hostname="h", started_at=10.0),
        os_counters=lambda: OS,
        iface_map=lambda: {"127.0.0.1": "lo"},
    )
    reg.register("transfer", lambda: TE)
    reg.register("conductor", lambda: CONDUCTOR)
    return reg


def test_document_shape():
    doc = _registry().document(now=15.5)
    assert doc["schema"] == SCHEMA
    assert doc["component"] == {
        "name": "store-0",
        "role": "store",
        "version": "0.1",
        "pid": 42,
        "hostname": "h",
        "started_at": 10.0,
        "uptime_s": 5.5,
    }
    te = doc["snapshots"]["transfer"]
    assert te["kind"] == "transfer"
    assert te["data"]["nics"][0]["bytes_sent"] == 1000
    assert doc["os_nics"][0]["iface"] == "lo"
    assert doc["nic_ifaces"] == {"127.0.0.1": "lo"}
    json.dumps(doc)  # plain JSON all the way down


def test_failing_source_is_reported_not_raised():
    reg = _registry()

    def broken() -> object:
        raise RuntimeError("engine closed")

    reg.register("worker", broken, kind="engine")
    entry = reg.document(now=11.0)["snapshots"]["worker"]
    assert entry == {"kind": "engine", "error": "RuntimeError: engine closed"}


def test_duplicate_and_empty_names_rejected():
    reg = _registry()
    with pytest.raises(ValueError, match="already registered"):
        reg.register("transfer", lambda: TE)
    with pytest.raises(ValueError, match="empty"):
        reg.register("", lambda: TE)
    assert reg.names() == ("conductor", "transfer")


def test_prometheus_text_parses_and_carries_values():
    text = exposition(_registry()).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    sent = fams["mooncake_transfer_nic_sent_bytes"]
    assert sent.type == "counter"
    by_nic = {s.labels["nic"]: s for s in sent.samples}
    assert by_nic["127.0.0.1"].value == 1000
    assert by_nic["127.0.0.1"].labels["iface"] == "lo"
    assert by_nic["127.0.0.1"].labels["component"] == "store-0"
    assert by_nic["10.0.0.1"].labels["iface"] == ""
    errs = {s.labels["nic"]: s.value for s in fams["mooncake_transfer_nic_errors"].samples}
    assert errs["127.0.0.1"] == 5
    rej = fams["mooncake_conductor_rejected"].samples[0]
    assert rej.labels["reason"] == "decode overloaded" and rej.value == 2
    q = fams["mooncake_conductor_prefill_queued"].samples[0]
    assert q.labels["instance"] == "prefill-0" and q.value == 2
    rx = fams["mooncake_os_nic_receive_bytes"].samples[0]
    assert rx.labels["iface"] == "lo" and rx.value == 100
    up = {s.labels["snapshot"]: s.value for s in fams["mooncake_snapshot_up"].samples}
    assert up == {"conductor": 1.0, "transfer": 1.0}
    assert fams["mooncake_component_uptime_seconds"].samples[0].value > 0


def test_generic_kind_exports_top_level_numbers():
    reg = _registry()
    reg.register("gadget", lambda: {"widgets": 3, "name": "x", "on": True})
    fams = {f.name: f for f in text_string_to_metric_families(exposition(reg).decode())}
    assert fams["mooncake_gadget_widgets"].samples[0].value == 3
    assert fams["mooncake_gadget_on"].samples[0].value == 1


def test_routes_and_thread_server():
    reg = _registry()
    routes = telemetry_routes(reg)
    status, ctype, body = routes["/telemetry"]()
    assert status == 200 and ctype == "application/json"
    assert json.loads(body)["schema"] == SCHEMA
    with serve_telemetry(reg, "127.0.0.1", 0) as srv:
        with urllib.request.urlopen(srv.url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        assert any(
            f.name == "mooncake_transfer_endpoints" for f in text_string_to_metric_families(text)
        )
        with urllib.request.urlopen(srv.url + "/telemetry", timeout=5) as r:
            assert json.loads(r.read())["component"]["name"] == "store-0"
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(srv.url + "/nope", timeout=5)
        assert exc.value.code == 404


class _Color(Enum):
    RED = 1


def test_to_plain():
    assert to_plain({"c": _Color.RED, "t": (1, 2.5), "n": float("nan"), "b": b"\x01"}) == {
        "c": "RED",
        "t": [1, 2.5],
        "n": None,
        "b": "01",
    }
    with pytest.raises(TypeError, match="object"):
        to_plain(object())
