"""Upstream's CPU tensor API of ``MooncakeDistributedStore`` (a mixin of the store).

Tensors are stored in our own layout (:mod:`mooncake_core.store.client.tensor`: a small
header, then the bytes), so ``put_tensor_from`` / ``get_tensor_into`` buffers hold that
layout, as upstream's hold its ``[TensorMetadata][data]``. Tensor-parallel shards are
stored under ``{key}_tp_{rank}`` as upstream does. CUDA tensors are refused (-600, logged):
there is no CUDA transport here (docs/compat.md). Every call returns upstream's codes.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mooncake_core.store.client import tensor as client_tensor
from mooncake_core.store.errors import StoreError

from ._codes import UpstreamCode, to_code
from ._replicate import ReplicateConfig

if TYPE_CHECKING:
    import torch

log = logging.getLogger("mooncake.store")
_INVALID = int(UpstreamCode.INVALID_PARAMS)
_NOT_SUPPORTED = int(UpstreamCode.NOT_SUPPORTED)


def tp_key(key: str, rank: int) -> str:
    """Upstream's shard key name."""
    return f"{key}_tp_{rank}"


def _encode(tensor: Any) -> bytes | int:
    try:
        return client_tensor.encode(tensor)
    except StoreError as exc:
        log.error("%s", exc.message)
        return to_code(exc)


def _decode(key: str, data: bytes) -> torch.Tensor | None:
    try:
        return client_tensor.decode(key, data)
    except StoreError as exc:
        log.error("%s", exc.message)
        return None


def _shards(tensor: Any, tp_size: int, split_dim: int) -> list[Any] | int:
    import torch

    if not isinstance(tensor, torch.Tensor) or tp_size < 1 or tensor.dim() == 0:
        return _INVALID
    if not -tensor.dim() <= split_dim < tensor.dim() or tensor.shape[split_dim] < tp_size:
        return _INVALID
    parts = list(torch.chunk(tensor, tp_size, dim=split_dim))
    if len(parts) != tp_size:
        return _INVALID
    return [p.contiguous() for p in parts]


class TensorOps:
    """The tensor methods; the store supplies the byte-level calls below."""

    if TYPE_CHECKING:

        def _put(
            self, key: str, value: Any, config: ReplicateConfig | None, upsert: bool
        ) -> int: ...
        def _from(
            self, key: str, ptr: int, size: int, cfg: ReplicateConfig | None, upsert: bool
        ) -> int: ...
        def get(self, key: str) -> bytes: ...
        def get_into(self, key: str, buffer_ptr: int, size: int) -> int: ...

    # ---------------------------------------------------------------- whole tensors
    def _put_tensor(self, key: str, tensor: Any, cfg: ReplicateConfig | None, upsert: bool) -> int:
        data = _encode(tensor)
        if isinstance(data, int):
            return data
        return self._put(key, data, cfg, upsert)

    def put_tensor(self, key: str, tensor: Any) -> int:
        """Store a CPU tensor (an existing key is kept, 0); CUDA tensors -600."""
        return self._put_tensor(key, tensor, None, False)

    def upsert_tensor(self, key: str, tensor: Any) -> int:
        return self._put_tensor(key, tensor, None, True)

    def pub_tensor(self, key: str, tensor: Any, config: ReplicateConfig | None = None) -> int:
        """:meth:`put_tensor` with a :class:`ReplicateConfig`."""
        return self._put_tensor(key, tensor, config, False)

    def upsert_pub_tensor(
        self, key: str, tensor: Any, config: ReplicateConfig | None = None
    ) -> int:
        return self._put_tensor(key, tensor, config, True)

    def _batch(
        self,
        keys: Sequence[str],
        tensors: Sequence[Any],
        cfg: ReplicateConfig | None,
        upsert: bool,
    ) -> list[int]:
        if len(keys) != len(tensors):
            return [_INVALID] * len(keys)
        return [self._put_tensor(k, t, cfg, upsert) for k, t in zip(keys, tensors, strict=True)]

    def batch_put_tensor(self, keys: Sequence[str], tensors_list: Sequence[Any]) -> list[int]:
        return self._batch(keys, tensors_list, None, False)

    def batch_upsert_tensor(self, keys: Sequence[str], tensors_list: Sequence[Any]) -> list[int]:
        return self._batch(keys, tensors_list, None, True)

    def batch_pub_tensor(
        self,
        keys: Sequence[str],
        tensors_list: Sequence[Any],
        config: ReplicateConfig | None = None,
    ) -> list[int]:
        return self._batch(keys, tensors_list, config, False)

    def batch_upsert_pub_tensor(
        self,
        keys: Sequence[str],
        tensors_list: Sequence[Any],
        config: ReplicateConfig | None = None,
    ) -> list[int]:
        return self._batch(keys, tensors_list, config, True)

    def get_tensor(self, key: str) -> torch.Tensor | None:
        """The tensor, or None (missing, unreadable, not a tensor)."""
        data = self.get(key)
        return _decode(key, data) if data else None

    def batch_get_tensor(self, keys: Sequence[str]) -> list[torch.Tensor | None]:
        return [self.get_tensor(k) for k in keys]

    # ------------------------------------------------------------ registered buffers
    def get_tensor_into(self, key: str, buffer_ptr: int, size: int) -> torch.Tensor | None:
        """Read ``key`` into a registered buffer and return its tensor (a copy), or None."""
        n = self.get_into(key, buffer_ptr, size)
        if n <= 0:
            return None
        return _decode(key, ctypes.string_at(int(buffer_ptr), n))

    def batch_get_tensor_into(
        self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int]
    ) -> list[Any]:
        """One tensor (or None) per key; lists of different lengths: -600 per key."""
        if not len(keys) == len(buffer_ptrs) == len(sizes):
            return [_INVALID] * len(keys)
        return [
            self.get_tensor_into(k, p, n) for k, p, n in zip(keys, buffer_ptrs, sizes, strict=True)
        ]

    def put_tensor_from(self, key: str, buffer_ptr: int, size: int) -> int:
        """Store a registered buffer that holds a tensor in :meth:`get_tensor_into`'s layout."""
        return self._from(key, buffer_ptr, size, None, False)

    def upsert_tensor_from(self, key: str, buffer_ptr: int, size: int) -> int:
        return self._from(key, buffer_ptr, size, None, True)

    def _tensor_batch_from(
        self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int], upsert: bool
    ) -> list[int]:
        if not len(keys) == len(ptrs) == len(sizes):
            return [_INVALID] * len(keys)
        return [
            self._from(k, p, n, None, upsert) for k, p, n in zip(keys, ptrs, sizes, strict=True)
        ]

    def batch_put_tensor_from(
        self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int]
    ) -> list[int]:
        return self._tensor_batch_from(keys, buffer_ptrs, sizes, False)

    def batch_upsert_tensor_from(
        self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int]
    ) -> list[int]:
        return self._tensor_batch_from(keys, buffer_ptrs, sizes, True)

    # --------------------------------------------------------- tensor parallelism
    def _put_tp(
        self,
        key: str,
        tensor: Any,
        cfg: ReplicateConfig | None,
        tp_size: int,
        split_dim: int,
    ) -> int:
        if tp_size <= 1:
            return self._put_tensor(key, tensor, cfg, False)
        parts = _shards(tensor, tp_size, split_dim)
        if isinstance(parts, int):
            return parts
        for rank, part in enumerate(parts):
            rc = self._put_tensor(tp_key(key, rank), part, cfg, False)
            if rc:
                return rc
        return 0

    def put_tensor_with_tp(
        self, key: str, tensor: Any, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0
    ) -> int:
        """Split ``tensor`` into ``tp_size`` chunks along ``split_dim``, stored under
        ``{key}_tp_{rank}`` for every rank (``tp_rank`` is not used, as upstream)."""
        return self._put_tp(key, tensor, None, int(tp_size), int(split_dim))

    def pub_tensor_with_tp(
        self,
        key: str,
        tensor: Any,
        config: ReplicateConfig | None = None,
        tp_rank: int = 0,
        tp_size: int = 1,
        split_dim: int = 0,
    ) -> int:
        return self._put_tp(key, tensor, config, int(tp_size), int(split_dim))

    def batch_put_tensor_with_tp(
        self,
        base_keys: Sequence[str],
        tensors_list: Sequence[Any],
        tp_rank: int = 0,
        tp_size: int = 1,
        split_dim: int = 0,
    ) -> list[int]:
        if len(base_keys) != len(tensors_list):
            return [_INVALID] * len(base_keys)
        return [
            self._put_tp(k, t, None, int(tp_size), int(split_dim))
            for k, t in zip(base_keys, tensors_list, strict=True)
        ]

    def get_tensor_with_tp(
        self, key: str, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0
    ) -> torch.Tensor | None:
        """This rank's shard (``{key}_tp_{tp_rank}``), or the whole tensor when
        ``tp_size`` is 1."""
        return self.get_tensor(key if tp_size <= 1 else tp_key(key, int(tp_rank)))

    def batch_get_tensor_with_tp(
        self, base_keys: Sequence[str], tp_rank: int = 0, tp_size: int = 1
    ) -> list[torch.Tensor | None]:
        return [self.get_tensor_with_tp(k, tp_rank, tp_size) for k in base_keys]

    # -------------------------------------- the *_with_parallelism family (no plan)
    def _plain(self, what: str, *plans: object) -> int | None:
        if any(p is not None for p in plans):
            log.error("%s: parallelism / writer_partition plans are not supported", what)
            return _NOT_SUPPORTED
        return None

    def put_tensor_with_parallelism(
        self,
        key: str,
        tensor: Any,
        parallelism: object = None,
        config: ReplicateConfig | None = None,
        writer_partition: object = None,
    ) -> int:
        """Without a plan: :meth:`pub_tensor`; with one: -1012 (not supported)."""
        refused = self._plain("put_tensor_with_parallelism", parallelism, writer_partition)
        return refused if refused is not None else self._put_tensor(key, tensor, config, False)

    def upsert_tensor_with_parallelism(
        self,
        key: str,
        tensor: Any,
        parallelism: object = None,
        config: ReplicateConfig | None = None,
        writer_partition: object = None,
    ) -> int:
        refused = self._plain("upsert_tensor_with_parallelism", parallelism, writer_partition)
        return refused if refused is not None else self._put_tensor(key, tensor, config, True)

    def _many_plain(
        self,
        what: str,
        keys: Sequence[str],
        tensors: Sequence[Any],
        config: ReplicateConfig | None,
        upsert: bool,
        *plans: object,
    ) -> list[int]:
        refused = self._plain(what, *plans)
        if refused is not None:
            return [refused] * len(keys)
        return self._batch(keys, tensors, config, upsert)

    def batch_put_tensor_with_parallelism(
        self,
        keys: Sequence[str],
        tensors_list: Sequence[Any],
        parallelisms: object = None,
        config: ReplicateConfig | None = None,
        writer_partitions: object = None,
    ) -> list[int]:
        return self._many_plain(
            "batch_put_tensor_with_parallelism",
            keys,
            tensors_list,
            config,
            False,
            parallelisms,
            writer_partitions,
        )

    def batch_upsert_tensor_with_parallelism(
        self,
        keys: Sequence[str],
        tensors_list: Sequence[Any],
        parallelisms: object = None,
        config: ReplicateConfig | None = None,
        writer_partitions: object = None,
    ) -> list[int]:
        return self._many_plain(
            "batch_upsert_tensor_with_parallelism",
            keys,
            tensors_list,
            config,
            True,
            parallelisms,
            writer_partitions,
        )

    def _from_plain(
        self,
        what: str,
        keys: Sequence[str],
        ptrs: Sequence[int],
        sizes: Sequence[int],
        config: ReplicateConfig | None,
        upsert: bool,
        *plans: object,
    ) -> list[int]:
        refused = self._plain(what, *plans)
        if refused is not None:
            return [refused] * len(keys)
        if not len(keys) == len(ptrs) == len(sizes):
            return [_INVALID] * len(keys)
        return [
            self._from(k, p, n, config, upsert) for k, p, n in zip(keys, ptrs, sizes, strict=True)
        ]

    def put_tensor_with_parallelism_from(
        self,
        key: str,
        buffer_ptr: int,
        size: int,
        parallelism: object = None,
        config: ReplicateConfig | None = None,
        writer_partition: object = None,
    ) -> int:
        what = "put_tensor_with_parallelism_from"
        plans = (parallelism, writer_partition)
        return self._from_plain(what, [key], [buffer_ptr], [size], config, False, *plans)[0]

    def upsert_tensor_with_parallelism_from(
        self,
        key: str,
        buffer_ptr: int,
        size: int,
        parallelism: object = None,
        config: ReplicateConfig | None = None,
        writer_partition: object = None,
    ) -> int:
        what = "upsert_tensor_with_parallelism_from"
        plans = (parallelism, writer_partition)
        return self._from_plain(what, [key], [buffer_ptr], [size], config, True, *plans)[0]

    def batch_put_tensor_with_parallelism_from(
        self,
        keys: Sequence[str],
        buffer_ptrs: Sequence[int],
        sizes: Sequence[int],
        parallelisms: object = None,
        config: ReplicateConfig | None = None,
        writer_partitions: object = None,
    ) -> list[int]:
        what = "batch_put_tensor_with_parallelism_from"
        plans = (parallelisms, writer_partitions)
        return self._from_plain(what, keys, buffer_ptrs, sizes, config, False, *plans)

    def batch_upsert_tensor_with_parallelism_from(
        self,
        keys: Sequence[str],
        buffer_ptrs: Sequence[int],
        sizes: Sequence[int],
        parallelisms: object = None,
        config: ReplicateConfig | None = None,
        writer_partitions: object = None,
    ) -> list[int]:
        what = "batch_upsert_tensor_with_parallelism_from"
        plans = (parallelisms, writer_partitions)
        return self._from_plain(what, keys, buffer_ptrs, sizes, config, True, *plans)

    def get_tensor_with_parallelism(self, key: str, target: object = None) -> torch.Tensor | None:
        """Without a read target: :meth:`get_tensor`; with one: None (not supported)."""
        if self._plain("get_tensor_with_parallelism", target) is not None:
            return None
        return self.get_tensor(key)
