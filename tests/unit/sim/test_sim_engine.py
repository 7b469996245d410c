"""The event engine on tiny hand-made traces, with times worked out by hand."""

import dataclasses

import pytest

from mooncake_core.conductor.predictors import DecodeStepModel, PrefillTimeModel
from mooncake_core.sim import CostModel, SimConfig, TraceRequest, set_field, simulate

B = 512  # tokens per block in the trace format


def linear_cost(
    per_token: float = 0.001, step: float = 0.1, bw: float = 1e15, kv: int = 1
) -> CostModel:
    """Prefill = per_token * new tokens; decode step = ``step`` s; KV ``kv`` B/token."""
    return CostModel(
        name="linear",
        prefill=PrefillTimeModel((0.0, per_token, 0.0, 0.0)),
        decode=DecodeStepModel((step, 0.0, 0.0)),
        kv_bytes_per_token=kv,
        layers=1,
        node_bandwidth_bps=bw,
        local_cache_tokens=1_000_000,
        decode_kv_capacity_tokens=1_000_000,
        decode_max_batch=8,
    )


def req(rid: int, t: float, blocks: list[int], out: int = 1) -> TraceRequest:
    return TraceRequest(rid, t, len(blocks) * B, out, tuple(blocks))


def cfg(policy: str = "load_balance", p: int = 1, d: int = 1, **kw: object) -> SimConfig:
    c = SimConfig(prefill_instances=p, decode_instances=d, **kw)  # type: ignore[arg-type]
    return set_field(c, "conductor.policy", policy)


def test_three_requests_fifo_and_prefix_reuse_by_hand() -> None:
    # One prefill instance, 1 ms per new token.
    # r0 arrives at 0, 1024 new tokens: runs 0 -> 1.024.
    # r1 arrives at 0.5, shares r0's 2 blocks: waits until 1.024, then 512 new tokens
    #    -> done 1.536, TTFT 1.036.
    # r2 arrives at 3.0 with an unseen block: 0.512 s, TTFT 0.512.
    trace = [req(0, 0.0, [1, 2]), req(1, 0.5, [1, 2, 3]), req(2, 3.0, [9])]
    res = simulate(trace, cfg(), linear_cost())
    r0, r1, r2 = res.requests
    assert r0.ttft_s == pytest.approx(1.024, abs=1e-12)
    assert r1.ttft_s == pytest.approx(1.036, abs=1e-12)
    assert r2.ttft_s == pytest.approx(0.512, abs=1e-12)
    assert [r.prefix_hit_blocks for r in res.requests] == [0, 2, 0]
    assert not any(r.rejected for r in res.requests)
    s = res.summary(30.0, 0.2)
    assert s.avg_ttft_s == pytest.approx((1.024 + 1.036 + 0.512) / 3, abs=1e-12)
    assert s.hit_rate == pytest.approx(2 / 6)


def test_decode_steps_give_ttft_plus_steps_and_tbt() -> None:
    # 512 tokens prefill in 0.512 s; 4 output tokens = first from prefill + 3 decode
    # steps of 0.1 s each (KV moves over a near-infinite link): finish 0.812, TBT 0.1.
    res = simulate([req(0, 0.0, [5], out=4)], cfg(), linear_cost())
    (r,) = res.requests
    assert r.ttft_s == pytest.approx(0.512)
    assert r.finish_s == pytest.approx(0.812)
    assert r.tbt_s == pytest.approx(0.1)
    assert r.decode_instance == "decode-0"


def test_slow_kv_transfer_delays_decode_join() -> None:
    # KV of 512 tokens at 1000 B/token = 512000 B over a 256000 B/s link: 2 s, started
    # with the prefill at 0, so decode joins at 2.0 (not at 0.512). First decode token at
    # 2.1: intervals 1.588 and 0.1; worst 10% of 2 intervals = the single worst, 1.588.
    res = simulate([req(0, 0.0, [5], out=3)], cfg(), linear_cost(bw=256_000, kv=1000))
    (r,) = res.requests
    assert r.ttft_s == pytest.approx(0.512)
    assert r.finish_s == pytest.approx(2.2)
    assert r.tbt_s == pytest.approx(1.588)
    assert r.transferred_bytes == 512_000


def test_two_instances_load_balance_runs_in_parallel() -> None:
    trace = [req(0, 0.0, [1, 2]), req(1, 0.0, [3, 4])]
    res = simulate(trace, cfg(p=2), linear_cost())
    assert [r.ttft_s for r in res.requests] == pytest.approx([1.024, 1.024])
    assert {r.prefill_instance for r in res.requests} == {"prefill-0", "prefill-1"}


def test_kvcache_centric_fetches_prefix_and_replicates_it() -> None:
    # r0 (4 blocks) prefills on prefill-0 (tie -> first instance): 0 -> 2.048.
    # r1 at 2.1 shares 4 blocks + 1 new. Plans: prefill-0 local: 0.512 s; prefill-1 must
    # fetch 4 blocks (4*512*1000 B = 2.048 MB at 1.024 MB/s = 2 s) -> 2.512 s. prefill-0 wins.
    # r2 at 2.2 shares 4 blocks: prefill-0 is busy until 2.612 (queue 0.412 + 0.512 = 0.924);
    # prefill-1 fetching costs 2 + 0.512 = 2.512 -> still prefill-0 (queue wins).
    cost = linear_cost(bw=1_024_000, kv=1000)
    trace = [req(0, 0.0, [1, 2, 3, 4]), req(1, 2.1, [1, 2, 3, 4, 5]), req(2, 2.2, [1, 2, 3, 4, 6])]
    res = simulate(trace, cfg("kvcache_centric", p=2), cost)
    r0, r1, r2 = res.requests
    assert r0.ttft_s == pytest.approx(2.048)
    assert r1.prefill_instance == "prefill-0" and r1.ttft_s == pytest.approx(0.512)
    assert r2.prefill_instance == "prefill-0"
    assert r2.ttft_s == pytest.approx(2.612 + 0.512 - 2.2)
    # Cheap network: fetching (4 blocks in 0.002 s) beats waiting, so r2 goes to prefill-1
    # and fetches all 4 blocks from prefill-0, keeping a replica.
    fast = linear_cost(bw=1.024e9, kv=1000)
    res = simulate(trace, cfg("kvcache_centric", p=2), fast)
    r2 = res.requests[2]
    assert r2.prefill_instance == "prefill-1"
    assert r2.fetched_blocks == 4 and r2.local_hit_blocks == 0
    assert r2.ttft_s == pytest.approx(0.002 + 0.512)
    assert res.counters["migrations"] == 1


def test_unlimited_cache_has_no_evictions_and_zero_cache_never_hits() -> None:
    trace = [req(i, i * 10.0, [1, 2, 3]) for i in range(3)]
    hits = simulate(trace, cfg(local_cache_tokens=-1), linear_cost())
    assert [r.prefix_hit_blocks for r in hits.requests] == [0, 3, 3]
    none = simulate(trace, cfg(local_cache_tokens=0), linear_cost())
    assert [r.prefix_hit_blocks for r in none.requests] == [0, 0, 0]


def test_ttft_slo_rejection_through_conductor_admission() -> None:
    # 30 s TTFT SLO, 1 ms/token: a 40-block prompt (20.48 s) queued behind another
    # predicts 40.96 s and is rejected before prefill by early_reject.
    trace = [req(0, 0.0, list(range(40))), req(1, 0.0, list(range(100, 140)))]
    c = set_field(cfg(), "conductor.admission", "early_reject")
    res = simulate(trace, c, linear_cost())
    assert not res.requests[0].rejected
    assert res.requests[1].rejected and res.requests[1].reason == "ttft_slo"
    assert res.summary(30.0, 0.2).rejected_by_reason == {"ttft_slo": 1}


def test_store_pool_serves_prefix_when_instances_cache_nothing() -> None:
    # Instances keep nothing locally; every prefill writes its blocks to the store pool.
    # r1 shares r0's 4 blocks: kvcache_centric fetches them from the pool (4 blocks x
    # 512 tokens x 1000 B = 2.048 MB at 1.024 GB/s = 2 ms) and computes 512 new tokens.
    cost = linear_cost(bw=1.024e9, kv=1000)
    trace = [req(0, 0.0, [1, 2, 3, 4]), req(1, 5.0, [1, 2, 3, 4, 5])]
    c = cfg("kvcache_centric", p=2, local_cache_tokens=0, store_pool_tokens=1_000_000)
    res = simulate(trace, c, cost)
    r1 = res.requests[1]
    assert r1.local_hit_blocks == 0 and r1.fetched_blocks == 4
    assert r1.ttft_s == pytest.approx(0.002 + 0.512)
    # Without the pool nothing is cached anywhere.
    res = simulate(trace, cfg("kvcache_centric", p=2, local_cache_tokens=0), cost)
    assert res.requests[1].prefix_hit_blocks == 0


def test_cpp_group_splits_long_prompt_compute() -> None:
    # 4 nodes in one CPP group: 8 blocks = 4096 new tokens >= 4 chunks of 1024, so the
    # compute is 4.096 s / (4 * 0.9); a 1-block prompt runs unsplit.
    trace = [req(0, 0.0, list(range(8))), req(1, 100.0, [99])]
    res = simulate(trace, cfg(p=4, cpp_group=4), linear_cost())
    assert res.requests[0].ttft_s == pytest.approx(4.096 / 3.6)
    assert res.requests[1].ttft_s == pytest.approx(0.512)


def test_load_samples_average_prefill_busy_time_over_the_window() -> None:
    # One instance busy 0 -> 1.024 s, then idle; 1 s windows: [0,1] fully busy,
    # [1,2] busy 0.024 s.
    res = simulate([req(0, 0.0, [1, 2])], cfg(load_sample_interval_s=1.0), linear_cost())
    busy = [s.prefill_busy for s in res.load]
    assert busy[0] == pytest.approx(1.0)
    assert busy[1] == pytest.approx(0.024)


def test_hit_rate_counts_complete_blocks_only() -> None:
    # r1 has 2 complete blocks + 100 tokens in a partial third block (its id is never
    # cached); both complete blocks hit, so its hit rate is 2/2, the run's 2/4.
    trace = [
        req(0, 0.0, [1, 2]),
        TraceRequest(1, 5.0, 2 * B + 100, 1, (1, 2, 77)),
    ]
    res = simulate(trace, cfg(), linear_cost())
    assert res.requests[1].prefix_hit_blocks == 2
    assert res.summary(30.0, 0.2).hit_rate == pytest.approx(2 / 4)


def test_join_on_another_decode_instance_charges_a_kv_move() -> None:
    # Two decode instances holding 1024 KV tokens each. r0 (1024 tokens, long decode)
    # fills decode-0, r1 (1024 tokens, one step) decode-1; r2 (512 tokens) fits nowhere
    # at scheduling, so the Conductor picks decode-0 and its KV streams there. When r2's
    # prefill ends at 2.56, r1 has left decode-1 (2.048 + 0.1) and r0 still fills decode-0:
    # r2 joins decode-1 and its 512 x 1000 B of KV cross the network a second time.
    cost = dataclasses.replace(linear_cost(kv=1000), decode_kv_capacity_tokens=1024)
    trace = [req(0, 0.0, [1, 2], out=100), req(1, 0.0, [3, 4], out=2), req(2, 0.0, [5], out=2)]
    res = simulate(trace, cfg(d=2), cost)
    r0, r1, r2 = res.requests
    assert (r0.decode_instance, r1.decode_instance, r2.decode_instance) == (
        "decode-0",
        "decode-1",
        "decode-1",
    )
    assert r2.transferred_bytes == 2 * 512 * 1000
    assert r1.transferred_bytes == 1024 * 1000
    assert res.counters["kv_moves"] == 1
    assert not any(r.rejected for r in res.requests)
