"""The live conductor: sans-IO Conductor + audit writer + worker links + front door.

Everything runs on one asyncio loop (the HTTP server runs on the same loop, see
``mooncake_web/frontdoor``): the Conductor is only touched from it, so it needs no lock.
The audit writer has its own thread (it formats and inserts off the decision path).

Startup:
1. audit: create or upgrade the database in place (``mooncake db upgrade`` logic; an
   existing database is never recreated), open the writer;
2. predictors: a quick self-profile of the same tiny model on this host (or the JSON
   models given in the options), so predicted times are in the model's scale;
3. links: one gRPC channel per worker, ``Health`` until it answers (bounded), then its
   ``Watch`` stream feeds cache events to the Conductor.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from mooncake_core import __version__
from mooncake_core.conductor.hashing import BlockHasher
from mooncake_core.conductor.options import ConductorOptions
from mooncake_core.conductor.predictors import DecodeStepModel, PrefillTimeModel
from mooncake_core.conductor.scheduler import Conductor
from mooncake_core.conductor.service.frontdoor import FrontDoor
from mooncake_core.conductor.service.links import WorkerLink
from mooncake_core.conductor.service.resync import StoreResync
from mooncake_core.conductor.snapshot import ConductorSnapshot
from mooncake_core.config.models import ClusterConfig
from mooncake_core.telemetry import ComponentInfo, TelemetryRegistry
from mooncake_core.worker.bpe_tokenizer import tokenizer_for
from mooncake_core.worker.checkpoint import checkpoint_config

if TYPE_CHECKING:
    from mooncake_core.conductor.audit.process_writer import AuditSink
    from mooncake_core.conductor.audit.writer import WriterSnapshot

__all__ = ["ConductorService", "ConductorServiceOptions", "kv_bytes_per_token"]

log = logging.getLogger(__name__)


def kv_bytes_per_token(cluster: ClusterConfig) -> int:
    """KV bytes of one token of the configured model (all layers, K and V)."""
    m = cluster.model
    itemsize = 4 if m.dtype == "float32" else 2
    return m.layers * 2 * m.kv_heads * (m.hidden // m.heads) * itemsize


@dataclass(frozen=True, slots=True)
class ConductorServiceOptions:
    """Process settings of the live conductor (``mooncake conductor serve`` fills them
    from ``ConductorConfig`` and its flags).

    Attributes:
        secret: cluster secret for worker RPCs, or None.
        store_kv: prefill workers store new blocks to the Store layer-wise.
        profile: self-profile the model at start to fit the predictors (else defaults,
            which are for a large model and make every prediction far too slow).
        profile_device: device of the self-profile (``"cpu"``, ``"cuda"``; ``None``:
            CUDA when present), the workers' device (``ClusterConfig.profile_device``).
        prefill_model_path, decode_model_path: fitted predictor JSON to use instead.
        worker_wait_s: how long start() waits for each worker's first Health answer.
        report_interval_s: worker report period.
        rpc_timeout_s: deadline of one prefill/prepare RPC.
        conductor_options: extra knobs of the sans-IO Conductor.
        cpp_threshold: prompts longer than this (tokens) run on a 2-stage CPP group of
            prefill workers (needs 2 or more); 0 disables CPP.
        cpp_chunk_tokens: CPP chunk size in tokens.
        store_events: follow the store master's events so the index knows which
            blocks the Store holds (tier DRAM at each store segment), and resync that
            view from the master's key listing at start and every ``resync_interval_s``.
        resync_start_wait_s: how long start() waits for the first store resync.
    """

    secret: bytes | None = None
    store_kv: bool = True
    profile: bool = True
    profile_device: str | None = "cpu"
    prefill_model_path: Path | None = None
    decode_model_path: Path | None = None
    worker_wait_s: float = 60.0
    report_interval_s: float = 0.25
    rpc_timeout_s: float = 120.0
    conductor_options: ConductorOptions | None = None
    cpp_threshold: int = 1024
    cpp_chunk_tokens: int = 256
    store_events: bool = True
    resync_start_wait_s: float = 10.0


def _profile_models(
    cluster: ClusterConfig, device: str | None
) -> tuple[PrefillTimeModel, DecodeStepModel]:
    """Fit the predictors on this host's ``device`` with a small grid (about a second for
    tiny models on a CPU)."""
    import torch

    from mooncake_core.worker.engine import InferenceEngine
    from mooncake_core.worker.profile import profile_engine

    torch.set_num_threads(1)
    bs = cluster.hashing.block_size
    top = max(4 * bs, min(cluster.model.max_seq_len // 2, 512))
    lens = sorted({max(bs + 1, top // 4), max(bs + 2, top // 2), top})
    grid = [(n, p) for n in lens for p in (0, (n // 2) // bs * bs, (n * 3 // 4) // bs * bs)]
    dgrid = [(b, b * c) for b in (1, 4) for c in (32, 128)]
    eng = InferenceEngine(
        cluster.model, cluster.hashing, num_blocks=max(64, 4 * top // bs + 64), device=device
    )
    prof = profile_engine(eng, prefill_grid=grid, decode_grid=dgrid, repeats=1)
    # Live prompts run past the profiled lengths: fit the shape physically (coefficients
    # >= 0, relative error) so it extrapolates; the online calibration does the rest.
    return PrefillTimeModel.fit(prof.prefill_points, physical=True), prof.decode_model


class ConductorService:
    """Owns the Conductor, the audit writer, the worker links and the front door.

    Args:
        cluster: the cluster config.
        options: process settings.
    """

    def __init__(self, cluster: ClusterConfig, options: ConductorServiceOptions) -> None:
        # A checkpoint's shapes (layers, hidden, vocabulary...) replace the config's.
        self.cluster = cluster.model_copy(update={"model": checkpoint_config(cluster.model)})
        self.options = options
        self.conductor: Conductor | None = None
        self.audit: AuditSink | None = None
        self.links: dict[str, WorkerLink] = {}
        self.front: FrontDoor | None = None
        self.started_at = 0.0
        self._store_task: asyncio.Task[None] | None = None
        self._resync_task: asyncio.Task[None] | None = None
        self.store_resync: StoreResync | None = None
        self.telemetry = TelemetryRegistry(ComponentInfo("conductor", "conductor", __version__))
        """Served as ``/telemetry`` and ``/metrics`` by the front door (docs/metrics.md).
        Read it from the event loop's thread: the Conductor has no lock."""
        self.telemetry.register("conductor", self._conductor_snapshot)
        if cluster.audit.enabled:
            self.telemetry.register("audit", self._audit_snapshot, kind="audit_writer")

    async def start(self) -> FrontDoor:
        """Open the audit DB, fit predictors, connect to every worker.

        Raises:
            RuntimeError: a worker did not answer within ``worker_wait_s``, or the audit
                database cannot be opened or upgraded.
        """
        cl, opts = self.cluster, self.options
        loop = asyncio.get_running_loop()
        if cl.audit.enabled:
            self.audit = await loop.run_in_executor(None, self._open_audit)
        if opts.prefill_model_path and opts.decode_model_path:
            pm = PrefillTimeModel.load(opts.prefill_model_path)
            dm = DecodeStepModel.load(opts.decode_model_path)
        elif opts.profile:
            pm, dm = await loop.run_in_executor(None, _profile_models, cl, opts.profile_device)
        else:
            pm, dm = None, None
        copts = opts.conductor_options or ConductorOptions(bytes_per_token=kv_bytes_per_token(cl))
        self.conductor = Conductor.from_cluster(
            cl, prefill_model=pm, decode_model=dm, options=copts
        )
        for role, workers in (("prefill", cl.prefill_workers), ("decode", cl.decode_workers)):
            for w in workers:
                addr = f"{cl.host(w.host).address}:{w.rpc_port}"
                self.links[w.name] = WorkerLink(w.name, role, addr, opts.secret)
        await asyncio.gather(*(self._hello(link) for link in self.links.values()))
        for link in self.links.values():
            if link.role == "decode":
                cap = self._kv_capacity(link)
                if cap is not None:
                    self.conductor.set_decode_kv(link.name, capacity_tokens=cap)
            link.follow(
                self.conductor.apply,
                opts.report_interval_s,
                on_change=self._membership,
                on_report=self._decode_report if link.role == "decode" else None,
            )
        if opts.store_events:
            from mooncake_core.conductor.service.store_events import follow_store
            from mooncake_core.conductor.store_feed import StoreFeed

            master = cl.master_target
            feed = StoreFeed(cl.model.name)
            self._store_task = asyncio.create_task(
                follow_store(
                    master,
                    opts.secret,
                    feed,
                    self.conductor.index,
                    self.conductor.apply,
                    cl.model.layers,
                ),
                name="store-events",
            )
            # Blocks stored before this process started are in no event: list them now
            # (bounded, a dead master only delays start) and again every resync interval.
            self.store_resync = StoreResync(
                self.conductor, master, opts.secret, feed, cl.model.layers, links=self.links
            )
            try:
                await asyncio.wait_for(self.store_resync.try_once(), opts.resync_start_wait_s)
            except TimeoutError:
                log.warning("store resync at start took over %.0fs", opts.resync_start_wait_s)
            self._resync_task = asyncio.create_task(self.store_resync.loop(), name="store-resync")
        self.front = FrontDoor(
            self.conductor,
            self.links,
            BlockHasher(cl.hashing),
            audit=self.audit,
            store_kv=opts.store_kv,
            rpc_timeout_s=opts.rpc_timeout_s,
            model_name=cl.model.name,
            vocab_size=cl.model.vocab_size,
            cpp_threshold=opts.cpp_threshold,
            cpp_chunk_tokens=opts.cpp_chunk_tokens,
            tokenizer=tokenizer_for(cl.model),
            max_seq_len=cl.model.max_seq_len,
            eos_token=cl.model.eos_token,
        )
        self.started_at = time.time()
        return self.front

    def _membership(self, link: WorkerLink, up: bool) -> None:
        """A worker went down (stop scheduling on it) or came back (schedule again).

        Requests in flight on a dead worker fail on their own RPCs; the Conductor forgets
        them here (``remove_*``), which the front door tolerates.
        """
        c = self.conductor
        if c is None:
            return
        try:
            if link.role == "prefill":
                if up:
                    c.add_prefill(link.name)
                else:
                    c.remove_prefill(link.name)
            elif up:
                batch = link.health.max_batch if link.health is not None else 8
                c.add_decode(link.name, batch, self._kv_capacity(link))
            else:
                c.remove_decode(link.name)
        except (KeyError, ValueError) as exc:  # already in that state
            log.debug("membership %s %s: %s", link.name, up, exc)

    def _block_size(self, link: WorkerLink) -> int:
        h = link.health
        return h.block_size if h is not None and h.block_size else self.cluster.hashing.block_size

    def _kv_capacity(self, link: WorkerLink) -> int | None:
        """A decode worker's KV pool in tokens, from its ``Health`` (``None``: unknown)."""
        h = link.health
        if h is None or not h.num_blocks:
            return None
        return h.num_blocks * self._block_size(link)

    def _decode_report(self, link: WorkerLink) -> None:
        """A decode worker's load report: its KV capacity and use into the Conductor."""
        rep, c = link.report, self.conductor
        if rep is None or c is None or not rep.num_blocks:
            return
        bs = self._block_size(link)
        c.set_decode_kv(
            link.name, capacity_tokens=rep.num_blocks * bs, used_tokens=rep.used_blocks * bs
        )

    def _conductor_snapshot(self) -> ConductorSnapshot:
        if self.conductor is None:
            raise RuntimeError("conductor not started")
        return self.conductor.snapshot()

    def _audit_snapshot(self) -> WriterSnapshot:
        if self.audit is None:
            raise RuntimeError("audit writer not open")
        return self.audit.snapshot()

    def _open_audit(self) -> AuditSink:
        from mooncake_core.conductor.audit import open_audit_writer, upgrade

        url = str(self.cluster.audit_url)
        try:
            upgrade(url, "head")  # creates a new database; upgrades an old one in place
            writer = open_audit_writer(url, self.cluster.audit)
            writer.start()
        except Exception as exc:
            raise RuntimeError(f"audit database {url}: {exc}") from exc
        return writer

    async def _hello(self, link: WorkerLink) -> None:
        deadline = time.monotonic() + self.options.worker_wait_s
        while True:
            try:
                await link.hello(timeout=2.0)
                return
            except grpc.RpcError as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{link.role} worker {link.name} at {link.address} did not answer "
                        f"Health within {self.options.worker_wait_s:.0f}s: {exc.code().name}"
                    ) from None
            await asyncio.sleep(0.2)

    def health(self) -> dict[str, Any]:
        """Liveness summary for ``GET /health``."""
        now = time.time()
        workers = {}
        for name, link in self.links.items():
            rep = link.report
            workers[name] = {
                "role": link.role,
                "up": link.up,
                "address": link.address,
                "report_age_s": None if rep is None else round(now - rep.time, 3),
            }
        out: dict[str, Any] = {
            "status": "ok",
            "uptime_s": round(now - self.started_at, 3),
            "workers": workers,
        }
        if self.conductor is not None:
            snap = self.conductor.snapshot(now)
            out["scheduler"] = {
                "policy": snap.policy,
                "admission": snap.admission,
                "decisions": snap.decisions,
                "admitted": snap.admitted,
                "rejected": dict(snap.rejected),
                "migrations": snap.migrations,
                "in_flight": snap.in_flight,
                "decode_time_s": snap.decode_time_s,
                "prefill_instances": [p.name for p in snap.prefill],
                "decode_instances": [d.name for d in snap.decode],
                "decode": [repr(d) for d in snap.decode],
                "index_blocks": {f"{loc}/{tier}": n for loc, tier, n in snap.index.per_holder},
                "index_drift": {
                    "added": snap.index.drift_added,
                    "removed": snap.index.drift_removed,
                },
            }
        if self.store_resync is not None:
            rs = self.store_resync.stats
            out["store_resync"] = {
                "runs": rs.runs,
                "errors": rs.errors,
                "last_age_s": None if rs.last_at is None else round(now - rs.last_at, 3),
                "last_blocks": rs.last_blocks,
                "last_added": rs.last_added,
                "last_removed": rs.last_removed,
                "worker_runs": self.store_resync.worker_runs,
                "worker_errors": self.store_resync.worker_errors,
            }
        if self.front is not None:
            st = self.front.stats
            out["front_door"] = {
                "requests": st.requests,
                "rejected": st.rejected,
                "completed": st.completed,
                "failed": st.failed,
                "cancelled": st.cancelled,
                "reused_tokens": st.reused_tokens,
                "computed_tokens": st.computed_tokens,
                "fetched_blocks": st.fetched_blocks,
                "stored_blocks": st.stored_blocks,
                "cpp": st.cpp,
                "kv_full": st.kv_full,
                "audit_unconfirmed": st.audit_unconfirmed,
                "rejected_by_reason": dict(st.by_reason),
            }
        return out

    async def stop(self) -> None:
        """Close the worker links and flush the audit."""
        for task in (self._store_task, self._resync_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        for link in self.links.values():
            await link.close()
        if self.audit is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.audit.close)
