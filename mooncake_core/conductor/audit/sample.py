"""Deterministic example decisions: the documented demo scenario and a bulk generator.

``scenario`` is the small, hand-built story used in ``docs/audit.md`` and the tests
(every number in it is chosen, so the explanations can be checked word for word);
``synthetic`` produces many varied decisions for ``bench/audit_throughput.py`` and for
trying the CLI or the dashboard without a running cluster.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from .records import CandidateRecord, DecisionRecord

Pair = tuple[DecisionRecord, tuple[CandidateRecord, ...]]


def _p(
    name: str, matched: int, queue: float, prefill: float, ttft: float, **kw: object
) -> CandidateRecord:
    return CandidateRecord(
        instance=name,
        role="prefill",
        matched_prefix_blocks=matched,
        queue_time_s=queue,
        prefill_time_s=prefill,
        predicted_ttft_s=ttft,
        **kw,  # type: ignore[arg-type]
    )


def _d(name: str, tbt: float, **kw: object) -> CandidateRecord:
    return CandidateRecord(instance=name, role="decode", predicted_tbt_s=tbt, **kw)  # type: ignore[arg-type]


def scenario(t0: float) -> list[Pair]:
    """Four decisions starting at ``t0`` (unix seconds), 30 s apart.

    - ``req-a``: ``prefill-2`` holds 12 of 14 prefix blocks and wins (TTFT 1.20 s) over
      ``prefill-0``, which would fetch 10 blocks (0.31 s) and queue 0.80 s; ``decode-0``;
      outcome ``completed``.
    - ``req-b``: rejected by predictive early rejection, retry after 2 s (``rejected``).
    - ``req-c``: hotspot migration: ``prefill-1`` fetches 8 blocks from ``prefill-2``;
      the client went away mid-stream (``cancelled``).
    - ``req-d``: round robin, no prefix hit, policy ``round_robin``; no outcome yet.
    """
    return [
        (
            DecisionRecord(
                time=t0,
                request_id="req-a",
                prompt_tokens=230,
                prompt_blocks=14,
                first_block_key="9f2c4e1a0b7d6c35",
                block_key_count=14,
                policy="kvcache_centric",
                chosen_prefill="prefill-2",
                chosen_decode="decode-0",
                predicted_ttft_s=1.20,
                predicted_tbt_s=0.045,
                outcome="completed",
            ),
            (
                _p(
                    "prefill-0",
                    2,
                    0.80,
                    0.40,
                    1.51,
                    transfer_blocks=10,
                    transfer_time_s=0.31,
                    transfer_source="prefill-2",
                    why_not="predicted TTFT 0.31 s higher",
                ),
                _p("prefill-1", 0, 0.20, 2.50, 2.70, why_not="predicted TTFT 1.50 s higher"),
                _p("prefill-2", 12, 0.10, 1.10, 1.20, chosen=True),
                _d("decode-0", 0.045, chosen=True),
                _d("decode-1", 0.060, why_not="predicted TBT 15 ms higher"),
            ),
        ),
        (
            DecisionRecord(
                time=t0 + 30,
                request_id="req-b",
                prompt_tokens=4096,
                prompt_blocks=256,
                first_block_key="17aa0c3b5e9d2f48",
                block_key_count=256,
                policy="kvcache_centric",
                chosen_prefill="prefill-1",
                chosen_decode="decode-1",
                predicted_ttft_s=3.00,
                predicted_tbt_s=0.210,
                admitted=False,
                reject_reason="decode load predicted at 0.97 when prefill ends (limit 0.95)",
                retry_after_s=2.0,
                outcome="rejected",
                outcome_detail="decode load predicted at 0.97 when prefill ends (limit 0.95)",
            ),
            (
                _p("prefill-1", 0, 0.50, 2.50, 3.00, chosen=True),
                _d("decode-1", 0.210, chosen=True),
            ),
        ),
        (
            DecisionRecord(
                time=t0 + 60,
                request_id="req-c",
                prompt_tokens=160,
                prompt_blocks=10,
                first_block_key="9f2c4e1a0b7d6c35",
                block_key_count=10,
                policy="kvcache_centric",
                chosen_prefill="prefill-1",
                chosen_decode="decode-1",
                predicted_ttft_s=0.60,
                predicted_tbt_s=0.050,
                migration_source="prefill-2",
                migration_blocks=8,
                outcome="cancelled",
                outcome_detail="stream closed before the last token (client gone)",
            ),
            (
                _p(
                    "prefill-1",
                    2,
                    0.05,
                    0.30,
                    0.60,
                    chosen=True,
                    transfer_blocks=8,
                    transfer_time_s=0.25,
                    transfer_source="prefill-2",
                ),
                _p("prefill-2", 10, 1.40, 0.20, 1.60, why_not="queue 1.40 s"),
                _d("decode-1", 0.050, chosen=True),
            ),
        ),
        (
            DecisionRecord(
                time=t0 + 90,
                request_id="req-d",
                prompt_tokens=64,
                prompt_blocks=4,
                first_block_key="0d1e2f3a4b5c6d7e",
                block_key_count=4,
                policy="round_robin",
                chosen_prefill="prefill-0",
                chosen_decode="decode-0",
                predicted_ttft_s=0.30,
                predicted_tbt_s=0.040,
            ),
            (
                _p("prefill-0", 0, 0.10, 0.20, 0.30, chosen=True),
                _d("decode-0", 0.040, chosen=True),
            ),
        ),
    ]


def synthetic(
    n: int, *, t0: float, rate: float = 1000.0, prefill: int = 3, decode: int = 1, seed: int = 0
) -> Iterator[Pair]:
    """``n`` varied decisions, ``rate`` per second from ``t0``, each with
    ``prefill + decode`` candidates (3 + 1 by default: the "~4 candidates" of the bench).

    Raises:
        ValueError: ``n`` < 0, ``rate`` <= 0, or no prefill instance.
    """
    if n < 0 or rate <= 0 or prefill < 1 or decode < 0:
        raise ValueError(
            f"bad synthetic() arguments: n={n} rate={rate} prefill={prefill} decode={decode}"
        )
    rng = random.Random(seed)
    pnames = [f"prefill-{i}" for i in range(prefill)]
    dnames = [f"decode-{i}" for i in range(decode)]
    for i in range(n):
        blocks = rng.randint(1, 64)
        matched = [rng.randint(0, blocks) for _ in pnames]
        queue = [rng.random() for _ in pnames]
        ttft = [q + 0.02 * (blocks - m) + 0.05 for q, m in zip(queue, matched, strict=True)]
        best = min(range(prefill), key=ttft.__getitem__)
        tbt = [0.03 + 0.02 * rng.random() for _ in dnames]
        dbest = min(range(decode), key=tbt.__getitem__) if decode else None
        admitted = rng.random() > 0.05
        cands = tuple(
            _p(
                pnames[k],
                matched[k],
                queue[k],
                0.02 * (blocks - matched[k]) + 0.05,
                ttft[k],
                chosen=k == best,
                why_not=None if k == best else "higher predicted TTFT",
            )
            for k in range(prefill)
        ) + tuple(
            _d(dnames[k], tbt[k], chosen=k == dbest, why_not=None if k == dbest else "higher TBT")
            for k in range(decode)
        )
        yield (
            DecisionRecord(
                time=t0 + i / rate,
                request_id=f"syn-{seed}-{i}",
                prompt_tokens=blocks * 16 + rng.randint(0, 15),
                prompt_blocks=blocks,
                first_block_key=f"{rng.getrandbits(64):016x}",
                block_key_count=blocks,
                policy="kvcache_centric",
                chosen_prefill=pnames[best],
                chosen_decode=None if dbest is None else dnames[dbest],
                predicted_ttft_s=ttft[best],
                predicted_tbt_s=None if dbest is None else tbt[dbest],
                admitted=admitted,
                reject_reason=None if admitted else "decode load predicted above limit",
                retry_after_s=None if admitted else 1.0,
            ),
            cands,
        )
