"""CPP across processes: a prefill worker hosting pipeline stages for a layer range.

A 2-stage group is two prefill workers: the one the conductor sent the request to runs
stage 0 (layers ``[0, split)``) on its engine thread and calls the peer's
``StageForward`` for stage 1 (``[split, L)``) chunk by chunk. Only activations cross
(``[n, hidden]`` float32 as gRPC bytes; they are not KV). Stage 0 computes chunk ``c+1``
while stage 1 computes chunk ``c``:

```
leader engine:  s0(c0)  s0(c1)  s0(c2)
peer engine:            s1(c0)  s1(c1)  s1(c2) -> logits of the last token
```

Each stage keeps its layers' KV in its own paged cache and writes those layers of every
block straight into the decode worker's reserved blocks (``block*B + layer*S``, the
full-model layout) after each chunk, so the decode worker receives the same bytes as from
a single prefill. CPP prefills compute every token (no prefix reuse on this path; it is
meant for long new prompts), and they do not store KV to the Store.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch

from mooncake_core.config.models import HashingConfig, ModelConfig
from mooncake_core.transfer import (
    Batch,
    OpCode,
    Region,
    RemoteSegment,
    TransferEngine,
    TransferRequest,
    TransferState,
)
from mooncake_core.worker.cpp import PipelineStage
from mooncake_core.worker.kv_stream import KVStreamError, StreamTarget

__all__ = ["StageHost"]


class StageHost:
    """Pipeline stages of one worker, by layer range (built on first use).

    Call from the worker's engine thread only.

    Args:
        model: the full model config.
        hashing: block size and seed.
        transfer: the worker's Transfer Engine (KV writes to decode).
        num_blocks: paged cache size of each stage.
        name: instance name.
        device: torch device.
    """

    def __init__(
        self,
        model: ModelConfig,
        hashing: HashingConfig,
        transfer: TransferEngine,
        *,
        num_blocks: int,
        name: str,
        device: str | None = None,
    ) -> None:
        self.model = model
        self.hashing = hashing
        self.transfer = transfer
        self.num_blocks = num_blocks
        self.name = name
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self._stages: dict[tuple[int, int], tuple[PipelineStage, Region]] = {}
        self._open: dict[str, tuple[Batch | None, int]] = {}  # seq -> (write batch, requests)
        self._segments: dict[str, RemoteSegment] = {}
        self.chunks = 0

    def stage(self, start: int, stop: int) -> tuple[PipelineStage, Region]:
        """The stage owning layers ``[start, stop)`` (built and registered once).

        Raises:
            ValueError: an empty or out-of-model range.
        """
        if not 0 <= start < stop <= self.model.layers:
            raise ValueError(f"layer range [{start}, {stop}) is not inside 0..{self.model.layers}")
        got = self._stages.get((start, stop))
        if got is None:
            st = PipelineStage(
                self.model,
                range(start, stop),
                self.hashing,
                num_blocks=self.num_blocks,
                device=self.device,
                name=f"{self.name}/L{start}-{stop}",
            )
            got = (st, self.transfer.register_memory(st.cache.pool_view()))
            self._stages[(start, stop)] = got
        return got

    def _segment(self, name: str) -> RemoteSegment:
        seg = self._segments.get(name)
        if seg is None:
            seg = self._segments[name] = self.transfer.open_segment(name)
        return seg

    def run_chunk(
        self,
        seq_id: str,
        layers: tuple[int, int],
        start: int,
        total: int,
        keys: Sequence[int],
        inputs: torch.Tensor,
        last: bool,
        target: StreamTarget | None,
        timeout: float = 30.0,
    ) -> torch.Tensor:
        """Run one chunk through the stage; write its KV to ``target``.

        Args:
            seq_id: the request's sequence (opened by the first chunk, start 0).
            layers: the stage's range.
            start: position of the chunk's first token.
            total: prompt length.
            keys: the prompt's block keys.
            inputs: token ids ``[n]`` (first stage) or activations ``[n, hidden]``.
            last: the prompt's last chunk: finish, wait for the writes, release.
            target: the decode worker's reserved blocks, or None.

        Returns:
            Activations ``[n, hidden]``, or the last token's logits on the last stage.

        Raises:
            ValueError / CacheFullError / KVStreamError; the sequence is released on error.
        """
        st, region = self.stage(*layers)
        try:
            if start == 0:
                st.begin(seq_id, keys, 0, total)
                cap = 0
                if target is not None:
                    cap = len(target.blocks) * (layers[1] - layers[0])
                batch = self.transfer.allocate_batch(cap) if cap else None
                self._open[seq_id] = (batch, 0)
            elif seq_id not in self._open:
                raise KeyError(f"sequence {seq_id!r} has no open stage state")
            out = st.forward(seq_id, start, inputs)
            self.chunks += 1
            end = start + int(inputs.shape[0])
            if target is not None:
                self._write(st, region, seq_id, start, end, layers, target)
            if last:
                st.finish(seq_id, total, keys)
                self._wait(seq_id, timeout, target)
                st.release(seq_id)
            return out
        except BaseException:
            self.abort(seq_id, layers)
            raise

    def _write(
        self,
        st: PipelineStage,
        region: Region,
        seq_id: str,
        start: int,
        end: int,
        layers: tuple[int, int],
        target: StreamTarget,
    ) -> None:
        batch, n = self._open[seq_id]
        assert batch is not None
        bs = self.hashing.block_size
        S = st.cache.layer_nbytes
        B_local = st.cache.block_nbytes
        if target.layer_nbytes != S:
            raise KVStreamError(f"decode layer slices are {target.layer_nbytes} B, ours {S} B")
        table = st.cache.block_table(seq_id)
        first, stop = start // bs, -(-end // bs)
        seg = self._segment(target.segment)
        reqs = [
            TransferRequest(
                OpCode.WRITE,
                region,
                table[i] * B_local + (layer - layers[0]) * S,
                seg,
                target.blocks[i] * target.block_nbytes + layer * S,
                S,
            )
            for layer in range(*layers)
            for i in range(first, stop)
        ]
        self.transfer.submit(batch, reqs)
        self._open[seq_id] = (batch, n + len(reqs))

    def _wait(self, seq_id: str, timeout: float, target: StreamTarget | None) -> None:
        batch, _ = self._open.pop(seq_id)
        if batch is None:
            return
        try:
            sts = self.transfer.wait(batch, timeout=timeout)
            bad = [s for s in sts if s.state is not TransferState.COMPLETED]
            if bad:
                where = target.segment if target else "?"
                raise KVStreamError(f"{len(bad)} CPP KV writes to {where} did not complete")
        finally:
            self.transfer.free_batch(batch)

    def abort(self, seq_id: str, layers: tuple[int, int]) -> None:
        """Forget a failed sequence (idempotent)."""
        got = self._stages.get(layers)
        entry = self._open.pop(seq_id, None)
        if entry is not None and entry[0] is not None:
            self.transfer.wait(entry[0], timeout=30.0)
            self.transfer.free_batch(entry[0])
        if got is not None:
            with contextlib.suppress(KeyError):
                got[0].release(seq_id)
