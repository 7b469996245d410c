"""ClusterView: the one immutable picture of the cluster that ``mooncake top`` and the web
dashboard read. Built by :class:`ViewBuilder` from what the :class:`Collector` polled."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ClusterView",
    "DecisionView",
    "HostNicView",
    "InstanceQueueView",
    "NicView",
    "NodeView",
    "SchedulerView",
    "SegmentView",
    "StoreView",
]


@dataclass(frozen=True, slots=True)
class NodeView:
    """One polled component.

    Attributes:
        name: Component name.
        role: Its role (``master``, ``store``, ``conductor``, ``transfer``...).
        url: Base URL polled.
        up: Whether the last poll answered.
        last_seen: Wall time of the last answer (``None``: never answered).
        error: Why the last poll failed (``None`` when up).
        version: Package version it reports ("" if unknown).
        uptime_s: Uptime it reports.
        pid: Its process id, if reported.
        hostname: Host it runs on, if reported.
        endpoint: Which page answered: ``telemetry``, ``snapshot`` (master) or ``health``.
        latency_s: Duration of the last poll.
    """

    name: str
    role: str
    url: str
    up: bool
    last_seen: float | None
    error: str | None
    version: str
    uptime_s: float | None
    pid: int | None
    hostname: str
    endpoint: str
    latency_s: float | None


@dataclass(frozen=True, slots=True)
class NicView:
    """One Transfer Engine NIC of one component, with the OS view of its interface.

    Rates are bytes per second over the collector's sliding window (``None`` until two
    samples exist).

    Attributes:
        node: Component that owns the NIC.
        nic: NIC address as the Transfer Engine names it.
        iface: OS interface carrying that address ("" if unknown).
        te_tx_bps: Transfer Engine payload bytes sent per second.
        te_rx_bps: Transfer Engine payload bytes received per second.
        os_tx_bps: Kernel bytes sent per second on ``iface`` (all traffic, every process).
        os_rx_bps: Kernel bytes received per second on ``iface``.
        share: This NIC's part of the node's TE traffic (0..1; ``None`` when idle).
        errors: Failed slices so far.
        retries: Retried slices so far.
        errors_per_s: Failed slices per second.
        paused: Paused after repeated failures.
        slow: Far below its peers on the same node (< 25% of their median while they move
            at least 1 MiB/s).
        history: Recent TE tx+rx rates, oldest first (for the sparkline).
    """

    node: str
    nic: str
    iface: str
    te_tx_bps: float | None
    te_rx_bps: float | None
    os_tx_bps: float | None
    os_rx_bps: float | None
    share: float | None
    errors: int
    retries: int
    errors_per_s: float | None
    paused: bool
    slow: bool
    history: tuple[float, ...]

    @property
    def te_total_bps(self) -> float:
        """TE tx + rx per second (0 when unknown)."""
        return (self.te_tx_bps or 0.0) + (self.te_rx_bps or 0.0)


@dataclass(frozen=True, slots=True)
class TransportView:
    """One transport (tcp, shm, rdma) of one component: the bytes its own requests moved
    and the bytes peers moved through it (its segments, its data servers).

    Attributes:
        node: Component.
        transport: ``tcp``, ``shm`` or ``rdma``.
        bytes: Payload bytes its requests moved so far.
        served_bytes: Payload bytes peers moved into or out of it so far (shm: counted
            from the peers' ledgers; rdma: 0, the target does not see one-sided verbs).
        bps: ``bytes`` per second over the window (``None`` until two samples).
        served_bps: ``served_bytes`` per second.
    """

    node: str
    transport: str
    bytes: int
    served_bytes: int
    bps: float | None
    served_bps: float | None


@dataclass(frozen=True, slots=True)
class HostNicView:
    """One OS interface of one host (deduplicated over the components on that host).

    Attributes:
        hostname: Host.
        iface: Interface name.
        tx_bps: Bytes sent per second.
        rx_bps: Bytes received per second.
        errors: Receive + transmit errors so far.
        drops: Receive + transmit drops so far.
    """

    hostname: str
    iface: str
    tx_bps: float | None
    rx_bps: float | None
    errors: int
    drops: int


@dataclass(frozen=True, slots=True)
class SegmentView:
    """One store segment as the master reports it.

    Attributes:
        name: Segment name.
        client: Client (store node) that lends it.
        tier: ``dram`` or ``ssd`` (from the segment's location).
        state: ``OK``, ``DRAINING``... (the master's state name).
        capacity: Bytes lent.
        used: Bytes allocated.
        keys: Objects with a replica here.
    """

    name: str
    client: str
    tier: str
    state: str
    capacity: int
    used: int
    keys: int

    @property
    def usage(self) -> float:
        """``used / capacity`` (0 for an empty segment)."""
        return self.used / self.capacity if self.capacity else 0.0


@dataclass(frozen=True, slots=True)
class StoreView:
    """The store, from the master's snapshot (``available`` False when no master answered).

    Attributes:
        available: A master answered.
        capacity: Bytes lent by all segments.
        used: Bytes allocated.
        keys: Objects (complete and being written).
        processing: Objects being written.
        clients: Clients heartbeating.
        key_pins: Keys pinned.
        prefix_pins: Prefixes pinned.
        evicted_total: Objects evicted so far.
        evictions_per_s: Objects evicted per second (sliding window).
        hit_rate: Prefix-cache hit rate (blocks reused / looked up) reported by the
            workers' caches, else by the audited decisions; ``None`` without data.
        segments: Per segment.
        tiers: ``(tier, capacity, used)`` totals.
    """

    available: bool
    capacity: int
    used: int
    keys: int
    processing: int
    clients: int
    key_pins: int
    prefix_pins: int
    evicted_total: int
    evictions_per_s: float | None
    hit_rate: float | None
    segments: tuple[SegmentView, ...]
    tiers: tuple[tuple[str, int, int], ...]


@dataclass(frozen=True, slots=True)
class InstanceQueueView:
    """Load of one worker instance as the conductor sees it.

    Attributes:
        name: Instance.
        role: ``prefill`` or ``decode``.
        queued: Requests queued (prefill).
        running: Requests running (prefill) or in the batch (decode).
        capacity: Batch capacity (decode; 0 for prefill).
        queue_time_s: Predicted queue time (prefill).
    """

    name: str
    role: str
    queued: int
    running: int
    capacity: int
    queue_time_s: float | None


@dataclass(frozen=True, slots=True)
class DecisionView:
    """One recent scheduling decision (from the audit database).

    Attributes:
        time: When (unix seconds).
        request_id: Request.
        prefill: Chosen prefill instance.
        decode: Chosen decode instance.
        predicted_ttft_s: Predicted TTFT.
        actual_ttft_s: Measured TTFT (once reported).
        admitted: Whether admitted.
        reject_reason: Why rejected.
        prompt_tokens: Prompt length.
    """

    time: float
    request_id: str
    prefill: str | None
    decode: str | None
    predicted_ttft_s: float | None
    actual_ttft_s: float | None
    admitted: bool
    reject_reason: str | None
    prompt_tokens: int


@dataclass(frozen=True, slots=True)
class SchedulerView:
    """The conductor (its telemetry) and the audit trail.

    Attributes:
        available: The conductor served a snapshot, or the audit database was readable.
        source: ``conductor``, ``audit``, ``conductor+audit`` or ``none``.
        policy: Scheduling policy.
        admission: Admission strategy.
        decisions_total: Decisions so far.
        decisions_per_s: Decisions per second (sliding window).
        admitted_total: Admitted so far.
        in_flight: Admitted and not finished.
        rejected: ``(reason, count)``, most frequent first.
        ttft_mae_s: Mean absolute TTFT prediction error.
        ttft_bias_s: TTFT bias: mean of ``actual - predicted`` (positive: requests took
            longer than predicted); the conductor's, else over ``last_decisions``.
        queues: Per instance.
        last_decisions: Newest first.
    """

    available: bool
    source: str
    policy: str
    admission: str
    decisions_total: int | None
    decisions_per_s: float | None
    admitted_total: int | None
    in_flight: int | None
    rejected: tuple[tuple[str, int], ...]
    ttft_mae_s: float | None
    ttft_bias_s: float | None
    queues: tuple[InstanceQueueView, ...]
    last_decisions: tuple[DecisionView, ...]

    @property
    def rejected_total(self) -> int:
        """All rejections counted."""
        return sum(n for _, n in self.rejected)


@dataclass(frozen=True, slots=True)
class ClusterView:
    """Everything ``mooncake top`` shows, consistent at ``taken_at``.

    Attributes:
        taken_at: Wall time the view was built.
        window_s: Width of the rate window.
        nodes: Every polled component, in target order.
        nics: Transfer Engine NICs of every component that reports one.
        host_nics: OS interfaces per host.
        store: The store.
        scheduler: The scheduler.
        transports: Per component and transport, those that moved anything.
    """

    taken_at: float
    window_s: float
    nodes: tuple[NodeView, ...]
    nics: tuple[NicView, ...]
    host_nics: tuple[HostNicView, ...]
    store: StoreView
    scheduler: SchedulerView
    transports: tuple[TransportView, ...] = ()

    @property
    def nodes_up(self) -> int:
        """Components that answered the last poll."""
        return sum(1 for n in self.nodes if n.up)
