"""rdma transport: detection and a clear refusal where it cannot run.

The reference machines have no RDMA device, so this build has no RDMA data path. What
exists: device discovery through sysfs, and ``require_rdma()``, which the engine calls
when ``protocol: rdma`` is configured. Without a device it refuses with a message that
says so; with a device it still refuses, naming the device, because a data path that
was never run on hardware must not pretend to work (see docs/transfer.md).
"""

from __future__ import annotations

import os

from .request import TransferError

SYSFS_INFINIBAND = "/sys/class/infiniband"


def rdma_devices(root: str = SYSFS_INFINIBAND) -> list[str]:
    """Names of RDMA devices (``mlx5_0``...), empty when there are none."""
    try:
        return sorted(os.listdir(root))
    except OSError:
        return []


def require_rdma(root: str = SYSFS_INFINIBAND) -> None:
    """Refuse ``protocol: rdma`` with the reason.

    Raises:
        TransferError: Always: no device, or a device but no tested data path.
    """
    devices = rdma_devices(root)
    if not devices:
        raise TransferError(
            f"rdma requested but no RDMA device found ({root} is empty or missing); "
            "use protocol 'tcp' or 'auto'"
        )
    try:
        import pyverbs  # noqa: F401  (optional extra)
    except ImportError as exc:
        raise TransferError(
            f"rdma requested and devices {devices} exist, but pyverbs is not installed: {exc}"
        ) from exc
    raise TransferError(
        f"rdma requested and devices {devices} exist, but this build has no RDMA data path "
        "(never run on hardware); use protocol 'tcp' or 'auto'"
    )
