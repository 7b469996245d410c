"""explain() on hand-built entries: the edge cases the scenario does not cover."""

from __future__ import annotations

from mooncake_core.conductor.audit import (
    AuditEntry,
    CandidateRecord,
    DecisionRecord,
    explain,
)


def _d(**kw: object) -> DecisionRecord:
    base: dict[str, object] = {
        "time": 0.0,
        "request_id": "r",
        "prompt_tokens": 48,
        "prompt_blocks": 3,
        "policy": "load_balance",
    }
    base.update(kw)
    return DecisionRecord(**base)  # type: ignore[arg-type]


def test_admitted_without_candidate_rows() -> None:
    text = explain(
        AuditEntry(
            1,
            _d(chosen_prefill="p0", chosen_decode="d0", predicted_ttft_s=0.5, predicted_tbt_s=0.03),
            (),
        )
    )
    assert text == (
        "Request r (48 tokens, 3 blocks) was scheduled by policy load_balance. "
        "p0 was chosen for prefill (predicted TTFT 0.50 s); no candidate details were "
        "recorded. d0 was chosen for decode (predicted TBT 30 ms)."
    )


def test_rejected_before_any_choice() -> None:
    text = explain(AuditEntry(1, _d(admitted=False, reject_reason="decode_full: 8/8 slots"), ()))
    assert text.endswith("It was rejected by admission control: decode_full: 8/8 slots.")


def test_chosen_flag_missing_falls_back_to_name_and_measured_without_prediction() -> None:
    cands = (
        CandidateRecord(
            instance="p1",
            role="prefill",
            matched_prefix_blocks=3,
            queue_time_s=0.2,
            prefill_time_s=0.1,
            predicted_ttft_s=0.3,
        ),
        CandidateRecord(instance="p0", role="prefill", predicted_ttft_s=None, why_not="draining"),
    )
    text = explain(AuditEntry(1, _d(chosen_prefill="p1", actual_ttft_s=0.4), cands))
    assert "p1 was chosen for prefill because it held 3 of 3 prefix blocks" in text
    # A runner-up without a prediction sorts last but is still named, without a gap.
    assert "The runner-up p0 (predicted TTFT ?) held 0 of 3 prefix blocks" in text
    assert "(not chosen: draining)" in text
    assert text.endswith("Measured TTFT 0.40 s.")


def test_decode_kv_without_a_known_limit() -> None:
    # A decode instance whose KV capacity is unknown: said as such, not "11477 of no KV
    # limit known tokens".
    from mooncake_core.conductor.audit.explain import _kv

    c = CandidateRecord(instance="d0", role="decode", kv_tokens=11477)
    assert _kv(c) == " (KV: 11477 tokens counted by the Conductor, no KV limit known)"
