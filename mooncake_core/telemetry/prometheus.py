"""Prometheus text generated from the same telemetry document that ``/telemetry`` serves.

Nothing is counted twice: a custom collector reads :meth:`TelemetryRegistry.document`
at scrape time and turns it into metric families (names in docs/metrics.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .registry import TelemetryRegistry

__all__ = ["DocumentCollector", "exposition", "metrics_from_document"]

_P = "mooncake_"

# (snapshot field, metric suffix, help) for the per-NIC counters of the Transfer Engine.
_NIC_COUNTERS = (
    ("bytes_sent", "transfer_nic_sent_bytes", "Payload bytes sent through the NIC."),
    ("bytes_received", "transfer_nic_received_bytes", "Payload bytes received by the NIC."),
    ("slices_sent", "transfer_nic_sent_slices", "Slices sent through the NIC."),
    ("slices_received", "transfer_nic_received_slices", "Slices received by the NIC."),
    ("errors", "transfer_nic_errors", "Failed slices initiated over the NIC."),
    ("retries", "transfer_nic_retries", "Slices retried after a failure on the NIC."),
    ("connections", "transfer_nic_connections", "Data connections accepted on the NIC."),
    ("malformed_frames", "transfer_nic_malformed_frames", "Frames rejected by the server."),
    ("auth_failures", "transfer_nic_auth_failures", "Connections refused: bad secret."),
    ("bounds_errors", "transfer_nic_bounds_errors", "Requests refused: out of bounds."),
)
_TRANSPORT_COUNTERS = (
    ("requests_completed", "transfer_requests_completed", "Requests completed."),
    ("requests_failed", "transfer_requests_failed", "Requests failed."),
    ("bytes", "transfer_transport_bytes", "Payload bytes moved."),
    ("slices", "transfer_transport_slices", "Slices moved."),
    (
        "served_bytes",
        "transfer_transport_served_bytes",
        "Payload bytes peers moved into or out of our segments.",
    ),
    ("served_requests", "transfer_transport_served_requests", "Requests peers moved through us."),
)
_OS_COUNTERS = (
    ("rx_bytes", "os_nic_receive_bytes", "Bytes received (kernel counter)."),
    ("tx_bytes", "os_nic_transmit_bytes", "Bytes sent (kernel counter)."),
    ("rx_packets", "os_nic_receive_packets", "Packets received."),
    ("tx_packets", "os_nic_transmit_packets", "Packets sent."),
    ("rx_errors", "os_nic_receive_errors", "Receive errors."),
    ("tx_errors", "os_nic_transmit_errors", "Transmit errors."),
    ("rx_dropped", "os_nic_receive_drops", "Received packets dropped."),
    ("tx_dropped", "os_nic_transmit_drops", "Packets dropped on transmit."),
)
_CONDUCTOR_COUNTERS = (
    ("decisions", "conductor_decisions", "Requests scheduled."),
    ("admitted", "conductor_admitted", "Requests admitted before prefill."),
    ("migrations", "conductor_migrations", "Hotspot migrations issued."),
)
_CONDUCTOR_GAUGES = (
    ("in_flight", "conductor_in_flight", "Admitted requests not finished."),
    ("threshold", "conductor_balancing_threshold", "kvcache balancing threshold in force."),
    ("decode_time_s", "conductor_decode_time_seconds", "Uniform decode-time estimate."),
    ("ttft_mae_s", "conductor_ttft_mae_seconds", "Mean absolute TTFT prediction error."),
    (
        "ttft_bias_s",
        "conductor_ttft_bias_seconds",
        "TTFT bias: mean of actual - predicted (positive: took longer than predicted).",
    ),
    ("tbt_mae_s", "conductor_tbt_mae_seconds", "Mean absolute TBT prediction error."),
)
_WRITER_COUNTERS = (
    ("submitted", "audit_submitted", "Decisions accepted by the audit writer."),
    ("written", "audit_written", "Decisions stored."),
    ("dropped", "audit_dropped", "Decisions refused: queue full."),
    ("failed", "audit_failed", "Decisions that could not be written."),
    ("batches", "audit_batches", "Transactions committed."),
)
_ENGINE_COUNTERS = (
    ("prefills", "engine_prefills", "Prefills run."),
    ("computed_tokens", "engine_computed_tokens", "Prompt tokens computed."),
    ("reused_tokens", "engine_reused_tokens", "Prompt tokens reused from cache."),
    ("decode_steps", "engine_decode_steps", "Decode steps run."),
    ("decoded_tokens", "engine_decoded_tokens", "Tokens decoded."),
)
_CACHE_GAUGES = (
    ("num_blocks", "kvcache_blocks", "KV cache pool capacity, blocks."),
    ("free_blocks", "kvcache_free_blocks", "Blocks holding nothing."),
    ("cached_blocks", "kvcache_cached_blocks", "Evictable cached blocks."),
    ("used_blocks", "kvcache_used_blocks", "Blocks used by live sequences."),
)
_CACHE_COUNTERS = (
    ("hit_blocks", "kvcache_hit_blocks", "Prefix blocks reused."),
    ("queried_blocks", "kvcache_queried_blocks", "Prefix blocks looked up."),
    ("evictions", "kvcache_evictions", "Cached blocks evicted."),
)


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    return None


class _Families:
    """Metric families created on first use, so each name is emitted once per scrape."""

    def __init__(self) -> None:
        self._f: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}

    def add(self, kind: str, suffix: str, doc: str, labels: dict[str, str], value: Any) -> None:
        v = _num(value)
        if v is None:
            return
        name = _P + suffix
        fam = self._f.get(name)
        if fam is None:
            fam = self._f[name] = (
                CounterMetricFamily(name, doc, labels=list(labels))
                if kind == "counter"
                else GaugeMetricFamily(name, doc, labels=list(labels))
            )
        fam.add_metric(list(labels.values()), v)

    def all(self) -> list[Metric]:
        return list(self._f.values())


def metrics_from_document(doc: dict[str, Any]) -> list[Metric]:
    """Metric families for one telemetry document.

    Args:
        doc: What :meth:`TelemetryRegistry.document` returned.

    Returns:
        The families, every sample labelled with ``component``.
    """
    f = _Families()
    comp = doc["component"]
    c = {"component": str(comp["name"])}
    f.add(
        "gauge",
        "component_info",
        "Component identity (value 1).",
        {**c, "role": str(comp["role"]), "version": str(comp["version"])},
        1,
    )
    f.add(
        "gauge",
        "component_uptime_seconds",
        "Seconds since the process started.",
        c,
        comp["uptime_s"],
    )
    ifaces: dict[str, str] = doc.get("nic_ifaces") or {}
    for name, entry in doc["snapshots"].items():
        src = {**c, "snapshot": name}
        f.add(
            "gauge",
            "snapshot_up",
            "1 if the snapshot source answered, else 0.",
            src,
            0 if "error" in entry else 1,
        )
        data = entry.get("data")
        if not isinstance(data, dict):
            continue
        kind = entry["kind"]
        if kind == "transfer":
            _transfer(f, c, data, ifaces)
        elif kind == "conductor":
            _conductor(f, c, data)
        elif kind == "audit_writer":
            _fields(f, c, data, _WRITER_COUNTERS, "counter")
            f.add("gauge", "audit_queue_depth", "Audit items waiting.", c, data.get("queue_depth"))
        elif kind == "engine":
            _fields(
                f, {**c, "instance": str(data.get("location"))}, data, _ENGINE_COUNTERS, "counter"
            )
            f.add("gauge", "engine_sequences", "Live sequences.", c, data.get("sequences"))
            f.add(
                "gauge",
                "engine_context_tokens",
                "Tokens with KV (decode load).",
                c,
                data.get("context_tokens"),
            )
            if isinstance(data.get("cache"), dict):
                _cache(f, c, data["cache"])
        elif kind == "kvcache":
            _cache(f, c, data)
        elif kind != "master":  # the master's own /metrics already carries master_*
            _generic(f, c, kind, data)
    for row in doc.get("os_nics") or []:
        _fields(f, {**c, "iface": str(row["iface"])}, row, _OS_COUNTERS, "counter")
    return f.all()


def _fields(
    f: _Families,
    labels: dict[str, str],
    data: dict[str, Any],
    table: tuple[tuple[str, str, str], ...],
    kind: str,
) -> None:
    for key, suffix, doc in table:
        f.add(kind, suffix, doc, labels, data.get(key))


def _transfer(f: _Families, c: dict[str, str], d: dict[str, Any], ifaces: dict[str, str]) -> None:
    for nic in d.get("nics") or []:
        labels = {**c, "nic": str(nic["nic"]), "iface": ifaces.get(str(nic["nic"]), "")}
        _fields(f, labels, nic, _NIC_COUNTERS, "counter")
        f.add(
            "gauge",
            "transfer_nic_paused",
            "1 while the NIC is paused after failures.",
            labels,
            bool(nic.get("paused")),
        )
    for t in d.get("transports") or []:
        _fields(f, {**c, "transport": str(t["name"])}, t, _TRANSPORT_COUNTERS, "counter")
    f.add("gauge", "transfer_endpoints", "Endpoints open in the pool.", c, d.get("endpoints"))
    f.add(
        "gauge", "transfer_pending_requests", "Requests not finished.", c, d.get("pending_requests")
    )
    f.add(
        "gauge",
        "transfer_paused_remotes",
        "Remote servers paused after failures.",
        c,
        len(d.get("paused_remotes") or ()),
    )


def _conductor(f: _Families, c: dict[str, str], d: dict[str, Any]) -> None:
    _fields(f, c, d, _CONDUCTOR_COUNTERS, "counter")
    _fields(f, c, d, _CONDUCTOR_GAUGES, "gauge")
    for reason, count in d.get("rejected") or []:
        f.add(
            "counter",
            "conductor_rejected",
            "Requests rejected, by reason.",
            {**c, "reason": str(reason)},
            count,
        )
    for p in d.get("prefill") or []:
        lab = {**c, "instance": str(p["name"])}
        f.add(
            "gauge",
            "conductor_prefill_queued",
            "Requests queued per prefill instance.",
            lab,
            p.get("queued"),
        )
        f.add(
            "gauge",
            "conductor_prefill_running",
            "Requests running per prefill instance.",
            lab,
            p.get("running"),
        )
        f.add(
            "gauge",
            "conductor_prefill_queue_seconds",
            "Predicted queue time (T_queue).",
            lab,
            p.get("queue_time_s"),
        )
    for dd in d.get("decode") or []:
        lab = {**c, "instance": str(dd["name"])}
        f.add(
            "gauge", "conductor_decode_batch", "Requests in the decode batch.", lab, dd.get("batch")
        )
        f.add(
            "gauge",
            "conductor_decode_max_batch",
            "Decode batch capacity.",
            lab,
            dd.get("max_batch"),
        )
        f.add(
            "gauge",
            "conductor_decode_context_tokens",
            "Context tokens on the instance.",
            lab,
            dd.get("context_tokens"),
        )


def _cache(f: _Families, c: dict[str, str], d: dict[str, Any]) -> None:
    lab = {**c, "instance": str(d.get("location"))}
    _fields(f, lab, d, _CACHE_GAUGES, "gauge")
    _fields(f, lab, d, _CACHE_COUNTERS, "counter")


def _generic(f: _Families, c: dict[str, str], kind: str, d: dict[str, Any]) -> None:
    safe = "".join(ch if ch.isalnum() else "_" for ch in kind)
    for key, value in d.items():
        if _num(value) is not None:
            field = "".join(ch if ch.isalnum() else "_" for ch in key)
            f.add("gauge", f"{safe}_{field}", f"{kind}.{key} (generic).", c, value)


class DocumentCollector:
    """A prometheus_client custom collector over a document source.

    Args:
        document: Returns a fresh telemetry document (normally ``registry.document``).
    """

    def __init__(self, document: Callable[[], dict[str, Any]]) -> None:
        self._document = document

    def describe(self) -> list[Metric]:
        # Empty: the families depend on what is registered at scrape time.
        return []

    def collect(self) -> Iterator[Metric]:
        yield from metrics_from_document(self._document())


def exposition(registry: TelemetryRegistry) -> bytes:
    """The Prometheus text exposition of ``registry``'s current document."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(DocumentCollector(registry.document))
    return generate_latest(reg)
