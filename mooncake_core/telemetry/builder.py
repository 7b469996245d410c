"""Sans-IO merge of polled documents into a :class:`ClusterView` (rates, last-seen, down).

The :class:`Collector` does the HTTP; this object only receives what came back, with an
explicit ``now``, so the merging and the rate arithmetic are tested without a network.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mooncake_core.prediction_error import summarize

from .rates import RateBook
from .targets import Target
from .view import (
    ClusterView,
    DecisionView,
    HostNicView,
    InstanceQueueView,
    NicView,
    NodeView,
    SchedulerView,
    SegmentView,
    StoreView,
    TransportView,
)

__all__ = ["AuditDigest", "PollResult", "ViewBuilder"]

SLOW_FRACTION = 0.25
"""A NIC moving less than this fraction of its peers' median is flagged slow."""
SLOW_MIN_PEER_BPS = float(1 << 20)
"""...but only while its peers move at least this much (idle NICs are not slow)."""


@dataclass(frozen=True, slots=True)
class PollResult:
    """What one target answered in one poll.

    Attributes:
        target: The target polled.
        ok: It answered (any of its pages).
        error: Why not, in words.
        latency_s: Time the poll took.
        telemetry: The ``/telemetry`` document, if served.
        health: The ``/health`` JSON, if read.
        master: The master's ``/snapshot`` JSON, if read.
    """

    target: Target
    ok: bool
    error: str | None = None
    latency_s: float | None = None
    telemetry: dict[str, Any] | None = None
    health: dict[str, Any] | None = None
    master: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class AuditDigest:
    """What the collector read from the audit database in one poll.

    Attributes:
        last: Newest decisions first.
        recent_count: Decisions with ``time >= now - window_s``.
        window_s: That window.
        rejected: ``(reason, count)`` over the recent rejected decisions read.
        hit_rate: Matched / prompt blocks over the decisions read (``None``: no blocks).
    """

    last: tuple[DecisionView, ...]
    recent_count: int
    window_s: float
    rejected: tuple[tuple[str, int], ...]
    hit_rate: float | None


class ViewBuilder:
    """Keeps the rate windows, last-seen times and sparkline histories between polls.

    Args:
        window_s: Width of the sliding rate window.
        history: Points kept per NIC sparkline.

    Raises:
        ValueError: ``window_s`` not positive or ``history`` < 1.
    """

    def __init__(self, window_s: float = 10.0, history: int = 60) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        if history < 1:
            raise ValueError(f"history must be >= 1, got {history}")
        self.window_s = window_s
        self._rates = RateBook(window_s)
        self._history_len = history
        self._history: dict[tuple[str, str], deque[float]] = {}
        self._last_seen: dict[str, float] = {}

    def update(
        self, results: Sequence[PollResult], now: float, audit: AuditDigest | None = None
    ) -> ClusterView:
        """Fold one round of poll results into a new view.

        Args:
            results: One result per target, in display order.
            now: Wall time of the poll (unix seconds).
            audit: What the audit database said, if read.

        Returns:
            The immutable view.
        """
        nodes = tuple(self._node(r, now) for r in results)
        docs = [(r.target, r.telemetry) for r in results if r.ok and r.telemetry is not None]
        host_nics = self._host_nics(docs, now)  # first: the NIC rows read these OS rates
        nics = self._nics(docs, now)
        transports = self._transports(docs, now)
        master = next((r.master for r in results if r.ok and r.master is not None), None)
        store = self._store(master, docs, audit, now)
        sched = self._scheduler(docs, audit, now)
        return ClusterView(
            taken_at=now,
            window_s=self.window_s,
            nodes=nodes,
            nics=nics,
            host_nics=host_nics,
            store=store,
            scheduler=sched,
            transports=transports,
        )

    # ------------------------------------------------------------------ nodes

    def _node(self, r: PollResult, now: float) -> NodeView:
        t = r.target
        if r.ok:
            self._last_seen[t.name] = now
        else:
            self._rates.forget((t.name,))
        comp = (r.telemetry or {}).get("component") or {}
        health = r.health or {}
        endpoint = "telemetry" if r.telemetry else "snapshot" if r.master else "health"
        uptime = comp.get("uptime_s", health.get("uptime_s"))
        return NodeView(
            name=t.name,
            role=str(comp.get("role") or t.role),
            url=t.url,
            up=r.ok,
            last_seen=self._last_seen.get(t.name),
            error=None if r.ok else (r.error or "no answer"),
            version=str(comp.get("version") or health.get("version") or ""),
            uptime_s=float(uptime) if isinstance(uptime, int | float) and r.ok else None,
            pid=comp.get("pid") if isinstance(comp.get("pid"), int) else None,
            hostname=str(comp.get("hostname") or ""),
            endpoint=endpoint if r.ok else "-",
            latency_s=r.latency_s,
        )

    # ------------------------------------------------------------------ NICs

    def _nics(self, docs: list[tuple[Target, dict[str, Any]]], now: float) -> tuple[NicView, ...]:
        out: list[NicView] = []
        for target, doc in docs:
            t_doc = float(doc.get("taken_at") or now)
            host = str((doc.get("component") or {}).get("hostname") or target.name)
            ifaces: dict[str, str] = doc.get("nic_ifaces") or {}
            rows = []
            for snap in _snapshots(doc, "transfer"):
                for n in snap.get("nics") or []:
                    addr = str(n["nic"])
                    k = (target.name, addr)
                    tx = self._rates.add((*k, "tx"), t_doc, n.get("bytes_sent", 0))
                    rx = self._rates.add((*k, "rx"), t_doc, n.get("bytes_received", 0))
                    eps = self._rates.add((*k, "err"), t_doc, n.get("errors", 0))
                    iface = ifaces.get(addr, "")
                    rows.append((addr, iface, tx, rx, eps, n))
            totals = [(r[2] or 0.0) + (r[3] or 0.0) for r in rows]
            node_total = sum(totals)
            for i, (addr, iface, tx, rx, eps, n) in enumerate(rows):
                hist = self._history.setdefault(
                    (target.name, addr), deque(maxlen=self._history_len)
                )
                hist.append(totals[i])
                peers = totals[:i] + totals[i + 1 :]
                med = statistics.median(peers) if peers else 0.0
                slow = bool(peers) and med >= SLOW_MIN_PEER_BPS and totals[i] < SLOW_FRACTION * med
                os_k = ("os", host, iface)
                out.append(
                    NicView(
                        node=target.name,
                        nic=addr,
                        iface=iface,
                        te_tx_bps=tx,
                        te_rx_bps=rx,
                        os_tx_bps=self._rates.rate((*os_k, "tx")) if iface else None,
                        os_rx_bps=self._rates.rate((*os_k, "rx")) if iface else None,
                        share=totals[i] / node_total if node_total > 0 else None,
                        errors=int(n.get("errors", 0)),
                        retries=int(n.get("retries", 0)),
                        errors_per_s=eps,
                        paused=bool(n.get("paused")),
                        slow=slow,
                        history=tuple(hist),
                    )
                )
        return tuple(out)

    def _transports(
        self, docs: list[tuple[Target, dict[str, Any]]], now: float
    ) -> tuple[TransportView, ...]:
        out: list[TransportView] = []
        for target, doc in docs:
            t_doc = float(doc.get("taken_at") or now)
            totals: dict[str, list[int]] = {}
            for snap in _snapshots(doc, "transfer"):
                for t in snap.get("transports") or []:
                    acc = totals.setdefault(str(t["name"]), [0, 0])
                    acc[0] += int(t.get("bytes") or 0)
                    acc[1] += int(t.get("served_bytes") or 0)
            for name, (moved, served) in totals.items():
                k = (target.name, "transport", name)
                bps = self._rates.add((*k, "own"), t_doc, moved)
                served_bps = self._rates.add((*k, "served"), t_doc, served)
                if moved or served:
                    out.append(TransportView(target.name, name, moved, served, bps, served_bps))
        return tuple(out)

    def _host_nics(
        self, docs: list[tuple[Target, dict[str, Any]]], now: float
    ) -> tuple[HostNicView, ...]:
        # Every process on a host reports the same kernel counters: read one per host per
        # poll, or two slightly different readings at one instant look like a reset.
        seen: set[str] = set()
        out: list[HostNicView] = []
        for target, doc in docs:
            host = str((doc.get("component") or {}).get("hostname") or target.name)
            rows = doc.get("os_nics") or []
            if host in seen or not rows:
                continue
            seen.add(host)
            t_doc = float(doc.get("taken_at") or now)
            for row in rows:
                k = ("os", host, str(row["iface"]))
                out.append(
                    HostNicView(
                        hostname=host,
                        iface=str(row["iface"]),
                        tx_bps=self._rates.add((*k, "tx"), t_doc, row.get("tx_bytes", 0)),
                        rx_bps=self._rates.add((*k, "rx"), t_doc, row.get("rx_bytes", 0)),
                        errors=int(row.get("rx_errors", 0)) + int(row.get("tx_errors", 0)),
                        drops=int(row.get("rx_dropped", 0)) + int(row.get("tx_dropped", 0)),
                    )
                )
        return tuple(out)

    # ------------------------------------------------------------------ store

    def _store(
        self,
        m: dict[str, Any] | None,
        docs: list[tuple[Target, dict[str, Any]]],
        audit: AuditDigest | None,
        now: float,
    ) -> StoreView:
        hit, looked = 0, 0
        for _, doc in docs:
            for snap in [*_snapshots(doc, "kvcache"), *_snapshots(doc, "engine")]:
                cache = snap.get("cache", snap)
                hit += int(cache.get("hit_blocks") or 0)
                looked += int(cache.get("queried_blocks") or 0)
        hit_rate = hit / looked if looked else (audit.hit_rate if audit else None)
        if m is None:
            return StoreView(False, 0, 0, 0, 0, 0, 0, 0, 0, None, hit_rate, (), ())
        evicted = int(m.get("evicted_objects_total") or 0)
        eps = self._rates.add(("master", "evicted"), now, evicted)
        segs = tuple(
            SegmentView(
                name=str(s.get("name")),
                client=str(s.get("client_id") or ""),
                tier=_tier(str(s.get("location") or "")),
                state=str(s.get("state")),
                capacity=int(s.get("capacity") or 0),
                used=int(s.get("used") or 0),
                keys=int(s.get("keys") or 0),
            )
            for s in m.get("segments") or []
        )
        tiers: dict[str, list[int]] = {}
        for s in segs:
            agg = tiers.setdefault(s.tier, [0, 0])
            agg[0] += s.capacity
            agg[1] += s.used
        return StoreView(
            available=True,
            capacity=int(m.get("total_capacity_bytes") or 0),
            used=int(m.get("allocated_bytes") or 0),
            keys=int(m.get("key_count") or 0),
            processing=int(m.get("processing_count") or 0),
            clients=int(m.get("client_count") or 0),
            key_pins=int(m.get("key_pins") or 0),
            prefix_pins=int(m.get("prefix_pins") or 0),
            evicted_total=evicted,
            evictions_per_s=eps,
            hit_rate=hit_rate,
            segments=segs,
            tiers=tuple((k, v[0], v[1]) for k, v in sorted(tiers.items())),
        )

    # ------------------------------------------------------------------ scheduler

    def _scheduler(
        self, docs: list[tuple[Target, dict[str, Any]]], audit: AuditDigest | None, now: float
    ) -> SchedulerView:
        conductor = next(((t, s) for t, doc in docs for s in _snapshots(doc, "conductor")), None)
        last = audit.last if audit else ()
        err = summarize((d.predicted_ttft_s, d.actual_ttft_s) for d in last)
        if conductor is None:
            if audit is None:
                return SchedulerView(
                    False, "none", "", "", None, None, None, None, (), None, None, (), ()
                )
            return SchedulerView(
                available=True,
                source="audit",
                policy="",
                admission="",
                decisions_total=None,
                decisions_per_s=audit.recent_count / audit.window_s,
                admitted_total=None,
                in_flight=None,
                rejected=audit.rejected,
                ttft_mae_s=err.mae_s,
                ttft_bias_s=err.bias_s,
                queues=(),
                last_decisions=last,
            )
        t, c = conductor
        doc_t = next(float(d.get("taken_at") or now) for tt, d in docs if tt is t)
        decisions = int(c.get("decisions") or 0)
        dps = self._rates.add((t.name, "conductor", "decisions"), doc_t, decisions)
        queues = [
            InstanceQueueView(
                name=str(p["name"]),
                role="prefill",
                queued=int(p.get("queued") or 0),
                running=int(p.get("running") or 0),
                capacity=0,
                queue_time_s=p.get("queue_time_s"),
            )
            for p in c.get("prefill") or []
        ]
        queues += [
            InstanceQueueView(
                name=str(d["name"]),
                role="decode",
                queued=0,
                running=int(d.get("batch") or 0),
                capacity=int(d.get("max_batch") or 0),
                queue_time_s=None,
            )
            for d in c.get("decode") or []
        ]
        rejected = sorted(
            ((str(r), int(n)) for r, n in c.get("rejected") or []), key=lambda x: (-x[1], x[0])
        )
        return SchedulerView(
            available=True,
            source="conductor+audit" if audit else "conductor",
            policy=str(c.get("policy") or ""),
            admission=str(c.get("admission") or ""),
            decisions_total=decisions,
            decisions_per_s=dps,
            admitted_total=int(c.get("admitted") or 0),
            in_flight=int(c.get("in_flight") or 0),
            rejected=tuple(rejected),
            # The conductor knows the error only of actuals reported to it; the audit
            # has the measured TTFTs of the workers, so fall back to those.
            ttft_mae_s=c.get("ttft_mae_s") if c.get("ttft_mae_s") is not None else err.mae_s,
            ttft_bias_s=c.get("ttft_bias_s") if c.get("ttft_bias_s") is not None else err.bias_s,
            queues=tuple(queues),
            last_decisions=last,
        )


def _snapshots(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The ``data`` of every snapshot of ``kind`` in a telemetry document."""
    out = []
    for entry in (doc.get("snapshots") or {}).values():
        if entry.get("kind") == kind and isinstance(entry.get("data"), dict):
            out.append(entry["data"])
    return out


def _tier(location: str) -> str:
    loc = location.lower()
    return "ssd" if loc.startswith(("ssd", "file", "disk")) else "dram"
