"""The prefill worker's Store bridge: prefix fetch into the paged cache, layer-wise store.

**Object layout (one object per block and layer).** The Store's objects are immutable
and written whole (``PutStart`` -> bytes -> ``PutEnd``), so a block object that grows
layer by layer cannot exist. To store KV *as each layer is computed* (overlapped with the
next layer's compute), every layer slice of a complete block is its own object:

```
kv/<model>/<key hex16>/L<l>      bytes = cache.layer_view(block, l)   (layer_nbytes)
```

``kv/<model>/<key hex16>`` is ``block_store_key`` (docs/worker.md); the ``/L<l>`` suffix
names the layer. The concatenation of ``L0..L(n-1)`` in order is exactly the block
object of docs/worker.md (``layer_view(b, l)`` sits at ``l * layer_nbytes``), and a CPP
stage owning layers ``[a, b)`` fetches exactly its own objects. A block counts as held by
the Store only when all its layer objects are there (fetch checks every layer).

**Zero copy.** The paged pool is registered with the Store client once
(``register_buffer``); puts read straight from ``layer_view`` addresses and gets write
straight into the blocks ``begin_import`` took, so no staging copy happens in Python.

**Threads.** All Store client calls run on one bridge thread (the client is used from
one thread only). The engine thread enqueues a layer's puts from the layer hook and goes
on computing; ``finish`` waits for the session's puts; ``fetch`` waits for its gets
(the fetch is on the request's critical path anyway).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from mooncake_core.conductor.hashing import block_store_key
from mooncake_core.config.models import ClusterConfig
from mooncake_core.store.errors import ConflictError, StoreError
from mooncake_core.worker.engine import InferenceEngine
from mooncake_core.worker.kvcache import PagedKVCache
from mooncake_core.worker.results import LayerKVEvent

__all__ = ["StoreBridge", "layer_object_key", "store_bridge_factory"]


def layer_object_key(model: str, key: int, layer: int) -> str:
    """Store object name of one layer of one block: ``kv/<model>/<hex16>/L<layer>``."""
    return f"{block_store_key(model, key)}/L{layer}"


class _Session:
    """One prefill's layer-wise store (see :class:`StoreBridge.begin_layers`)."""

    def __init__(self, bridge: StoreBridge, cache: PagedKVCache) -> None:
        self._bridge = bridge
        self._cache = cache
        self._futures: list[Future[int]] = []
        self._blocks: set[int] = set()
        self._aborted = False

    def layer(self, event: LayerKVEvent) -> None:
        keys, ptrs = [], []
        for block, key in zip(event.blocks, event.keys, strict=True):
            if key is None:  # the partial tail block is never stored
                continue
            keys.append(layer_object_key(self._bridge.model, key, event.layer))
            ptrs.append(self._bridge.layer_address(block, event.layer))
            self._blocks.add(key)
        if keys:
            self._futures.append(self._bridge.submit_puts(keys, ptrs))

    def finish(self, timeout: float) -> tuple[int, float]:
        t0 = time.perf_counter()
        for f in self._futures:
            f.result(timeout=max(0.0, timeout - (time.perf_counter() - t0)))
        return len(self._blocks), time.perf_counter() - t0

    def abort(self) -> None:
        # Puts already queued still run (their bytes are valid); nothing else to undo:
        # a block whose layers did not all arrive is never fetched as a whole.
        self._aborted = True
        for f in self._futures:
            f.cancel()


class StoreBridge:
    """Store access of one prefill worker (implements ``service_prefill.PrefixStore``).

    Args:
        client: a set-up :class:`mooncake_core.store.client.Client` (pure user).
        cache: the worker's paged cache (its pool is registered with the client).
        model: model name (object key namespace).
    """

    def __init__(self, client: Any, cache: PagedKVCache, model: str) -> None:
        self.client = client
        self.model = model
        self._cache = cache
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="store-bridge")
        pool = cache.pool_view()
        self._base = self._thread.submit(client.register_buffer, pool).result()
        self._S = cache.layer_nbytes
        self._B = cache.block_nbytes
        self._nlayers = self._B // self._S
        self.put_objects = 0
        self.put_existing = 0
        self.put_failed = 0
        self.got_blocks = 0

    def layer_address(self, block: int, layer: int) -> int:
        """Address of one layer slice of one block in the registered pool."""
        return self._base + block * self._B + layer * self._S

    def submit_puts(self, keys: list[str], ptrs: list[int]) -> Future[int]:
        """Queue puts of layer objects; the future gives how many were written."""
        return self._thread.submit(self._put, keys, ptrs)

    def _put(self, keys: list[str], ptrs: list[int]) -> int:
        res = self.client.batch_put_from(keys, ptrs, [self._S] * len(keys))
        ok = 0
        for r in res:
            if r is None:
                ok += 1
            elif isinstance(r, ConflictError):
                self.put_existing += 1  # another prefill stored this prefix already
            else:
                self.put_failed += 1
        self.put_objects += ok
        return ok

    def begin_layers(self, cache: PagedKVCache) -> _Session:
        """Start the layer-wise store of one prefill."""
        return _Session(self, cache)

    def fetch(self, keys: Sequence[int], cache: PagedKVCache) -> int:
        """Fetch the leading blocks of ``keys`` missing from ``cache`` into it.

        Blocks after the first one the Store cannot supply whole are not used (a prefix
        must be contiguous). Returns the number of blocks fetched.
        """
        taken = cache.begin_import(list(keys))
        if not taken:
            return 0
        arrived: list[int] = []
        try:
            arrived = self._thread.submit(self._get, list(keys), taken).result()
        finally:
            cache.end_import(taken, ok=arrived)
        self.got_blocks += len(arrived)
        return len(arrived)

    def _get(self, keys: list[int], taken: dict[int, int]) -> list[int]:
        want = [k for k in keys if k in taken]
        names, ptrs = [], []
        for k in want:
            for layer in range(self._nlayers):
                names.append(layer_object_key(self.model, k, layer))
                ptrs.append(self.layer_address(taken[k], layer))
        try:
            res = self.client.batch_get_into(names, ptrs, [self._S] * len(names))
        except StoreError:
            return []
        arrived: list[int] = []
        # Prefix order: keys the cache already held are skipped by begin_import, so a
        # missing block ends the usable prefix.
        for i, k in enumerate(want):
            chunk = res[i * self._nlayers : (i + 1) * self._nlayers]
            if all(isinstance(n, int) and n == self._S for n in chunk):
                arrived.append(k)
            else:
                break
        return arrived

    def close(self) -> None:
        """Stop the bridge thread and close the client."""
        self._thread.shutdown(wait=True)
        self.client.close()


def store_bridge_factory(
    cluster: ClusterConfig, host: str, secret: bytes | None, *, connect_timeout_s: float = 30.0
) -> Callable[[InferenceEngine], StoreBridge]:
    """A factory for :class:`WorkerService` that connects a pure-user Store client.

    Args:
        cluster: the cluster config (master address and limits, transfer settings).
        host: address the client's data server binds to.
        secret: the cluster secret, or None.
        connect_timeout_s: how long to wait for the master.

    Raises (when called):
        UnavailableError: the master did not answer in time.
    """

    def build(engine: InferenceEngine) -> StoreBridge:
        from mooncake_core.store.client import Client
        from mooncake_core.store.client.options import ClientOptions

        master = cluster.master_target
        client = Client(
            ClientOptions(
                master=master,
                secret=secret,
                host=host,
                transfer=cluster.transfer,
                master_config=cluster.master,
                connect_timeout_s=connect_timeout_s,
                client_id=f"worker-{engine.cache.location}",
            )
        ).setup()
        return StoreBridge(client, engine.cache, cluster.model.name)

    return build
