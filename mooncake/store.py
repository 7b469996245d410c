"""``mooncake.store``: upstream's ``MooncakeDistributedStore`` over our store client.

Same method names, argument orders, defaults and return conventions as upstream's
pybind module (``mooncake-integration/store/store_py.cpp``): calls return ``0`` or a
negative upstream ``ErrorCode`` (see :mod:`mooncake._codes`), a get miss is ``b""``,
``is_exist`` is ``1``/``0``, batches return lists of ints. The work is done by
:class:`mooncake_core.store.client.Client`; this module only translates.

::

    from mooncake.store import MooncakeDistributedStore
    store = MooncakeDistributedStore()
    store.setup("localhost", "P2PHANDSHAKE", 512 << 20, 128 << 20, "tcp", "",
                "127.0.0.1:50051")
    store.put("k", b"v")            # 0
    store.get("k")                  # b"v"
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from mooncake_core.store.client import Client
from mooncake_core.store.errors import ErrorCode, StoreError

from ._codes import UpstreamCode, to_code
from ._ranges import BufferHandle, Registry, ranged_reads, scatter
from ._replicate import ReplicateConfig, SoftPinAction
from ._setup import SetupArgs, args_from_dict, log, start_client
from ._tensors import TensorOps
from .config import ConfigError, load_setup_dict

if TYPE_CHECKING:
    from ._dummy import MemPool

__all__ = ["BufferHandle", "MooncakeDistributedStore", "ReplicateConfig", "SoftPinAction"]

T = TypeVar("T")
_INVALID = int(UpstreamCode.INVALID_PARAMS)
_HC_HEALTHY, _HC_NOT_INITIALIZED, _HC_MASTER_UNREACHABLE = 0, 1, 2


def _bytes(value: Any) -> memoryview:
    return memoryview(value).cast("B")


class MooncakeDistributedStore(TensorOps):
    """A store client with upstream's Python surface (see the module docstring)."""

    def __init__(self) -> None:
        self._client: Client | None = None
        self._hostname = ""
        self._local_buffer_size = 0
        self._registry = Registry()
        self._lock = threading.Lock()
        self._pool: MemPool | None = None

    # ---------------------------------------------------------------- lifecycle
    def setup(self, *args: Any, **kwargs: Any) -> int:
        """``setup(local_hostname, metadata_server, global_segment_size=16MB,
        local_buffer_size=16MB, protocol="tcp", rdma_devices="",
        master_server_addr="127.0.0.1:50051", engine=None, ...)``, ``setup(dict)``, or
        ``setup()`` (from ``MOONCAKE_CONFIG_PATH`` / ``MOONCAKE_*``, :mod:`mooncake.config`).

        ``metadata_server`` is accepted and not used: our master also serves segment
        discovery. ``engine`` (a :class:`mooncake.engine.TransferEngine`) is accepted
        for upstream's engine sharing; the store starts its own engine.

        Returns:
            0, or upstream's negative code (``-600`` for a refused argument).
        """
        try:
            if not args and not kwargs:
                try:
                    a = args_from_dict(load_setup_dict())
                except ConfigError as exc:
                    log.error("setup: %s", exc)
                    return _INVALID
            elif len(args) == 1 and not kwargs and isinstance(args[0], dict):
                a = args_from_dict(args[0])
            else:
                a = _positional(*args, **kwargs)
            client, name = start_client(a)
        except StoreError as exc:
            return to_code(exc)
        with self._lock:
            old, self._client = self._client, client
            self._hostname = name
            self._local_buffer_size = a.local_buffer_size
            self._registry = Registry()
            self._pool = None
        if old is not None:
            old.close()
        return 0

    def setup_dummy(self, mem_pool_size: int, local_buffer_size: int, server_address: str) -> int:
        """Attach to the ``mooncake_client`` at ``server_address`` (upstream's dummy client).

        The standalone client lends the memory: this store hosts no segment, its
        objects are placed in the standalone client's segment through the master that
        client serves. ``alloc_from_mem_pool`` hands out pieces of a local pool of
        ``mem_pool_size`` bytes for the ``*_from``/``*_into`` calls.

        Returns:
            0, or upstream's negative code (-900 when nothing answers there).
        """
        from ._dummy import MemPool, attach_info

        try:
            info = attach_info(str(server_address))
            pool = MemPool(int(mem_pool_size))
            a = SetupArgs(
                local_hostname="localhost",
                metadata_server="P2PHANDSHAKE",
                global_segment_size=0,
                local_buffer_size=int(local_buffer_size),
                protocol=info.get("protocol", "tcp"),
                rdma_devices="",
                master_server_addr=info["master_server_address"],
            )
            client, name = start_client(a)
        except StoreError as exc:
            log.error("setup_dummy: %s", exc.message)
            return to_code(exc)
        with self._lock:
            old, self._client = self._client, client
            self._hostname = name
            self._local_buffer_size = a.local_buffer_size
            self._registry = Registry()
            self._pool = pool
        if old is not None:
            old.close()
        return 0

    def alloc_from_mem_pool(self, size: int) -> int:
        """``size`` bytes of the dummy client's pool (0: not a dummy client, or full)."""
        pool = self._pool
        return pool.alloc(int(size)) if pool is not None else 0

    def close(self) -> int:
        """Unmount this client's segment (its objects go with it) and stop; 0."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
        return 0

    def health_check(self) -> int:
        """0 healthy, 1 not set up or closed, 2 master unreachable (upstream's codes)."""
        c = self._client
        if c is None:
            return _HC_NOT_INITIALIZED
        try:
            c.is_exist("__mooncake_health_check__")
        except StoreError:
            return _HC_MASTER_UNREACHABLE
        return _HC_HEALTHY

    def get_hostname(self) -> str:
        """``host:port`` of this client (its segment name)."""
        return self._hostname

    @property
    def core(self) -> Client:
        """The underlying :class:`mooncake_core.store.client.Client` (our richer API)."""
        c = self._client
        if c is None:
            raise RuntimeError("store is not set up (call setup())")
        return c

    def _do(self, fn: Callable[[Client], T], on_error: Callable[[int], T]) -> T:
        c = self._client
        if c is None:
            return on_error(_INVALID)
        try:
            return fn(c)
        except StoreError as exc:
            return on_error(to_code(exc))

    def _rc(self, fn: Callable[[Client], object]) -> int:
        def run(c: Client) -> int:
            fn(c)
            return 0

        return self._do(run, lambda code: code)

    # ----------------------------------------------------------------- buffers
    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        """Register ``size`` bytes at ``buffer_ptr`` for the ``*_from``/``*_into`` calls."""

        def run(c: Client) -> int:
            addr = c.register_buffer(int(buffer_ptr), int(size))
            self._registry.add(addr, int(size))
            return 0

        return self._do(run, lambda code: code)

    def unregister_buffer(self, buffer_ptr: int) -> int:
        def run(c: Client) -> int:
            c.unregister_buffer(int(buffer_ptr))
            self._registry.remove(int(buffer_ptr))
            return 0

        return self._do(run, lambda code: code)

    # ------------------------------------------------------------------ writes
    def _staged(self, nbytes: int) -> int | None:
        # upstream copies bytes through its local buffer; a value larger than it fails
        if nbytes > self._local_buffer_size:
            return _INVALID
        return None

    def _put(self, key: str, value: Any, config: ReplicateConfig | None, upsert: bool) -> int:
        view = _bytes(value)
        refused = self._staged(view.nbytes)
        if refused is not None:
            return refused

        def run(c: Client) -> int:
            # the default config's core form is built once (the common call)
            core = _DEFAULT_CORE if config is None else config.to_core()
            if upsert:
                c.upsert(key, view, core)
            else:
                try:
                    c.put(key, view, core)
                except StoreError as exc:
                    # upstream: a put of an existing key succeeds and keeps the object
                    if exc.code != ErrorCode.OBJECT_ALREADY_EXISTS:
                        raise
            if config is not None:
                _after_write(c, key, config)
            return 0

        return self._do(run, lambda code: code)

    def put(self, key: str, value: Any, config: ReplicateConfig | None = None) -> int:
        """Store ``value`` (any bytes-like); an existing key is kept and 0 returned."""
        return self._put(key, value, config, upsert=False)

    def upsert(self, key: str, value: Any, config: ReplicateConfig | None = None) -> int:
        """Store ``value`` under ``key``, replacing an existing object."""
        return self._put(key, value, config, upsert=True)

    def put_parts(self, key: str, *parts: Any, config: ReplicateConfig | None = None) -> int:
        """Store the concatenation of ``parts`` as one object."""
        return self._put(key, b"".join(_bytes(p) for p in parts), config, upsert=False)

    def upsert_parts(self, key: str, *parts: Any, config: ReplicateConfig | None = None) -> int:
        return self._put(key, b"".join(_bytes(p) for p in parts), config, upsert=True)

    def _put_many(
        self, keys: Sequence[str], values: Sequence[Any], cfg: ReplicateConfig | None, upsert: bool
    ) -> list[int]:
        if len(keys) != len(values):
            return [_INVALID] * len(keys)
        views = [_bytes(v) for v in values]
        if self._staged(sum(v.nbytes for v in views)) is not None:
            return [_INVALID] * len(keys)
        rc = cfg if cfg is not None else ReplicateConfig()

        def run(c: Client) -> list[int]:
            core = rc.to_core()
            if upsert:
                errs = [_try(c.upsert, k, v, core) for k, v in zip(keys, views, strict=True)]
            else:
                errs = c.put_batch(list(keys), views, core)
            return [_put_result(c, k, e, rc) for k, e in zip(keys, errs, strict=True)]

        return self._do(run, lambda code: [code] * len(keys))

    def put_batch(
        self, keys: Sequence[str], values: Sequence[Any], config: ReplicateConfig | None = None
    ) -> int:
        """Store several values; 0 when every key was stored, else the first error."""
        return next((r for r in self._put_many(keys, values, config, False) if r), 0)

    def upsert_batch(
        self, keys: Sequence[str], values: Sequence[Any], config: ReplicateConfig | None = None
    ) -> int:
        return next((r for r in self._put_many(keys, values, config, True) if r), 0)

    def _from(
        self, key: str, ptr: int, size: int, cfg: ReplicateConfig | None, upsert: bool
    ) -> int:
        rc = cfg if cfg is not None else ReplicateConfig()

        def run(c: Client) -> int:
            if upsert:
                c.upsert_from(key, int(ptr), int(size), rc.to_core())
            else:
                try:
                    c.put_from(key, int(ptr), int(size), rc.to_core())
                except StoreError as exc:
                    if exc.code != ErrorCode.OBJECT_ALREADY_EXISTS:
                        raise
            _after_write(c, key, rc)
            return 0

        return self._do(run, lambda code: code)

    def put_from(
        self, key: str, buffer_ptr: int, size: int, config: ReplicateConfig | None = None
    ) -> int:
        """Store ``size`` bytes of a registered buffer (zero-copy)."""
        return self._from(key, buffer_ptr, size, config, upsert=False)

    def upsert_from(
        self, key: str, buffer_ptr: int, size: int, config: ReplicateConfig | None = None
    ) -> int:
        return self._from(key, buffer_ptr, size, config, upsert=True)

    def _batch_from(
        self,
        keys: Sequence[str],
        ptrs: Sequence[int],
        sizes: Sequence[int],
        cfg: ReplicateConfig | None,
        upsert: bool,
    ) -> list[int]:
        if not len(keys) == len(ptrs) == len(sizes):
            return [_INVALID] * len(keys)
        if not keys:
            return []
        rc = cfg if cfg is not None else ReplicateConfig()

        def run(c: Client) -> list[int]:
            core = rc.to_core()
            if upsert:
                errs = [
                    _try(c.upsert_from, k, int(p), int(n), core)
                    for k, p, n in zip(keys, ptrs, sizes, strict=True)
                ]
            else:
                errs = c.batch_put_from(
                    list(keys), [int(p) for p in ptrs], [int(n) for n in sizes], core
                )
            return [_put_result(c, k, e, rc) for k, e in zip(keys, errs, strict=True)]

        return self._do(run, lambda code: [code] * len(keys))

    def batch_put_from(
        self,
        keys: Sequence[str],
        buffer_ptrs: Sequence[int],
        sizes: Sequence[int],
        config: ReplicateConfig | None = None,
    ) -> list[int]:
        """Zero-copy puts from registered buffers; one code per key."""
        return self._batch_from(keys, buffer_ptrs, sizes, config, upsert=False)

    def batch_upsert_from(
        self,
        keys: Sequence[str],
        buffer_ptrs: Sequence[int],
        sizes: Sequence[int],
        config: ReplicateConfig | None = None,
    ) -> list[int]:
        return self._batch_from(keys, buffer_ptrs, sizes, config, upsert=True)

    def batch_put_from_multi_buffers(
        self,
        keys: Sequence[str],
        all_buffer_ptrs: Sequence[Sequence[int]],
        all_sizes: Sequence[Sequence[int]],
        config: ReplicateConfig | None = None,
    ) -> list[int]:
        """Each key's object is the concatenation of its (pointer, size) parts."""
        if not len(keys) == len(all_buffer_ptrs) == len(all_sizes):
            return [_INVALID] * len(keys)
        if any(len(p) != len(s) for p, s in zip(all_buffer_ptrs, all_sizes, strict=True)):
            return [_INVALID] * len(keys)
        values = [
            b"".join(ctypes.string_at(int(p), int(n)) for p, n in zip(ps, ns, strict=True))
            for ps, ns in zip(all_buffer_ptrs, all_sizes, strict=True)
        ]
        return self._put_many(keys, values, config, upsert=False) if keys else []

    # ------------------------------------------------------------------- reads
    def get(self, key: str) -> bytes:
        """The value, or ``b""`` when it cannot be read (missing, unreadable)."""
        return self._do(lambda c: c.get(key), lambda code: b"")

    def get_batch(self, keys: Sequence[str]) -> list[bytes]:
        def run(c: Client) -> list[bytes]:
            return [v if isinstance(v, bytes) else b"" for v in c.get_batch(list(keys))]

        return self._do(run, lambda code: [b""] * len(keys))

    def get_buffer(self, key: str) -> BufferHandle | None:
        """The value in a :class:`BufferHandle` (buffer protocol, ``size()``), or None."""
        data = self.get(key)
        return BufferHandle(data) if data else None

    def batch_get_buffer(self, keys: Sequence[str]) -> list[BufferHandle | None]:
        return [BufferHandle(v) if v else None for v in self.get_batch(keys)] if keys else []

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        """Bytes read into a registered buffer, or a negative code (too small: -600)."""
        return self._do(lambda c: c.get_into(key, int(buffer_ptr), int(size)), lambda code: code)

    def batch_get_into(
        self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int]
    ) -> list[int]:
        if not len(keys) == len(buffer_ptrs) == len(sizes):
            return [_INVALID] * len(keys)
        if not keys:
            return []

        def run(c: Client) -> list[int]:
            got = c.batch_get_into(
                list(keys), [int(p) for p in buffer_ptrs], [int(n) for n in sizes]
            )
            return [g if isinstance(g, int) else to_code(g) for g in got]

        return self._do(run, lambda code: [code] * len(keys))

    def batch_get_into_multi_buffers(
        self,
        keys: Sequence[str],
        all_buffer_ptrs: Sequence[Sequence[int]],
        all_sizes: Sequence[Sequence[int]],
        prefer_alloc_in_same_node: bool = False,
    ) -> list[int]:
        """Each key's object scattered over its buffers in order; bytes read per key."""
        if not len(keys) == len(all_buffer_ptrs) == len(all_sizes):
            return [_INVALID] * len(keys)
        if not keys:
            return []

        def run(c: Client) -> list[int]:
            out: list[int] = []
            for v, ps, ns in zip(c.get_batch(list(keys)), all_buffer_ptrs, all_sizes, strict=True):
                out.append(to_code(v) if isinstance(v, StoreError) else scatter(v, ps, ns))
            return out

        return self._do(run, lambda code: [code] * len(keys))

    def get_into_ranges(
        self,
        buffer_ptrs: Sequence[int],
        all_keys: Sequence[Sequence[str]],
        all_dst_offsets: Sequence[Sequence[Sequence[int]]],
        all_src_offsets: Sequence[Sequence[Sequence[int]]],
        all_sizes: Sequence[Sequence[Sequence[int]]],
    ) -> list[list[list[int]]]:
        """Byte ranges of objects into registered buffers (upstream's nesting:
        buffer -> key -> range); each range's result is its length or a negative code."""
        c = self._client

        def fetch(key: str) -> bytes | int:
            if c is None:
                return _INVALID
            try:
                return c.get(key)
            except StoreError as exc:
                return to_code(exc)

        return ranged_reads(
            self._registry,
            fetch,
            buffer_ptrs,
            all_keys,
            all_dst_offsets,
            all_src_offsets,
            all_sizes,
        )

    # ----------------------------------------------------------------- queries
    def is_exist(self, key: str) -> int:
        """1 if ``key`` exists, 0 if not, a negative code on error."""
        return self._do(lambda c: int(c.is_exist(key)), lambda code: code)

    def batch_is_exist(self, keys: Sequence[str]) -> list[int]:
        if not keys:
            return []
        return self._do(
            lambda c: [int(b) for b in c.batch_is_exist(list(keys))],
            lambda code: [code] * len(keys),
        )

    def get_size(self, key: str) -> int:
        return self._do(lambda c: c.get_size(key), lambda code: code)

    # ---------------------------------------------------------------- removals
    def remove(self, key: str, force: bool = False) -> int:
        """0, or -706 while a reader's lease is live (``force`` skips the check)."""
        return self._rc(lambda c: c.remove(key, force=force))

    def batch_remove(self, keys: Sequence[str], force: bool = False) -> list[int]:
        return [self.remove(k, force) for k in keys]

    def remove_by_regex(self, regex_pattern: str, force: bool = False) -> int:
        """Objects removed, or a negative code."""
        return self._do(
            lambda c: c.remove_by_regex(regex_pattern, force=force).removed, lambda x: x
        )

    def remove_all(self, force: bool = False) -> int:
        """Objects removed, or a negative code."""
        return self._do(lambda c: c.remove_all(force=force).removed, lambda x: x)


def _positional(
    local_hostname: str,
    metadata_server: str,
    global_segment_size: int = 16 << 20,
    local_buffer_size: int = 16 << 20,
    protocol: str = "tcp",
    rdma_devices: str = "",
    master_server_addr: str = "127.0.0.1:50051",
    engine: object = None,
    *rest: object,
    **extra: object,
) -> SetupArgs:
    return SetupArgs(
        local_hostname=local_hostname,
        metadata_server=metadata_server,
        global_segment_size=int(global_segment_size),
        local_buffer_size=int(local_buffer_size),
        protocol=protocol,
        rdma_devices=rdma_devices,
        master_server_addr=master_server_addr,
    )


def _try(fn: Callable[..., object], *args: Any) -> StoreError | None:
    try:
        fn(*args)
    except StoreError as exc:
        return exc
    return None


_DEFAULT_CORE = ReplicateConfig().to_core()
"""``ReplicateConfig()`` as our master's config (frozen; its soft-pin action needs no
follow-up call)."""


def _after_write(c: Client, key: str, cfg: ReplicateConfig) -> None:
    # DISABLE clears a soft pin the key had; our writes only ever add one
    if cfg.soft_pin_action == SoftPinAction.DISABLE:
        try:
            c.unpin(key)
        except StoreError as exc:
            if exc.code != ErrorCode.PIN_NOT_FOUND:
                raise


def _put_result(c: Client, key: str, err: StoreError | None, cfg: ReplicateConfig) -> int:
    if err is not None and err.code != ErrorCode.OBJECT_ALREADY_EXISTS:
        return to_code(err)
    try:
        _after_write(c, key, cfg)
    except StoreError as exc:
        return to_code(exc)
    return 0
