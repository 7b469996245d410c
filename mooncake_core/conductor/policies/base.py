"""What every scheduling policy sees and returns.

A policy only chooses the prefill instance and plan (local prefix, or fetch the best
prefix first). Decode selection and admission are the Conductor's, the same for all
policies, so policies stay comparable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from mooncake_core.conductor.calibration import Calibration, InstanceCalibration
from mooncake_core.conductor.decision import ScheduleRequest
from mooncake_core.conductor.index import Holder, PrefixMatch
from mooncake_core.conductor.network import NetworkModel
from mooncake_core.conductor.predictors import PrefillTimeModel
from mooncake_core.conductor.state import PrefillInstanceState

__all__ = ["Policy", "PolicyChoice", "PolicyContext", "PrefillFeedback", "PrefillPlan"]


class PrefillPlan(NamedTuple):
    """How one prefill instance would serve the request, with predicted times.

    A named tuple: every decision builds one per prefill instance, and tuples are
    several times cheaper to create than frozen dataclasses.

    Attributes:
        instance: prefill instance.
        local_blocks: prefix blocks the instance holds itself.
        used_blocks: prefix blocks reused (``local_blocks``, or the best prefix when fetching).
        source: holder the missing blocks come from, ``None`` for a local plan.
        queue_s: predicted wait on the instance.
        transfer_s: predicted fetch time.
        prefill_s: predicted compute time with ``used_blocks`` cached.
        overhead_s: predicted time outside the instance (dispatch, RPCs), learned by
            the calibration (0 without it).
    """

    instance: str
    local_blocks: int
    used_blocks: int
    source: Holder | None
    queue_s: float
    transfer_s: float
    prefill_s: float
    overhead_s: float = 0.0

    @property
    def ttft_s(self) -> float:
        """Predicted TTFT of this plan."""
        return self.overhead_s + self.queue_s + self.transfer_s + self.prefill_s

    @property
    def fetches(self) -> bool:
        """Whether the plan fetches blocks first."""
        return self.source is not None


@dataclass(frozen=True, slots=True)
class PolicyChoice:
    """A policy's answer.

    Attributes:
        chosen: index into ``plans`` of the winner.
        plans: one plan per prefill instance, in instance order.
        basis: what the winner was picked on, which words explain the losers
            (:func:`explain_losers`): ``"ttft"``, ``"queue"``, ``"draw"`` or ``"turn"``.
        alternative: for the winner, the plan it did *not* take (fetch vs local) when the
            best prefix lives elsewhere; feeds :class:`PrefillFeedback`.
        ratio: ``best_blocks / local_blocks`` of the winner (``inf`` when it held nothing).
    """

    chosen: int
    plans: tuple[PrefillPlan, ...]
    basis: str
    alternative: PrefillPlan | None = None
    ratio: float = 0.0

    def why_not(self) -> tuple[str, ...]:
        """For each plan (same order; ``""`` for the winner) why it lost, with the numbers."""
        return explain_losers(self.plans, self.chosen, self.basis)


@dataclass(frozen=True, slots=True)
class PrefillFeedback:
    """What actually happened to one request's prefill, for policies that learn.

    Attributes:
        request_id: the request.
        plan: the plan taken (predictions as the policy made them).
        alternative: the plan not taken, if there was a choice between fetch and local.
        ratio: best/local prefix ratio at decision time.
        threshold: the threshold in force at decision time.
        raw_transfer_s: uncorrected transfer prediction of ``plan``.
        raw_prefill_s: uncorrected compute prediction of ``plan``.
        raw_alt_transfer_s: uncorrected transfer prediction of ``alternative``.
        raw_alt_prefill_s: uncorrected compute prediction of ``alternative``.
        actual_exec_s: measured time from prefill start to prefill done (fetch included).
        actual_transfer_s: measured fetch time, when the worker reported it.
    """

    request_id: str
    plan: PrefillPlan
    alternative: PrefillPlan | None
    ratio: float
    threshold: float | None
    raw_transfer_s: float
    raw_prefill_s: float
    raw_alt_transfer_s: float
    raw_alt_prefill_s: float
    actual_exec_s: float
    actual_transfer_s: float | None


class PolicyContext:
    """Inputs of one decision, with the plan calculators every policy shares.

    Args:
        request: the request.
        match: longest-prefix match of its keys.
        instances: prefill instance states in a fixed order.
        now: decision time.
        prefill_model: ``T_prefill`` predictor.
        network: transfer-time predictor.
        block_size: tokens per block.
        bytes_per_block: KV bytes of one block.
        prefill_scale: multiplier on predicted compute (and queue) times.
        transfer_scale: multiplier on predicted transfer times.
        calibration: per instance corrections learned from measured timings, applied
            before the policy's own scales (``None``: predict from the models alone).
    """

    __slots__ = (
        "_best_holders",
        "_calibrated",
        "_predicted",
        "_raw_transfer",
        "_sources",
        "block_size",
        "bytes_per_block",
        "calibration",
        "instances",
        "match",
        "network",
        "now",
        "prefill_model",
        "prefill_scale",
        "request",
        "transfer_scale",
    )

    def __init__(
        self,
        request: ScheduleRequest,
        match: PrefixMatch,
        instances: Sequence[PrefillInstanceState],
        now: float,
        prefill_model: PrefillTimeModel,
        network: NetworkModel,
        block_size: int,
        bytes_per_block: int,
        prefill_scale: float = 1.0,
        transfer_scale: float = 1.0,
        calibration: Calibration | None = None,
    ) -> None:
        self.request = request
        self.match = match
        self.instances = instances
        self.now = now
        self.prefill_model = prefill_model
        self.network = network
        self.block_size = block_size
        self.bytes_per_block = bytes_per_block
        self.prefill_scale = prefill_scale
        self.transfer_scale = transfer_scale
        self.calibration = calibration
        self._best_holders: list[Holder] | None = None
        self._sources: dict[int, list[tuple[float, Holder]]] = {}
        self._predicted: dict[int, float] = {}
        self._calibrated: dict[int, float] = {}
        self._raw_transfer: dict[str, float] = {}

    def local_blocks(self, instance: str) -> int:
        """Prefix blocks ``instance`` holds in any of its own tiers."""
        return self.match.by_location.get(instance, 0)

    def model_prefill_time(self, blocks: int) -> float:
        """Uncalibrated, uncorrected ``T_prefill`` with ``blocks`` prefix blocks cached (memoised)."""
        t = self._predicted.get(blocks)
        if t is None:
            tokens = blocks * self.block_size
            n = self.request.input_len
            t = self.prefill_model.predict(n, tokens if tokens < n else n)
            self._predicted[blocks] = t
        return t

    def _shared_compute(self, cal: InstanceCalibration, blocks: int) -> float:
        # The shared part of the calibrated compute is the same for every instance.
        t = self._calibrated.get(blocks)
        if t is None:
            t = self._calibrated[blocks] = cal.shared.compute_s(self.model_prefill_time(blocks))
        return t

    def prefill_time(self, blocks: int) -> float:
        """Corrected ``T_prefill`` with ``blocks`` prefix blocks cached (before calibration)."""
        return self.model_prefill_time(blocks) * self.prefill_scale

    def model_transfer_time(self, plan: PrefillPlan) -> float:
        """The network model's uncalibrated, uncorrected fetch time of ``plan`` (0: local)."""
        return self._raw_transfer.get(plan.instance, 0.0) if plan.source is not None else 0.0

    def local_plan(self, state: PrefillInstanceState) -> PrefillPlan:
        """Serve from the instance's own prefix only."""
        name = state.name
        local = self.match.by_location.get(name, 0)
        cal = self.calibration.get(name) if self.calibration is not None else None
        if cal is None:
            compute, overhead = self.model_prefill_time(local), 0.0
        else:
            compute, overhead = self._shared_compute(cal, local) * cal.compute.factor, cal.overhead
        return PrefillPlan(
            name,
            local,
            local,
            None,
            state.queue_time(self.now) * self.prefill_scale,
            0.0,
            compute * self.prefill_scale,
            overhead,
        )

    def _two_best_sources(self, nbytes: int) -> list[tuple[float, Holder]]:
        # The source side of a transfer does not depend on the target, so the cheapest
        # holder is the same for every candidate (the runner-up covers the candidate that
        # is itself the cheapest holder): one pass over the holders per transfer size.
        cached = self._sources.get(nbytes)
        if cached is not None:
            return cached
        if self._best_holders is None:
            self._best_holders = self.match.holders_with(self.match.best_len)
        net, now = self.network, self.now
        timed = [(net.source_time(h[0], nbytes, now, h[1]), h) for h in self._best_holders]
        ranked: list[tuple[float, Holder]] = []
        if timed:
            first = min(timed, key=lambda x: x[0])
            ranked.append(first)
            others = [x for x in timed if x[1][0] != first[1][0]]
            if others:
                ranked.append(min(others, key=lambda x: x[0]))
        self._sources[nbytes] = ranked
        return ranked

    def fetch_plan(self, state: PrefillInstanceState) -> PrefillPlan:
        """Fetch the best prefix from its cheapest holder first; local plan if nothing to fetch."""
        best = self.match.best_len
        name = state.name
        local = self.match.by_location.get(name, 0)
        if best <= local:
            return self.local_plan(state)
        nbytes = (best - local) * self.bytes_per_block
        ranked = self._sources.get(nbytes)
        if ranked is None:
            ranked = self._two_best_sources(nbytes)
        source: Holder | None = None
        src_t = 0.0
        for t, holder in ranked:
            if holder[0] != name:
                src_t, source = t, holder
                break
        if source is None:
            return self.local_plan(state)
        net, now = self.network, self.now
        sink_t = net.sink_time(name, nbytes, now)
        transfer = net.latency_s + (src_t if src_t > sink_t else sink_t)
        self._raw_transfer[name] = transfer
        overhead = 0.0
        cal = self.calibration.get(name) if self.calibration is not None else None
        if cal is None:
            compute = self.model_prefill_time(best)
        else:
            transfer = cal.transfer_s(transfer)
            compute = self._shared_compute(cal, best) * cal.compute.factor
            overhead = cal.overhead
        return PrefillPlan(
            name,
            local,
            best,
            source,
            state.queue_time(now) * self.prefill_scale,
            transfer * self.transfer_scale,
            compute * self.prefill_scale,
            overhead,
        )

    def all_local_plans(self) -> tuple[PrefillPlan, ...]:
        """Local plan of every instance, in instance order."""
        return tuple(self.local_plan(s) for s in self.instances)


def explain_losers(plans: Sequence[PrefillPlan], chosen: int, basis: str) -> tuple[str, ...]:
    """Why each plan lost (``""`` for the winner).

    Formatting is deferred to here, off the decision path: a decision only keeps the
    plans, and the words are produced when someone reads the candidate table.

    Args:
        plans: the plans compared.
        chosen: index of the winner.
        basis: ``"ttft"`` (lowest predicted TTFT), ``"queue"`` (lowest queue),
            ``"draw"`` (random) or ``"turn"`` (round robin).
    """
    win = plans[chosen]
    out = []
    for i, p in enumerate(plans):
        if i == chosen:
            out.append("")
        elif basis == "ttft":
            if p.ttft_s > win.ttft_s:
                out.append(f"predicted TTFT {p.ttft_s:.3f}s > {win.ttft_s:.3f}s")
            else:
                out.append(
                    f"predicted TTFT {p.ttft_s:.3f}s ties {win.ttft_s:.3f}s; earlier instance wins"
                )
        elif basis == "queue":
            if p.queue_s > win.queue_s:
                out.append(f"queue {p.queue_s:.3f}s > {win.queue_s:.3f}s")
            else:
                out.append("queue ties; earlier instance wins")
        else:
            out.append("not drawn" if basis == "draw" else "not its turn")
    return tuple(out)


def argmin_ttft(plans: Sequence[PrefillPlan]) -> int:
    """Index of the lowest predicted TTFT; ties go to the first instance."""
    best_i = 0
    best_t = plans[0].ttft_s
    for i in range(1, len(plans)):
        t = plans[i].ttft_s
        if t < best_t:
            best_i, best_t = i, t
    return best_i


class Policy:
    """Base of scheduling policies: choose a prefill plan for one request."""

    name: ClassVar[str] = ""
    threshold: float | None = None
    """The kvcache balancing threshold in force, for policies that have one."""

    def choose(self, ctx: PolicyContext) -> PolicyChoice:
        """Pick the prefill instance and plan.

        Raises:
            ValueError: no prefill instance to choose from.
        """
        raise NotImplementedError

    def observe(self, feedback: PrefillFeedback) -> None:
        """Learn from a finished prefill; most policies ignore it."""
        del feedback

    @property
    def prefill_scale(self) -> float:
        """Correction the policy applies to predicted compute times (1: none)."""
        return 1.0

    @property
    def transfer_scale(self) -> float:
        """Correction the policy applies to predicted transfer times (1: none)."""
        return 1.0
