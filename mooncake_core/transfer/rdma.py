"""rdma transport: detection, the refusal messages, options and transport selection.

Pure parts only (no pyverbs import at module level): the verbs code is in
``rdma_verbs`` (device, memory regions, queue pairs), the transport in
``rdma_transport``, the wire block in ``rdma_info`` and the posting window in
``rdma_window``.

``protocol: rdma`` needs an RDMA device (``/sys/class/infiniband``) *and* pyverbs;
without either the engine refuses at construction with a message naming what is
missing. ``auto`` uses rdma for a segment only when this engine opened a device and the
segment's owner advertises rdma; otherwise shm (same host) or tcp, as before.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from .request import TransferError

SYSFS_INFINIBAND = "/sys/class/infiniband"
INSTALL_HINT = "pip install 'mooncake-py[rdma]'"


@dataclass(frozen=True, slots=True)
class RdmaOptions:
    """Knobs of the rdma transport (not yet in ``TransferConfig``).

    Attributes:
        device: Device to open (``mlx5_0``); None = the first with an active port.
        port: Port number on the device.
        gid_index: GID table index; None = 0 on InfiniBand, the first RoCE v2 GID on
            Ethernet.
        window: Work requests in flight per queue pair.
        poll_idle_s: Longest sleep between CQ polls while requests are in flight.
    """

    device: str | None = None
    port: int = 1
    gid_index: int | None = None
    window: int = 64
    poll_idle_s: float = 0.0005

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 255:
            raise ValueError(f"rdma port must be 1..255, got {self.port}")
        if self.gid_index is not None and not 0 <= self.gid_index < 1 << 16:
            raise ValueError(f"rdma gid_index must be 0..65535, got {self.gid_index}")
        if not 1 <= self.window <= 4096:
            raise ValueError(f"rdma window must be 1..4096, got {self.window}")
        if not 0 < self.poll_idle_s <= 0.1:
            raise ValueError(f"rdma poll_idle_s must be in (0, 0.1], got {self.poll_idle_s}")


@dataclass(frozen=True, slots=True)
class RdmaSupport:
    """What this host offers for rdma.

    Attributes:
        devices: RDMA device names found in sysfs.
        pyverbs_error: Why ``import pyverbs`` failed, or None when it imports.
        root: The sysfs directory that was read.
    """

    devices: tuple[str, ...]
    pyverbs_error: str | None
    root: str = SYSFS_INFINIBAND

    @property
    def usable(self) -> bool:
        """A device exists and pyverbs imports (opening the device may still fail)."""
        return bool(self.devices) and self.pyverbs_error is None


@dataclass(frozen=True, slots=True)
class RdmaStatus:
    """The rdma transport of one engine, for operators (``TransferEngine.rdma_status()``).

    Attributes:
        device: Opened device (``mlx5_0``), or None when rdma is not in use.
        port: Its port.
        gid_index: GID index in use.
        reason: Why rdma is not in use (None when it is).
        links: Queue pairs open now (one per remote segment in use).
        errors: Slices that failed on a queue pair.
        retries: Slices re-sent over rdma after a failure.
        fallback_slices: Slices sent over tcp because rdma was paused for their remote
            or their local buffer has no memory region.
        paused_remotes: Remote servers whose traffic goes over tcp now.
    """

    device: str | None
    port: int = 0
    gid_index: int = 0
    reason: str | None = None
    links: int = 0
    errors: int = 0
    retries: int = 0
    fallback_slices: int = 0
    paused_remotes: tuple[str, ...] = ()


def rdma_devices(root: str = SYSFS_INFINIBAND) -> list[str]:
    """Names of RDMA devices (``mlx5_0``...), empty when there are none."""
    try:
        return sorted(os.listdir(root))
    except OSError:
        return []


def pyverbs_import_error() -> str | None:
    """None when pyverbs imports, else the import error's text."""
    try:
        import pyverbs.device  # noqa: F401  (optional extra)
    except ImportError as exc:
        return str(exc) or type(exc).__name__
    return None


def probe(root: str = SYSFS_INFINIBAND) -> RdmaSupport:
    """Look for devices and pyverbs (cheap: pyverbs is imported only if a device exists)."""
    devices = tuple(rdma_devices(root))
    return RdmaSupport(devices, pyverbs_import_error() if devices else None, root)


def refusal(support: RdmaSupport) -> str | None:
    """Why ``protocol: rdma`` cannot run here, or None when it may.

    The message names what is missing: no device, or pyverbs not installed.
    """
    if not support.devices:
        return (
            f"rdma requested but no RDMA device found ({support.root} is empty or missing); "
            "use protocol 'tcp' or 'auto', or run on a host with an RDMA NIC or soft-RoCE "
            "(rdma link add rxe0 type rxe netdev <iface>)"
        )
    if support.pyverbs_error is not None:
        return (
            f"rdma requested and devices {list(support.devices)} exist, but pyverbs is not "
            f"installed ({support.pyverbs_error}); install it with: {INSTALL_HINT}"
        )
    return None


def require_rdma(root: str = SYSFS_INFINIBAND, options: RdmaOptions | None = None) -> None:
    """Check that this host can run the rdma transport: device, pyverbs, and it opens.

    Raises:
        TransferError: No device, pyverbs missing, or the device cannot be opened (the
            message names the device and the verbs error).
    """
    support = probe(root)
    msg = refusal(support)
    if msg is not None:
        raise TransferError(msg)
    from .rdma_verbs import RdmaDevice

    RdmaDevice.open(options or RdmaOptions(), support.devices).close()


def select_transport(
    protocol: str,
    *,
    name: str,
    same_host_shm: bool,
    local_rdma: bool,
    peer_transports: Sequence[str],
) -> str:
    """Choose the transport for one remote segment.

    Args:
        protocol: Configured ``transfer.protocol`` (auto, tcp, shm, rdma).
        name: Segment name (for messages).
        same_host_shm: The segment is shm-backed and on this host.
        local_rdma: This engine opened an RDMA device.
        peer_transports: Transports the segment's owner advertises.

    Returns:
        ``shm``, ``rdma`` or ``tcp``.

    Raises:
        TransferError: ``shm`` or ``rdma`` requested and impossible for this segment.
    """
    if protocol == "shm":
        if not same_host_shm:
            raise TransferError(f"shm requested but {name} is not shm-backed or not on this host")
        return "shm"
    if protocol == "tcp":
        return "tcp"
    if protocol == "rdma":
        if not local_rdma:
            raise TransferError(f"rdma requested but this engine has no RDMA device open ({name})")
        if "rdma" not in peer_transports:
            raise TransferError(
                f"rdma requested but {name} does not offer rdma "
                f"(it offers {list(peer_transports)}); use protocol 'auto' to fall back"
            )
        return "rdma"
    if protocol != "auto":
        raise TransferError(f"unknown transfer protocol {protocol!r}")
    if same_host_shm:
        return "shm"
    if local_rdma and "rdma" in peer_transports:
        return "rdma"
    return "tcp"
