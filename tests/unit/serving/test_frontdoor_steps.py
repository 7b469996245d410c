"""The front door's request path, step by step: the sans-IO pieces exactly, and the
whole path over fake workers (no network): EOS, KV-full rejection, accounting."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from mooncake_core.conductor import (
    Conductor,
    ConductorOptions,
    DecodeStepModel,
    NetworkModel,
    PrefillTimeModel,
    ScheduleRequest,
)
from mooncake_core.conductor.decision import Decision
from mooncake_core.conductor.hashing import BlockHasher
from mooncake_core.conductor.service.completion import (
    ChunkBuilder,
    CompletionChunk,
    CompletionRequest,
    fetch_keys,
    first_is_last,
    prefill_request,
    prompt_tokens,
)
from mooncake_core.conductor.service.frontdoor import FrontDoor, Rejected, ServingError
from mooncake_core.conductor.service.links import WorkerLink
from mooncake_core.config.models import ConductorConfig, HashingConfig
from mooncake_core.rpc import worker_pb2 as pb
from mooncake_core.worker.tokenizer import BOS, EOS, ByteTokenizer


def conductor() -> Conductor:
    return Conductor(
        ConductorConfig(policy="round_robin", admission="none"),
        ["p0"],
        {"d0": 4},
        hashing=HashingConfig(block_size=4),
        prefill_model=PrefillTimeModel((0.0, 0.001, 0.0, 0.0)),
        decode_model=DecodeStepModel((0.01, 0.01, 0.0)),
        network=NetworkModel(default_bandwidth_bps=1e6),
        options=ConductorOptions(bytes_per_token=100),
    )


def decision(**kw: Any) -> Decision:
    d = conductor().schedule(ScheduleRequest("r1", (11, 12, 13), 12, 4), 0.0)
    return dataclasses.replace(d, **kw)


def test_prompt_tokens_text_gets_bos_and_ids_are_checked() -> None:
    tok = ByteTokenizer()
    assert prompt_tokens(CompletionRequest(prompt="hi"), tok, 259, None) == [BOS, 104, 105]
    assert prompt_tokens(CompletionRequest(token_ids=(1, 2)), tok, 3, None) == [1, 2]
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 3\)"):
        prompt_tokens(CompletionRequest(token_ids=(1, 3)), tok, 3, None)
    # prompt 3 + max_tokens 2 = 5: fits 5 exactly, not 4
    req = CompletionRequest(prompt="hi", max_tokens=2)
    assert prompt_tokens(req, tok, 259, 5) == [BOS, 104, 105]
    with pytest.raises(ValueError, match=r"prompt \(3 tokens\) \+ max_tokens \(2\) exceeds"):
        prompt_tokens(req, tok, 259, 4)


def test_fetch_keys_only_when_the_reused_prefix_is_not_all_local() -> None:
    keys = (11, 12, 13)
    assert fetch_keys(decision(prefix_blocks=2, local_blocks=0), keys) == (11, 12)
    assert fetch_keys(decision(prefix_blocks=2, local_blocks=2), keys) == ()
    assert fetch_keys(decision(prefix_blocks=0, local_blocks=0), keys) == ()


def test_prefill_request_targets_the_decode_reservation() -> None:
    d = decision(prefix_blocks=1, local_blocks=0)
    reserved = pb.PrepareReply(
        segment="seg", seq_id="7", blocks=[4, 5], block_nbytes=64, layer_nbytes=16
    )
    req = CompletionRequest(token_ids=(1, 2, 3), max_tokens=4, temperature=0.5, seed=9)
    r = prefill_request(
        d, (11, 12), [1, 2, 3], req, reserved, store_kv=True, cpp_peer="", cpp_chunk_tokens=8
    )
    assert (r.request_id, list(r.tokens), list(r.fetch_keys), r.fetch_source) == (
        "r1",
        [1, 2, 3],
        [11],
        "",
    )
    t = r.target
    assert (t.instance, t.segment, t.seq_id, list(t.blocks)) == ("d0", "seg", "7", [4, 5])
    assert (t.block_nbytes, t.layer_nbytes) == (64, 16)
    s = r.sampling
    assert (s.max_tokens, s.temperature, s.seed, s.stop_at_eos) == (4, 0.5, 9, False)
    assert (r.store_kv, r.cpp_peer, r.cpp_chunk_tokens) == (True, "", 8)


def test_first_is_last_on_one_token_or_the_models_eos() -> None:
    one = CompletionRequest(prompt="a", max_tokens=1)
    stop = CompletionRequest(prompt="a", max_tokens=5, stop_at_eos=True)
    go_on = CompletionRequest(prompt="a", max_tokens=5)
    assert first_is_last(one, 65, eos=2)
    assert first_is_last(stop, 2, eos=2) and not first_is_last(stop, EOS, eos=2)
    assert not first_is_last(go_on, 2, eos=2)


def test_chunk_builder_never_splits_a_character_and_counts_on_the_last() -> None:
    rep = pb.PrefillReply(first_token=0xC3, reused_tokens=4, computed_tokens=2)
    b = ChunkBuilder("r1", "p0", "d0", ByteTokenizer(), rep)
    first = b.first(0xC3, 0.5, last=False)  # first byte of "é"
    assert (first.text, first.index, first.ttft_s, first.reused_tokens) == ("", 0, 0.5, None)
    last = b.next(0xA9, 1, last=True, tbt=0.01)
    assert last == CompletionChunk(
        "r1", 0xA9, "é", 1, True, "p0", "d0", tbt_s=0.01, reused_tokens=4, computed_tokens=2
    )


class _RpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return "pool full"


class _FakeWorker:
    """The four RPCs of the request path; ``tokens`` are what Admit streams."""

    def __init__(self, first: int, tokens: list[int], prepare_error: Any = None) -> None:
        self.first, self.tokens, self.prepare_error = first, tokens, prepare_error
        self.calls: list[str] = []

    async def Prepare(self, req: pb.PrepareRequest, **_: Any) -> pb.PrepareReply:
        self.calls.append("Prepare")
        if self.prepare_error is not None:
            raise self.prepare_error
        return pb.PrepareReply(segment="s", seq_id="3", blocks=[0, 1], block_nbytes=8)

    async def Prefill(self, req: pb.PrefillRequest, **_: Any) -> pb.PrefillReply:
        self.calls.append("Prefill")
        return pb.PrefillReply(first_token=self.first, computed_tokens=len(req.tokens))

    async def Admit(self, req: pb.AdmitRequest, **_: Any) -> AsyncIterator[pb.TokenEvent]:
        self.calls.append("Admit")
        for i, t in enumerate(self.tokens, 1):
            yield pb.TokenEvent(token=t, index=i, finished=i == len(self.tokens))

    async def Cancel(self, req: pb.CancelRequest, **_: Any) -> pb.CancelReply:
        self.calls.append("Cancel")
        return pb.CancelReply()


def front_door(worker: _FakeWorker, eos_token: int | None = None) -> FrontDoor:
    links = {}
    for name, role in (("p0", "prefill"), ("d0", "decode")):
        link = WorkerLink(name, role, "127.0.0.1:9", None)  # never dialled
        link.stub = worker  # type: ignore[assignment]
        links[name] = link
    return FrontDoor(
        conductor(), links, BlockHasher(HashingConfig(block_size=4)), eos_token=eos_token
    )


def serve(
    worker: _FakeWorker, req: CompletionRequest, eos_token: int | None = None
) -> tuple[FrontDoor, list[CompletionChunk] | Exception]:
    """One request through a front door over ``worker`` (built on the loop: the links'
    channels need one); the chunks, or what the request raised."""

    async def go() -> tuple[FrontDoor, list[CompletionChunk] | Exception]:
        fd = front_door(worker, eos_token)
        try:
            return fd, [c async for c in fd.complete(req, "r1")]
        except Exception as exc:
            return fd, exc
        finally:
            for link in fd.links.values():
                await link.channel.close(None)

    return asyncio.run(go())


def test_the_path_stops_at_the_models_eos_not_the_byte_tokenizers() -> None:
    req = CompletionRequest(prompt="ab", max_tokens=4, stop_at_eos=True)
    # The model's EOS is 5: prefill's token 5 ends the request.
    worker = _FakeWorker(first=5, tokens=[])
    fd, chunks = serve(worker, req, eos_token=5)
    assert isinstance(chunks, list)
    assert [(c.token, c.finished) for c in chunks] == [(5, True)]
    assert worker.calls == ["Prepare", "Prefill", "Admit"]
    # Default: the tokenizer's EOS, and 5 is an ordinary token; the worker streams on.
    worker = _FakeWorker(first=5, tokens=[66, 67, 68])
    fd, chunks = serve(worker, req)
    assert fd.eos_token == EOS and isinstance(chunks, list)
    assert [(c.token, c.index, c.finished) for c in chunks] == [
        (5, 0, False),
        (66, 1, False),
        (67, 2, False),
        (68, 3, True),
    ]
    assert chunks[-1].computed_tokens == 3 and chunks[0].ttft_s is not None
    st = fd.stats
    assert (st.requests, st.completed, st.failed, st.computed_tokens) == (1, 1, 0, 3)
    d0 = fd.conductor.snapshot(0.0).decode[0]
    assert (d0.batch, d0.reserved) == (0, 0)  # done: the slot is free


def test_a_full_decode_pool_is_a_429_and_the_conductor_forgets_the_request() -> None:
    worker = _FakeWorker(1, [], prepare_error=_RpcError(grpc.StatusCode.RESOURCE_EXHAUSTED))
    fd, err = serve(worker, CompletionRequest(prompt="ab", max_tokens=4))
    assert isinstance(err, Rejected)
    assert (err.reason, err.retry_after_s) == ("decode_kv_full", 1.0)
    assert err.detail == "RESOURCE_EXHAUSTED: pool full"
    assert worker.calls == ["Prepare", "Cancel"]
    st = fd.stats
    assert (st.requests, st.rejected, st.kv_full, st.by_reason) == (1, 1, 1, {"decode_kv_full": 1})
    snap = fd.conductor.snapshot(0.0)
    assert (snap.prefill[0].queued, snap.prefill[0].running) == (0, 0)
    assert (snap.decode[0].batch, snap.decode[0].reserved) == (0, 0)
    assert not fd._fifo["p0"]


def test_a_decision_naming_an_unlinked_worker_fails_and_is_forgotten() -> None:
    # The Conductor knows d0 and d1 but the front door has a connection to d1 only (a
    # worker whose link went away) and the decision names d0: the request fails, is
    # counted, and the Conductor and the prefill FIFO forget it instead of holding its
    # reservation for good.
    worker = _FakeWorker(1, [2])

    async def go() -> tuple[FrontDoor, Exception | None]:
        c = Conductor(
            ConductorConfig(policy="round_robin", admission="none"),
            ["p0"],
            {"d0": 4, "d1": 4},
            hashing=HashingConfig(block_size=4),
            prefill_model=PrefillTimeModel((0.0, 0.001, 0.0, 0.0)),
            decode_model=DecodeStepModel((0.01, 0.01, 0.0)),
        )
        links = {}
        for name, role in (("p0", "prefill"), ("d1", "decode")):
            link = WorkerLink(name, role, "127.0.0.1:9", None)  # never dialled
            link.stub = worker  # type: ignore[assignment]
            links[name] = link
        fd = FrontDoor(c, links, BlockHasher(HashingConfig(block_size=4)))
        try:
            [x async for x in fd.complete(CompletionRequest(prompt="ab", max_tokens=2), "r1")]
        except Exception as exc:
            return fd, exc
        finally:
            for link in links.values():
                await link.channel.close(None)
        return fd, None

    fd, err = asyncio.run(go())
    assert isinstance(err, ServingError) and "no connection to worker 'd0'" in str(err), err
    assert worker.calls == []
    assert (fd.stats.requests, fd.stats.failed) == (1, 1)
    snap = fd.conductor.snapshot(0.0)
    assert snap.in_flight == 0
    assert (snap.prefill[0].queued, snap.decode[0].reserved) == (0, 0)
    assert not fd._fifo.get("p0")
