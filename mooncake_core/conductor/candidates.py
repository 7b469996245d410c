"""A decision's candidate rows from plain inputs, and decisions as plain tuples.

The Conductor does not build a decision's candidate rows (a row per instance, with its
"why not" sentence: more work than the decision itself on a large cluster). It keeps the
plain inputs they are made from (:data:`CandidateInputs`) and :func:`candidate_rows` makes
the rows when someone reads them. The audit writes them from another process:
:func:`pack_decision` turns a decision into bytes on the decision path (a C encoder,
``mooncake_core._flat``, copies its numbers and names: ~3 us for 32 candidates, where
pickle takes 10-17 us), and :func:`unpack_decision` makes the decision again on the other
side, where the rows are built and stored. :func:`decision_to_wire` and
:func:`decision_from_wire` are the tuple form in between.
"""

from __future__ import annotations

from typing import Any

from mooncake_core import _flat
from mooncake_core.conductor.decision import (
    AdmissionResult,
    Candidate,
    CandidateTable,
    Decision,
    Migration,
)
from mooncake_core.conductor.events import Tier
from mooncake_core.conductor.policies.base import PrefillPlan, explain_losers

__all__ = [
    "CandidateInputs",
    "candidate_rows",
    "decision_from_wire",
    "decision_to_wire",
    "pack_decision",
    "unpack_decision",
]

CandidateInputs = tuple[Any, ...]
"""``(plans, chosen, basis, d_idx, tbts, loads, fits, tbt_slo_s, input_len)``: the prefill
plans (instance order) with the index of the chosen one and the policy's basis, the
chosen decode index, every decode instance's predicted TBT, its load ``(name, expected
batch, max batch, expected context, KV capacity, reported KV)``, whether the request fits
its expected KV, the TBT SLO and the request's prompt length."""


def candidate_rows(inputs: CandidateInputs) -> list[Candidate]:
    """Prefill rows in instance order, then decode rows, each with why it lost."""
    plans, chosen, basis, d_idx, tbts, loads, fits, slo, new = inputs
    why_not = explain_losers(plans, chosen, basis)
    out = [
        Candidate(
            "prefill",
            p.instance,
            p.local_blocks,
            p.used_blocks,
            p.used_blocks - p.local_blocks if p.source is not None else 0,
            p.source[0] if p.source is not None else None,
            p.queue_s,
            p.transfer_s,
            p.prefill_s,
            p.ttft_s,
            None,
            i == chosen,
            why_not[i],
            p.overhead_s,
        )
        for i, p in enumerate(plans)
    ]
    win = tbts[d_idx]
    for i, (name, batch, max_batch, context, kv_cap, kv_rep) in enumerate(loads):
        t = tbts[i]
        if i == d_idx:
            why = ""
        elif batch >= max_batch:
            why = f"full ({batch}/{max_batch})"
        elif not fits[i]:
            why = f"KV full ({context} + {new} > {kv_cap} tokens)"
        elif t > slo:
            why = f"predicted TBT {t * 1000:.1f}ms > SLO {slo * 1000:.1f}ms"
        else:
            why = f"predicted TBT {t * 1000:.1f}ms >= {win * 1000:.1f}ms"
        out.append(
            Candidate(
                "decode",
                name,
                0,
                0,
                0,
                None,
                0.0,
                0.0,
                0.0,
                0.0,
                t,
                i == d_idx,
                why,
                0.0,
                context,
                kv_cap,
                kv_rep,
            )
        )
    return out


def pack_decision(d: Decision) -> bytes:
    """``d`` as bytes for the audit's writer process (:func:`unpack_decision` reads them).

    Raises:
        TypeError, ValueError: ``d`` holds a value the encoding does not carry.
    """
    return _flat.pack(decision_to_wire(d))


def unpack_decision(data: bytes) -> Decision:
    """The decision :func:`pack_decision` made ``data`` from (see :func:`decision_from_wire`).

    Raises:
        ValueError: ``data`` is not a packed decision (the message names the problem).
    """
    w = _flat.unpack(data)
    try:
        return decision_from_wire(w)
    except (TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"not a packed decision: {exc}") from None


def decision_to_wire(d: Decision) -> tuple[Any, ...]:
    """``d`` as nested tuples (named tuples included) of numbers, strings and :class:`Tier`
    values, which ``_flat.pack`` encodes as they are.

    Only the number of block keys and the first one travel (all the audit stores). A
    table made from rows (not :meth:`CandidateTable.lazy`) travels as rows.
    """
    a, m, table = d.admission, d.migration, d.candidates
    keys = d.block_keys
    inputs = table.inputs
    # The inputs, even if the rows were read: fewer objects.
    cands: tuple[Any, ...] = (True, *inputs) if inputs is not None else (False, table.rows())
    return (
        d.time,
        d.request_id,
        d.input_len,
        d.expected_output_len,
        len(keys),
        keys[0] if keys else None,
        d.policy,
        d.threshold,
        d.prefill,
        d.decode,
        d.local_blocks,
        d.prefix_blocks,
        d.best_blocks,
        d.predicted_queue_s,
        d.predicted_transfer_s,
        d.predicted_prefill_s,
        d.predicted_ttft_s,
        d.predicted_tbt_s,
        (a.admitted, a.reason, a.retry_after_s, a.detail),
        None
        if m is None
        else (
            m.source,
            m.source_tier,
            m.target,
            len(m.keys),
            m.nbytes,
            m.predicted_s,
            m.bandwidth_bps,
            m.bandwidth_source,
        ),
        d.predicted_overhead_s,
        d.model_ttft_s,
        cands,
    )


def _plan(p: tuple[Any, ...]) -> PrefillPlan:
    plan = PrefillPlan._make(p)
    src = plan.source
    if src is None or type(src[1]) is Tier:
        return plan
    return plan._replace(source=(src[0], Tier(src[1])))


def decision_from_wire(w: tuple[Any, ...]) -> Decision:
    """The decision :func:`decision_to_wire` made ``w`` from, for the audit.

    Its ``block_keys`` hold the first key and zeros (the count is right), and a
    migration's ``keys`` likewise: the audit keeps only counts and the first key. Tiers
    may arrive as their string values (``_flat`` writes a str enum as its str).
    """
    (time, rid, input_len, out_len, n_keys, first, policy, threshold, prefill, decode,
     local, prefix, best, q, x, p, ttft, tbt, adm, mig, overhead, model_ttft, cands) = w  # fmt: skip
    keys = (first, *([0] * (n_keys - 1))) if n_keys else ()
    migration = None
    if mig is not None:
        src, tier, target, n_mig, nbytes, predicted, bw, bw_source = mig
        migration = Migration(
            src, Tier(tier), target, (0,) * n_mig, nbytes, predicted, bw, bw_source
        )
    if cands[0]:
        _, plans, *rest = cands
        table = CandidateTable.lazy(candidate_rows, (tuple(map(_plan, plans)), *rest))
    else:
        table = CandidateTable([Candidate(*r) for r in cands[1]])
    return Decision(
        time=time,
        request_id=rid,
        input_len=input_len,
        expected_output_len=out_len,
        block_keys=keys,
        policy=policy,
        threshold=threshold,
        prefill=prefill,
        decode=decode,
        local_blocks=local,
        prefix_blocks=prefix,
        best_blocks=best,
        predicted_queue_s=q,
        predicted_transfer_s=x,
        predicted_prefill_s=p,
        predicted_ttft_s=ttft,
        predicted_tbt_s=tbt,
        admission=AdmissionResult(*adm),
        migration=migration,
        candidates=table,
        predicted_overhead_s=overhead,
        model_ttft_s=model_ttft,
    )
