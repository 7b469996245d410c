"""Prefill side of a request: Store prefix fetch, incremental prefill, layer-wise store, KV stream.

Runs on the worker's single engine thread (the engine is not thread-safe); everything
that moves bytes is handed to the Transfer Engine's threads (KV stream) or the Store
bridge's thread (layer-wise store), so copying layer ``l`` overlaps computing layer
``l+1``. See ``docs/serving.md`` ("Prefill instance").
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from mooncake_core.transfer import Region, RemoteSegment, TransferEngine
from mooncake_core.worker.engine import InferenceEngine
from mooncake_core.worker.kv_stream import KVStream, StreamTarget
from mooncake_core.worker.kvcache import PagedKVCache
from mooncake_core.worker.results import LayerKVEvent
from mooncake_core.worker.sampling import SamplingParams

__all__ = ["LayerStoreSession", "PrefillJob", "PrefillOutcome", "PrefillRunner", "PrefixStore"]


class LayerStoreSession(Protocol):
    """One prefill's layer-wise store: fed layer events, then finished."""

    def layer(self, event: LayerKVEvent) -> None:
        """Queue the layer's bytes of the complete new blocks for the Store."""

    def finish(self, timeout: float) -> tuple[int, float]:
        """Wait for the writes; return (blocks stored, seconds waited)."""

    def abort(self) -> None:
        """Drop what is not written yet (the prefill failed)."""


class PrefixStore(Protocol):
    """The worker's view of the Store for KV blocks (see ``service_store.py``)."""

    def fetch(self, keys: Sequence[int], cache: PagedKVCache) -> int:
        """Fetch the leading ``keys`` missing from ``cache`` into it; return blocks fetched."""

    def begin_layers(self, cache: PagedKVCache) -> LayerStoreSession:
        """Start the layer-wise store of one prefill."""


@dataclass(frozen=True, slots=True)
class PrefillJob:
    """What the conductor asked this prefill instance to do for one request.

    Attributes:
        request_id: the request.
        tokens: prompt token ids.
        sampling: sampling parameters (the first token is sampled here).
        fetch_keys: leading prefix block keys to fetch from the Store first.
        target: the decode instance's reserved blocks, or None to keep the KV local.
        store_kv: store each new complete block to the Store, layer by layer.
    """

    request_id: str
    tokens: tuple[int, ...]
    sampling: SamplingParams
    fetch_keys: tuple[int, ...] = ()
    target: StreamTarget | None = None
    store_kv: bool = True


@dataclass(frozen=True, slots=True)
class PrefillOutcome:
    """Result and timings of one prefill (seconds)."""

    first_token: int
    reused_tokens: int
    computed_tokens: int
    fetched_blocks: int
    stored_blocks: int
    fetch_s: float
    compute_s: float
    stream_wait_s: float
    store_wait_s: float


@dataclass(slots=True)
class _Counters:
    prefills: int = 0
    fetched_blocks: int = 0
    stored_blocks: int = 0
    streamed_bytes: int = 0
    failures: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)


class PrefillRunner:
    """Executes :class:`PrefillJob` s on one engine (call from the engine thread only).

    Args:
        engine: the instance's inference engine.
        transfer: the worker's Transfer Engine (for the KV stream).
        store: the Store bridge, or None (no prefix fetch, no layer-wise store).
        io_timeout_s: longest wait for the last KV / Store writes.
    """

    def __init__(
        self,
        engine: InferenceEngine,
        transfer: TransferEngine,
        store: PrefixStore | None = None,
        *,
        io_timeout_s: float = 30.0,
    ) -> None:
        self.engine = engine
        self.transfer = transfer
        self.store = store
        self.io_timeout_s = io_timeout_s
        self.region: Region = transfer.register_memory(engine.cache.pool_view())
        self._segments: dict[str, RemoteSegment] = {}
        self.counters = _Counters()

    def _segment(self, name: str) -> RemoteSegment:
        seg = self._segments.get(name)
        if seg is None:
            seg = self.transfer.open_segment(name)
            self._segments[name] = seg
        return seg

    def fetch_prefix(self, keys: Sequence[int]) -> tuple[int, int, float]:
        """Hotspot migration: fetch ``keys`` from the Store and keep them cached.

        Returns:
            (blocks fetched, blocks already cached, seconds).
        """
        t0 = time.perf_counter()
        cached = self.engine.cache.match(keys)
        fetched = self.store.fetch(keys, self.engine.cache) if self.store else 0
        self.counters.fetched_blocks += fetched
        return fetched, cached, time.perf_counter() - t0

    def run(self, job: PrefillJob) -> PrefillOutcome:
        """Fetch, prefill (storing and streaming layer by layer), wait for the writes.

        Raises:
            ValueError / CacheFullError: from the engine (nothing is left allocated);
            KVStreamError: the KV did not reach the decode instance.
        """
        eng, cache = self.engine, self.engine.cache
        t0 = time.perf_counter()
        fetched = 0
        if job.fetch_keys and self.store is not None:
            fetched = self.store.fetch(job.fetch_keys, cache)
        t1 = time.perf_counter()
        stream: KVStream | None = None
        if job.target is not None:
            stream = KVStream(
                self.transfer,
                self.region,
                self._segment(job.target.segment),
                job.target,
                block_size=cache.block_size,
                layers=eng.config.layers,
                block_nbytes=cache.block_nbytes,
                layer_nbytes=cache.layer_nbytes,
            )
        session = self.store.begin_layers(cache) if job.store_kv and self.store else None

        def hook(ev: LayerKVEvent) -> None:
            if stream is not None:
                # The reused prefix is whole blocks before ``start``: send them once.
                stream.send_prefix(cache.block_table(ev.seq_id), ev.start // cache.block_size)
                stream.send_layer(ev)
            if session is not None:
                session.layer(ev)

        seq: str | None = None
        try:
            r = eng.prefill(list(job.tokens), layer_hook=hook, sampling=job.sampling)
            seq = r.seq_id
            t2 = time.perf_counter()
            stream_wait = stream.finish(self.io_timeout_s) if stream is not None else 0.0
            stored, store_wait = (
                session.finish(self.io_timeout_s) if session is not None else (0, 0.0)
            )
        except BaseException:
            self.counters.failures += 1
            if stream is not None:
                stream.close()
            if session is not None:
                session.abort()
            raise
        finally:
            if seq is not None:
                eng.release(seq)  # complete blocks stay in the local prefix cache
        c = self.counters
        c.prefills += 1
        c.fetched_blocks += fetched
        c.stored_blocks += stored
        c.streamed_bytes += stream.bytes if stream is not None else 0
        return PrefillOutcome(
            first_token=r.first_token,
            reused_tokens=r.reused_tokens,
            computed_tokens=r.computed_tokens,
            fetched_blocks=fetched,
            stored_blocks=stored,
            fetch_s=t1 - t0,
            compute_s=t2 - t1,
            stream_wait_s=stream_wait,
            store_wait_s=store_wait,
        )
