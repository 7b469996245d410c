"""CPP: layer split, wavefront schedule, pipelined output equals one engine."""

from __future__ import annotations

import pytest
import torch

from mooncake_core.config.models import HashingConfig, ModelConfig
from mooncake_core.worker import (
    CppOptions,
    CppPrefillGroup,
    InferenceEngine,
    SamplingParams,
    split_layers,
)


def _prompt(n: int, salt: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(salt)
    return torch.randint(0, 256, (n,), generator=g).tolist()


def test_split_layers() -> None:
    assert split_layers(4, 2) == [range(0, 2), range(2, 4)]
    assert split_layers(5, 3) == [range(0, 2), range(2, 4), range(4, 5)]
    with pytest.raises(ValueError, match="3 layers over 4 stages"):
        split_layers(3, 4)


def test_two_stage_chunked_prefill_equals_single_engine(
    tiny4: ModelConfig, hashing: HashingConfig
) -> None:
    prompt = _prompt(27)
    group = CppPrefillGroup(tiny4, hashing, CppOptions(stages=2, chunk_tokens=8, threshold=10))
    r = group.prefill(prompt)
    assert r.pipelined
    assert r.chunks == ((0, 8), (8, 16), (16, 24), (24, 27))
    assert r.schedule == (
        (0, 0, 0),
        (1, 0, 1),
        (1, 1, 0),
        (2, 0, 2),
        (2, 1, 1),
        (3, 0, 3),
        (3, 1, 2),
        (4, 1, 3),
    )
    eng = InferenceEngine(tiny4, hashing, num_blocks=32, device="cpu")
    ref = eng.prefill(prompt)
    assert torch.allclose(r.logits, ref.logits, rtol=0, atol=1e-5)
    assert int(r.logits.argmax()) == ref.first_token
    got = group.block_bytes(r.seq_id)
    want = [eng.cache.read_block(b) for b in eng.cache.block_table(ref.seq_id)]
    assert len(got) == len(want) == 7
    g = torch.frombuffer(bytearray(b"".join(got)), dtype=torch.float32)
    w = torch.frombuffer(bytearray(b"".join(want)), dtype=torch.float32)
    # Only the 27 real token slots are defined; the tail of the last block is unused.
    g = g.view(7, 4, 2, 2, 4, 16).permute(1, 2, 3, 0, 4, 5).reshape(4, 2, 2, 28, 16)[:, :, :, :27]
    w = w.view(7, 4, 2, 2, 4, 16).permute(1, 2, 3, 0, 4, 5).reshape(4, 2, 2, 28, 16)[:, :, :, :27]
    assert torch.allclose(g, w, rtol=0, atol=1e-5)


def test_short_prompt_runs_on_one_stage(tiny4: ModelConfig, hashing: HashingConfig) -> None:
    group = CppPrefillGroup(tiny4, hashing, CppOptions(stages=2, chunk_tokens=4, threshold=10))
    r = group.prefill(_prompt(10))
    assert not r.pipelined
    assert r.schedule == ((0, -1, 0),) and r.chunks == ((0, 10),)
    assert all(st.cache.snapshot().sequences == 0 for st in group.stages)
    ref = InferenceEngine(tiny4, hashing, num_blocks=8, device="cpu").prefill(_prompt(10))
    assert torch.allclose(r.logits, ref.logits, rtol=0, atol=1e-5)


def test_pipeline_reuses_cached_prefix_on_every_stage(
    tiny4: ModelConfig, hashing: HashingConfig
) -> None:
    base = _prompt(24, 1)
    group = CppPrefillGroup(tiny4, hashing, CppOptions(stages=2, chunk_tokens=8, threshold=6))
    group.release(group.prefill(base).seq_id)
    r = group.prefill(base + _prompt(9, 2))
    assert (r.reused_tokens, r.computed_tokens) == (24, 9)
    assert r.chunks == ((24, 32), (32, 33))
    ref = InferenceEngine(tiny4, hashing, num_blocks=16, device="cpu").prefill(base + _prompt(9, 2))
    assert torch.allclose(r.logits, ref.logits, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="already exists"):
        group.prefill([1, 2], seq_id=r.seq_id)
    group.release(r.seq_id)
    with pytest.raises(KeyError):
        group.release(r.seq_id)


def test_cpp_prefill_then_decode_elsewhere_equals_reference(
    tiny4: ModelConfig, hashing: HashingConfig
) -> None:
    prompt = _prompt(30, 6)
    params = SamplingParams(max_tokens=7, stop_at_eos=False)
    group = CppPrefillGroup(tiny4, hashing, CppOptions(stages=2, chunk_tokens=8, threshold=8))
    r = group.prefill(prompt)
    kv = group.export_kv(r, params)
    assert len(kv.blocks) == 8 and kv.tokens == tuple(prompt)
    dec = InferenceEngine(tiny4, hashing, num_blocks=16, device="cpu")
    sid = dec.import_kv(kv)
    while not dec.finished(sid):
        dec.decode_step([sid])
    assert dec.generated(sid) == dec.generate_reference(prompt, 7, sampling=params)


def test_stage_object_range_is_its_slice_of_the_full_block(
    tiny4: ModelConfig, hashing: HashingConfig
) -> None:
    prompt = _prompt(12, 7)
    group = CppPrefillGroup(tiny4, hashing, CppOptions(stages=2, chunk_tokens=4, threshold=4))
    r = group.prefill(prompt)
    full = group.block_bytes(r.seq_id)[0]
    for st in group.stages:
        off, n = st.object_range
        assert full[off : off + n] == st.cache.read_block(st.cache.block_table(r.seq_id)[0])
    assert [st.object_range for st in group.stages] == [
        (0, 2048),
        (2048, 2048),
    ]  # layer = 2 * 2 * 4 * 16 * 4 bytes
