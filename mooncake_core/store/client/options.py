"""Options of the store client (what it connects to, what it hosts, how it moves data)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from mooncake_core.config.models import MasterConfig, TransferConfig

from ..errors import ErrorCode, InvalidArgumentError

if TYPE_CHECKING:
    from mooncake_core.config import ClusterConfig

Transport = Literal["auto", "tcp", "shm"]


@dataclass(frozen=True, slots=True)
class SegmentSpec:
    """A DRAM segment the client hosts and lends to the store.

    Attributes:
        name: cluster-unique segment name (no ``/``: it is also the Transfer Engine
            segment name under this client's ``host:port``).
        size: bytes.
        location: memory location (``cpu:N``).
        ssd_capacity: bytes of the SSD tier behind this segment (0: none); announced
            at mount so the master offloads this segment's objects to it. The tier
            itself is run by the store node (``mooncake store node --ssd-dir``).
    """

    name: str
    size: int
    location: str = "cpu:0"
    ssd_capacity: int = 0


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """How a :class:`~mooncake_core.store.client.Client` connects and what it hosts.

    Attributes:
        master: ``host:port`` of the master, or ``etcd://host:port[/cluster]`` to find
            the HA leader through etcd and follow it on change.
        secret: cluster secret (control-plane token and data-plane handshake), or None.
        client_id: identity at the master (default: host-pid-random).
        segments: segments to host and mount; empty: a pure user (reads and writes
            other processes' segments only).
        host: address the Transfer Engine's data server binds and advertises.
        data_port: data server port (0: any free port).
        transport: ``auto`` (shm on this host, tcp elsewhere), or force ``tcp``/``shm``.
        transfer: Transfer Engine settings (``transport`` overrides its protocol).
        master_config: the master's limits, checked here before any call (the master
            checks them again).
        rpc_timeout_s: deadline of each master call.
        connect_timeout_s: how long ``setup`` waits for the master.
        heartbeat_interval_s: heartbeat period.
        fast_control: send the hot master calls over the master's fast control channel
            when it has one (docs/store.md); ``False``: every call over gRPC.
        fast_unix: on the master's host, reach the fast channel through the abstract
            Unix socket it advertises (docs/store.md); ``False``: its TCP port.
    """

    master: str = "127.0.0.1:50051"
    secret: bytes | None = None
    client_id: str | None = None
    segments: tuple[SegmentSpec, ...] = ()
    host: str = "127.0.0.1"
    data_port: int = 0
    transport: Transport = "auto"
    transfer: TransferConfig = field(default_factory=TransferConfig)
    master_config: MasterConfig = field(default_factory=MasterConfig)
    rpc_timeout_s: float = 10.0
    connect_timeout_s: float = 10.0
    heartbeat_interval_s: float = 1.0
    fast_control: bool = True
    fast_unix: bool = True

    def __post_init__(self) -> None:
        names = [s.name for s in self.segments]
        for s in self.segments:
            if not s.name or "/" in s.name or len(s.name) > 256:
                raise InvalidArgumentError(
                    ErrorCode.INVALID_PARAMS,
                    f"segment name must be 1..256 characters without '/', got {s.name!r}",
                )
            if not isinstance(s.size, int) or s.size <= 0:
                raise InvalidArgumentError(
                    ErrorCode.INVALID_PARAMS, f"segment {s.name!r}: size must be > 0, got {s.size}"
                )
            if not isinstance(s.ssd_capacity, int) or s.ssd_capacity < 0:
                raise InvalidArgumentError(
                    ErrorCode.INVALID_PARAMS,
                    f"segment {s.name!r}: ssd_capacity must be >= 0, got {s.ssd_capacity}",
                )
        if len(set(names)) != len(names):
            raise InvalidArgumentError(ErrorCode.INVALID_PARAMS, f"segment names repeat: {names}")
        if self.transport not in ("auto", "tcp", "shm"):
            raise InvalidArgumentError(
                ErrorCode.INVALID_PARAMS,
                f"transport must be auto, tcp or shm, got {self.transport!r}",
            )

    @classmethod
    def from_cluster(
        cls,
        cfg: ClusterConfig,
        *,
        master: str | None = None,
        secret_file: Path | None = None,
        **overrides: object,
    ) -> ClientOptions:
        """Options from the cluster config: master address, limits, transfer settings.

        Args:
            cfg: the loaded cluster config.
            master: ``host:port`` (or ``etcd://...``) overriding the configured master
                (default: ``cfg.master_target``, the etcd URL when HA is enabled).
            secret_file: secret file overriding ``cfg.secret_path``; the secret is read
                when the file exists (no file: no authentication).
            overrides: any other field of this class.
        """
        from ..auth import read_secret

        if master is None:
            master = cfg.master_target
        path = secret_file or cfg.secret_path
        secret = read_secret(path) if path.is_file() else None
        kw: dict[str, object] = {
            "master": master,
            "secret": secret,
            "transfer": cfg.transfer,
            "master_config": cfg.master,
            "heartbeat_interval_s": cfg.master.heartbeat_interval_s,
        }
        kw.update(overrides)
        return cls(**kw)  # type: ignore[arg-type]

    def engine_config(self) -> TransferConfig:
        """The Transfer Engine config with ``transport`` applied."""
        if self.transport == "auto":
            return self.transfer
        return self.transfer.model_copy(update={"protocol": self.transport})
