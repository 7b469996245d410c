"""Cost profile: the fitted prefill polynomial passes through the paper's anchors."""

import json
from pathlib import Path

import pytest

from mooncake_core.conductor.predictors import PrefillPoint
from mooncake_core.sim import available_profiles, fit_causal_prefill, load_profile


def test_a800_profile_reproduces_fig14_and_short_anchor() -> None:
    m = load_profile("llama3_70b_a800")
    # Paper Fig. 14: 128k tokens, no cache ~25 s; 95% prefix hit ~2 s.
    assert m.prefill_time(131072, 0) == pytest.approx(25.0, rel=1e-9)
    assert m.prefill_time(131072, round(0.95 * 131072)) == pytest.approx(2.0, rel=1e-9)
    # Documented short-prompt anchor from physics.
    assert m.prefill_time(1024, 0) == pytest.approx(0.1, rel=1e-9)
    c0, c1, c2, c3 = m.prefill.coefficients
    assert c2 == pytest.approx(2 * c3)  # causal attention shape
    assert min(c0, c1, c3) > 0
    assert m.kv_bytes_per_token == 327680 and m.kv_bytes(2) == 655360
    assert m.local_cache_tokens == 3_000_000
    assert m.node_bandwidth_bps == 87e9


def test_a800_prefill_monotone_and_decode_memory_bound() -> None:
    m = load_profile()
    times = [m.prefill_time(n, 0) for n in (512, 4096, 32768, 131072)]
    assert times == sorted(times)
    # More cached prefix never costs more.
    assert m.prefill_time(65536, 32768) < m.prefill_time(65536, 0)
    # Decode step: weights read dominates an empty batch; KV reads grow with context.
    assert m.decode.step_time(1, 0) == pytest.approx(0.0131 + 8.6e-5)
    assert m.decode.step_time(1, 1_000_000) > m.decode.step_time(1, 0) + 0.03


def test_cpp_group_divides_long_prompts_only() -> None:
    m = load_profile()
    assert m.prefill_time(131072, 0, group=4) == pytest.approx(25.0 / (4 * 0.9))
    assert m.prefill_time(2048, 0, group=4) == m.prefill_time(2048, 0)


def test_fit_rejects_bad_anchors() -> None:
    with pytest.raises(ValueError, match="exactly 3"):
        fit_causal_prefill([PrefillPoint(10, 0, 1.0)])
    with pytest.raises(ValueError, match="prefix_len"):
        fit_causal_prefill([PrefillPoint(10, 20, 1.0)] * 3)
    with pytest.raises(ValueError, match="do not determine"):
        fit_causal_prefill([PrefillPoint(10, 0, 1.0)] * 3)
    with pytest.raises(ValueError, match="negative"):
        fit_causal_prefill(
            [PrefillPoint(1000, 0, 1.0), PrefillPoint(2000, 0, 0.5), PrefillPoint(4000, 0, 3.0)]
        )


def test_profiles_listed_and_loaded_by_path(tmp_path: Path) -> None:
    assert {"llama3_70b_a800", "tiny_cpu", "smollm2_cpu"} <= set(available_profiles())
    tiny = load_profile("tiny_cpu")  # measured from the worker's tiny torch model
    assert tiny.prefill_time(256, 0) > 0 and tiny.decode_max_batch == 8
    # Measured from the embedded default (SmolLM2-135M-Instruct): its KV per token is
    # 30 layers x K,V x 3 KV heads x 64 dims x 4 bytes, and a cached prefix is cheaper.
    smol = load_profile("smollm2_cpu")
    assert smol.kv_bytes_per_token == 30 * 2 * 3 * 64 * 4
    assert 0 < smol.prefill_time(512, 448) < smol.prefill_time(512, 0)
    with pytest.raises(FileNotFoundError, match="llama3_70b_a800"):
        load_profile("nope")
    doc = json.loads(
        (Path(__file__).parents[3] / "mooncake_core/sim/profiles/llama3_70b_a800.json").read_text()
    )
    del doc["decode"]
    p = tmp_path / "broken.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="missing field 'decode'"):
        load_profile(p)
