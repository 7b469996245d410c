"""What the audit keeps about one scheduling decision: plain, immutable records.

The conductor maps its own ``Decision`` to these two records and hands them to
:class:`~mooncake_core.conductor.audit.writer.AuditWriter`; the read side
(:mod:`.queries`) returns the same records, so the CLI, the web dashboard and tests
see one shape whether a decision is fresh or came back from the database.

All fields are keyword-only so that adding a field never silently shifts values
between positional arguments. Times are seconds (floats); instant times are unix
seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["prefill", "decode"]

ROLES: tuple[Role, ...] = ("prefill", "decode")

Outcome = Literal["completed", "rejected", "failed", "cancelled"]
"""How a request ended (``None`` in a record: not known, see :class:`DecisionRecord`)."""

OUTCOMES: tuple[Outcome, ...] = ("completed", "rejected", "failed", "cancelled")
"""Every outcome code, in the order reports list them. The codes are stable: scripts and
dashboards filter on them."""

OUTCOME_DETAIL_MAX = 512
"""Longest ``outcome_detail`` stored (the column's length); longer texts are cut."""


def checked_outcome(outcome: str, detail: str | None) -> str | None:
    """``detail`` cut to :data:`OUTCOME_DETAIL_MAX` characters (ending in ``...``).

    Raises:
        ValueError: ``outcome`` is not one of :data:`OUTCOMES`.
    """
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}; got {outcome!r}")
    if detail is not None and len(detail) > OUTCOME_DETAIL_MAX:
        return detail[: OUTCOME_DETAIL_MAX - 3] + "..."
    return detail


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionRecord:
    """One scheduling decision: which prefill/decode pair, what was predicted, admitted?

    Attributes:
        time: When the decision was taken (unix seconds).
        request_id: The request's id (not unique: a rejected request may come back).
        prompt_tokens: Prompt length in tokens.
        prompt_blocks: Complete KV blocks in the prompt (the cacheable part).
        first_block_key: Hex of the prompt's first block key (``None`` for a prompt
            shorter than one block). Enough to group requests sharing a prefix without
            storing the whole key list.
        block_key_count: How many block keys the prompt has.
        policy: Name of the scheduling policy that decided (``kvcache_centric``...).
        chosen_prefill: Prefill instance chosen, ``None`` when rejected before choosing.
        chosen_decode: Decode instance chosen, ``None`` when rejected before choosing.
        predicted_ttft_s: Predicted time to first token on the chosen pair (``None``
            when no pair was evaluated).
        predicted_tbt_s: Predicted time between tokens on the chosen decode instance.
        admitted: ``False`` when admission control rejected the request (HTTP 429).
        reject_reason: Why it was rejected, in words; ``None`` when admitted.
        retry_after_s: Retry-after hint given to the client on rejection.
        migration_source: Instance the chosen prefill fetches the best prefix from
            (hotspot migration), ``None`` when nothing is fetched.
        migration_blocks: Number of blocks that migration moves.
        actual_ttft_s: Measured TTFT, filled in later by ``update_actual``.
        actual_tbt_s: Measured TBT, filled in later by ``update_actual``.
        outcome: How the request ended, filled in later by ``record_outcome``:
            ``completed`` (every token delivered), ``rejected`` (HTTP 429: admission
            control, or a full KV pool at Prepare), ``failed`` (a worker or the front
            door failed) or ``cancelled`` (the client went away or the request was
            stopped). ``None``: not known (still running, written before revision
            0003, or the update was lost).
        outcome_detail: The reason code and text (``decode_kv_full: ...``) or the
            error, at most :data:`OUTCOME_DETAIL_MAX` characters; ``None`` when there
            is nothing to add (completed).
        model_ttft_s: What the uncalibrated models (profile fit, network model) predicted
            for the same plan, queue included; ``None``: not recorded (before revision
            0004). Beside ``predicted_ttft_s`` it shows what the online calibration did.
        predicted_overhead_s: Part of ``predicted_ttft_s`` outside the prefill instance
            (dispatch, RPCs), learned by the calibration; ``None``: not recorded.
        migration_bandwidth_bps: Bandwidth (bytes/s) the network model priced the
            migration at: the slower end of the path; ``None``: no migration, or
            written before revision 0005.
        migration_bandwidth_source: Where that bandwidth came from: ``measured``
            (earlier fetches on that end), ``configured`` or ``default`` (nothing
            known about the end); ``None`` as above.
    """

    time: float
    request_id: str
    prompt_tokens: int
    prompt_blocks: int
    first_block_key: str | None = None
    block_key_count: int = 0
    policy: str
    chosen_prefill: str | None = None
    chosen_decode: str | None = None
    predicted_ttft_s: float | None = None
    predicted_tbt_s: float | None = None
    admitted: bool = True
    reject_reason: str | None = None
    retry_after_s: float | None = None
    migration_source: str | None = None
    migration_blocks: int = 0
    actual_ttft_s: float | None = None
    actual_tbt_s: float | None = None
    outcome: Outcome | None = None
    outcome_detail: str | None = None
    model_ttft_s: float | None = None
    predicted_overhead_s: float | None = None
    migration_bandwidth_bps: float | None = None
    migration_bandwidth_source: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CandidateRecord:
    """One instance the policy considered for a decision, with its predicted costs.

    Attributes:
        instance: Instance name.
        role: ``prefill`` or ``decode``.
        matched_prefix_blocks: Prefix blocks of the prompt this instance already holds.
        queue_time_s: Predicted wait before this instance starts the request.
        transfer_time_s: Predicted time to fetch missing prefix blocks from elsewhere
            (0 when the policy would not fetch).
        prefill_time_s: Predicted prefill compute time on this instance.
        predicted_ttft_s: Predicted TTFT if chosen (prefill candidates; ``None`` for
            decode candidates).
        predicted_tbt_s: Predicted TBT if the request joined this decode instance
            (decode candidates; ``None`` for prefill candidates).
        chosen: Whether this candidate was picked.
        why_not: Short reason it was not picked (``None`` for the chosen one).
        transfer_blocks: Blocks this candidate would fetch (the ``transfer_time_s``
            is the cost of moving them).
        overhead_time_s: Predicted time outside the instance (prefill candidates;
            calibrated); ``None`` for decode candidates and older rows.
        kv_tokens: KV context tokens the Conductor counted on the instance, reserved
            ones included (decode candidates).
        kv_capacity_tokens: KV tokens the instance holds (decode; ``None``: not known).
        kv_reported_tokens: KV tokens in use as the worker last reported (decode;
            ``None``: no report, e.g. in the simulator).
        transfer_source: Location the ``transfer_blocks`` would come from (a prefill
            instance or a store node); ``None`` when the candidate fetches nothing,
            and in rows written before revision 0006.
    """

    instance: str
    role: Role
    matched_prefix_blocks: int = 0
    queue_time_s: float = 0.0
    transfer_time_s: float = 0.0
    prefill_time_s: float = 0.0
    predicted_ttft_s: float | None = None
    predicted_tbt_s: float | None = None
    chosen: bool = False
    why_not: str | None = None
    transfer_blocks: int = 0
    overhead_time_s: float | None = None
    kv_tokens: int | None = None
    kv_capacity_tokens: int | None = None
    kv_reported_tokens: int | None = None
    transfer_source: str | None = None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """A decision read back from the database with its candidates.

    Attributes:
        id: Row id (increases with submission order).
        decision: The decision.
        candidates: Its candidates, prefill first, in the order they were submitted.
    """

    id: int
    decision: DecisionRecord
    candidates: tuple[CandidateRecord, ...]
