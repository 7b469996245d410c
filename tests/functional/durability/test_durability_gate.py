"""The NOT_LEADER gate of a master that is not serving, in-process over loopback gRPC."""

from __future__ import annotations

import grpc
import pytest

from mooncake_core.config.models import MasterConfig
from mooncake_core.rpc import store_pb2 as pb
from mooncake_core.rpc import store_pb2_grpc as pb_grpc
from mooncake_core.store.auth import auth_metadata
from mooncake_core.store.client.async_master import MasterClient
from mooncake_core.store.errors import AuthError
from mooncake_core.store.master_service import MasterService, ServiceOptions

SECRET = b"s3cret"


async def test_follower_refuses_after_auth_and_answers_readiness() -> None:
    svc = MasterService(
        MasterConfig(), ServiceOptions(port=0, metrics_port=None, secret=SECRET), role="follower"
    )
    svc.leader_hint = ("m1", "127.0.0.1:50051")
    await svc.start()
    try:
        addr = f"127.0.0.1:{svc.port}"
        async with grpc.aio.insecure_channel(addr) as ch:
            stub = pb_grpc.MasterServiceStub(ch)
            with pytest.raises(grpc.aio.AioRpcError) as no_token:
                await stub.Exist(pb.ExistRequest(key="k"))
            assert no_token.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Exist(pb.ExistRequest(key="k"), metadata=auth_metadata(SECRET))
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert refused.value.details() == (
                "NOT_LEADER: this master is follower; the leader is m1 at 127.0.0.1:50051"
            )
            trailing = dict(refused.value.trailing_metadata() or ())
            assert trailing.get("mooncake-leader") == "127.0.0.1:50051"
        async with MasterClient(addr, secret=SECRET) as mc:
            r = await mc.get_readiness()
            assert (r.state, r.serving, r.leader_id, r.leader_address) == (
                "follower",
                False,
                "m1",
                "127.0.0.1:50051",
            )
        async with MasterClient(addr) as anonymous:
            with pytest.raises(AuthError):
                await anonymous.get_readiness()
    finally:
        await svc.stop()
