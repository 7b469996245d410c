"""The Conductor: places requests on prefill/decode pairs and tracks them through their life.

Sans-IO: every call takes ``now``; nothing here sleeps, sends or reads a clock. The live
service and the simulator both drive it the same way::

    d = conductor.schedule(req, now)          # -> Decision (admitted or rejected)
    conductor.on_prefill_start(req_id, now)   # the prefill instance picked it up
    conductor.on_prefill_done(req_id, now)    # KV complete; feeds the adaptive policy
    conductor.on_decode_join(req_id, now)     # -> JoinResult (baseline may reject here)
    conductor.on_decode_done(req_id, now)     # last token
    conductor.on_actual(req_id, ttft, timings=...)  # measured TTFT (+ parts): calibration
    conductor.on_actual(req_id, None, tbt)    # measured TBT, for error statistics
    conductor.apply(event) / resync(...)      # cache changes for the prefix index
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from mooncake_core.conductor.admission import AdmissionContext, make_admission
from mooncake_core.conductor.calibration import (
    Calibration,
    CalibrationOptions,
    PrefillTimings,
)
from mooncake_core.conductor.candidates import candidate_rows
from mooncake_core.conductor.decision import (
    AdmissionResult,
    CandidateTable,
    Decision,
    JoinResult,
    Migration,
    ScheduleRequest,
)
from mooncake_core.conductor.durations import DecodeDurations
from mooncake_core.conductor.events import BlockStored, CacheEvent, Tier
from mooncake_core.conductor.index import PrefixIndex
from mooncake_core.conductor.network import NetworkModel
from mooncake_core.conductor.options import (
    ConductorOptions,
    default_decode_model,
    default_prefill_model,
)
from mooncake_core.conductor.policies import (
    PolicyChoice,
    PolicyContext,
    PrefillFeedback,
    PrefillPlan,
    make_policy,
)
from mooncake_core.conductor.predictors import DecodeStepModel, PrefillTimeModel
from mooncake_core.conductor.snapshot import ConductorSnapshot
from mooncake_core.conductor.state import DecodeInstanceState, PrefillInstanceState
from mooncake_core.config.models import ClusterConfig, ConductorConfig, HashingConfig
from mooncake_core.prediction_error import ErrorTally

__all__ = ["Conductor"]


class _Learn(NamedTuple):
    """What the calibration needs to learn from a request's measured TTFT."""

    instance: str
    input_len: int
    prefix_tokens: int
    model_transfer_s: float
    fetched: bool
    predicted_ttft_s: float


@dataclass(slots=True)
class _Tracked:
    """What the Conductor remembers about an admitted request until it finishes."""

    decision: Decision
    plan: PrefillPlan
    alternative: PrefillPlan | None
    ratio: float
    raw: tuple[float, float, float, float]
    prefill_finish: float
    learn: _Learn | None = None
    started_at: float | None = None
    prefilled: bool = False
    decode: str | None = None
    joined_at: float | None = None


class Conductor:
    """Global scheduler facade over the index, predictors, policy and admission.

    Args:
        config: policy, threshold, admission and SLOs.
        prefill: prefill instance names, in a fixed order (ties go to the first).
        decode: decode instance name -> max batch, or -> ``(max_batch,
            kv_capacity_tokens)`` to limit it by KV memory too (``kv_capacity_tokens``
            ``None``: slots only).
        hashing: block size of the keys (must match the keys' producer).
        prefill_model: ``T_prefill`` predictor (default: illustrative coefficients).
        decode_model: decode step predictor (default: illustrative coefficients).
        network: transfer-time predictor (default: 100 Gbps per location).
        index: prefix index to share (default: a new one).
        options: knobs not in ``config``.

    Raises:
        ValueError: no prefill or decode instance, duplicate names, unknown policy/admission.
    """

    def __init__(
        self,
        config: ConductorConfig,
        prefill: list[str] | tuple[str, ...],
        decode: Mapping[str, int | tuple[int, int | None]],
        *,
        hashing: HashingConfig | None = None,
        prefill_model: PrefillTimeModel | None = None,
        decode_model: DecodeStepModel | None = None,
        network: NetworkModel | None = None,
        index: PrefixIndex | None = None,
        options: ConductorOptions | None = None,
    ) -> None:
        if not prefill or not decode:
            raise ValueError("the Conductor needs at least one prefill and one decode instance")
        if len(set(prefill)) != len(prefill):
            raise ValueError(f"duplicate prefill instance names in {list(prefill)}")
        self.config = config
        self.options = options or ConductorOptions()
        self.block_size = (hashing or HashingConfig()).block_size
        self.prefill_model = prefill_model or default_prefill_model()
        self.decode_model = decode_model or default_decode_model()
        self.network = network or NetworkModel()
        self.index = index if index is not None else PrefixIndex()
        self.policy = make_policy(
            config.policy,
            seed=self.options.seed,
            threshold=config.kvcache_balancing_threshold,
            adaptive=self.options.adaptive,
        )
        self.admission = make_admission(config.admission)
        self.calibration = (
            Calibration(CalibrationOptions(memory=self.options.calibration_memory))
            if config.calibrate
            else None
        )
        self._prefill = [PrefillInstanceState(n) for n in prefill]
        self._prefill_by_name = {s.name: s for s in self._prefill}
        self._decode = [
            DecodeInstanceState(n, *v) if isinstance(v, tuple) else DecodeInstanceState(n, v)
            for n, v in decode.items()
        ]
        self._decode_by_name = {s.name: s for s in self._decode}
        self._bytes_per_block = self.block_size * self.options.bytes_per_token
        self._tracked: dict[str, _Tracked] = {}
        # Predicted prefill finish of admitted requests not yet in decode (for admission).
        self._finishes: dict[str, float] = {}
        self._done: OrderedDict[str, tuple[float, float, _Learn | None]] = OrderedDict()
        self._decode_time = self.options.uniform_decode_time_s
        o = self.options
        self._durations = (
            DecodeDurations(o.decode_duration_window, o.decode_duration_min_samples)
            if o.decode_duration_window
            else None
        )
        self._counts = {"decisions": 0, "admitted": 0, "migrations": 0, "join_rejected": 0}
        self._rejected: dict[str, int] = {}
        self._ttft_err = ErrorTally()
        self._tbt_err = ErrorTally()
        self._now = 0.0
        self._resynced: dict[str, float] = {}

    @classmethod
    def from_cluster(cls, cluster: ClusterConfig, **kwargs: object) -> Conductor:
        """Build from the cluster description (instances, hashing, conductor settings).

        Args:
            cluster: the whole cluster config.
            **kwargs: any keyword argument of the constructor (models, network, options).
        """
        return cls(
            cluster.conductor,
            [w.name for w in cluster.prefill_workers],
            {w.name: w.max_batch for w in cluster.decode_workers},
            hashing=cluster.hashing,
            **kwargs,  # type: ignore[arg-type]
        )

    # -- membership --------------------------------------------------------------------

    def add_prefill(self, name: str) -> None:
        """Start scheduling on a new prefill instance (placed last in the order).

        Raises:
            ValueError: an instance of that name exists.
        """
        if name in self._prefill_by_name:
            raise ValueError(f"prefill instance {name!r} already exists")
        state = PrefillInstanceState(name)
        self._prefill.append(state)
        self._prefill_by_name[name] = state

    def remove_prefill(self, name: str) -> list[str]:
        """Stop scheduling on a prefill instance (it died or is drained).

        Its local cache is dropped from the index. Requests queued or running there are
        forgotten and returned, for the caller to schedule again or fail; requests whose
        prefill is done there carry on to decode.

        Raises:
            KeyError: no such instance.
        """
        state = self._prefill_by_name[name]
        orphans = [
            rid for rid, t in self._tracked.items() if t.plan.instance == name and not t.prefilled
        ]
        for rid in orphans:
            self.cancel(rid)
        del self._prefill_by_name[name]
        self._prefill.remove(state)
        self.index.drop_location(name)
        return orphans

    def add_decode(self, name: str, max_batch: int, kv_capacity_tokens: int | None = None) -> None:
        """Start placing decodes on a new decode instance.

        Args:
            name: instance name.
            max_batch: most requests decoding at once.
            kv_capacity_tokens: most context tokens its KV memory holds (``None``: slots only).

        Raises:
            ValueError: an instance of that name exists, ``max_batch`` or
                ``kv_capacity_tokens`` below 1.
        """
        if name in self._decode_by_name:
            raise ValueError(f"decode instance {name!r} already exists")
        state = DecodeInstanceState(name, max_batch, kv_capacity_tokens)
        self._decode.append(state)
        self._decode_by_name[name] = state

    def set_decode_kv(
        self,
        name: str,
        *,
        capacity_tokens: int | None = None,
        used_tokens: int | None = None,
    ) -> None:
        """Register a decode instance's KV capacity and the use its worker reports.

        The capacity limits placement and the KV term of admission, as in the
        simulator; the reported use is kept beside the Conductor's own count (joined
        and reserved prompts) and recorded with each decision, for operators.

        Args:
            name: decode instance.
            capacity_tokens: KV tokens the instance holds (unchanged when ``None``).
            used_tokens: KV tokens in use per the worker's last report (unchanged when
                ``None``).

        Raises:
            KeyError: no such decode instance.
            ValueError: a capacity below 1 or a negative use.
        """
        d = self._decode_by_name[name]
        if capacity_tokens is not None:
            if capacity_tokens < 1:
                raise ValueError(
                    f"decode {name!r}: KV capacity must be >= 1, got {capacity_tokens}"
                )
            d.kv_capacity_tokens = capacity_tokens
        if used_tokens is not None:
            if used_tokens < 0:
                raise ValueError(f"decode {name!r}: KV use must be >= 0, got {used_tokens}")
            d.reported_kv_tokens = used_tokens

    def remove_decode(self, name: str) -> list[str]:
        """Stop placing decodes on a decode instance (it died or is drained).

        Requests that reserved it will join another instance at ``on_decode_join``.
        Requests decoding there are forgotten and returned (their streams are lost).

        Raises:
            KeyError: no such instance.
        """
        state = self._decode_by_name.pop(name)
        self._decode.remove(state)
        lost = []
        for rid, t in list(self._tracked.items()):
            if t.decode == name:
                if t.joined_at is None:
                    t.decode = None
                else:
                    lost.append(rid)
                    self._forget(rid)
        return lost

    # -- cache events ----------------------------------------------------------------

    def apply(self, event: CacheEvent) -> None:
        """Feed one cache event to the prefix index."""
        self.index.apply(event)

    def resync(
        self, location: str, tier: Tier, keys: Iterable[int], now: float | None = None
    ) -> tuple[int, int]:
        """Replace one holder's view in the index; returns ``(added, removed)`` drift.

        Args:
            location: worker or store node that reported its keys.
            tier: the tier they describe.
            keys: everything it holds there.
            now: when; recorded for :meth:`resync_due`.
        """
        result = self.index.resync(location, tier, keys)
        if now is not None:
            self._resynced[location] = now
        return result

    def resync_due(self, now: float) -> list[str]:
        """Locations whose last resync is older than ``resync_interval_s`` (or never), sorted.

        The locations are the prefill instances plus every location the index has heard
        of (store nodes included); the caller fetches their key sets and calls
        :meth:`resync` for each tier.
        """
        interval = self.config.resync_interval_s
        known = set(self._prefill_by_name) | {loc for loc, _ in self.index.holders()}
        return sorted(
            loc for loc in known if now - self._resynced.get(loc, -float("inf")) >= interval
        )

    # -- scheduling --------------------------------------------------------------------

    def _decode_time_estimate(self, request: ScheduleRequest, tbt: float) -> float:
        if self._decode_time is None:
            guess = request.expected_output_len * tbt
            self._decode_time = guess if guess > 0 else 10.0
        return self._decode_time

    def _choose_decode(self, request: ScheduleRequest) -> tuple[int, list[float]]:
        # Requests admitted but still in prefill count as joined: they will be there by
        # the time this one arrives, and counting them spreads a burst over instances.
        slo = self.config.tbt_slo_s
        joined = self.decode_model.tbt_if_joined
        new = request.input_len
        decoders = self._decode
        tbts = [joined(d.expected_batch, d.expected_context, new) for d in decoders]
        best = -1
        for i, d in enumerate(decoders):
            t = tbts[i]
            if t <= slo and (best < 0 or t < tbts[best]) and d.fits_expected(new):
                best = i
        if best < 0:
            best = min(range(len(tbts)), key=tbts.__getitem__)
        return best, tbts

    def schedule(self, request: ScheduleRequest, now: float) -> Decision:
        """Choose a prefill/decode pair for ``request`` and admit or reject it.

        Args:
            request: the request (its keys must come from this Conductor's block size).
            now: current time.

        Returns:
            The decision; when admitted the request is queued on the chosen prefill
            instance, a decode slot is reserved and any hotspot migration is recorded.

        Raises:
            ValueError: more blocks than the prompt has, a request id already in flight, or
                no prefill or decode instance left.
        """
        keys = request.block_keys
        if len(keys) * self.block_size > request.input_len:
            raise ValueError(
                f"request {request.request_id!r}: {len(keys)} blocks of {self.block_size} tokens "
                f"exceed input_len {request.input_len}"
            )
        if request.request_id in self._tracked:
            raise ValueError(f"request {request.request_id!r} is already in flight")
        if not self._prefill or not self._decode:
            raise ValueError("no prefill or no decode instance to schedule on (all removed)")
        self._now = now
        policy = self.policy
        p_scale, x_scale = policy.prefill_scale, policy.transfer_scale
        match = self.index.match(keys)
        ctx = PolicyContext(
            request,
            match,
            self._prefill,
            now,
            self.prefill_model,
            self.network,
            self.block_size,
            self._bytes_per_block,
            p_scale,
            x_scale,
            self.calibration,
        )
        choice = policy.choose(ctx)
        plan = choice.plans[choice.chosen]
        d_idx, tbts = self._choose_decode(request)
        decode = self._decode[d_idx]
        adm_ctx = AdmissionContext(
            now,
            plan.ttft_s,
            tbts[d_idx],
            self.config.ttft_slo_s,
            self.config.tbt_slo_s,
            self._decode,
            self._finishes.values(),
            self._decode_time_estimate(request, tbts[d_idx]),
            self.options.decode_load_threshold,
            self.options.min_retry_after_s,
            self.options.max_retry_after_s,
            self._pending_joins(),
            request.input_len,
            self._durations,
            floor_ttft_s=plan.ttft_s - plan.queue_s,
            floor_tbt_s=self.decode_model.tbt_if_joined(0, 0, request.input_len),
        )
        verdict = self.admission.before_prefill(adm_ctx)
        migration = None
        if verdict.admitted and plan.source is not None:
            fetched = keys[plan.local_blocks : plan.used_blocks]
            nbytes = len(fetched) * self._bytes_per_block
            net = self.network
            src, dst = plan.source[0], plan.instance
            slow = src if net.bandwidth(src) <= net.bandwidth(dst) else dst
            migration = Migration(
                src,
                plan.source[1],
                dst,
                tuple(fetched),
                nbytes,
                plan.transfer_s,
                net.bandwidth(slow),
                net.bandwidth_source(slow),
            )
        state = self._prefill[choice.chosen]
        model_transfer = ctx.model_transfer_time(plan)
        model_exec = model_transfer + ctx.model_prefill_time(plan.used_blocks)
        model_ttft = state.model_queue_time(now) + model_exec
        decision = self._decision(
            request, now, choice, d_idx, tbts, match.best_len, verdict, migration, model_ttft
        )
        self._counts["decisions"] += 1
        if not verdict.admitted:
            self._rejected[verdict.reason] = self._rejected.get(verdict.reason, 0) + 1
            return decision
        self._counts["admitted"] += 1
        raw_x = plan.transfer_s / x_scale
        raw_p = plan.prefill_s / p_scale
        alt = choice.alternative
        raw = (
            raw_x,
            raw_p,
            alt.transfer_s / x_scale if alt else 0.0,
            alt.prefill_s / p_scale if alt else 0.0,
        )
        state.enqueue(request.request_id, raw_x + raw_p, model_exec)
        decode.reserve(request.request_id, request.input_len)
        if migration is not None:
            self._counts["migrations"] += 1
            self.index.add_pending(plan.instance, Tier.HBM, migration.keys)
            self.network.add_transfer(migration.source, plan.instance, migration.nbytes, now)
        learn = None
        if self.calibration is not None:
            prefix = plan.used_blocks * self.block_size
            learn = _Learn(
                plan.instance,
                request.input_len,
                prefix if prefix < request.input_len else request.input_len,
                model_transfer,
                plan.source is not None,
                plan.ttft_s,
            )
        self._tracked[request.request_id] = _Tracked(
            decision, plan, alt, choice.ratio, raw, now + plan.ttft_s, learn, decode=decode.name
        )
        self._finishes[request.request_id] = now + plan.ttft_s
        return decision

    def _pending_joins(self) -> list[tuple[float, int]]:
        # Only the predictive admission reads these; build them for it alone.
        if self.admission.name != "early_reject_predictive":
            return []
        tracked = self._tracked
        return [(f, tracked[rid].decision.input_len) for rid, f in self._finishes.items()]

    def _decision(
        self,
        request: ScheduleRequest,
        now: float,
        choice: PolicyChoice,
        d_idx: int,
        tbts: list[float],
        best_len: int,
        verdict: AdmissionResult,
        migration: Migration | None,
        model_ttft_s: float | None = None,
    ) -> Decision:
        plan = choice.plans[choice.chosen]
        # The candidate table is formatted lazily; capture the decode state it needs now.
        new = request.input_len
        loads = [
            (
                d.name,
                d.expected_batch,
                d.max_batch,
                d.expected_context,
                d.kv_capacity_tokens,
                d.reported_kv_tokens,
            )
            for d in self._decode
        ]
        fits = [d.fits_expected(new) for d in self._decode]
        inputs = (
            choice.plans,
            choice.chosen,
            choice.basis,
            d_idx,
            tbts,
            loads,
            fits,
            self.config.tbt_slo_s,
            new,
        )
        return Decision(
            time=now,
            request_id=request.request_id,
            input_len=request.input_len,
            expected_output_len=request.expected_output_len,
            block_keys=request.block_keys,
            policy=self.policy.name,
            threshold=self.policy.threshold,
            prefill=plan.instance,
            decode=self._decode[d_idx].name,
            local_blocks=plan.local_blocks,
            prefix_blocks=plan.used_blocks,
            best_blocks=best_len,
            predicted_queue_s=plan.queue_s,
            predicted_transfer_s=plan.transfer_s,
            predicted_prefill_s=plan.prefill_s,
            predicted_ttft_s=plan.ttft_s,
            predicted_tbt_s=tbts[d_idx],
            admission=verdict,
            migration=migration,
            candidates=CandidateTable.lazy(candidate_rows, inputs),
            predicted_overhead_s=plan.overhead_s,
            model_ttft_s=model_ttft_s,
        )

    # -- lifecycle hooks ---------------------------------------------------------------

    def _get(self, request_id: str) -> _Tracked:
        t = self._tracked.get(request_id)
        if t is None:
            raise KeyError(f"request {request_id!r} is not in flight")
        return t

    def on_prefill_start(self, request_id: str, now: float) -> None:
        """The chosen prefill instance started the request (its fetch, then compute).

        Raises:
            KeyError: unknown request, or it is not queued.
        """
        t = self._get(request_id)
        self._prefill_by_name[t.plan.instance].start(request_id, now)
        t.started_at = now
        t.prefill_finish = now + t.raw[0] + t.raw[1]
        self._finishes[request_id] = t.prefill_finish
        self._now = now

    def on_prefill_done(
        self,
        request_id: str,
        now: float,
        actual_transfer_s: float | None = None,
        fetched_blocks: int | None = None,
    ) -> None:
        """The prefill finished: the instance frees up, caches the prompt, and policies learn.

        Args:
            request_id: the request.
            now: current time.
            actual_transfer_s: measured fetch time, when the worker reports it.
            fetched_blocks: blocks that fetch really moved, when the worker reports it
                (``None``: all the migration's blocks). A fetch that found blocks already
                cached (another request put them there first) moved fewer bytes than
                planned: the network model learns from the bytes moved, and nothing
                from a fetch that moved none (its time would read as a huge bandwidth);
                the policy's feedback carries the time only when every planned block
                moved (otherwise it is not comparable with the prediction).

        Raises:
            KeyError: unknown request.
        """
        t = self._get(request_id)
        self._prefill_by_name[t.plan.instance].finish(request_id)
        t.prefill_finish = now
        t.prefilled = True
        self._finishes[request_id] = now
        self._now = now
        d = t.decision
        if self.options.cache_on_prefill_done and d.block_keys:
            self.index.apply(BlockStored(t.plan.instance, Tier.HBM, d.block_keys))
        elif d.migration is not None:
            self.index.confirm(t.plan.instance, Tier.HBM, d.migration.keys)
        if d.migration is not None and actual_transfer_s is not None:
            # The measured fetch teaches the bandwidth of ends nobody configured.
            mig = d.migration
            planned = len(mig.keys)
            moved = planned if fetched_blocks is None else min(max(fetched_blocks, 0), planned)
            if moved > 0 and planned > 0:
                nbytes = mig.nbytes * moved / planned
                self.network.observe_transfer(
                    mig.source, mig.target, nbytes, actual_transfer_s, now
                )
            if moved < planned:
                actual_transfer_s = None
        if t.started_at is not None:
            self.policy.observe(
                PrefillFeedback(
                    request_id,
                    t.plan,
                    t.alternative,
                    t.ratio,
                    d.threshold,
                    *t.raw,
                    now - t.started_at,
                    actual_transfer_s,
                )
            )

    def on_decode_join(self, request_id: str, now: float, *, placed: bool = False) -> JoinResult:
        """The prefilled request reaches decode; it joins its instance, another with room, or is rejected.

        Args:
            request_id: the request.
            now: join time.
            placed: the KV already sits in memory the chosen decode instance reserved for
                it (the live service: the worker's ``Prepare`` reserved the blocks), so the
                request joins that instance whatever the Conductor's estimate says; moving
                it would need the KV sent again, which the live path does not do.

        Raises:
            KeyError: unknown request.
        """
        t = self._get(request_id)
        if t.joined_at is not None:
            raise ValueError(f"request {request_id!r} already joined decode instance {t.decode!r}")
        self._now = now
        context = t.decision.input_len
        streamed_to = t.decision.decode
        wanted = self._decode_by_name.get(t.decode) if t.decode else None
        target = wanted if wanted is not None and (placed or wanted.has_room(context)) else None
        if target is None and self._decode and not placed:
            roomy = [d for d in self._decode if d.has_room(context)]
            if roomy:
                target = min(roomy, key=lambda d: (d.load(d.reserved), d.expected_batch))
            elif self.admission.overflow_at_join:
                target = wanted or min(self._decode, key=lambda d: d.expected_batch)
        if wanted is not None:
            wanted.unreserve(request_id)
        if target is None:
            self._counts["join_rejected"] += 1
            self._rejected["decode_full"] = self._rejected.get("decode_full", 0) + 1
            self._forget(request_id)
            return JoinResult(False, None, "decode_full", streamed_to)
        target.join(request_id, context, now)
        self._finishes.pop(request_id, None)
        t.decode = target.name
        t.joined_at = now
        return JoinResult(True, target.name, "", streamed_to, target.name != streamed_to)

    def on_decode_done(self, request_id: str, now: float) -> None:
        """The request produced its last token; its slot frees and ``D`` is updated.

        Raises:
            KeyError: unknown request.
        """
        t = self._get(request_id)
        self._now = now
        if t.decode is not None:
            self._decode_by_name[t.decode].leave(request_id)
        w = self.options.decode_time_ewma
        if t.joined_at is not None and self._durations is not None:
            self._durations.add(max(now - t.joined_at, 0.0))
        if t.joined_at is not None and w > 0:
            observed = now - t.joined_at
            self._decode_time = (
                observed
                if self._decode_time is None
                else (1 - w) * self._decode_time + w * observed
            )
        self._forget(request_id)

    def cancel(self, request_id: str, now: float | None = None) -> bool:
        """Drop a request wherever it is (client gone, worker failed); returns whether it was known.

        A migration it issued and had not started is taken back from the index (pending
        replica) and from the NIC backlogs.
        """
        if now is not None:
            self._now = now
        t = self._tracked.get(request_id)
        if t is None:
            return False
        self._prefill_by_name[t.plan.instance].finish(request_id)
        mig = t.decision.migration
        if mig is not None and t.started_at is None:
            self.index.cancel(t.plan.instance, Tier.HBM, mig.keys)
            self.network.cancel_transfer(mig.source, mig.target, mig.nbytes, self._now)
        for d in self._decode:
            d.unreserve(request_id)
            d.leave(request_id)
        self._forget(request_id)
        return True

    def _forget(self, request_id: str) -> None:
        self._finishes.pop(request_id, None)
        t = self._tracked.pop(request_id, None)
        if t is None:
            return
        self._done[request_id] = (
            t.decision.predicted_ttft_s,
            t.decision.predicted_tbt_s,
            t.learn,
        )
        while len(self._done) > self.options.max_tracked:
            self._done.popitem(last=False)

    def on_actual(
        self,
        request_id: str,
        ttft_s: float | None,
        tbt_s: float | None = None,
        *,
        timings: PrefillTimings | None = None,
    ) -> None:
        """Record measured TTFT/TBT against the predictions; the TTFT also calibrates.

        Report the TTFT as soon as the first token is out (the calibration learns from
        it) and the TBT once the request ends; each is counted once in the error
        statistics. Unknown ids are ignored.

        Args:
            request_id: the request.
            ttft_s: measured time to first token, or ``None``.
            tbt_s: measured time between tokens, or ``None``.
            timings: the prefill instance's measured parts of the TTFT (queue, fetch,
                compute); without them only the end-to-end TTFT calibrates (the
                overhead correction absorbs the whole error).
        """
        t = self._tracked.get(request_id)
        if t is not None:
            pred_ttft, pred_tbt, learn = (
                t.decision.predicted_ttft_s,
                t.decision.predicted_tbt_s,
                t.learn,
            )
        else:
            done = self._done.get(request_id)
            if done is None:
                return
            pred_ttft, pred_tbt, learn = done
        if ttft_s is not None:
            self._ttft_err.add(pred_ttft, ttft_s)
            if learn is not None and self.calibration is not None:
                self._learn(learn, ttft_s, timings)
                if t is not None:
                    t.learn = None
                else:
                    self._done[request_id] = (pred_ttft, pred_tbt, None)
        if tbt_s is not None:
            self._tbt_err.add(pred_tbt, tbt_s)

    def _learn(self, learn: _Learn, ttft_s: float, timings: PrefillTimings | None) -> None:
        assert self.calibration is not None
        prefix = learn.prefix_tokens
        if timings is not None and timings.reused_tokens is not None:
            prefix = min(timings.reused_tokens, learn.input_len)
        self.calibration.observe(
            learn.instance,
            ttft_s,
            self.prefill_model.predict(learn.input_len, prefix),
            learn.model_transfer_s,
            learn.fetched,
            timings,
            learn.predicted_ttft_s,
        )

    # -- read model --------------------------------------------------------------------

    def snapshot(self, now: float | None = None) -> ConductorSnapshot:
        """Everything an operator view needs, as one immutable value."""
        at = self._now if now is None else now
        ttft = self._ttft_err.summary()
        return ConductorSnapshot(
            time=at,
            policy=self.policy.name,
            admission=self.admission.name,
            threshold=self.policy.threshold,
            decisions=self._counts["decisions"],
            admitted=self._counts["admitted"],
            rejected=tuple(sorted(self._rejected.items())),
            migrations=self._counts["migrations"],
            in_flight=len(self._tracked),
            decode_time_s=self._decode_time,
            prefill=tuple(s.snapshot(at) for s in self._prefill),
            decode=tuple(d.snapshot() for d in self._decode),
            index=self.index.snapshot(),
            network=self.network.snapshot(at),
            ttft_mae_s=ttft.mae_s,
            ttft_bias_s=ttft.bias_s,
            tbt_mae_s=self._tbt_err.summary().mae_s,
            prefill_correction=self.policy.prefill_scale,
            transfer_correction=self.policy.transfer_scale,
            calibration=self.calibration.snapshot() if self.calibration is not None else None,
        )
