"""Options of the dashboard that the cluster config does not hold (yet)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["WebOptions"]


@dataclass(frozen=True, slots=True)
class WebOptions:
    """How the dashboard reaches the cluster and how it serves pages.

    Attributes:
        master: ``host:port`` of the master RPC (``None``: from the config).
        secret_file: Cluster secret (``None``: ``ClusterConfig.secret_path``).
        audit_url: Audit database URL (``None``: the config's, if it exists; ``""``: none).
        targets: Extra telemetry targets ``NAME=URL`` / ``NAME:ROLE=URL``.
        targets_only: Poll only ``targets`` (no config or run-state targets).
        interval_s: Seconds between collector polls (and SSE pushes).
        poll_timeout_s: Timeout of each collector request.
        history: Points kept per NIC chart.
        page_cap: Largest page size a list endpoint accepts.
        session_ttl_s: Lifetime of a login session.
        anonymous_read: Override of ``DashboardConfig.anonymous_read`` (``None``: config).
        bind_host: Address the server binds (one of the names accepted in ``Host``).
        allowed_hosts: More ``Host`` names to accept, beside ``dashboard.allowed_hosts``.
    """

    master: str | None = None
    secret_file: Path | None = None
    audit_url: str | None = None
    targets: tuple[str, ...] = field(default_factory=tuple)
    targets_only: bool = False
    interval_s: float = 1.0
    poll_timeout_s: float = 0.8
    history: int = 120
    page_cap: int = 1000
    session_ttl_s: float = 12 * 3600.0
    anonymous_read: bool | None = None
    bind_host: str = "127.0.0.1"
    allowed_hosts: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {self.interval_s}")
        if not self.poll_timeout_s > 0:
            raise ValueError(f"poll_timeout_s must be > 0, got {self.poll_timeout_s}")
        if self.history < 2:
            raise ValueError(f"history must be >= 2, got {self.history}")
        if self.page_cap < 1:
            raise ValueError(f"page_cap must be >= 1, got {self.page_cap}")
