"""What the Conductor is asked and what it answers: requests, decisions, candidate rows.

Everything here is an immutable value: the audit, the simulator and the front door keep
them without copying.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, overload

from mooncake_core.conductor.events import Tier

if TYPE_CHECKING:
    from mooncake_core.conductor.audit.records import CandidateRecord, DecisionRecord

__all__ = [
    "AdmissionResult",
    "Candidate",
    "CandidateTable",
    "Decision",
    "JoinResult",
    "Migration",
    "ScheduleRequest",
]


@dataclass(frozen=True, slots=True)
class ScheduleRequest:
    """One request to place.

    Attributes:
        request_id: unique id (the front door's or the trace's).
        block_keys: chained keys of the prompt's complete blocks, in order.
        input_len: prompt tokens.
        expected_output_len: output tokens expected (``max_tokens`` or a trace's length).

    Raises:
        ValueError: empty id, negative lengths.
    """

    request_id: str
    block_keys: tuple[int, ...]
    input_len: int
    expected_output_len: int = 0

    def __post_init__(self) -> None:
        if not self.request_id:
            raise ValueError("request_id must be non-empty")
        if self.input_len < 0 or self.expected_output_len < 0:
            raise ValueError(
                f"request {self.request_id!r}: lengths must be >= 0, got input_len="
                f"{self.input_len} expected_output_len={self.expected_output_len}"
            )


@dataclass(frozen=True, slots=True)
class AdmissionResult:
    """Admit or reject, with the reason and when to retry.

    Attributes:
        admitted: whether the request goes ahead.
        reason: ``""`` when admitted; else a stable code: ``decode_full``, ``ttft_slo``,
            ``tbt_slo``, ``decode_load_predicted``.
        retry_after_s: hint for the client's ``Retry-After`` (seconds), rejections only.
        detail: one human sentence with the numbers behind the verdict.
    """

    admitted: bool
    reason: str = ""
    retry_after_s: float | None = None
    detail: str = ""


ADMIT = AdmissionResult(True)


@dataclass(frozen=True, slots=True)
class JoinResult:
    """Outcome of a request reaching decode after its prefill.

    Attributes:
        admitted: whether it joined a decode batch.
        instance: the decode instance it joined (may differ from the decision's when
            that one filled up meanwhile), ``None`` when rejected.
        reason: rejection code (``decode_full``), ``""`` when admitted.
        streamed_to: the decode instance chosen at scheduling time, where the prefill
            streamed the KV (``None`` when unknown).
        moved: the request joined another instance than ``streamed_to``, so its KV must
            be moved there before it can decode (the caller pays that transfer).
    """

    admitted: bool
    instance: str | None
    reason: str = ""
    streamed_to: str | None = None
    moved: bool = False


@dataclass(frozen=True, slots=True)
class Migration:
    """A hotspot migration: ``target`` fetches ``keys`` from ``source`` and keeps a replica.

    Attributes:
        source: location holding the prefix (prefill instance or store node).
        source_tier: tier it is read from.
        target: the chosen prefill instance.
        keys: the block keys fetched (the part of the best prefix the target lacked).
        nbytes: bytes moved.
        predicted_s: predicted transfer time.
        bandwidth_bps: the path bandwidth the prediction used (the slower end's;
            0: not recorded).
        bandwidth_source: where that end's bandwidth came from: ``configured``,
            ``measured`` (from earlier transfers) or ``default`` (nothing known).
    """

    source: str
    source_tier: Tier
    target: str
    keys: tuple[int, ...]
    nbytes: int
    predicted_s: float
    bandwidth_bps: float = 0.0
    bandwidth_source: str = ""


class Candidate(NamedTuple):
    """One instance the Conductor considered, with the numbers it compared.

    A named tuple rather than a dataclass: a decision builds one per instance (256 for a
    128+128 cluster) and tuples are several times cheaper to create.

    Attributes:
        role: ``"prefill"`` or ``"decode"``.
        instance: instance name.
        matched_blocks: prefix blocks the instance holds itself (prefill; 0 for decode).
        used_blocks: prefix blocks the plan reuses (after any fetch).
        fetch_blocks: blocks the plan fetches from ``fetch_source``.
        fetch_source: location fetched from, ``None`` when the plan fetches nothing.
        queue_s: predicted wait before it starts (prefill) or 0.
        transfer_s: predicted fetch time.
        prefill_s: predicted prefill compute time.
        predicted_ttft_s: ``overhead_s + queue_s + transfer_s + prefill_s`` (prefill rows).
        predicted_tbt_s: predicted TBT if the request joins (decode rows), else ``None``.
        chosen: whether this row won.
        why_not: ``""`` for the winner; else why it lost, with the numbers.
        overhead_s: predicted time outside the instance (prefill rows; calibrated).
        kv_tokens: KV context tokens the Conductor counts on the instance, reserved
            ones included (decode rows), else ``None``.
        kv_capacity_tokens: KV tokens the instance holds (decode rows; ``None``: not
            known, slots only).
        kv_reported_tokens: KV tokens in use as the worker last reported (decode rows;
            ``None``: no report).
    """

    role: str
    instance: str
    matched_blocks: int
    used_blocks: int
    fetch_blocks: int
    fetch_source: str | None
    queue_s: float
    transfer_s: float
    prefill_s: float
    predicted_ttft_s: float
    predicted_tbt_s: float | None
    chosen: bool
    why_not: str
    overhead_s: float = 0.0
    kv_tokens: int | None = None
    kv_capacity_tokens: int | None = None
    kv_reported_tokens: int | None = None


class CandidateTable(Sequence[Candidate]):
    """A decision's candidate rows, built on first read.

    Building a row per instance, with its "why not" sentence, costs more than the
    decision itself on large clusters, and most consumers (the simulator, the front
    door) never read it. The table captures the immutable inputs at decision time and
    formats the rows once, when first read; after that it is a plain tuple.

    Args:
        rows: the rows (:meth:`lazy` makes a table built on first read).
    """

    __slots__ = ("_build", "_rows", "inputs")

    def __init__(self, rows: Iterable[Candidate]) -> None:
        self._rows: tuple[Candidate, ...] | None = tuple(rows)
        self._build: Callable[[tuple[Any, ...]], Iterable[Candidate]] | None = None
        # The plain inputs of a table made by ``lazy`` (what the audit ships to its
        # writer process instead of the rows); ``None`` otherwise.
        self.inputs: tuple[Any, ...] | None = None

    @classmethod
    def lazy(
        cls, build: Callable[[tuple[Any, ...]], Iterable[Candidate]], inputs: tuple[Any, ...]
    ) -> CandidateTable:
        """A table whose rows are ``build(inputs)``, made on first read.

        ``inputs`` must not change afterwards (tuples, numbers, strings, lists nobody
        touches again): the audit ships them to its writer process and builds the rows
        there (:mod:`mooncake_core.conductor.candidates`).
        """
        t = cls.__new__(cls)
        t._rows = None
        t._build = build
        t.inputs = inputs
        return t

    def rows(self) -> tuple[Candidate, ...]:
        """All rows as a tuple (prefill rows in instance order, then decode rows)."""
        rows = self._rows
        if rows is None:
            assert self._build is not None and self.inputs is not None
            rows = self._rows = tuple(self._build(self.inputs))
            self._build = None
        return rows

    @overload
    def __getitem__(self, index: int) -> Candidate: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Candidate, ...]: ...

    def __getitem__(self, index: int | slice) -> Candidate | tuple[Candidate, ...]:
        return self.rows()[index]

    def __len__(self) -> int:
        return len(self.rows())

    def __iter__(self) -> Iterator[Candidate]:
        return iter(self.rows())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CandidateTable):
            return self.rows() == other.rows()
        if isinstance(other, tuple):
            return self.rows() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"CandidateTable({self.rows()!r})"


@dataclass(frozen=True, slots=True)
class Decision:
    """Everything decided for one request, and everything the decision was based on.

    Attributes:
        time: ``now`` of the decision.
        request_id: the request.
        input_len: prompt tokens.
        expected_output_len: expected output tokens.
        block_keys: the prompt's block keys.
        policy: scheduling policy name.
        threshold: ``kvcache_balancing_threshold`` in force (``None`` for policies without one).
        prefill: chosen prefill instance (also set on rejection: what would have run).
        decode: chosen decode instance.
        local_blocks: prefix blocks the chosen prefill instance held itself.
        prefix_blocks: prefix blocks reused by the chosen plan (after any fetch).
        best_blocks: longest prefix held anywhere.
        predicted_queue_s: predicted wait on the chosen prefill instance.
        predicted_transfer_s: predicted fetch time of the chosen plan.
        predicted_prefill_s: predicted compute time of the chosen plan.
        predicted_ttft_s: predicted time to first token (calibrated when calibration is on).
        predicted_tbt_s: predicted time between tokens on the chosen decode instance.
        admission: admission verdict, reason and retry hint.
        migration: hotspot migration issued, or ``None``.
        candidates: prefill rows (instance order) then decode rows, built on first read.
        predicted_overhead_s: predicted time outside the chosen prefill instance
            (dispatch, RPCs; learned by the calibration, else 0).
        model_ttft_s: what the uncalibrated models (profile fit, network model) predicted
            for the same plan, queue included (``None``: not computed).
    """

    time: float
    request_id: str
    input_len: int
    expected_output_len: int
    block_keys: tuple[int, ...]
    policy: str
    threshold: float | None
    prefill: str
    decode: str
    local_blocks: int
    prefix_blocks: int
    best_blocks: int
    predicted_queue_s: float
    predicted_transfer_s: float
    predicted_prefill_s: float
    predicted_ttft_s: float
    predicted_tbt_s: float
    admission: AdmissionResult
    migration: Migration | None
    candidates: CandidateTable
    predicted_overhead_s: float = 0.0
    model_ttft_s: float | None = None

    @property
    def admitted(self) -> bool:
        """Whether the request was admitted."""
        return self.admission.admitted

    @property
    def reason(self) -> str:
        """Rejection code (``""`` when admitted)."""
        return self.admission.reason

    @property
    def retry_after_s(self) -> float | None:
        """Retry hint of a rejection."""
        return self.admission.retry_after_s

    def runner_up(self, role: str = "prefill") -> Candidate | None:
        """The best losing candidate of ``role`` (lowest predicted TTFT or TBT)."""
        losers = [c for c in self.candidates if c.role == role and not c.chosen]
        if not losers:
            return None
        if role == "decode":
            return min(losers, key=lambda c: c.predicted_tbt_s or 0.0)
        return min(losers, key=lambda c: c.predicted_ttft_s)

    def to_record(
        self, time: float | None = None
    ) -> tuple[DecisionRecord, tuple[CandidateRecord, ...]]:
        """Map to the audit's records (one decision row, one row per candidate).

        Args:
            time: wall-clock (unix) time to store; default ``self.time`` (the live
                service passes unix time as ``now``; the simulator may pass its clock).

        Returns:
            ``(decision_record, candidate_records)``, prefill candidates first.
        """
        # Imported here: the audit package pulls in SQLAlchemy, the decision path must not.
        from mooncake_core.conductor.audit.records import CandidateRecord, DecisionRecord

        adm = self.admission
        keys = self.block_keys
        record = DecisionRecord(
            time=self.time if time is None else time,
            request_id=self.request_id,
            prompt_tokens=self.input_len,
            prompt_blocks=len(keys),
            first_block_key=f"{keys[0]:016x}" if keys else None,
            block_key_count=len(keys),
            policy=self.policy,
            chosen_prefill=self.prefill,
            chosen_decode=self.decode,
            predicted_ttft_s=self.predicted_ttft_s,
            predicted_tbt_s=self.predicted_tbt_s,
            admitted=adm.admitted,
            reject_reason=None if adm.admitted else f"{adm.reason}: {adm.detail}",
            retry_after_s=adm.retry_after_s,
            migration_source=self.migration.source if self.migration else None,
            migration_blocks=len(self.migration.keys) if self.migration else 0,
            migration_bandwidth_bps=(
                self.migration.bandwidth_bps
                if self.migration and self.migration.bandwidth_bps > 0
                else None
            ),
            migration_bandwidth_source=(
                self.migration.bandwidth_source or None if self.migration else None
            ),
            model_ttft_s=self.model_ttft_s,
            predicted_overhead_s=self.predicted_overhead_s,
        )
        rows = tuple(
            CandidateRecord(
                instance=c.instance,
                role="prefill" if c.role == "prefill" else "decode",
                matched_prefix_blocks=c.matched_blocks,
                queue_time_s=c.queue_s,
                transfer_time_s=c.transfer_s,
                prefill_time_s=c.prefill_s,
                predicted_ttft_s=c.predicted_ttft_s if c.role == "prefill" else None,
                predicted_tbt_s=c.predicted_tbt_s,
                chosen=c.chosen,
                why_not=c.why_not or None,
                transfer_blocks=c.fetch_blocks,
                overhead_time_s=c.overhead_s if c.role == "prefill" else None,
                kv_tokens=c.kv_tokens,
                kv_capacity_tokens=c.kv_capacity_tokens,
                kv_reported_tokens=c.kv_reported_tokens,
                transfer_source=c.fetch_source if c.fetch_blocks else None,
            )
            for c in self.candidates
        )
        return record, rows
