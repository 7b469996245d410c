"""InferenceEngine: prefix reuse is exact and counted, KV moves as bytes, batching, sampling."""

from __future__ import annotations

import pytest
import torch

from mooncake_core.config.models import HashingConfig, ModelConfig
from mooncake_core.worker import CacheFullError, InferenceEngine, SamplingParams

NO_EOS = SamplingParams(max_tokens=8, stop_at_eos=False)


def _engine(cfg: ModelConfig, hc: HashingConfig, n: int = 64) -> InferenceEngine:
    return InferenceEngine(cfg, hc, num_blocks=n, device="cpu", location="p0")


def _prompt(n: int, salt: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(salt)
    return torch.randint(0, 256, (n,), generator=g).tolist()


def _seq_bytes(eng: InferenceEngine, sid: str) -> torch.Tensor:
    blocks = [eng.cache.block_view(b) for b in eng.cache.block_table(sid)]
    return torch.cat(blocks).view(torch.float32)


def test_incremental_prefill_equals_full_and_computes_only_new_tokens(
    tiny: ModelConfig, hashing: HashingConfig
) -> None:
    prompt = _prompt(30)
    cold = _engine(tiny, hashing)
    full = cold.prefill(prompt)
    assert (full.reused_tokens, full.computed_tokens) == (0, 30)
    warm = _engine(tiny, hashing)
    warm.release(warm.prefill(prompt[:21]).seq_id)  # caches 5 blocks = 20 tokens
    inc = warm.prefill(prompt)
    assert (inc.reused_tokens, inc.computed_tokens) == (20, 10)
    assert warm.stats.computed_tokens == 21 + 10
    assert inc.block_keys == full.block_keys
    assert torch.allclose(inc.logits, full.logits, rtol=0, atol=1e-5)
    assert inc.first_token == full.first_token
    # 30 tokens in 8 blocks; compare the KV of the 30 real slots only.
    a = _seq_bytes(cold, full.seq_id).view(8, tiny.layers, 2, tiny.kv_heads, 4, -1)
    b = _seq_bytes(warm, inc.seq_id).view(8, tiny.layers, 2, tiny.kv_heads, 4, -1)
    real = a.permute(1, 2, 3, 0, 4, 5).reshape(tiny.layers, 2, tiny.kv_heads, 32, -1)[:, :, :, :30]
    got = b.permute(1, 2, 3, 0, 4, 5).reshape(tiny.layers, 2, tiny.kv_heads, 32, -1)[:, :, :, :30]
    assert torch.allclose(got, real, rtol=0, atol=1e-5)


def test_full_block_prompt_still_computes_its_last_token(
    tiny: ModelConfig, hashing: HashingConfig
) -> None:
    eng = _engine(tiny, hashing)
    prompt = _prompt(12)
    first = eng.prefill(prompt)
    eng.release(first.seq_id)
    again = eng.prefill(prompt)
    assert (again.reused_tokens, again.computed_tokens) == (8, 4)
    assert again.first_token == first.first_token


def test_cold_prefill_ignores_the_cache(tiny: ModelConfig, hashing: HashingConfig) -> None:
    eng = _engine(tiny, hashing)
    eng.release(eng.prefill(_prompt(20)).seq_id)
    r = eng.prefill(_prompt(20), use_prefix_cache=False)
    assert (r.reused_tokens, r.computed_tokens) == (0, 20)


def test_blocks_from_another_instance_are_reused(tiny: ModelConfig, hashing: HashingConfig) -> None:
    prompt = _prompt(26, 3)
    src = _engine(tiny, hashing)
    r = src.prefill(prompt)
    # The Store stand-in: block bytes by chained key, as the layer-wise store writes them.
    table = src.cache.block_table(r.seq_id)
    store = {k: src.cache.read_block(table[i]) for i, k in enumerate(r.block_keys)}
    dst = _engine(tiny, hashing)
    got = dst.prefill([*prompt, 1, 2], cached_blocks=store)
    assert (got.reused_tokens, got.computed_tokens) == (24, 4)
    ref = _engine(tiny, hashing).prefill([*prompt, 1, 2])
    assert torch.allclose(got.logits, ref.logits, rtol=0, atol=1e-5)


def test_kv_copy_out_copy_in_reproduces_generation(
    tiny: ModelConfig, hashing: HashingConfig
) -> None:
    prompt = _prompt(23, 5)
    params = SamplingParams(max_tokens=10, stop_at_eos=False)
    pre = _engine(tiny, hashing)
    r = pre.prefill(prompt, sampling=params)
    kv = pre.export_kv(r.seq_id)
    assert len(kv.blocks) == 6 and all(len(b) == pre.cache.block_nbytes for b in kv.blocks)
    dec = _engine(tiny, hashing, n=16)
    sid = dec.import_kv(kv)
    while not dec.finished(sid):
        dec.decode_step([sid])
    assert dec.generated(sid) == pre.generate_reference(prompt, 10, sampling=params)
    assert dec.stats.computed_tokens == 0


def test_batched_decode_of_different_lengths_equals_each_alone(
    tiny: ModelConfig, hashing: HashingConfig
) -> None:
    prompts = [_prompt(n, n) for n in (3, 17, 9, 30)]
    params = [
        SamplingParams(max_tokens=6, stop_at_eos=False, temperature=t, seed=i)
        for i, t in enumerate((0.0, 0.8, 0.0, 1.3))
    ]
    batch = _engine(tiny, hashing)
    sids = [batch.prefill(p, sampling=s).seq_id for p, s in zip(prompts, params, strict=True)]
    for _ in range(5):
        batch.decode_step(sids)
    for p, s, sid in zip(prompts, params, sids, strict=True):
        alone = _engine(tiny, hashing)
        one = alone.prefill(p, sampling=s).seq_id
        for _ in range(5):
            alone.decode_step([one])
        assert batch.generated(sid) == alone.generated(one)
        k_b, _ = batch.cache.gather([sid], 1, len(p) + 5)
        k_a, _ = alone.cache.gather([one], 1, len(p) + 5)
        assert torch.allclose(k_b, k_a, rtol=0, atol=1e-5)


def test_shared_prefix_generation_through_the_cache_equals_reference(
    tiny: ModelConfig, hashing: HashingConfig
) -> None:
    system = _prompt(20, 9)
    prompts = [system + _prompt(n, 10 + n) for n in (1, 5, 11, 7, 2)] + [system[:13]]
    eng = _engine(tiny, hashing)
    out = eng.generate(prompts, NO_EOS, max_batch=2)
    assert out == [eng.generate_reference(p, 8, sampling=NO_EOS) for p in prompts]
    assert eng.stats.reused_tokens >= 4 * 20 + 12
    assert eng.stats.computed_tokens == sum(len(p) for p in prompts) - eng.stats.reused_tokens


def test_temperature_sampling_is_seeded(tiny: ModelConfig, hashing: HashingConfig) -> None:
    p = _prompt(10, 1)
    hot = SamplingParams(max_tokens=12, temperature=1.5, seed=42, stop_at_eos=False)
    eng = _engine(tiny, hashing)
    a = eng.generate([p], hot)[0]
    assert a == eng.generate([p], hot)[0] == eng.generate_reference(p, 12, sampling=hot)
    other = SamplingParams(max_tokens=12, temperature=1.5, seed=43, stop_at_eos=False)
    assert eng.generate([p], other)[0] != a


def test_failures_leave_the_cache_unchanged(tiny: ModelConfig, hashing: HashingConfig) -> None:
    eng = _engine(tiny, hashing, n=4)
    eng.release(eng.prefill(_prompt(9)).seq_id)
    before = eng.cache.snapshot()
    with pytest.raises(ValueError, match="token ids"):
        eng.prefill([1, 2, 300])
    with pytest.raises(ValueError, match="at least one token"):
        eng.prefill([])
    with pytest.raises(CacheFullError):
        eng.prefill(_prompt(40, 2))
    after = eng.cache.snapshot()
    assert (after.used_blocks, after.sequences, after.cached_blocks) == (0, 0, before.cached_blocks)
    assert eng.sequences() == ()
    with pytest.raises(KeyError, match="nope"):
        eng.decode_step(["nope"])
    with pytest.raises(ValueError, match="max_batch"):
        eng.generate([[1]], NO_EOS, max_batch=0)


def test_events_report_hbm_blocks(tiny: ModelConfig, hashing: HashingConfig) -> None:
    eng = _engine(tiny, hashing)
    r = eng.prefill(_prompt(9))
    events = eng.take_events()
    assert [e.keys for e in events] == [r.block_keys]
    assert events[0].location == "p0"


def test_snapshot_reports_load_and_counters(tiny: ModelConfig, hashing: HashingConfig) -> None:
    eng = _engine(tiny, hashing)
    a = eng.prefill(_prompt(9))
    eng.prefill(_prompt(5, 1))
    eng.decode_step([a.seq_id])
    snap = eng.snapshot()
    assert (snap.location, snap.device, snap.sequences, snap.context_tokens) == ("p0", "cpu", 2, 15)
    assert (snap.prefills, snap.computed_tokens, snap.decode_steps, snap.decoded_tokens) == (
        2,
        14,
        1,
        1,
    )
    assert snap.cache.sequences == 2 and snap.cache.used_blocks == 3 + 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_engine_matches_cpu(tiny: ModelConfig, hashing: HashingConfig) -> None:
    prompts = [_prompt(20, 4), [*_prompt(20, 4)[:12], 7, 8, 9]]
    cpu = _engine(tiny, hashing)
    gpu = InferenceEngine(tiny, hashing, num_blocks=64, device="cuda")
    assert gpu.cache.pool.is_cuda
    assert gpu.generate(prompts, NO_EOS) == [
        gpu.generate_reference(p, 8, sampling=NO_EOS) for p in prompts
    ]
    g, c = gpu.prefill(prompts[1]), cpu.prefill(prompts[1])
    assert g.reused_tokens == 12
    assert torch.allclose(g.logits.cpu(), c.logits, rtol=0, atol=1e-3)
    # KV moves between devices as plain bytes.
    sid = cpu.import_kv(gpu.export_kv(g.seq_id), seq_id="moved")
    cpu.decode_step([sid])


def test_reserved_kv_written_in_place_decodes_like_reference(
    tiny: ModelConfig, hashing: HashingConfig
) -> None:
    prompt = _prompt(14, 8)
    params = SamplingParams(max_tokens=6, stop_at_eos=False)
    pre = _engine(tiny, hashing)
    kv = pre.export_kv(pre.prefill(prompt, sampling=params).seq_id)
    dec = _engine(tiny, hashing, n=8)
    sid, blocks = dec.reserve_kv(len(kv.tokens), seq_id="r1")
    assert len(blocks) == 4
    with pytest.raises(ValueError, match="already exists"):
        dec.reserve_kv(3, seq_id="r1")
    for b, data in zip(blocks, kv.blocks, strict=True):
        dec.cache.block_view(b).copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    with pytest.raises(ValueError, match="reserved 14 tokens"):
        dec.adopt_kv(sid, kv.tokens[:-1], kv.next_token, params)
    dec.adopt_kv(sid, kv.tokens, kv.next_token, params)
    while not dec.finished(sid):
        dec.decode_step([sid])
    assert dec.generated(sid) == pre.generate_reference(prompt, 6, sampling=params)
    # A failed transfer gives its blocks back.
    other, _ = dec.reserve_kv(9)
    dec.abort_kv(other)
    with pytest.raises(KeyError):
        dec.abort_kv(other)
    assert dec.snapshot().cache.used_blocks == 5  # 14 + 5 decoded tokens; none of "other"
