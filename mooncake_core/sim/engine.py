"""Discrete-event simulator of a Mooncake cluster, driving the real Conductor.

The Conductor (:class:`~mooncake_core.conductor.scheduler.Conductor`) makes every
scheduling and admission decision, exactly as in the live service; this module plays the
cluster around it::

    arrival --schedule()--> prefill FIFO --start--> [fetch prefix over NICs] --> compute
        --> done: cache blocks (LRU), TTFT  --KV streamed to decode during compute-->
        decode join (continuous batching) --> steps ... --> last token: TBT

Time is a heap of ``(time, seq, kind, arg)``; ``seq`` breaks ties in insertion order, so
a run is a pure function of the trace and the config (the random policy draws from a
seeded generator). Caches emit ``BlockStored``/``BlockRemoved`` events to the
Conductor's prefix index, as the workers and store do in the live service.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mooncake_core.conductor.calibration import PrefillTimings
from mooncake_core.conductor.decision import Decision, ScheduleRequest
from mooncake_core.conductor.events import BlockRemoved, BlockStored, Tier
from mooncake_core.conductor.network import NetworkModel
from mooncake_core.conductor.options import ConductorOptions
from mooncake_core.conductor.scheduler import Conductor
from mooncake_core.config.models import HashingConfig
from mooncake_core.sim.cache import BlockLRU
from mooncake_core.sim.config import SimConfig
from mooncake_core.sim.costmodel import CostModel, load_profile
from mooncake_core.sim.decode import DecodeSim
from mooncake_core.sim.links import Links
from mooncake_core.sim.results import LoadSample, RequestResult, SimResult
from mooncake_core.sim.trace import TRACE_BLOCK_TOKENS, TraceRequest

__all__ = ["STORE_POOL", "Simulator", "simulate"]

STORE_POOL = "store-pool"
"""Location name of the global store pool in the prefix index."""

_ARRIVE, _PREFILL_DONE, _STEP, _NET, _SAMPLE = range(5)


@dataclass(slots=True)
class _Req:
    """Mutable per-request progress (internal)."""

    trace: TraceRequest
    keys: tuple[int, ...]
    decision: Decision | None = None
    local: int = 0
    fetched: int = 0
    fetch_s: float | None = None
    start_s: float = math.nan
    done_s: float = math.nan
    kv_pending: bool = False
    prefilled: bool = False
    moved: int = 0
    rejected: str = ""
    wasted: bool = False
    decode: str = ""
    finish_s: float = math.nan
    tbt_s: float = math.nan
    predicted_work: float = 0.0
    compute_s: float = 0.0
    prefix_tokens: int = 0


def _decision_of(r: _Req) -> Decision:
    if r.decision is None:
        raise RuntimeError(f"request {r.trace.rid} reached prefill without a decision")
    return r.decision


class Simulator:
    """One simulated cluster; :meth:`run` replays a trace through it.

    Args:
        config: cluster shape, policy and options.
        cost: cost model (default: the profile named in ``config``).

    Raises:
        ValueError: a config the Conductor rejects (unknown policy or admission).
    """

    def __init__(self, config: SimConfig, cost: CostModel | None = None) -> None:
        self.config = config
        base_cost = cost or load_profile(config.profile)
        if config.node_bandwidth_bps is not None:
            base_cost = dataclasses.replace(base_cost, node_bandwidth_bps=config.node_bandwidth_bps)
        self.cost = base_cost
        c = self.cost
        g = config.cpp_group
        self.prefill_names = [f"prefill-{i}" for i in range(config.prefill_instances // g)]
        self.decode_names = [f"decode-{i}" for i in range(config.decode_instances)]
        self.block_bytes = TRACE_BLOCK_TOKENS * c.kv_bytes_per_token
        lct = (
            c.local_cache_tokens if config.local_cache_tokens is None else config.local_cache_tokens
        )
        cap = None if lct == -1 else g * lct // TRACE_BLOCK_TOKENS
        self.caches = {n: BlockLRU(cap) for n in self.prefill_names}
        self.pool: BlockLRU | None = None
        slots = config.decode_max_batch or c.decode_max_batch
        bw = {n: g * c.node_bandwidth_bps for n in self.prefill_names}
        if config.store_pool_tokens:
            self.pool = BlockLRU(config.store_pool_tokens // TRACE_BLOCK_TOKENS)
            bw[STORE_POOL] = config.store_nodes * c.node_bandwidth_bps
        self.links = Links(bw, c.node_bandwidth_bps)
        net = NetworkModel(default_bandwidth_bps=c.node_bandwidth_bps)
        for n, b in bw.items():
            net.set_bandwidth(n, "nics", b)
        self.conductor = Conductor(
            config.conductor,
            self.prefill_names,
            # The Conductor sees both limits of a decode instance: batch slots and the KV
            # memory left after the weights (the one that binds for long contexts).
            {n: (slots, c.decode_kv_capacity_tokens) for n in self.decode_names},
            hashing=HashingConfig(block_size=TRACE_BLOCK_TOKENS),
            prefill_model=c.prefill,
            decode_model=c.decode,
            network=net,
            options=ConductorOptions(
                bytes_per_token=c.kv_bytes_per_token,
                seed=config.seed,
                cache_on_prefill_done=False,
            ),
        )
        self.decoders = {
            n: DecodeSim(n, c.decode, slots, c.decode_kv_capacity_tokens) for n in self.decode_names
        }
        # Ground truth that differs from the predictor (SimConfig.truth_*).
        n_pre = len(self.prefill_names)
        spread = config.truth_prefill_spread
        self._speed = {
            name: config.truth_prefill_scale
            * (1.0 + (spread * (2.0 * i / (n_pre - 1) - 1.0) if n_pre > 1 else 0.0))
            for i, name in enumerate(self.prefill_names)
        }
        self._noise = random.Random(config.seed * 1_000_003 + 7)
        self._queues: dict[str, deque[int]] = {n: deque() for n in self.prefill_names}
        self._busy: dict[str, int | None] = dict.fromkeys(self.prefill_names)
        self._work: dict[str, float] = dict.fromkeys(self.prefill_names, 0.0)
        # Busy-time accounting for window-averaged prefill utilisation in load samples.
        self._busy_since: dict[str, float] = dict.fromkeys(self.prefill_names, 0.0)
        self._busy_acc = 0.0
        self._busy_seen = 0.0
        self._last_sample = 0.0
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._net_version = 0
        self._flows: dict[int, tuple[str, int]] = {}
        self._reqs: list[_Req] = []
        self.decisions: list[Decision] = []
        self.load: list[LoadSample] = []
        self.counters: dict[str, float] = {
            "migrations": 0,
            "fetched_blocks": 0,
            "events": 0,
            "kv_moves": 0,
        }

    # -- event plumbing --------------------------------------------------------------

    def _push(self, t: float, kind: int, arg: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, arg))

    def _net_reschedule(self) -> None:
        self._net_version += 1
        nxt = self.links.next_completion()
        if nxt is not None:
            self._push(nxt[0], _NET, self._net_version)

    def _start_flow(self, src: str, dst: str, nbytes: int, now: float, what: str, rid: int) -> None:
        fid = self.links.start(src, dst, nbytes, now)
        self._flows[fid] = (what, rid)
        self._net_reschedule()

    def _cache_events(
        self, loc: str, tier: Tier, added: Sequence[int], evicted: Sequence[int]
    ) -> None:
        if added:
            self.conductor.apply(BlockStored(loc, tier, tuple(added)))
        if evicted:
            self.conductor.apply(BlockRemoved(loc, tier, tuple(evicted)))

    # -- prefill ---------------------------------------------------------------------

    def _arrive(self, r: _Req, now: float) -> None:
        t = r.trace
        req = ScheduleRequest(str(t.rid), r.keys, t.input_length, t.output_length)
        d = self.conductor.schedule(req, now)
        r.decision = d
        if self.config.audit:
            self.decisions.append(d)
        if not d.admitted:
            r.rejected = d.reason or "rejected"
            return
        r.predicted_work = d.predicted_transfer_s + d.predicted_prefill_s
        self._work[d.prefill] += r.predicted_work
        self._queues[d.prefill].append(t.rid)
        if self._busy[d.prefill] is None:
            self._start_next(d.prefill, now)

    def _start_next(self, inst: str, now: float) -> None:
        q = self._queues[inst]
        if not q:
            if self._busy[inst] is not None:
                self._busy_acc += now - self._busy_since[inst]
            self._busy[inst] = None
            return
        rid = q.popleft()
        if self._busy[inst] is None:
            self._busy_since[inst] = now
        self._busy[inst] = rid
        r = self._reqs[rid]
        d = _decision_of(r)
        self.conductor.on_prefill_start(str(rid), now)
        r.start_s = now
        keys = r.keys
        r.local = self.caches[inst].prefix_len(keys)
        mig = d.migration
        if mig is not None and mig.keys:
            src_cache = self.pool if mig.source == STORE_POOL else self.caches.get(mig.source)
            want = keys[r.local : d.prefix_blocks]
            n = (
                src_cache.prefix_len(want)
                if src_cache is not None and r.local < d.prefix_blocks
                else 0
            )
            if n > 0 and src_cache is not None:
                src_cache.touch(want[:n])
                r.fetched = n
                self.counters["migrations"] += 1
                self.counters["fetched_blocks"] += n
                self._start_flow(mig.source, inst, n * self.block_bytes, now, "fetch", rid)
                return
        self._compute(inst, r, now)

    def _compute(self, inst: str, r: _Req, now: float) -> None:
        t = r.trace
        used = r.local + r.fetched
        self.caches[inst].touch(r.keys[:used])
        prefix_tokens = min(used * TRACE_BLOCK_TOKENS, t.input_length)
        dur = self.cost.prefill_time(t.input_length, prefix_tokens, self.config.cpp_group)
        cfg = self.config
        if cfg.truth_prefill_scale != 1.0 or cfg.truth_prefill_spread:
            dur *= self._speed[inst]
        if cfg.truth_prefill_noise:
            sigma = cfg.truth_prefill_noise
            dur *= math.exp(self._noise.gauss(-0.5 * sigma * sigma, sigma))
        r.compute_s = dur
        r.prefix_tokens = prefix_tokens
        if self.config.simulate_decode and t.output_length > 1 and r.decision is not None:
            # KV streams to decode layer by layer while the prefill computes (paper Fig. 3).
            kv = self.cost.kv_bytes(t.input_length)
            r.kv_pending = True
            r.moved += kv
            self._start_flow(inst, r.decision.decode, kv, now, "kv", t.rid)
        self._push(now + dur, _PREFILL_DONE, (inst, t.rid))

    def _fetch_done(self, r: _Req, now: float) -> None:
        inst = _decision_of(r).prefill
        r.fetch_s = now - r.start_s
        r.moved += r.fetched * self.block_bytes
        # Hotspot replication: the target keeps what it fetched.
        fetched = r.keys[r.local : r.local + r.fetched]
        added, evicted = self.caches[inst].insert(fetched)
        self._cache_events(inst, Tier.HBM, added, evicted)
        self._compute(inst, r, now)

    def _prefill_done(self, inst: str, rid: int, now: float) -> None:
        r = self._reqs[rid]
        r.done_s = now
        r.prefilled = True
        self._work[inst] -= r.predicted_work
        cache = self.caches[inst]
        added, evicted = cache.insert(r.keys)
        self.conductor.on_prefill_done(str(rid), now, r.fetch_s)
        self._cache_events(inst, Tier.HBM, added, evicted)
        d = r.decision
        if d is not None and d.migration is not None:
            gone = [k for k in d.migration.keys if k not in cache]
            if gone:  # confirmed by the Conductor but already evicted here
                self.conductor.apply(BlockRemoved(inst, Tier.HBM, tuple(gone)))
        if self.pool is not None:
            a, e = self.pool.insert(r.keys)
            self._cache_events(STORE_POOL, Tier.DRAM, a, e)
        # The TTFT as the sum of its parts (the same sum the calibration subtracts), plus
        # the time outside the instance.
        queue = r.start_s - r.trace.arrival_s
        fetch = r.fetch_s or 0.0
        ttft = queue + fetch + r.compute_s + self.config.truth_overhead_s
        self.conductor.on_actual(
            str(rid), ttft, timings=PrefillTimings(queue, fetch, r.compute_s, r.prefix_tokens)
        )
        self._start_next(inst, now)
        if not r.kv_pending:
            self._join(r, now)

    # -- decode ----------------------------------------------------------------------

    def _join(self, r: _Req, now: float) -> None:
        rid = r.trace.rid
        res = self.conductor.on_decode_join(str(rid), now)
        if not res.admitted or res.instance is None:
            r.rejected = res.reason or "decode_full"
            r.wasted = True
            return
        r.decode = res.instance
        steps = r.trace.output_length - 1
        if not self.config.simulate_decode or steps <= 0:
            r.finish_s = now
            self.conductor.on_decode_done(str(rid), now)
            return
        if res.moved and res.streamed_to in self.decoders:
            # The KV went to the instance chosen at scheduling time, which filled up
            # meanwhile: it must cross the network again before this request can decode.
            kv = self.cost.kv_bytes(r.trace.input_length)
            r.moved += kv
            self.counters["kv_moves"] += 1
            self._start_flow(res.streamed_to, res.instance, kv, now, "move", rid)
            return
        self._decode_join(r, now)

    def _decode_join(self, r: _Req, now: float) -> None:
        rid = r.trace.rid
        steps = r.trace.output_length - 1
        dec = self.decoders[r.decode]
        if dec.join(rid, r.trace.input_length, steps, r.done_s, now):
            self._push(now + dec.step_time(), _STEP, r.decode)

    def _step(self, name: str, now: float) -> None:
        dec = self.decoders[name]
        done, more = dec.end_step(now)
        for dd in done:
            r = self._reqs[dd.rid]
            r.finish_s = dd.finish_s
            r.tbt_s = dd.tbt_s
            self.conductor.on_decode_done(str(dd.rid), now)
            self.conductor.on_actual(str(dd.rid), None, dd.tbt_s)
        if more:
            self._push(now + dec.step_time(), _STEP, name)

    def _net(self, version: object, now: float) -> None:
        if version != self._net_version:
            return
        while True:
            nxt = self.links.next_completion()
            if nxt is None or nxt[0] > now + 1e-12:
                break
            self.links.finish(nxt[1], now)
            what, rid = self._flows.pop(nxt[1])
            r = self._reqs[rid]
            if what == "fetch":
                self._fetch_done(r, now)
            elif what == "move":
                self._decode_join(r, now)
            else:
                r.kv_pending = False
                if r.prefilled:
                    self._join(r, now)
        self._net_reschedule()

    # -- load samples ------------------------------------------------------------------

    def _sample(self, now: float) -> None:
        n = len(self.prefill_names)
        total = self._busy_acc + sum(
            now - self._busy_since[k] for k, v in self._busy.items() if v is not None
        )
        window = now - self._last_sample
        busy = (total - self._busy_seen) / window if window > 0 else 0.0
        self._busy_seen, self._last_sample = total, now
        work = sum(self._work.values()) / n
        slots = sum(d.max_batch for d in self.decoders.values())
        batch = sum(d.batch for d in self.decoders.values())
        kv = sum(d.context for d in self.decoders.values())
        kv_cap = sum(d.kv_capacity for d in self.decoders.values())
        self.load.append(
            LoadSample(
                now, work / self.config.load_sample_interval_s, busy / n, batch / slots, kv / kv_cap
            )
        )

    # -- run ---------------------------------------------------------------------------

    def run(self, trace: Sequence[TraceRequest]) -> SimResult:
        """Replay ``trace`` (arrival order) to completion.

        Returns:
            Per-request results, load samples and counters.

        Raises:
            ValueError: a request id out of order (trace not from :func:`load_trace`).
        """
        wall = time.perf_counter()
        for i, t in enumerate(trace):
            if t.rid != i:
                raise ValueError(f"trace request {i} has rid {t.rid}; load it with load_trace")
            keys = tuple(t.hash_ids[: t.input_length // TRACE_BLOCK_TOKENS])
            self._reqs.append(_Req(t, keys))
            self._push(t.arrival_s, _ARRIVE, i)
        interval = self.config.load_sample_interval_s
        if trace:
            self._last_sample = trace[0].arrival_s
            self._push(trace[0].arrival_s + interval, _SAMPLE, None)
        last_arrival = trace[-1].arrival_s if trace else 0.0
        heap = self._heap
        events = 0
        while heap:
            now, _, kind, arg = heapq.heappop(heap)
            events += 1
            if kind == _STEP:
                self._step(arg, now)
            elif kind == _ARRIVE:
                self._arrive(self._reqs[arg], now)
            elif kind == _PREFILL_DONE:
                inst, rid = arg
                self._prefill_done(inst, rid, now)
            elif kind == _NET:
                self._net(arg, now)
            elif kind == _SAMPLE:
                self._sample(now)
                if now < last_arrival or len(heap) > 0:
                    self._push(now + interval, _SAMPLE, None)
        self.counters["events"] = events
        self.counters["bytes_moved"] = self.links.bytes_moved
        results = [self._result(r) for r in self._reqs]
        return SimResult(results, self.load, dict(self.counters), time.perf_counter() - wall)

    def _result(self, r: _Req) -> RequestResult:
        t = r.trace
        d = r.decision
        rejected = bool(r.rejected)
        served_ttft = (
            r.done_s - t.arrival_s + self.config.truth_overhead_s
            if not math.isnan(r.done_s)
            else math.nan
        )
        return RequestResult(
            rid=t.rid,
            arrival_s=t.arrival_s,
            input_length=t.input_length,
            output_length=t.output_length,
            rejected=rejected,
            reason=r.rejected,
            prefill_instance=d.prefill if d is not None and d.admitted else "",
            decode_instance=r.decode,
            ttft_s=served_ttft,
            tbt_s=r.tbt_s,
            finish_s=r.finish_s if not rejected else math.nan,
            prefix_hit_blocks=r.local + r.fetched,
            local_hit_blocks=r.local,
            fetched_blocks=r.fetched,
            transferred_bytes=r.moved,
            predicted_ttft_s=d.predicted_ttft_s if d is not None else math.nan,
            wasted_prefill=r.wasted,
        )


def simulate(
    trace: Sequence[TraceRequest], config: SimConfig, cost: CostModel | None = None
) -> SimResult:
    """Run ``trace`` through a fresh :class:`Simulator` built from ``config``."""
    return Simulator(config, cost).run(trace)
