"""Say in one paragraph why a decision went the way it did, with its numbers."""

from __future__ import annotations

from mooncake_core.fmt import byte_rate, seconds, signed_seconds
from mooncake_core.prediction_error import relative_error, signed_error

from .records import AuditEntry, CandidateRecord


def _s(seconds_: float | None) -> str:
    """A latency in prose (``45 ms``, ``1.20 s``); ``?`` when unknown."""
    return seconds(seconds_, missing="?")


def _signed_s(seconds_: float | None) -> str:
    """A prediction error, sign always shown (``+100 ms``); ``?`` when unknown."""
    return signed_seconds(seconds_, missing="?")


def _chosen(cands: list[CandidateRecord], name: str | None) -> CandidateRecord | None:
    for c in cands:
        if c.chosen:
            return c
    for c in cands:
        if name is not None and c.instance == name:
            return c
    return None


def _runner_up(
    cands: list[CandidateRecord], chosen: CandidateRecord | None, key: str
) -> CandidateRecord | None:
    others = [c for c in cands if c is not chosen]
    if not others:
        return None
    inf = float("inf")
    return min(others, key=lambda c: v if (v := getattr(c, key)) is not None else inf)


_NOT_BY_COST = frozenset({"random", "round_robin"})


def _why(policy: str) -> str:
    # Random and round-robin do not weigh costs; do not pretend the numbers decided.
    if policy in _NOT_BY_COST:
        return f"by {policy} (not by cost): it "
    return "because it "


def _holding(c: CandidateRecord, blocks: int) -> str:
    return f"held {c.matched_prefix_blocks} of {blocks} prefix blocks"


def _costs_chosen(c: CandidateRecord) -> str:
    fetch = ""
    if c.transfer_blocks or c.transfer_time_s > 0:
        fetch = f", fetches {c.transfer_blocks} more ({_s(c.transfer_time_s)})"
    out = f"{fetch}, queues {_s(c.queue_time_s)} and prefills in {_s(c.prefill_time_s)}"
    if c.overhead_time_s:
        out += f", plus {_s(c.overhead_time_s)} outside the instance (dispatch, RPCs)"
    return out


def _kv(c: CandidateRecord) -> str:
    """`` (KV: ...)`` for a decode candidate whose KV inputs were recorded, else ``""``."""
    if c.kv_tokens is None and c.kv_reported_tokens is None:
        return ""
    parts = []
    if c.kv_tokens is not None:
        if c.kv_capacity_tokens is None:
            parts.append(f"{c.kv_tokens} tokens counted by the Conductor, no KV limit known")
        else:
            parts.append(f"{c.kv_tokens} of {c.kv_capacity_tokens} tokens counted by the Conductor")
    if c.kv_reported_tokens is not None:
        parts.append(f"{c.kv_reported_tokens} in use per its worker")
    return f" (KV: {', '.join(parts)})"


def _costs_runner_up(c: CandidateRecord) -> str:
    fetch = ""
    if c.transfer_blocks or c.transfer_time_s > 0:
        src = f" from {c.transfer_source}" if c.transfer_source else ""
        fetch = f"fetch {c.transfer_blocks} blocks{src} ({_s(c.transfer_time_s)}), "
    return (
        f"would have needed to {fetch}queue {_s(c.queue_time_s)} "
        f"and prefill for {_s(c.prefill_time_s)}"
    )


def explain(entry: AuditEntry) -> str:
    """One plain-language paragraph: why this pair, why not the runner-up, what happened.

    The last sentence says how the request ended when an outcome was recorded
    (nothing is said when it was not: still running, or a row older than outcomes).

    Args:
        entry: A decision with its candidates (from :class:`.queries.AuditReader`).

    Returns:
        The paragraph, numbers included (blocks, queue/transfer/prefill times,
        predicted and, when known, measured TTFT/TBT).
    """
    d = entry.decision
    prefill = [c for c in entry.candidates if c.role == "prefill"]
    decode = [c for c in entry.candidates if c.role == "decode"]
    p = _chosen(prefill, d.chosen_prefill)
    dc = _chosen(decode, d.chosen_decode)
    out = [
        f"Request {d.request_id} ({d.prompt_tokens} tokens, {d.prompt_blocks} blocks) "
        f"was scheduled by policy {d.policy}."
    ]
    if not d.admitted:
        reason = d.reject_reason or "no reason recorded"
        line = f"It was rejected by admission control: {reason}"
        if d.chosen_prefill or d.chosen_decode:
            line += (
                f"; the best pair was {d.chosen_prefill or '?'} + {d.chosen_decode or '?'} with "
                f"predicted TTFT {_s(d.predicted_ttft_s)} and TBT {_s(d.predicted_tbt_s)}"
            )
        if d.retry_after_s is not None:
            line += f". The client was told to retry after {_s(d.retry_after_s)}"
        out.append(line + ".")
        if d.outcome is not None and d.outcome != "rejected":
            out.append(_outcome(d.outcome, d.outcome_detail))  # not expected; say it
        return " ".join(out)

    if p is not None:
        out.append(
            f"{p.instance} was chosen for prefill {_why(d.policy)}{_holding(p, d.prompt_blocks)}"
            f"{_costs_chosen(p)}: predicted TTFT "
            f"{_s(p.predicted_ttft_s if p.predicted_ttft_s is not None else d.predicted_ttft_s)}."
        )
        ru = _runner_up(prefill, p, "predicted_ttft_s")
        if ru is None:
            out.append("It was the only prefill candidate.")
        else:
            gap = ""
            if ru.predicted_ttft_s is not None and p.predicted_ttft_s is not None:
                gap = f", {_s(ru.predicted_ttft_s - p.predicted_ttft_s)} slower"
            line = (
                f"The runner-up {ru.instance} (predicted TTFT {_s(ru.predicted_ttft_s)}{gap}) "
                f"{_holding(ru, d.prompt_blocks)} and {_costs_runner_up(ru)}"
            )
            if ru.why_not:
                line += f" (not chosen: {ru.why_not})"
            out.append(line + ".")
    elif d.chosen_prefill:
        out.append(
            f"{d.chosen_prefill} was chosen for prefill (predicted TTFT "
            f"{_s(d.predicted_ttft_s)}); no candidate details were recorded."
        )

    if dc is not None:
        line = (
            f"{dc.instance} was chosen for decode with predicted TBT "
            f"{_s(dc.predicted_tbt_s if dc.predicted_tbt_s is not None else d.predicted_tbt_s)}"
            f"{_kv(dc)}"
        )
        ru = _runner_up(decode, dc, "predicted_tbt_s")
        if ru is not None:
            line += f"; the runner-up {ru.instance} predicted {_s(ru.predicted_tbt_s)}{_kv(ru)}"
            if ru.why_not:
                line += f" (not chosen: {ru.why_not})"
        out.append(line + ".")
    elif d.chosen_decode:
        out.append(
            f"{d.chosen_decode} was chosen for decode (predicted TBT {_s(d.predicted_tbt_s)})."
        )

    if d.migration_source and d.migration_blocks:
        out.append(
            f"Hotspot migration: {d.chosen_prefill or 'the prefill instance'} fetches "
            f"{d.migration_blocks} blocks from {d.migration_source} and keeps a replica"
            f"{_priced(d.migration_bandwidth_bps, d.migration_bandwidth_source)}."
        )
    out.extend(_actuals(d.predicted_ttft_s, d.actual_ttft_s, "TTFT"))
    out.extend(_uncalibrated(d.predicted_ttft_s, d.model_ttft_s, d.actual_ttft_s))
    out.extend(_actuals(d.predicted_tbt_s, d.actual_tbt_s, "TBT"))
    if d.outcome is not None:
        out.append(_outcome(d.outcome, d.outcome_detail))
    return " ".join(out)


_OUTCOME_TEXT = {
    "completed": "It completed: every token was delivered",
    "rejected": "It was admitted, then rejected with HTTP 429",
    "failed": "It failed",
    "cancelled": "It was cancelled before the last token",
}


def _outcome(outcome: str, detail: str | None) -> str:
    """The sentence on how the request ended (no sentence when nothing was recorded)."""
    text = _OUTCOME_TEXT.get(outcome, f"Its outcome was {outcome}")
    return f"{text}: {detail}." if detail else f"{text}."


_BANDWIDTH_SOURCE = {
    "measured": "measured on earlier fetches",
    "configured": "configured",
    "default": "the default: nothing measured yet",
}


def _priced(bps: float | None, source: str | None) -> str:
    """The migration's price: ``, priced at 1.23 GB/s (measured ...)`` (empty if unknown)."""
    if not bps:
        return ""
    rate = byte_rate(bps)
    why = _BANDWIDTH_SOURCE.get(source or "", source or "")
    return f", priced at {rate}" + (f" ({why})" if why else "")


def _uncalibrated(pred: float | None, model: float | None, actual: float | None) -> list[str]:
    """What the uncalibrated models said, when it differs from what was used."""
    if model is None or pred is None or abs(model - pred) <= 1e-9 * max(abs(pred), 1e-9):
        return []
    line = f"Uncalibrated, the models predicted {_s(model)}"
    rel = relative_error(model, actual) if actual is not None else None
    if actual is not None and rel is not None:
        line += f" (error {_signed_s(signed_error(model, actual))}, {rel * 100:.0f}%)"
    return [line + "; the online calibration learned the rest from measured requests."]


def _actuals(pred: float | None, actual: float | None, what: str) -> list[str]:
    if actual is None:
        return []
    if pred is None:
        return [f"Measured {what} {_s(actual)}."]
    rel = relative_error(pred, actual)
    pct = "" if rel is None else f", {rel * 100:.0f}%"
    return [
        f"Measured {what} {_s(actual)} against {_s(pred)} predicted "
        f"(error {_signed_s(signed_error(pred, actual))}{pct})."
    ]
