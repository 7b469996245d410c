"""The worker process: one engine behind a gRPC server (prefill or decode role).

```
conductor --gRPC--> WorkerServicer (asyncio)          Transfer Engine data server
                      | Prefill/FetchPrefix/Prepare/Admit/Cancel/Watch      (KV bytes)
                      v
               engine thread (1-thread executor): InferenceEngine, PrefillRunner,
                                                  DecodeRunner steps
```

The engine is not thread-safe and its calls are CPU-heavy, so every engine call runs on
one dedicated thread; the asyncio loop only moves control messages. Prefill requests
queue on that thread in arrival order (the queue the conductor's ``T_queue`` models).
A decode worker exposes its whole KV pool as the Transfer Engine segment
``<host:data_port>/kv``; prefill workers write reserved blocks there (``kv_stream.py``).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import grpc

from mooncake_core import __version__
from mooncake_core.conductor.events import BlockStored
from mooncake_core.config.models import ClusterConfig, ModelConfig, WorkerConfig
from mooncake_core.rpc import worker_pb2 as pb
from mooncake_core.rpc import worker_pb2_grpc as pbg
from mooncake_core.rpc.worker_health import probe_worker
from mooncake_core.store.auth import TokenAuthInterceptor, auth_metadata
from mooncake_core.telemetry import (
    ComponentInfo,
    TelemetryRegistry,
    TelemetryServer,
    serve_telemetry,
)
from mooncake_core.transfer import TransferEngine, TransferSnapshot
from mooncake_core.worker.checkpoint import checkpoint_config
from mooncake_core.worker.engine import EngineSnapshot, InferenceEngine
from mooncake_core.worker.kv_stream import KVStreamError, StreamTarget
from mooncake_core.worker.kvcache import CacheFullError
from mooncake_core.worker.sampling import Sampler, SamplingParams
from mooncake_core.worker.service_cpp import StageHost
from mooncake_core.worker.service_decode import DecodeRunner
from mooncake_core.worker.service_prefill import PrefillJob, PrefillRunner, PrefixStore

__all__ = [
    "WorkerRole",
    "WorkerService",
    "WorkerServiceOptions",
    "probe_worker",
    "sampling_from_pb",
    "sampling_to_pb",
]

log = logging.getLogger(__name__)

WorkerRole = Literal["prefill", "decode"]
KV_SEGMENT = "kv"


@dataclass(frozen=True, slots=True)
class WorkerServiceOptions:
    """How one worker process runs (from ``WorkerConfig`` plus process settings).

    Attributes:
        name: instance name (cache events, reports).
        role: ``prefill`` or ``decode``.
        host: bind address of the RPC and data servers.
        rpc_port: gRPC port (0: any free port).
        data_port: Transfer Engine data port (0: any free port).
        num_blocks: paged KV pool size in blocks (``WorkerConfig.local_cache_blocks``).
        max_batch: decode batch limit.
        device: ``cpu``, ``cuda`` or None (CUDA when available).
        secret: cluster secret (control and data plane), or None.
        torch_threads: intra-op threads of torch (the machines are small and shared).
        io_timeout_s: longest wait for KV / Store writes of one request.
        metrics_port: HTTP port of ``/health``, ``/telemetry`` and ``/metrics`` (0: any
            free port; None: not served).
    """

    name: str
    role: WorkerRole
    host: str = "127.0.0.1"
    rpc_port: int = 0
    data_port: int = 0
    num_blocks: int = 1024
    max_batch: int = 8
    device: str | None = None
    secret: bytes | None = None
    torch_threads: int = 1
    io_timeout_s: float = 30.0
    metrics_port: int | None = None

    @classmethod
    def from_cluster(
        cls, cluster: ClusterConfig, role: WorkerRole, name: str, **overrides: Any
    ) -> WorkerServiceOptions:
        """Options for worker ``name`` of ``role`` in ``cluster``.

        Raises:
            KeyError: no such worker in the config (message lists the known names).
        """
        workers: list[WorkerConfig] = (
            cluster.prefill_workers if role == "prefill" else cluster.decode_workers
        )
        for w in workers:
            if w.name == name:
                host = cluster.host(w.host).address
                vals: dict[str, Any] = {
                    "name": name,
                    "role": role,
                    "host": host,
                    "rpc_port": w.rpc_port,
                    "data_port": w.data_port,
                    "num_blocks": max(w.local_cache_blocks, 16),
                    "max_batch": w.max_batch,
                    "device": None if w.device == "auto" else w.device,
                    "metrics_port": w.metrics_port,
                }
                vals.update(overrides)
                return cls(**vals)
        known = ", ".join(w.name for w in workers) or "none"
        raise KeyError(f"no {role} worker named {name!r} in the config (known: {known})")


def sampling_to_pb(s: SamplingParams) -> pb.Sampling:
    """Protobuf form of :class:`SamplingParams`."""
    return pb.Sampling(
        max_tokens=s.max_tokens,
        temperature=s.temperature,
        seed=s.seed,
        stop_at_eos=s.stop_at_eos,
        top_p=s.top_p,
    )


def sampling_from_pb(s: pb.Sampling) -> SamplingParams:
    """:class:`SamplingParams` from protobuf (raises ValueError on bad values)."""
    return SamplingParams(
        max_tokens=max(1, s.max_tokens),
        temperature=s.temperature,
        seed=s.seed,
        stop_at_eos=s.stop_at_eos,
        top_p=s.top_p or 1.0,
    )


async def _abort(context: grpc.aio.ServicerContext, exc: BaseException) -> None:
    code = grpc.StatusCode.INTERNAL
    if isinstance(exc, CacheFullError):
        code = grpc.StatusCode.RESOURCE_EXHAUSTED
    elif isinstance(exc, KeyError):
        code = grpc.StatusCode.NOT_FOUND
    elif isinstance(exc, ValueError):
        code = grpc.StatusCode.INVALID_ARGUMENT
    elif isinstance(exc, KVStreamError):
        code = grpc.StatusCode.UNAVAILABLE
    await context.abort(code, f"{type(exc).__name__}: {exc}")


class WorkerService(pbg.WorkerServicer):
    """A prefill or decode instance: engine thread + gRPC servicer + Transfer Engine.

    Args:
        cluster: the cluster config (model, hashing, transfer settings).
        options: this worker's process options.
        store_factory: builds the Store bridge for prefix fetch and layer-wise store from
            the engine (prefill only; called on the engine thread), or None to run
            without the Store.
    """

    def __init__(
        self,
        cluster: ClusterConfig,
        options: WorkerServiceOptions,
        store_factory: Callable[[InferenceEngine], PrefixStore] | None = None,
    ) -> None:
        # A checkpoint's shapes (layers, hidden, vocabulary...) replace the config's.
        self.cluster = cluster.model_copy(update={"model": checkpoint_config(cluster.model)})
        self.options = options
        self.store_factory = store_factory
        self.store: PrefixStore | None = None
        self.rpc_port = options.rpc_port
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"engine-{options.name}")
        self._server: grpc.aio.Server | None = None
        self._transfer: TransferEngine | None = None
        self._engine: InferenceEngine | None = None
        self._prefill: PrefillRunner | None = None
        self._stages: StageHost | None = None
        self._peers: dict[str, tuple[grpc.aio.Channel, pbg.WorkerStub]] = {}
        self._decode: DecodeRunner | None = None
        self._decode_task: asyncio.Task[None] | None = None
        self._queued = 0
        self._inflight: dict[str, asyncio.Future[Any]] = {}
        self.kv_segment = ""
        self._telemetry: TelemetryServer | None = None
        self.auth_failures: dict[str, int] = {}
        """Calls refused for a missing or wrong cluster token, by RPC method."""
        self.metrics_port: int | None = None

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Build the engine, start the data server and the gRPC server.

        Raises:
            RuntimeError: the RPC port or the metrics port cannot be bound.
        """
        opts = self.options
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._build)
        assert self._engine is not None and self._transfer is not None
        if opts.role == "decode":
            self._decode = DecodeRunner(self._engine, self._executor, opts.max_batch)
            self._decode_task = asyncio.create_task(self._decode.run(), name="decode-loop")
        interceptors = (
            [TokenAuthInterceptor(opts.secret, on_refused=self._count_refusal)]
            if opts.secret
            else []
        )
        self._server = grpc.aio.server(
            interceptors=interceptors,
            options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", 64 << 20)],
        )
        pbg.add_WorkerServicer_to_server(self, self._server)
        try:
            self.rpc_port = self._server.add_insecure_port(f"{opts.host}:{opts.rpc_port}")
        except RuntimeError as exc:
            raise RuntimeError(f"cannot bind {opts.host}:{opts.rpc_port}: {exc}") from None
        if self.rpc_port == 0:
            raise RuntimeError(f"cannot bind {opts.host}:{opts.rpc_port} (port in use?)")
        await self._server.start()
        if opts.metrics_port is not None:
            try:
                self._serve_telemetry(opts.metrics_port)
            except OSError as exc:
                await self._server.stop(0)
                raise RuntimeError(f"metrics_port: {exc}") from None
        log.info(
            "%s worker %s serving on %s:%d (kv segment %s)",
            opts.role,
            opts.name,
            opts.host,
            self.rpc_port,
            self.kv_segment,
        )

    def _build(self) -> None:
        import torch

        opts = self.options
        torch.set_num_threads(opts.torch_threads)
        self._engine = InferenceEngine(
            self.cluster.model,
            self.cluster.hashing,
            num_blocks=opts.num_blocks,
            device=opts.device,
            location=opts.name,
        )
        te = TransferEngine(
            self.cluster.transfer, nics=(opts.host,), port=opts.data_port, secret=opts.secret
        )
        te.start()
        self._transfer = te
        if opts.role == "decode":
            te.register_memory(self._engine.cache.pool_view(), name=KV_SEGMENT)
            self.kv_segment = f"{te.segment_name}/{KV_SEGMENT}"
        else:
            if self.store_factory is not None:
                self.store = self.store_factory(self._engine)
            self._prefill = PrefillRunner(
                self._engine, te, self.store, io_timeout_s=opts.io_timeout_s
            )
            self._stages = StageHost(
                self.cluster.model,
                self.cluster.hashing,
                te,
                num_blocks=opts.num_blocks,
                name=opts.name,
                device=opts.device,
            )

    def _serve_telemetry(self, port: int) -> None:
        opts = self.options
        reg = TelemetryRegistry(ComponentInfo(opts.name, opts.role, __version__))
        reg.register("engine", self._engine_snapshot)
        reg.register("transfer", self._transfer_snapshot)
        reg.register(
            "auth",
            lambda: {
                "auth_failures_total": sum(self.auth_failures.values()),
                "auth_failures": dict(self.auth_failures),
            },
        )
        self._telemetry = serve_telemetry(reg, opts.host, port)
        self.metrics_port = self._telemetry.port

    def _count_refusal(self, method: str) -> None:
        self.auth_failures[method] = self.auth_failures.get(method, 0) + 1

    def _engine_snapshot(self) -> EngineSnapshot:
        # Called from the telemetry server's threads while the engine thread may add or
        # drop a sequence: reading its dicts can then raise "changed size during
        # iteration". The snapshot is a handful of reads, so retry instead of queueing
        # behind a long prefill on the engine thread.
        for _ in range(4):
            try:
                return self.engine.snapshot()
            except RuntimeError as exc:
                if "changed size" not in str(exc):
                    raise
        return self.engine.snapshot()

    def _transfer_snapshot(self) -> TransferSnapshot:
        if self._transfer is None:
            raise RuntimeError("worker not started")
        return self._transfer.snapshot()

    async def stop(self, grace: float = 2.0) -> None:
        """Stop serving: refuse new calls, end decode streams, free the data plane."""
        if self._telemetry is not None:
            self._telemetry.close()
        if self._decode is not None:
            self._decode.stop()
        if self._server is not None:
            await self._server.stop(grace)
        if self._decode_task is not None:
            self._decode_task.cancel()
            await asyncio.gather(self._decode_task, return_exceptions=True)
        loop = asyncio.get_running_loop()
        for ch, _ in self._peers.values():
            await ch.close(None)
        if self._transfer is not None:
            await loop.run_in_executor(self._executor, self._transfer.close)
        close = getattr(self.store, "close", None)
        if close is not None:
            await loop.run_in_executor(self._executor, close)
        self._executor.shutdown(wait=True)

    async def wait_closed(self) -> None:
        """Block until the gRPC server terminates."""
        if self._server is not None:
            await self._server.wait_for_termination()

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    @property
    def engine(self) -> InferenceEngine:
        """The instance's engine (after :meth:`start`)."""
        if self._engine is None:
            raise RuntimeError("worker not started")
        return self._engine

    # ---- RPCs -----------------------------------------------------------------------------

    async def Health(self, request: pb.HealthRequest, context: Any) -> pb.HealthReply:
        eng = self.engine
        c = eng.cache
        return pb.HealthReply(
            name=self.options.name,
            role=pb.ROLE_PREFILL if self.options.role == "prefill" else pb.ROLE_DECODE,
            model=eng.config.name,
            kv_segment=self.kv_segment,
            block_nbytes=c.block_nbytes,
            layer_nbytes=c.layer_nbytes,
            block_size=c.block_size,
            num_blocks=c.num_blocks,
            max_batch=self.options.max_batch,
        )

    async def Prefill(self, request: pb.PrefillRequest, context: Any) -> pb.PrefillReply:
        if self._prefill is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "not a prefill worker")
        runner = self._prefill
        assert runner is not None
        try:
            target = None
            if request.HasField("target"):
                t = request.target
                target = StreamTarget(t.segment, tuple(t.blocks), t.block_nbytes, t.layer_nbytes)
            job = PrefillJob(
                request.request_id,
                tuple(request.tokens),
                sampling_from_pb(request.sampling),
                tuple(request.fetch_keys),
                target,
                request.store_kv,
            )
        except ValueError as exc:
            await _abort(context, exc)
        if request.cpp_peer:
            # Only a configured prefill worker may be the second stage: the address comes
            # from the request, and a worker must not dial whatever it is told to.
            peers = {
                f"{self.cluster.host(w.host).address}:{w.rpc_port}"
                for w in self.cluster.prefill_workers
            }
            if request.cpp_peer not in peers:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"cpp_peer {request.cpp_peer!r} is not a configured prefill worker",
                )
            return await self._prefill_cpp(request, job, context)
        t0 = time.perf_counter()
        self._queued += 1
        started: list[float] = []

        def run() -> Any:
            started.append(time.perf_counter())
            return runner.run(job)

        try:
            out = await self._call(run)
        except Exception as exc:  # engine/stream errors become gRPC statuses
            await _abort(context, exc)
        finally:
            self._queued -= 1
        return pb.PrefillReply(
            request_id=request.request_id,
            first_token=out.first_token,
            reused_tokens=out.reused_tokens,
            computed_tokens=out.computed_tokens,
            fetched_blocks=out.fetched_blocks,
            stored_blocks=out.stored_blocks,
            queue_s=started[0] - t0 if started else 0.0,
            fetch_s=out.fetch_s,
            compute_s=out.compute_s,
            stream_wait_s=out.stream_wait_s,
            store_wait_s=out.store_wait_s,
        )

    def _peer(self, address: str) -> pbg.WorkerStub:
        got = self._peers.get(address)
        if got is None:
            ch = grpc.aio.insecure_channel(
                address, options=[("grpc.max_receive_message_length", 64 << 20)]
            )
            got = self._peers[address] = (ch, pbg.WorkerStub(ch))
        return got[1]

    async def _prefill_cpp(
        self, request: pb.PrefillRequest, job: PrefillJob, context: Any
    ) -> pb.PrefillReply:
        """Stage 0 here, stage 1 on ``cpp_peer``; chunks pipelined (see service_cpp)."""
        import torch

        stages = self._stages
        assert stages is not None
        eng = self.engine
        layers = eng.config.layers
        split = request.cpp_split or (layers + 1) // 2
        chunk = request.cpp_chunk_tokens or 256
        tokens = list(job.tokens)
        if not 0 < split < layers:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"cpp_split {split} not in 1..{layers - 1}"
            )
        keys = eng.hasher.block_keys(tokens)
        seq = f"cpp-{request.request_id}"
        ids = torch.tensor(tokens, dtype=torch.long)
        peer = self._peer(request.cpp_peer)
        meta = auth_metadata(self.options.secret)
        target_pb = request.target if request.HasField("target") else None
        bounds = [(s, min(s + chunk, len(tokens))) for s in range(0, len(tokens), chunk)]
        t0 = time.perf_counter()
        pending: Any = None
        logits: Any = None
        try:
            for c, (s, e) in enumerate(bounds):
                last = c == len(bounds) - 1
                act = await self._call(
                    stages.run_chunk,
                    seq,
                    (0, split),
                    s,
                    len(tokens),
                    keys,
                    ids[s:e],
                    last,
                    job.target,
                    self.options.io_timeout_s,
                )
                if pending is not None:
                    await pending  # stage 1 finished chunk c-1 while we computed chunk c
                data = act.to(torch.float32).contiguous().cpu().numpy().tobytes()
                pending = asyncio.ensure_future(
                    peer.StageForward(
                        pb.StageForwardRequest(
                            seq_id=seq,
                            start=s,
                            total=len(tokens),
                            keys=keys,
                            activations=data,
                            rows=e - s,
                            last_chunk=last,
                            layer_start=split,
                            layer_stop=layers,
                            target=target_pb,
                        ),
                        timeout=self.options.io_timeout_s,
                        metadata=meta,
                    )
                )
            rep = await pending
            logits = torch.frombuffer(bytearray(rep.activations), dtype=torch.float32)
        except grpc.RpcError as exc:
            await self._call(stages.abort, seq, (0, split))
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, f"CPP stage 1 at {request.cpp_peer}: {exc.details()}"
            )
        except Exception as exc:
            await _abort(context, exc)
        first = Sampler(job.sampling)(logits)
        return pb.PrefillReply(
            request_id=request.request_id,
            first_token=first,
            reused_tokens=0,
            computed_tokens=len(tokens),
            compute_s=time.perf_counter() - t0,
            cpp=True,
        )

    async def StageForward(
        self, request: pb.StageForwardRequest, context: Any
    ) -> pb.StageForwardReply:
        import torch

        if self._stages is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "not a prefill worker")
        stages = self._stages
        assert stages is not None
        hidden = self.cluster.model.hidden
        problem = _stage_request_problem(request, self.cluster.model)
        if problem is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        if len(request.activations) != request.rows * hidden * 4:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{len(request.activations)} activation bytes for {request.rows} rows of {hidden}",
            )
        x = torch.frombuffer(bytearray(request.activations), dtype=torch.float32)
        x = x.reshape(request.rows, hidden).to(self.engine.model.dtype)
        target = None
        if request.HasField("target"):
            t = request.target
            target = StreamTarget(t.segment, tuple(t.blocks), t.block_nbytes, t.layer_nbytes)
        try:
            out = await self._call(
                stages.run_chunk,
                request.seq_id,
                (request.layer_start, request.layer_stop),
                request.start,
                request.total,
                list(request.keys),
                x,
                request.last_chunk,
                target,
                self.options.io_timeout_s,
            )
        except Exception as exc:
            await _abort(context, exc)
        data = out.to(torch.float32).contiguous().cpu().numpy().tobytes()
        return pb.StageForwardReply(
            activations=data, rows=int(out.shape[0]) if out.dim() > 1 else 1
        )

    async def FetchPrefix(
        self, request: pb.FetchPrefixRequest, context: Any
    ) -> pb.FetchPrefixReply:
        if self._prefill is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "not a prefill worker")
        assert self._prefill is not None
        try:
            fetched, cached, secs = await self._call(self._prefill.fetch_prefix, list(request.keys))
        except Exception as exc:
            await _abort(context, exc)
        return pb.FetchPrefixReply(fetched_blocks=fetched, already_cached=cached, fetch_s=secs)

    async def Prepare(self, request: pb.PrepareRequest, context: Any) -> pb.PrepareReply:
        if self._decode is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "not a decode worker")
        assert self._decode is not None
        try:
            sid, blocks = await self._decode.prepare(
                request.request_id, request.num_tokens, request.max_tokens
            )
        except Exception as exc:
            await _abort(context, exc)
        c = self.engine.cache
        return pb.PrepareReply(
            seq_id=sid,
            segment=self.kv_segment,
            blocks=list(blocks),
            block_nbytes=c.block_nbytes,
            layer_nbytes=c.layer_nbytes,
        )

    async def Admit(self, request: pb.AdmitRequest, context: Any) -> AsyncIterator[pb.TokenEvent]:
        if self._decode is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "not a decode worker")
        assert self._decode is not None
        try:
            sampling = sampling_from_pb(request.sampling)
            stream = self._decode.admit(
                request.request_id,
                request.seq_id,
                list(request.tokens),
                request.next_token,
                sampling,
            )
            async for tok in stream:
                yield pb.TokenEvent(
                    token=tok.token,
                    index=tok.index,
                    time=tok.time,
                    finished=tok.finished,
                    batch=tok.batch,
                )
        except (KeyError, ValueError, CacheFullError) as exc:
            await _abort(context, exc)

    async def Cancel(self, request: pb.CancelRequest, context: Any) -> pb.CancelReply:
        found = False
        if self._decode is not None:
            found = await self._decode.cancel(request.request_id)
        return pb.CancelReply(found=found)

    async def Watch(self, request: pb.WatchRequest, context: Any) -> AsyncIterator[pb.WorkerReport]:
        interval = request.interval_s if request.interval_s > 0 else 0.5
        eng = self.engine
        role = pb.ROLE_PREFILL if self.options.role == "prefill" else pb.ROLE_DECODE
        while True:
            # Only prefill caches feed the conductor's index (decode blocks are private).
            events = await self._call(eng.take_events) if self._prefill is not None else []
            snap = eng.cache.snapshot()
            dec = self._decode
            yield pb.WorkerReport(
                name=self.options.name,
                role=role,
                time=time.time(),
                queued=self._queued,
                running=dec.running if dec is not None else 0,
                batch=dec.last_batch if dec is not None else 0,
                used_blocks=snap.used_blocks,
                num_blocks=snap.num_blocks,
                computed_tokens=eng.stats.computed_tokens,
                reused_tokens=eng.stats.reused_tokens,
                events=[
                    pb.BlockEvent(
                        stored=isinstance(e, BlockStored),
                        keys=list(e.keys),
                        tier=str(e.tier),
                        location=e.location,
                    )
                    for e in events
                ],
            )
            await asyncio.sleep(interval)

    async def ListCachedBlocks(
        self, request: pb.ListCachedBlocksRequest, context: Any
    ) -> pb.ListCachedBlocksReply:
        """One ascending page of the prefix cache's block keys (conductor index resync)."""
        if self._prefill is None:  # decode caches are private: not in the index
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "not a prefill worker")
        limit = request.limit or 4096
        cache = self.engine.cache
        # Read on the engine thread: the cache is only mutated there.
        keys = await self._call(cache.cached_keys)
        if request.has_start:
            keys = keys[bisect.bisect_right(keys, request.start_after) :]
        return pb.ListCachedBlocksReply(
            keys=keys[:limit], more=len(keys) > limit, location=cache.location, tier="hbm"
        )


def _stage_request_problem(request: pb.StageForwardRequest, model: ModelConfig) -> str | None:
    """Why a StageForward request cannot be run, checked before any tensor is built."""
    if request.rows < 1:
        return f"rows must be >= 1, got {request.rows}"
    if not 0 <= request.layer_start < request.layer_stop <= model.layers:
        return (
            f"layer range [{request.layer_start}, {request.layer_stop}) is not inside "
            f"the model's {model.layers} layers"
        )
    if not 0 <= request.start < request.start + request.rows <= request.total <= model.max_seq_len:
        return (
            f"chunk [{request.start}, {request.start + request.rows}) of a {request.total}-token "
            f"prompt does not fit (max_seq_len {model.max_seq_len})"
        )
    return None
