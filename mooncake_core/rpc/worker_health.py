"""Whether a worker answers its ``Health`` RPC: the readiness probe of ``cluster up`` and
``cluster status``.

A module of its own, outside :mod:`mooncake_core.worker`: importing that package loads
torch (about 2 s), which a status check must not pay to send one RPC.
"""

from __future__ import annotations

import grpc

from mooncake_core.rpc import worker_pb2 as pb
from mooncake_core.rpc import worker_pb2_grpc as pbg
from mooncake_core.store.auth import auth_metadata


def probe_worker(address: str, timeout: float = 1.0, secret: bytes | None = None) -> bool:
    """Whether a worker answers ``Health`` at ``address`` (``host:port``) within ``timeout``.

    Never raises for an unreachable worker (or one that refuses the token).
    """
    try:
        with grpc.insecure_channel(address) as ch:
            pbg.WorkerStub(ch).Health(
                pb.HealthRequest(), timeout=timeout, metadata=auth_metadata(secret)
            )
        return True
    except grpc.RpcError:
        return False
