"""A worker process's telemetry server, in process: ``/telemetry`` carries the engine and
Transfer Engine snapshots, and a metrics port already in use fails ``start()`` clearly."""

from __future__ import annotations

import socket

import httpx
import pytest

from mooncake_core.config import ClusterConfig
from mooncake_core.worker.service import WorkerService, WorkerServiceOptions

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _cluster() -> ClusterConfig:
    return ClusterConfig.model_validate({"model": {"layers": 2, "hidden": 64, "intermediate": 128}})


def _options(metrics_port: int | None) -> WorkerServiceOptions:
    return WorkerServiceOptions(
        name="decode-t", role="decode", num_blocks=32, device="cpu", metrics_port=metrics_port
    )


async def test_worker_serves_engine_and_transfer_telemetry() -> None:
    svc = WorkerService(_cluster(), _options(0))
    await svc.start()
    try:
        assert svc.metrics_port
        base = f"http://127.0.0.1:{svc.metrics_port}"
        async with httpx.AsyncClient(timeout=5) as c:
            doc = (await c.get(f"{base}/telemetry")).json()
            health = (await c.get(f"{base}/health")).json()
        assert doc["component"]["name"] == "decode-t" and doc["component"]["role"] == "decode"
        snaps = doc["snapshots"]
        assert snaps["engine"]["kind"] == "engine"
        assert snaps["engine"]["data"]["cache"]["num_blocks"] == 32
        assert [n["nic"] for n in snaps["transfer"]["data"]["nics"]] == ["127.0.0.1"]
        assert health == {"status": "ok", "name": "decode-t", "role": "decode"}
    finally:
        await svc.stop()


async def test_worker_metrics_port_in_use_fails_start() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = int(held.getsockname()[1])
        svc = WorkerService(_cluster(), _options(port))
        try:
            with pytest.raises(RuntimeError, match="metrics_port"):
                await svc.start()
        finally:
            await svc.stop()


async def test_worker_counts_refused_calls() -> None:
    import dataclasses

    import grpc

    from mooncake_core.rpc import worker_pb2 as wpb
    from mooncake_core.rpc import worker_pb2_grpc as wpbg
    from mooncake_core.store.auth import auth_metadata

    secret = b"s3cret-for-the-test"
    svc = WorkerService(_cluster(), dataclasses.replace(_options(0), secret=secret))
    await svc.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{svc.rpc_port}") as ch:
            stub = wpbg.WorkerStub(ch)
            for md in ((), auth_metadata(b"wrong"), auth_metadata(b"wrong")):
                with pytest.raises(grpc.aio.AioRpcError) as ei:
                    await stub.Health(wpb.HealthRequest(), metadata=md, timeout=5)
                assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
            await stub.Health(wpb.HealthRequest(), metadata=auth_metadata(secret), timeout=5)
        assert svc.auth_failures == {"/mooncake.worker.Worker/Health": 3}
        async with httpx.AsyncClient(timeout=5) as c:
            doc = (await c.get(f"http://127.0.0.1:{svc.metrics_port}/telemetry")).json()
            metrics = (await c.get(f"http://127.0.0.1:{svc.metrics_port}/metrics")).text
        assert doc["snapshots"]["auth"]["data"]["auth_failures_total"] == 3
        assert "auth_failures_total" in metrics
        assert secret.decode() not in metrics and secret.decode() not in str(doc)
    finally:
        await svc.stop()
