"""The master process: a grpc.aio server around :class:`MasterState`, plus /metrics.

Threading model: everything runs on one asyncio event loop. RPC handlers, the periodic
upkeep task and the HTTP endpoint call the sans-IO core synchronously under one
``asyncio.Lock`` (uncontended, so it costs microseconds). Bulk calls that walk every key
(remove by regex/prefix, remove all) run in a worker thread while holding that lock, so
a walk over millions of keys does not stall heartbeats or the metrics endpoint; the
other calls wait for it, which keeps the core single-threaded.

After every core call the new events are drained and fanned out to ``WatchEvents``
subscribers through bounded queues; a subscriber that falls too far behind is cut off
with RESOURCE_EXHAUSTED (it resynchronises from ``ListKeys``) instead of growing memory.

Durability (see ``docs/durability.md``): with a record sink (the local journal or, under
HA, the etcd log) the drained events are also turned into journal records and written
under the lock, in event order; the reply is sent only once the sink says those records
are durable, so an acknowledged change is never lost. Under HA the service starts as a
follower (``role``), refuses every RPC with NOT_LEADER (:class:`RoleGate`) and is
promoted by the election with :meth:`MasterService.become_leader`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from mooncake_core import __version__
from mooncake_core.config.models import MasterConfig
from mooncake_core.rpc import store_pb2_grpc as pb_grpc

from . import convert
from . import events as ev
from .auth import TokenAuthInterceptor
from .errors import ErrorCode, StoreError
from .fast_control_server import FastControlServer
from .ha.follow import LEADER_METADATA
from .master import MasterState
from .metrics_http import serve_http
from .results import MasterSnapshot
from .running_clock import RunningClock
from .segment import SegmentSnapshot

if TYPE_CHECKING:
    from .ha.durable import RecordSink
    from .ha.image import MetadataImage

Record = dict[str, Any]

log = logging.getLogger(__name__)
T = TypeVar("T")

_SETTLING = (ev.ReplicaAdded, ev.StageRequested, ev.SsdCopyDropped, ev.ObjectRemoved)
"""Events that may settle a pending SSD stage of their key."""

_OVERFLOW = object()
_CLOSED = object()


@dataclasses.dataclass(frozen=True)
class ServiceOptions:
    """Where and how the master process listens (the rest is in MasterConfig)."""

    host: str = "127.0.0.1"
    """gRPC bind address."""
    port: int = 50051
    """gRPC port; 0 picks a free one (see :attr:`MasterService.port`)."""
    fast_port: int | None = None
    """Port of the fast control channel for the hot calls (``fast_control``); 0 picks a
    free one; ``None``: no fast channel, every call over gRPC."""
    fast_unix: bool = True
    """Also serve the fast channel on an abstract Unix socket, for clients on this host
    (advertised in the readiness; clients elsewhere use the port)."""
    metrics_host: str = "127.0.0.1"
    """Bind address of /metrics, /health, /snapshot."""
    metrics_port: int | None = 9003
    """HTTP port; 0 picks a free one; ``None`` disables the endpoint."""
    secret: bytes | None = None
    """Cluster secret; when set, every RPC needs the derived bearer token."""
    tick_interval_s: float = 0.1
    """Period of the upkeep task (client expiry, stale puts, pins, eviction)."""
    event_queue_size: int = 10_000
    """Events buffered per WatchEvents subscriber before it is cut off."""
    hashing: Mapping[str, object] | None = None
    """Block-hashing settings this cluster runs with (e.g. ``{"block_size", "seed"}``),
    reported on /health so ``cluster check`` can compare them; ``None``: not reported."""


class MasterMetrics:
    """Prometheus metrics: counters updated by the service, gauges read from the snapshot."""

    def __init__(self, snapshot: Callable[[], MasterSnapshot], subscribers: Callable[[], int]):
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "master_rpc_requests", "RPCs received, by method.", ["rpc"], registry=self.registry
        )
        self.failures = Counter(
            "master_rpc_failures",
            "RPCs (or batch items) that returned an error, by method and error code.",
            ["rpc", "code"],
            registry=self.registry,
        )
        self.fast_calls = Counter(
            "master_fast_calls",
            "Calls received over the fast control channel, by method (each is also "
            "counted in master_rpc_requests).",
            ["rpc"],
            registry=self.registry,
        )
        self.auth_failures = Counter(
            "master_auth_failures",
            "Calls refused for a missing or wrong cluster token.",
            ["rpc"],
            registry=self.registry,
        )
        self.events = Counter(
            "master_events_published", "Events emitted by the core.", registry=self.registry
        )
        self.registry.register(_SnapshotCollector(snapshot, subscribers))

    def exposition(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)


class _SnapshotCollector:
    def __init__(self, snapshot: Callable[[], MasterSnapshot], subscribers: Callable[[], int]):
        self._snapshot = snapshot
        self._subscribers = subscribers

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self._snapshot()
        gauges = {
            "master_key_count": ("Objects (complete and being written).", s.key_count),
            "master_processing_key_count": ("Objects being written.", s.processing_count),
            "master_allocated_bytes": ("Bytes allocated in segments.", s.allocated_bytes),
            "master_total_capacity_bytes": ("Bytes lent by segments.", s.total_capacity_bytes),
            "master_client_count": ("Clients heartbeating.", s.client_count),
            "master_segment_count": ("Segments known.", len(s.segments)),
            "master_pinned_key_count": ("Key pins.", s.key_pins),
            "master_prefix_pin_count": ("Prefix pins.", s.prefix_pins),
            "master_event_subscribers": ("WatchEvents streams open.", self._subscribers()),
            "master_ssd_only_key_count": (
                "Objects with no DRAM replica, readable from SSD.",
                s.ssd_only_count,
            ),
            "master_grant_count": (
                "Grants writers hold (space of their next puts).",
                s.grant_count,
            ),
            "master_granted_bytes": ("Bytes allocated to grants, in no object.", s.granted_bytes),
        }
        for name, (doc, value) in gauges.items():
            yield GaugeMetricFamily(name, doc, value=value)
        counters = {
            "master_evicted_objects": ("Objects evicted.", s.evicted_objects_total),
            "master_evicted_bytes": ("Replica bytes evicted.", s.evicted_bytes_total),
            "master_eviction_rounds": ("Eviction rounds that evicted.", s.eviction_rounds_total),
            "master_removed_objects": ("Objects removed on request.", s.removed_objects_total),
            "master_expired_puts": ("Writes discarded after put_timeout.", s.expired_puts_total),
            "master_lost_objects": ("Objects lost with their segments.", s.lost_objects_total),
            "master_offloaded_evictions": (
                "Evictions that freed DRAM and kept the object on SSD.",
                s.offloaded_evictions_total,
            ),
            "master_ssd_offloads": ("SSD copies confirmed by nodes.", s.ssd_offloads_total),
            "master_ssd_stages": ("SSD-only objects staged into DRAM.", s.ssd_stages_total),
            "master_ssd_stage_failures": (
                "Stages that failed (missing or corrupt file, timeout).",
                s.ssd_stage_failures_total,
            ),
            "master_ssd_promotions": (
                "Staged objects kept in DRAM after promote_after stages.",
                s.ssd_promotions_total,
            ),
            "master_ssd_lost_objects": (
                "Objects removed because their last SSD copy went.",
                s.ssd_lost_objects_total,
            ),
        }
        for name, (doc, value) in counters.items():
            yield CounterMetricFamily(name, doc, value=value)
        used = GaugeMetricFamily(
            "master_segment_used_bytes", "Allocated bytes per segment.", labels=["segment"]
        )
        cap = GaugeMetricFamily(
            "master_segment_capacity_bytes", "Capacity per segment.", labels=["segment", "state"]
        )
        ssd = GaugeMetricFamily(
            "master_segment_ssd_keys",
            "Objects with an SSD copy on the segment's node (segments with an SSD tier).",
            labels=["segment"],
        )
        for g in s.segments:
            used.add_metric([g.name], g.used)
            cap.add_metric([g.name, g.state.name], g.capacity)
            if g.ssd_capacity:
                ssd.add_metric([g.name], g.ssd_keys)
        yield used
        yield cap
        yield ssd


class MasterService:
    """The running master: gRPC server, upkeep task, metrics endpoint, event fan-out.

    Args:
        config: master settings.
        options: listen addresses, secret, timings.
        rng: randomness for the ``random`` allocation strategy.
        clock: monotonic clock; the core's ``now`` is its :class:`RunningClock`, which
            skips the master's own stalls and clock jumps (see :meth:`now`).
        wall: wall clock stamped on published events.
        state: a restored core (default: an empty one).
        sink: where committed changes are journaled (``None``: not durable).
        image: the image the sink's records fold into (for its snapshots).
        role: ``standalone`` (serves at once), or ``recovering`` under HA (refuses RPCs
            until :meth:`become_leader`).
    """

    def __init__(
        self,
        config: MasterConfig,
        options: ServiceOptions | None = None,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        state: MasterState | None = None,
        sink: RecordSink | None = None,
        image: MetadataImage | None = None,
        role: str = "standalone",
    ) -> None:
        self.config = config
        self.options = options or ServiceOptions()
        self._rng = rng or random.Random()
        self.state = state if state is not None else MasterState(config, rng=self._rng)
        self.sink = sink
        self.image = image
        self.role = role
        """standalone | recovering | follower | leader | deposed."""
        self.ha_info: Callable[[], dict[str, Any]] = dict
        """Extra readiness fields (set by the HA controller)."""
        self.leader_hint: tuple[str, str] | None = None
        """(id, address) of the current leader while this master is not serving."""
        self.lease_until: float | None = None
        """HA: monotonic time until which etcd surely still holds this master's lease
        (when the last confirmed keepalive was sent, plus its TTL); ``None``: no lease
        (standalone). A leader past it serves nothing, reads included: it may have
        been paused or cut off while another master took over."""
        self._sink_error: str | None = None
        """Why the journal cannot be written (``None``: it can); see :meth:`_journal`."""
        self._sink_error_since = 0.0
        self._owed: list[Record] = []
        self._visible_seq = 0
        """Journal seq of the last change readers can see; replies wait until it is durable."""
        self._durable_seen = 0
        self._compact_failing = False
        # One reading advances the core's clock by at most one heartbeat interval (and
        # never less than a few upkeep ticks): a longer gap is a stall of this process
        # (or a clock jump), not silence of the nodes.
        self._clock = RunningClock(
            clock,
            max(config.heartbeat_interval_s, 4 * self.options.tick_interval_s),
            _log_stall,
        )
        self._wall = wall
        self._raw_clock = clock
        self._started = clock()
        self._lock = asyncio.Lock()
        self._watchers: set[asyncio.Queue[object]] = set()
        # key -> future resolved at the next event about the key (readers waiting for
        # an SSD stage share it); created only while someone waits.
        self._key_waiters: dict[str, asyncio.Future[None]] = {}
        self._seq = 0
        self._snapshot = self.state.snapshot()
        self.metrics = MasterMetrics(self._current_snapshot, lambda: len(self._watchers))
        self._server: grpc.aio.Server | None = None
        self._http: asyncio.Server | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._fast: FastControlServer | None = None
        self.port = 0
        """Bound gRPC port (after :meth:`start`)."""
        self.metrics_port: int | None = None
        """Bound HTTP port (after :meth:`start`), ``None`` when disabled."""

    # ------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Bind and start serving.

        Raises:
            RuntimeError: a port could not be bound.
        """
        from .master_servicer import MasterServicer

        opts = self.options
        interceptors: list[grpc.aio.ServerInterceptor] = []
        if opts.secret is not None:
            interceptors.append(
                TokenAuthInterceptor(
                    opts.secret,
                    lambda method: self.metrics.auth_failures.labels(
                        method.rsplit("/", 1)[-1]
                    ).inc(),
                )
            )
        # After auth (the first interceptor is the outermost): a caller without the
        # token learns nothing, not even who the leader is.
        interceptors.append(RoleGate(self))
        # so_reuseport off: gRPC enables it by default, and a second master on the same
        # port would silently share the traffic instead of failing to start.
        server = grpc.aio.server(
            interceptors=interceptors, options=[*convert.GRPC_OPTIONS, ("grpc.so_reuseport", 0)]
        )
        servicer = MasterServicer(self)
        pb_grpc.add_MasterServiceServicer_to_server(servicer, server)
        try:
            self.port = server.add_insecure_port(f"{opts.host}:{opts.port}")
        except RuntimeError:
            self.port = 0
        if self.port == 0:
            raise RuntimeError(f"cannot bind gRPC on {opts.host}:{opts.port} (port in use?)")
        if opts.metrics_port is not None:
            try:
                self._http = await serve_http(
                    opts.metrics_host,
                    opts.metrics_port,
                    {
                        "/metrics": self._metrics_page,
                        "/health": self._health,
                        "/snapshot": self._snap,
                        "/get_all_segments": self._segment_names,
                    },
                )
            except OSError as exc:
                raise RuntimeError(
                    f"cannot bind metrics on {opts.metrics_host}:{opts.metrics_port}: "
                    f"{exc.strerror or exc}"
                ) from None
            self.metrics_port = self._http.sockets[0].getsockname()[1]
        if opts.fast_port is not None:
            fast = FastControlServer(
                self,
                servicer,
                opts.secret,
                lambda: self.metrics.auth_failures.labels("FastControl").inc(),
            )
            await fast.start(opts.host, opts.fast_port, unix=opts.fast_unix)
            self._fast = fast
        await server.start()
        self._server = server
        if self.serving and self.state.snapshot().segments:
            # Restored from the journal: its nodes were beating the previous process and
            # find this one only after their channel's reconnect backoff. None is expired
            # before it had that time on top of a full client_ttl_s (as after an HA
            # promotion); silent ones are suspect meanwhile, so get no new replicas.
            hold = PROMOTION_GRACE_FACTOR * self.config.client_ttl_s
            self.state.hold_expiry(self._clock() + hold)
        self._ticker = asyncio.create_task(self._upkeep(), name="master-upkeep")

    @property
    def fast_port(self) -> int:
        """Bound port of the fast control channel (0: none)."""
        return self._fast.port if self._fast is not None else 0

    @property
    def serving(self) -> bool:
        """Whether this master answers RPCs (standalone, or the elected leader whose
        lease is confirmed: a resumed or cut-off leader must not serve stale state)."""
        if self.role == "standalone":
            return True
        return self.role == "leader" and self.lease_confirmed()

    def lease_confirmed(self) -> bool:
        """Whether this master's etcd lease surely has not run out (no lease: True)."""
        return self.lease_until is None or time.monotonic() < self.lease_until

    async def become_leader(
        self, state: MasterState, sink: RecordSink, image: MetadataImage
    ) -> None:
        """Start serving ``state`` (rebuilt from the replicated image), journaling to ``sink``."""
        async with self._lock:
            # Clients were heartbeating the old leader; each finds this one within a
            # heartbeat deadline plus a leader lookup. Nobody is expired before they
            # had that time on top of a full client_ttl_s (their data is in their
            # memory, not lost); silent ones are suspect and get no new replicas.
            hold = PROMOTION_GRACE_FACTOR * state.config.client_ttl_s
            state.hold_expiry(self._clock() + hold)
            self.state = state
            self.sink = sink
            self.image = image
            self._snapshot = state.snapshot()
            self.leader_hint = None
            self.role = "leader"

    def step_down(self, reason: str) -> None:
        """Stop serving at once (lost the leader lease, or a fenced write)."""
        if self.role != "deposed":
            log.error("master steps down: %s", reason)
        self.role = "deposed"

    async def stop(self, grace_s: float = 1.0) -> None:
        """Stop accepting calls, end event streams, finish in-flight calls (up to ``grace_s``)."""
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        for q in list(self._watchers):
            _offer(q, _CLOSED)
        if self.sink is not None:
            with contextlib.suppress(Exception):
                await self.sink.close()
        if self._http is not None:
            self._http.close()
            await self._http.wait_closed()
        if self._fast is not None:
            await self._fast.stop()
        if self._server is not None:
            await self._server.stop(grace_s)

    # --------------------------------------------------------------- calling
    async def call(
        self,
        rpc: str,
        fn: Callable[[float], T],
        *,
        started: Callable[[T], list[Record]] | None = None,
    ) -> T | StoreError:
        """Run one core call under the lock; count it; journal and publish its events.

        Args:
            rpc: method name (for metrics).
            fn: the core call, given ``now``.
            started: for PutStart-like calls, the journal records of the writes the
                result started. They are journaled with the events but the reply does
                not wait for them to be durable (only for the call's events: evictions
                and the like), so PutStart pays no fsync of its own; the PutEnd that
                follows waits for both.

        Returns:
            The result, or the :class:`StoreError` it raised (bugs become INTERNAL).
        """
        async with self._lock:
            result = self._invoke(rpc, fn, self._clock())
            # Without a journal there is nowhere to put the records: do not build them.
            extra: list[Record] = []
            if started is not None and self.sink is not None and not isinstance(result, StoreError):
                extra = started(result)
            seq = self._publish(extra)
        return await self._durable(rpc, result, seq)

    async def call_bulk(self, rpc: str, fn: Callable[[float], T]) -> T | StoreError:
        """Like :meth:`call`, for calls that walk every key: the core call runs in a
        worker thread (the lock keeps everything else out meanwhile); events are
        published back on the loop, because asyncio queues are not thread-safe."""
        async with self._lock:
            result = await asyncio.to_thread(self._invoke, rpc, fn, self._clock())
            seq = self._publish()
        return await self._durable(rpc, result, seq)

    async def _durable(self, rpc: str, result: T | StoreError, seq: int) -> T | StoreError:
        # Reply only once the change is durable: an acknowledged write is never lost.
        # A reply that changed nothing still waits for the changes it could see (durable
        # before visible: no reader acts on a change a crash can take back).
        if seq < 0:
            self.metrics.failures.labels(rpc, ErrorCode.UNAVAILABLE.name).inc()
            return StoreError(
                ErrorCode.UNAVAILABLE,
                f"{rpc}: refused, the master's journal cannot be written "
                f"({self._sink_error}); nothing was changed",
            )
        if seq == 0 and self._visible_seq > self._durable_seen:
            seq = self._visible_seq
        if seq and self.sink is not None:
            try:
                await self.sink.wait_durable(seq)
            except Exception as exc:
                self._journal_down(exc)
                self.metrics.failures.labels(rpc, ErrorCode.UNAVAILABLE.name).inc()
                return StoreError(
                    ErrorCode.UNAVAILABLE, f"{rpc}: change not made durable: {_reason(exc)}"
                )
            self._durable_seen = max(self._durable_seen, seq)
        return result

    def call_heartbeat(self, client_id: str) -> bool | StoreError:
        """Record a heartbeat without waiting for the lock.

        A bulk call can hold the lock for seconds; heartbeats queued behind it would
        make the next upkeep expire live clients. A heartbeat only writes the client
        table, which no bulk call touches, and emits no event, so it runs at once on
        the loop thread (no publish: the outbox may be in use by the worker thread).
        """
        return self._invoke(
            "Heartbeat", lambda now: self.state.heartbeat(client_id, now), self._clock()
        )

    def count_item_failures(self, rpc: str, results: list[Any]) -> None:
        """Count the failed items of a batch call."""
        for r in results:
            if isinstance(r, StoreError):
                self.metrics.failures.labels(rpc, r.code.name).inc()

    def _invoke(self, rpc: str, fn: Callable[[float], T], now: float) -> T | StoreError:
        self.metrics.requests.labels(rpc).inc()
        try:
            return fn(now)
        except StoreError as exc:
            self.metrics.failures.labels(rpc, exc.code.name).inc()
            return exc
        except Exception as exc:
            log.exception("%s failed unexpectedly", rpc)
            self.metrics.failures.labels(rpc, ErrorCode.INTERNAL.name).inc()
            return StoreError(ErrorCode.INTERNAL, f"{rpc}: {type(exc).__name__}: {exc}")

    def now(self) -> float:
        """The core's clock: seconds this master was running (a :class:`RunningClock`
        over the monotonic clock; a stall or a jump counts one heartbeat interval)."""
        return self._clock()

    @property
    def stalls(self) -> tuple[int, float]:
        """Stalls and clock jumps seen so far, and the seconds they did not count."""
        return self._clock.stalls, self._clock.skipped_s

    # ---------------------------------------------------------------- events
    def subscribe(self) -> asyncio.Queue[object]:
        """A queue receiving every event from now on (``pb.Event`` items)."""
        q: asyncio.Queue[object] = asyncio.Queue(self.options.event_queue_size + 1)
        self._watchers.add(q)
        return q

    def unsubscribe(self, q: asyncio.Queue[object]) -> None:
        """Stop delivering to ``q``."""
        self._watchers.discard(q)

    @property
    def last_seq(self) -> int:
        """Sequence number of the last event published (0 before the first)."""
        return self._seq

    @staticmethod
    def is_overflow(item: object) -> bool:
        """Whether a queue item says the subscriber fell behind."""
        return item is _OVERFLOW

    @staticmethod
    def is_closed(item: object) -> bool:
        """Whether a queue item says the master is shutting down."""
        return item is _CLOSED

    def _publish(self, extra: list[Record] | None = None) -> int:
        """Journal and fan out the core's new events (plus ``extra`` journal records).

        Returns:
            The journal seq the reply must wait for (0: nothing, -1: the write failed).
        """
        events = self.state.take_events()
        stalled = self.state.take_stalled()
        if self._key_waiters and (events or stalled):
            self._wake_key_waiters(events, stalled)
        if not events and not extra:
            return 0
        seq = self._journal(events, extra or [])
        if not events or seq < 0:
            return seq  # a refused change was undone: nothing to announce
        self.metrics.events.inc(len(events))
        if not self._watchers:
            self._seq += len(events)
            return seq
        wall = self._wall()
        for e in events:
            self._seq += 1
            msg = convert.event_to_pb(e, self._seq, wall)
            for q in list(self._watchers):
                if q.qsize() >= self.options.event_queue_size:
                    self._watchers.discard(q)
                    _offer(q, _OVERFLOW)
                else:
                    q.put_nowait(msg)
        return seq

    def key_changed(self, key: str) -> asyncio.Future[None]:
        """A future resolved at the next published event about ``key`` that can settle
        an SSD stage (replica added, stage requested again, SSD copy dropped, object
        removed); every caller waiting on the same key gets the same future.

        Call it from inside a core call (under the lock) so no event is missed.
        """
        fut = self._key_waiters.get(key)
        if fut is None or fut.done():
            fut = asyncio.get_running_loop().create_future()
            self._key_waiters[key] = fut
        return fut

    def _wake_key_waiters(self, events: list[Any], stalled: list[str]) -> None:
        keys = [e.key for e in events if isinstance(e, _SETTLING)] + stalled
        for key in keys:
            fut = self._key_waiters.pop(key, None)
            if fut is not None and not fut.done():
                fut.set_result(None)

    def _journal(self, events: list[Any], extra: list[Record]) -> int:
        if self.sink is None:
            return 0
        from .ha.image import records_from_events

        records = records_from_events(events, self._wall() - self._clock(), self._segment_info)
        must_wait = bool(records)
        records.extend(extra)
        if not records:
            return 0
        batch = [*self._owed, *records] if self._owed else records
        try:
            seq = self.sink.append(batch)
        except Exception as exc:  # disk full, I/O error: undo, refuse to acknowledge
            self._journal_down(exc)
            return self._undo(records)
        self._owed = []
        self._journal_up()
        if self.image is not None:
            self.image.apply_all(batch)
            try:
                self.sink.maybe_compact(self.image)
                self._compact_failing = False
            except OSError as exc:
                if not self._compact_failing:
                    log.warning("journal: cannot start a snapshot (%s); logs are kept", exc)
                self._compact_failing = True
        # Records of started writes alone need not be durable before the reply.
        if must_wait:
            self._visible_seq = seq
        return seq if must_wait else 0

    def _undo(self, records: list[Record]) -> int:
        """Take back a change whose records were not written (see :mod:`.master.undo`).

        Returns:
            -1 when the call must be refused, 0 when only unfinished writes were dropped
            (kept in memory; their records are owed to the journal).
        """
        if self.image is None:
            return -1
        from .ha.rebuild import build_state
        from .master.undo import undo

        done = undo(
            self.state,
            self.image,
            records,
            self._owed,
            self._clock(),
            self._wall(),
            rebuild=build_state,
        )
        if done.rebuilt:
            log.warning(
                "journal: state rebuilt from the journal after a refused change (%s)",
                ", ".join(sorted({str(r.get("t")) for r in records})),
            )
            self.state = done.state
        self._owed = done.owed
        return -1 if done.refused else 0

    def _journal_down(self, exc: BaseException) -> None:
        """The journal failed: log it once per outage (not per request)."""
        if self._sink_error is None:
            self._sink_error_since = self._clock()
            log.error(
                "journal: cannot be written (%s); writes are refused until it can "
                "(/health readiness durable: false)",
                _reason(exc),
            )
        self._sink_error = _reason(exc)

    def _journal_up(self) -> None:
        if self._sink_error is not None:
            log.warning(
                "journal: writable again after %.1f s; writes are accepted",
                self._clock() - self._sink_error_since,
            )
            self._sink_error = None

    def _segment_info(self, name: str) -> SegmentSnapshot | None:
        for seg in self.state.snapshot().segments:
            if seg.name == name:
                return seg
        return None

    # ---------------------------------------------------------------- upkeep
    async def _upkeep(self) -> None:
        while True:
            await asyncio.sleep(self.options.tick_interval_s)
            if not self.serving:
                # A follower reads its running clock too, so its promotion is not taken
                # for a stall as long as its whole time as a follower.
                self._clock()
                continue
            async with self._lock:
                try:
                    self.state.tick(self._clock())
                except Exception:  # keep serving; the next tick retries
                    log.exception("master upkeep failed")
                self._publish()
                self._snapshot = self.state.snapshot()

    # ------------------------------------------------------------------ http
    def _current_snapshot(self) -> MasterSnapshot:
        # Called on the loop thread (HTTP handler or GetSnapshot): always consistent,
        # because no await happens inside a core call.
        if not self._lock.locked():
            self._snapshot = self.state.snapshot()
        return self._snapshot

    def snapshot(self) -> MasterSnapshot:
        """The latest consistent snapshot (fresh unless a bulk call is running)."""
        return self._current_snapshot()

    def _metrics_page(self) -> tuple[int, str, bytes]:
        return 200, "text/plain; version=0.0.4; charset=utf-8", self.metrics.exposition()

    def _health(self) -> tuple[int, str, bytes]:
        s = self._current_snapshot()
        body = {
            "status": "ok",
            "role": "master",
            "version": f"mooncake-py {__version__}",  # the form `cluster check` compares
            "uptime_s": round(self._raw_clock() - self._started, 3),
            "stalls": self._clock.stalls,
            "stalled_s": round(self._clock.skipped_s, 3),
            "keys": s.key_count,
            "segments": len(s.segments),
            "clients": s.client_count,
            "readiness": self.readiness(),
        }
        if self.options.hashing is not None:
            body["hashing"] = dict(self.options.hashing)
        return 200, "application/json", json.dumps(body).encode()

    def readiness(self) -> dict[str, Any]:
        """Role, durability and (under HA) election and catch-up state."""
        out: dict[str, Any] = {
            "state": self.role,
            "serving": self.serving,
            "durable": self.sink is not None and self._sink_error is None,
            "journal_seq": self.sink.last_seq if self.sink is not None else None,
            "fast_port": self.fast_port,
            "fast_unix": self._fast.unix_name if self._fast is not None else "",
            "put_timeout_s": self.config.put_timeout_s,
        }
        if self._sink_error is not None:
            out["journal_error"] = self._sink_error
        if self.leader_hint is not None:
            out["leader_id"], out["leader_address"] = self.leader_hint
        out.update(self.ha_info())
        return out

    def _segment_names(self) -> tuple[int, str, bytes]:
        # upstream's admin endpoint (SGLang polls it): one segment name per line
        names = "".join(f"{seg.name}\n" for seg in self._current_snapshot().segments)
        return 200, "text/plain; version=0.0.4", names.encode()

    def _snap(self) -> tuple[int, str, bytes]:
        data = _plain(dataclasses.asdict(self._current_snapshot()))
        assert isinstance(data, dict)
        data["readiness"] = self.readiness()
        return 200, "application/json", json.dumps(data, indent=1).encode()


def _log_stall(gap_s: float, counted_s: float) -> None:
    if gap_s < 0:
        log.warning("master clock went back %.3f s; liveness counts none of it", -gap_s)
    else:
        log.warning(
            "master was not running for %.3f s (paused, starved or its clock jumped); "
            "liveness counts %.3f s of it, so no node is expired for that silence",
            gap_s,
            counted_s,
        )


def _reason(exc: BaseException) -> str:
    """One line for a journal error: ``No space left on device`` rather than a repr."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} (errno {exc.errno})"
    return f"{type(exc).__name__}: {exc}"


def _plain(value: object) -> object:
    # IntEnum would serialise as a number; operators read names.
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _offer(q: asyncio.Queue[object], item: object) -> None:
    # The queue has one spare slot for this marker; if even that is used, drop the
    # oldest event so the marker always gets through.
    if q.full():
        q.get_nowait()
    q.put_nowait(item)


NOT_LEADER = "NOT_LEADER"
PROMOTION_GRACE_FACTOR = 2.0
"""A new leader expires no client for this many client_ttl_s after taking over: a
restored client that stays silent is forgotten 2 x client_ttl_s after the promotion
(not client_ttl_s, the time it may need to notice the failover and find the leader)."""


class RoleGate(grpc.aio.ServerInterceptor):
    """Refuses every RPC but GetReadiness with UNAVAILABLE ``NOT_LEADER: ...`` while the
    master is not serving (an HA follower, a master still recovering, or one that
    stepped down).

    The details name the leader when known, and the trailing metadata
    ``mooncake-leader`` carries its address, so a client can follow without etcd.
    """

    def __init__(self, service: MasterService) -> None:
        self._svc = service

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if self._svc.serving or handler is None:
            return handler
        if handler_call_details.method.endswith("/GetReadiness"):
            return handler  # how a client learns the role of a master that refuses
        return _not_leader(handler, self._svc)


def _not_leader(handler: Any, svc: MasterService) -> Any:
    def refusal() -> tuple[str, tuple[tuple[str, str], ...]]:
        hint = svc.leader_hint
        if svc.role == "leader":
            return (
                f"{NOT_LEADER}: this master's leader lease is not confirmed (it was paused "
                "or cut off from etcd); ask etcd for the leader",
                (),
            )
        if hint is None:
            return f"{NOT_LEADER}: this master is {svc.role}; no leader known yet", ()
        text = f"{NOT_LEADER}: this master is {svc.role}; the leader is {hint[0]} at {hint[1]}"
        return text, ((LEADER_METADATA, hint[1]),)

    async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        text, md = refusal()
        if md:
            context.set_trailing_metadata(md)
        await context.abort(grpc.StatusCode.UNAVAILABLE, text)

    async def stream(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        text, md = refusal()
        if md:
            context.set_trailing_metadata(md)
        await context.abort(grpc.StatusCode.UNAVAILABLE, text)
        yield  # never reached; makes this an async generator like the real handler

    kw = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(stream, **kw)
    return grpc.unary_unary_rpc_method_handler(unary, **kw)
