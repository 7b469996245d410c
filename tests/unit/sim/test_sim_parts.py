"""LRU block cache, NIC fair-share links, decode batching and config fields."""

import pytest

from mooncake_core.conductor.predictors import DecodeStepModel
from mooncake_core.sim import SimConfig, set_field, worst_decile_mean
from mooncake_core.sim.cache import BlockLRU
from mooncake_core.sim.decode import DecodeSim
from mooncake_core.sim.links import Links


def test_lru_evicts_least_recent_first_and_reports_events() -> None:
    c = BlockLRU(4)
    assert c.insert([1, 2, 3]) == ([1, 2, 3], [])
    c.touch([1])
    added, evicted = c.insert([4, 5])
    assert added == [4, 5] and evicted == [2]
    assert c.keys() == [3, 1, 4, 5]
    assert c.prefix_len([3, 1, 9, 4]) == 2
    # A prompt longer than the cache: its own first blocks fall out, reported in neither list.
    added, evicted = c.insert([10, 11, 12, 13, 14])
    assert evicted == [3, 1, 4, 5]
    assert added == [11, 12, 13, 14]
    assert BlockLRU(0).insert([1]) == ([], [])
    with pytest.raises(ValueError, match="capacity"):
        BlockLRU(-1)


def test_links_share_bandwidth_fairly() -> None:
    links = Links({"a": 100.0, "b": 100.0, "c": 100.0}, 100.0)
    f1 = links.start("a", "b", 100, 0.0)
    assert links.next_completion() == (1.0, f1)
    f2 = links.start("a", "c", 100, 0.5)  # a's 100 B/s now split: 50 each
    # f1 has 50 B left at 50 B/s -> 1.5; f2 100 B at 50 B/s -> 2.5
    assert links.next_completion() == (1.5, f1)
    links.finish(f1, 1.5)
    # f2 moved 50 B in [0.5, 1.5], gets the full 100 B/s for the last 50: done at 2.0
    assert links.next_completion() == (2.0, f2)
    links.finish(f2, 2.0)
    assert links.bytes_moved == 200 and len(links) == 0
    with pytest.raises(ValueError, match="two different nodes"):
        links.start("a", "a", 1, 3.0)


def test_decode_batches_join_at_step_boundaries() -> None:
    d = DecodeSim("d", DecodeStepModel((0.1, 0.0, 0.0)), max_batch=2, kv_capacity_tokens=100)
    assert d.join(0, context=10, steps=2, first_token_s=0.0, now=0.0)
    assert not d.join(1, context=10, steps=1, first_token_s=0.05, now=0.05)  # waits for the step
    done, more = d.end_step(0.1)
    assert done == [] and more and d.batch == 2
    done, more = d.end_step(0.2)
    assert sorted(x.rid for x in done) == [0, 1]
    r1 = next(x for x in done if x.rid == 1)
    assert r1.tbt_s == pytest.approx(0.15)  # one interval: 0.05 -> 0.2
    assert not more and d.batch == 0 and d.context == 0


def test_decode_respects_kv_capacity() -> None:
    d = DecodeSim("d", DecodeStepModel((0.1, 0.0, 0.0)), max_batch=8, kv_capacity_tokens=100)
    assert d.join(0, 80, 1, 0.0, 0.0)
    d.end_step(0.1)  # 0 finished; batch empty
    assert d.join(1, 80, 3, 0.1, 0.1)
    assert not d.join(2, 30, 1, 0.1, 0.1)
    d.end_step(0.2)
    assert d.waiting == 1  # 81 + 30 > 100: still waiting


def test_worst_decile_mean() -> None:
    assert worst_decile_mean([]) == 0.0
    assert worst_decile_mean([0.1] * 19 + [1.0]) == pytest.approx((1.0 + 0.1) / 2)
    assert worst_decile_mean([0.3, 0.1]) == pytest.approx(0.3)


def test_set_field_on_conductor_and_top_level() -> None:
    c = set_field(SimConfig(), "conductor.kvcache_balancing_threshold", "4")
    assert c.conductor.kvcache_balancing_threshold == 4.0
    c = set_field(c, "prefill_instances", "8")
    assert c.prefill_instances == 8
    assert set_field(c, "simulate_decode", "false").simulate_decode is False
    assert set_field(c, "node_bandwidth_bps", "1.25e9").node_bandwidth_bps == 1.25e9
    assert set_field(c, "local_cache_tokens", "-1").local_cache_tokens == -1
    with pytest.raises(ValueError, match="node_bandwidth_bps"):
        set_field(c, "node_bandwidth_bps", "fast")
    with pytest.raises(ValueError, match=r"unknown field 'conductor\.nope'"):
        set_field(c, "conductor.nope", 1)
    with pytest.raises(ValueError, match="unknown field 'bogus'"):
        set_field(c, "bogus", 1)
    with pytest.raises(ValueError, match="policy"):
        set_field(c, "conductor.policy", "fastest")
    with pytest.raises(ValueError, match="cannot read"):
        set_field(c, "decode_instances", "many")
    with pytest.raises(ValueError, match="divide"):
        SimConfig(prefill_instances=6, cpp_group=4)
