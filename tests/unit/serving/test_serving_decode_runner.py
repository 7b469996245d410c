"""DecodeRunner control flow on a real (tiny) engine: batching, cancel, a full pool."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from mooncake_core.config.models import HashingConfig, ModelConfig
from mooncake_core.worker import CacheFullError, InferenceEngine, SamplingParams
from mooncake_core.worker.service_decode import DecodeRunner

MODEL = ModelConfig(layers=1, hidden=32, heads=2, kv_heads=1, intermediate=32, max_seq_len=512)


async def _collect(runner: DecodeRunner, rid: str, n_prompt: int, max_tokens: int) -> list[int]:
    sid, _ = await runner.prepare(rid, n_prompt)
    sampling = SamplingParams(max_tokens=max_tokens, stop_at_eos=False)
    toks = [t.token async for t in runner.admit(rid, sid, [5] * n_prompt, 7, sampling)]
    return toks


async def _idle(eng: InferenceEngine) -> None:
    # The loop releases a finished sequence just after handing out its last token.
    for _ in range(200):
        if eng.cache.snapshot().sequences == 0:
            return
        await asyncio.sleep(0.01)


async def test_serving_decode_runner_batches_and_survives_a_full_pool() -> None:
    eng = InferenceEngine(MODEL, HashingConfig(block_size=16), num_blocks=4, device="cpu")
    ex = ThreadPoolExecutor(1)
    runner = DecodeRunner(eng, ex, max_batch=2)
    loop_task = asyncio.create_task(runner.run())
    try:
        a, b = await asyncio.gather(_collect(runner, "a", 10, 5), _collect(runner, "b", 10, 5))
        assert len(a) == 4 and len(b) == 4  # first token came from prefill
        assert runner.peak_batch == 2  # they decoded in one batch
        await _idle(eng)
        # 50 prompt tokens take 4 blocks; the 65th token needs a fifth: the pool is full.
        with pytest.raises(CacheFullError):
            await _collect(runner, "c", 50, 40)
        assert runner.failed == 1
        # The loop is still alive and the blocks came back.
        assert len(await _collect(runner, "d", 20, 3)) == 2
        await _idle(eng)
        assert eng.cache.snapshot().used_blocks == 0
    finally:
        runner.stop()
        await asyncio.gather(loop_task, return_exceptions=True)
        ex.shutdown()


async def test_serving_decode_runner_cancel_drops_a_reservation() -> None:
    eng = InferenceEngine(MODEL, HashingConfig(block_size=16), num_blocks=4, device="cpu")
    ex = ThreadPoolExecutor(1)
    runner = DecodeRunner(eng, ex, max_batch=2)
    try:
        await runner.prepare("x", 30)
        assert eng.cache.snapshot().used_blocks == 2
        assert await runner.cancel("x") is True
        assert await runner.cancel("x") is False
        assert eng.cache.snapshot().used_blocks == 0
        with pytest.raises(KeyError, match="no reservation"):
            async for _ in runner.admit("x", "nope", [1], 2, SamplingParams()):
                pass
    finally:
        ex.shutdown()


async def test_serving_decode_runner_reserves_decode_blocks_at_prepare() -> None:
    # 4 blocks of 16. "a": 30 prompt tokens + 19 decoded (max_tokens 20) = 49 -> 4 blocks,
    # all taken at prepare, so "b" is refused there, and "a" still decodes to the end.
    eng = InferenceEngine(MODEL, HashingConfig(block_size=16), num_blocks=4, device="cpu")
    ex = ThreadPoolExecutor(1)
    runner = DecodeRunner(eng, ex, max_batch=2)
    loop_task = asyncio.create_task(runner.run())
    try:
        sid, blocks = await runner.prepare("a", 30, max_tokens=20)
        assert len(blocks) == 2  # the prompt's blocks; the decode headroom is not listed
        assert eng.cache.snapshot().used_blocks == 4
        with pytest.raises(CacheFullError, match="need 1 blocks, 0 free"):
            await runner.prepare("b", 1, max_tokens=1)
        with pytest.raises(CacheFullError):  # 50 + 39 tokens: 6 blocks of 4, nothing taken
            await runner.prepare("c", 50, max_tokens=40)
        sampling = SamplingParams(max_tokens=20, stop_at_eos=False)
        toks = [t.token async for t in runner.admit("a", sid, [5] * 30, 7, sampling)]
        assert len(toks) == 19 and runner.failed == 0
        await _idle(eng)
        assert eng.cache.snapshot().used_blocks == 0
        # Prompt plus max_tokens past max_seq_len (512) is refused before anything runs.
        with pytest.raises(ValueError, match="max_seq_len 512"):
            await runner.prepare("d", 500, max_tokens=13)
        assert eng.cache.snapshot().used_blocks == 0
    finally:
        runner.stop()
        await asyncio.gather(loop_task, return_exceptions=True)
        ex.shutdown()
