"""The per-process snapshot registry and the versioned ``/telemetry`` document it builds."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .plain import to_plain
from .procnet import IfaceCounters, iface_addresses, read_proc_net_dev

__all__ = ["SCHEMA", "ComponentInfo", "TelemetryRegistry"]

SCHEMA = "mooncake.telemetry/1"
"""Version tag of the ``/telemetry`` document. A reader refuses other major versions."""

KNOWN_KINDS = ("transfer", "master", "conductor", "audit_writer", "engine", "kvcache")
"""Kinds the collector and the Prometheus exporter understand field by field; any other
kind is still served (its top-level numbers become generic gauges)."""


@dataclass(frozen=True, slots=True)
class ComponentInfo:
    """Who serves a telemetry document.

    Attributes:
        name: Component name (``store-0``, ``conductor``...), unique in the cluster.
        role: Role (``master``, ``store``, ``conductor``, ``prefill``, ``decode``...).
        version: Package version it runs.
        pid: Process id.
        hostname: Host it runs on.
        started_at: Wall-clock start (unix seconds).
    """

    name: str
    role: str
    version: str = ""
    pid: int = field(default_factory=os.getpid)
    hostname: str = field(default_factory=socket.gethostname)
    started_at: float = field(default_factory=time.time)


SnapshotFn = Callable[[], Any]
OsCountersFn = Callable[[], tuple[IfaceCounters, ...]]


class TelemetryRegistry:
    """Snapshot sources of one process, read together into one JSON document.

    Components register a zero-argument function returning their ``snapshot()``; the
    registry never keeps snapshots, it calls the functions when a document is asked for.
    A function that raises shows up as an ``error`` entry instead of breaking the page.

    Args:
        component: Identity of the process.
        os_counters: Source of the OS per-interface counters (default ``/proc/net/dev``;
            tests inject fixtures); ``None`` leaves them, and the address map, out.
        iface_map: Source of the address -> interface map for the TE NICs.
    """

    def __init__(
        self,
        component: ComponentInfo,
        *,
        os_counters: OsCountersFn | None = read_proc_net_dev,
        iface_map: Callable[[], dict[str, str]] = iface_addresses,
    ) -> None:
        self.component = component
        self._os_counters = os_counters
        self._iface_map = iface_map
        self._lock = threading.Lock()
        self._sources: dict[str, tuple[str, SnapshotFn]] = {}

    def register(self, name: str, fn: SnapshotFn, *, kind: str | None = None) -> None:
        """Add a snapshot source.

        Args:
            name: Key in the document (unique in this process), e.g. ``transfer``.
            fn: Returns an immutable snapshot (dataclass) or plain JSON data.
            kind: What the snapshot is (one of ``KNOWN_KINDS`` to get field-level
                metrics); default: ``name``.

        Raises:
            ValueError: ``name`` empty or already registered.
        """
        if not name:
            raise ValueError("snapshot name must not be empty")
        with self._lock:
            if name in self._sources:
                raise ValueError(f"snapshot {name!r} is already registered")
            self._sources[name] = (kind or name, fn)

    def unregister(self, name: str) -> None:
        """Remove a source (no error if unknown)."""
        with self._lock:
            self._sources.pop(name, None)

    def names(self) -> tuple[str, ...]:
        """Registered source names, sorted."""
        with self._lock:
            return tuple(sorted(self._sources))

    def document(self, now: float | None = None) -> dict[str, Any]:
        """Read every source into the versioned telemetry document.

        Args:
            now: Wall-clock time to stamp (default: ``time.time()``).

        Returns:
            ``{"schema", "component", "taken_at", "snapshots": {name: {"kind", "data"}
            | {"kind", "error"}}, "os_nics": [...], "nic_ifaces": {address: iface}}``
            (see docs/metrics.md).
        """
        now = time.time() if now is None else now
        with self._lock:
            sources = dict(self._sources)
        snaps: dict[str, dict[str, Any]] = {}
        for name, (kind, fn) in sorted(sources.items()):
            try:
                snaps[name] = {"kind": kind, "data": to_plain(fn())}
            except Exception as exc:  # one broken source must not hide the others
                snaps[name] = {"kind": kind, "error": f"{type(exc).__name__}: {exc}"}
        c = self.component
        os_nics = [] if self._os_counters is None else to_plain(self._os_counters())
        return {
            "schema": SCHEMA,
            "component": {
                "name": c.name,
                "role": c.role,
                "version": c.version,
                "pid": c.pid,
                "hostname": c.hostname,
                "started_at": c.started_at,
                "uptime_s": round(max(0.0, now - c.started_at), 3),
            },
            "taken_at": now,
            "snapshots": snaps,
            "os_nics": os_nics,
            "nic_ifaces": self._iface_map() if self._os_counters is not None else {},
        }
