"""Segment metadata: where a named segment lives and how to reach it.

``SegmentDirectory`` is the pluggable interface (the Store master will implement it);
``PeerDirectory`` is the peer-to-peer implementation: a segment name is
``host:port[/segment]`` and resolving it asks that engine's server directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from . import handshake
from .request import TransferError


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """Everything an initiator needs to reach one remote segment.

    Attributes:
        name: Full name, ``host:port/segment``.
        segment_id: Id the target's data plane knows the segment by.
        size: Bytes; every request is checked against it before it is sent.
        nics: ``host:port`` data servers preferred for this segment's memory.
        secondary_nics: Servers to use when all preferred ones are down or paused.
        location: Memory location on the target (``cpu:0``...).
        host_id: Identity of the target's host; equal ids mean shm is possible.
        shm_path: Shared-memory file backing the segment, if any.
        transports: Transports the target offers for it (hints).
    """

    name: str
    segment_id: int
    size: int
    nics: tuple[str, ...]
    secondary_nics: tuple[str, ...] = ()
    location: str = "cpu:0"
    host_id: str = ""
    shm_path: str | None = None
    transports: tuple[str, ...] = ("tcp",)


class SegmentDirectory(Protocol):
    """Resolves segment names to :class:`SegmentInfo`."""

    def resolve(self, name: str) -> SegmentInfo:
        """Look a segment up.

        Raises:
            TransferError: Unknown name or unreachable owner.
        """
        ...


def split_name(name: str) -> tuple[str, int, str]:
    """Split ``host:port[/segment]``.

    Raises:
        TransferError: Not of that shape.
    """
    server, _, segment = name.partition("/")
    host, sep, port_s = server.rpartition(":")
    if not sep or not host or not port_s.isdigit() or not 0 < int(port_s) < 65536:
        raise TransferError(f"bad segment name {name!r}; expected host:port[/segment]")
    return host, int(port_s), segment


class PeerDirectory:
    """Peer-to-peer resolution: connect to ``host:port`` and ask (LOOKUP).

    Args:
        secret: Cluster secret, or None.
        connect_timeout_s: Connect + handshake timeout.
    """

    def __init__(self, secret: bytes | None = None, connect_timeout_s: float = 5.0) -> None:
        self.secret = secret
        self.connect_timeout_s = connect_timeout_s

    def resolve(self, name: str) -> SegmentInfo:
        host, port, segment = split_name(name)
        try:
            sock = handshake.connect(
                host, port, local_ip=None, secret=self.secret, timeout=self.connect_timeout_s
            )
        except handshake.AuthError:
            raise
        except (OSError, ValueError) as exc:
            raise TransferError(f"cannot reach {host}:{port} to open {name!r}: {exc}") from exc
        try:
            info = handshake.lookup(sock, segment)
        except (OSError, ValueError) as exc:
            raise TransferError(f"lookup of {name!r} failed: {exc}") from exc
        finally:
            sock.close()
        try:
            return SegmentInfo(
                name=f"{host}:{port}/{info['segment']}",
                segment_id=int(info["segment_id"]),
                size=int(info["size"]),
                nics=tuple(str(n) for n in info["nics"]),
                secondary_nics=tuple(str(n) for n in info.get("secondary_nics", ())),
                location=str(info.get("location", "cpu:0")),
                host_id=str(info.get("host_id", "")),
                shm_path=info.get("shm_path"),
                transports=tuple(str(t) for t in info.get("transports", ("tcp",))),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise TransferError(f"bad lookup reply for {name!r}: {exc}") from exc


@dataclass(frozen=True, eq=False)
class RemoteSegment:
    """Handle of an opened remote segment (returned by ``TransferEngine.open_segment``).

    Attributes:
        info: Resolved metadata.
        transport: Transport the engine chose for it (``tcp``, ``shm``, ``rdma``).
    """

    info: SegmentInfo
    transport: str

    @property
    def name(self) -> str:
        """Full segment name."""
        return self.info.name

    @property
    def size(self) -> int:
        """Segment size in bytes."""
        return self.info.size
