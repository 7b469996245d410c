"""KV streaming from a prefill instance into a decode instance's reserved blocks.

The decode worker registers its whole paged-KV pool with its Transfer Engine as the
segment ``<engine>/kv`` and, for each request, reserves blocks (``reserve_kv``) and tells
the conductor their ids. The prefill worker WRITEs block bytes from its own registered
pool straight into those offsets, layer by layer as the layers are computed:

```
prefill pool (registered region)              decode pool (segment "host:port/kv")
block p_i: [L0 K|V][L1 K|V]...                block d_i: [L0 K|V][L1 K|V]...
    layer l of block i:  offset p_i*B + l*S  --WRITE-->  offset d_i*B + l*S   (S bytes)
    reused prefix block i (already cached):  p_i*B      --WRITE-->  d_i*B     (B bytes)
```

``B = block_nbytes``, ``S = layer_nbytes``; block ``i`` covers tokens ``[i*bs, (i+1)*bs)``.
Both pools have the same layout because both workers run the same model config. Writes
are submitted asynchronously from the layer hook (the Transfer Engine's own threads move
the bytes, so layer ``l`` travels while layer ``l+1`` computes); :meth:`KVStream.finish`
waits for all of them. Nothing here touches the engine: the hook only reads block ids
from the :class:`~mooncake_core.worker.results.LayerKVEvent`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from mooncake_core.transfer import (
    OpCode,
    Region,
    RemoteSegment,
    TransferEngine,
    TransferRequest,
    TransferState,
)
from mooncake_core.worker.results import LayerKVEvent

__all__ = ["KVStream", "KVStreamError", "StreamTarget"]


class KVStreamError(RuntimeError):
    """A KV write to the decode instance failed (the reservation must be aborted)."""


@dataclass(frozen=True, slots=True)
class StreamTarget:
    """Where one request's KV goes: the decode instance's reserved blocks.

    Attributes:
        segment: the decode pool's segment name (``host:port/kv``).
        blocks: reserved block ids in token order (``ceil(tokens / block_size)``).
        block_nbytes: bytes per block (must equal the prefill pool's).
        layer_nbytes: bytes per layer inside a block.
    """

    segment: str
    blocks: tuple[int, ...]
    block_nbytes: int
    layer_nbytes: int


class KVStream:
    """Writes one request's KV into a decode instance while prefill computes.

    Args:
        engine: the prefill worker's Transfer Engine.
        local: the prefill pool registered with ``engine``.
        segment: the opened decode segment.
        target: the reserved blocks.
        block_size: tokens per block.
        layers: model layers (for the batch capacity).
        block_nbytes: local block size in bytes (checked against the target's).
        layer_nbytes: local layer slice size in bytes.

    Raises:
        KVStreamError: the two pools do not have the same block layout.
    """

    def __init__(
        self,
        engine: TransferEngine,
        local: Region,
        segment: RemoteSegment,
        target: StreamTarget,
        *,
        block_size: int,
        layers: int,
        block_nbytes: int,
        layer_nbytes: int,
    ) -> None:
        if (target.block_nbytes, target.layer_nbytes) != (block_nbytes, layer_nbytes):
            raise KVStreamError(
                f"decode pool blocks are {target.block_nbytes} B / {target.layer_nbytes} B "
                f"per layer, this prefill pool's are {block_nbytes} / {layer_nbytes}: "
                "the two workers run different model configs"
            )
        self._engine = engine
        self._local = local
        self._segment = segment
        self._target = target
        self._bs = block_size
        self._B = block_nbytes
        self._S = layer_nbytes
        # Worst case: every block whole (reused prefix) plus every block once per layer.
        self._batch = engine.allocate_batch(len(target.blocks) * (layers + 1))
        self._prefix_sent = False
        self.requests = 0
        self.bytes = 0

    def send_prefix(self, local_blocks: Sequence[int], count: int) -> None:
        """Write the first ``count`` blocks whole (the reused prefix, already cached).

        Args:
            local_blocks: the sequence's local block table.
            count: reused complete blocks at the head of the prompt.

        Raises:
            KVStreamError: more blocks than the reservation holds.
        """
        if self._prefix_sent:
            return
        self._prefix_sent = True
        if count > len(self._target.blocks):
            raise KVStreamError(
                f"{count} prefix blocks exceed the {len(self._target.blocks)} reserved"
            )
        reqs = [
            TransferRequest(
                OpCode.WRITE, self._local, p * self._B, self._segment, d * self._B, self._B
            )
            for p, d in zip(local_blocks[:count], self._target.blocks[:count], strict=True)
        ]
        self._submit(reqs)

    def send_layer(self, event: LayerKVEvent) -> None:
        """Write one layer of the blocks that ``event`` covers (called from the layer hook).

        Raises:
            KVStreamError: the event covers blocks beyond the reservation.
        """
        first = event.start // self._bs
        last = first + len(event.blocks)
        if last > len(self._target.blocks):
            raise KVStreamError(
                f"layer {event.layer} covers blocks {first}..{last - 1}, "
                f"only {len(self._target.blocks)} reserved"
            )
        off = event.layer * self._S
        reqs = [
            TransferRequest(
                OpCode.WRITE,
                self._local,
                p * self._B + off,
                self._segment,
                d * self._B + off,
                self._S,
            )
            for p, d in zip(event.blocks, self._target.blocks[first:last], strict=True)
        ]
        self._submit(reqs)

    def _submit(self, reqs: list[TransferRequest]) -> None:
        if reqs:
            self._engine.submit(self._batch, reqs)
            self.requests += len(reqs)
            self.bytes += sum(r.length for r in reqs)

    def finish(self, timeout: float) -> float:
        """Wait for every write; return the seconds spent waiting.

        Raises:
            KVStreamError: a write failed or did not finish within ``timeout``.
        """
        t0 = time.perf_counter()
        try:
            statuses = self._engine.wait(self._batch, timeout=timeout)
            bad = [s for s in statuses if s.state is not TransferState.COMPLETED]
            if bad:
                raise KVStreamError(
                    f"{len(bad)} of {len(statuses)} KV writes to {self._target.segment} "
                    f"did not complete: {bad[0].state.name} {bad[0].reason or ''}".rstrip()
                )
        finally:
            self.close()
        return time.perf_counter() - t0

    def close(self) -> None:
        """Free the batch (waits briefly for writes still in flight)."""
        if self._batch is None:
            return
        try:
            self._engine.free_batch(self._batch)
        except Exception:
            # Writes still WAITING (an aborted request): wait them out, then free.
            self._engine.wait(self._batch, timeout=30.0)
            self._engine.free_batch(self._batch)
        self._batch = None  # type: ignore[assignment]
