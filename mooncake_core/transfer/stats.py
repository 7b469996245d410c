"""Counters of the Transfer Engine and their immutable snapshot (the read-model)."""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NicStats:
    """One local NIC. Bytes and slices count both roles: as initiator and as server.

    Attributes:
        nic: NIC address as configured.
        bytes_sent: Payload bytes that left through this NIC (our WRITEs + READs we served).
        bytes_received: Payload bytes that arrived (our READs + WRITEs we served).
        slices_sent: Slices whose payload left through this NIC.
        slices_received: Slices whose payload arrived through this NIC.
        errors: Failed slices initiated over this NIC (connect, I/O, timeout).
        retries: Slices re-sent after a failure on a path through this NIC.
        paused: Whether the NIC is paused now after repeated failures.
        paused_until: Monotonic time the pause ends, or None.
        malformed_frames: Frames the server on this NIC rejected (connection closed).
        auth_failures: Connections refused for a wrong or missing secret.
        bounds_errors: Requests refused for out-of-bounds or unknown segments.
        connections: Data connections accepted by the server on this NIC.
    """

    nic: str
    bytes_sent: int
    bytes_received: int
    slices_sent: int
    slices_received: int
    errors: int
    retries: int
    paused: bool
    paused_until: float | None
    malformed_frames: int
    auth_failures: int
    bounds_errors: int
    connections: int


@dataclass(frozen=True, slots=True)
class TransportStats:
    """One transport (tcp, shm, rdma): what we initiated, and what peers moved through us.

    Attributes:
        name: ``tcp``, ``shm`` or ``rdma``.
        requests_completed: Our requests over it that completed.
        requests_failed: Our requests over it that failed.
        bytes: Payload bytes our requests moved (both directions).
        slices: Slices our requests moved.
        served_bytes: Payload bytes peers moved into or out of our segments (tcp: our
            data servers; shm: the peers' ledgers; rdma: 0, one-sided verbs are not
            seen by the target).
        served_requests: Their slices (tcp) or copy requests (shm).
    """

    name: str
    requests_completed: int
    requests_failed: int
    bytes: int
    slices: int
    served_bytes: int = 0
    served_requests: int = 0


@dataclass(frozen=True, slots=True)
class TransferSnapshot:
    """Everything ``TransferEngine.snapshot()`` reports, consistent at ``taken_at``."""

    segment_name: str
    taken_at: float
    nics: tuple[NicStats, ...]
    transports: tuple[TransportStats, ...]
    endpoints: int
    pending_requests: int
    paused_remotes: tuple[str, ...] = ()
    """Remote data servers (``host:port``) paused after repeated failures."""

    def nic(self, address: str) -> NicStats:
        """The stats of one NIC.

        Raises:
            KeyError: No NIC with that address.
        """
        for n in self.nics:
            if n.nic == address:
                return n
        raise KeyError(f"no NIC {address!r}; have {[n.nic for n in self.nics]}")

    def transport(self, name: str) -> TransportStats:
        """The stats of one transport.

        Raises:
            KeyError: Unknown transport name.
        """
        for t in self.transports:
            if t.name == name:
                return t
        raise KeyError(f"no transport {name!r}")


class Counters:
    """Mutable, thread-safe integer counters keyed by name (internal)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, int] = {}

    def add(self, name: str, value: int = 1) -> None:
        """Add ``value`` to counter ``name``."""
        with self._lock:
            self._values[name] = self._values.get(name, 0) + value

    def get(self, name: str) -> int:
        """Current value (0 if never added)."""
        with self._lock:
            return self._values.get(name, 0)

    def copy(self) -> dict[str, int]:
        """All values at once."""
        with self._lock:
            return dict(self._values)


def nic_stats(
    nic: str,
    values: dict[str, int],
    native: dict[str, int],
    server: dict[str, int],
    paused: bool,
    paused_until: float | None,
) -> NicStats:
    """Assemble one NIC's stats from initiator counters (``<nic>|name``), the C server
    loop's counters and the Python server's counters."""

    def v(key: str) -> int:
        return values.get(f"{nic}|{key}", 0)

    return NicStats(
        nic=nic,
        bytes_sent=v("bytes_sent") + native.get("bytes_sent", 0),
        bytes_received=v("bytes_received") + native.get("bytes_received", 0),
        slices_sent=v("slices_sent") + native.get("slices_sent", 0),
        slices_received=v("slices_received") + native.get("slices_received", 0),
        errors=v("errors"),
        retries=v("retries"),
        paused=paused,
        paused_until=paused_until,
        malformed_frames=native.get("malformed_frames", 0) + server.get("malformed_frames", 0),
        auth_failures=server.get("auth_failures", 0),
        bounds_errors=native.get("bounds_errors", 0) + native.get("unknown_segments", 0),
        connections=server.get("connections", 0),
    )


def transport_stats(
    name: str, values: dict[str, int], served: tuple[int, int] = (0, 0)
) -> TransportStats:
    """One transport's stats from counters named ``<transport>|name`` and what peers
    moved through us, ``served`` = (bytes, requests)."""
    return TransportStats(
        name=name,
        requests_completed=values.get(f"{name}|requests_completed", 0),
        requests_failed=values.get(f"{name}|requests_failed", 0),
        bytes=values.get(f"{name}|bytes", 0),
        slices=values.get(f"{name}|slices", 0),
        served_bytes=served[0],
        served_requests=served[1],
    )
