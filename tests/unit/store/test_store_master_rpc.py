"""The master's RPC surface is described once (``master_rpc.SURFACE``): it must match
``store.proto``'s service, name a servicer handler for each call and packed op, drive
both clients (one method per call, nothing written by hand but ``BY_HAND``) and the
fast channel's op table."""

from __future__ import annotations

import inspect

from mooncake_core.rpc import store_pb2 as pb
from mooncake_core.store import master_rpc as rpc
from mooncake_core.store.client.async_master import MasterClient
from mooncake_core.store.client.sync_master import SyncMaster
from mooncake_core.store.fast_control import KEPT_OPS, OPS
from mooncake_core.store.master_servicer import MasterServicer

SERVICE = pb.DESCRIPTOR.services_by_name["MasterService"]


def test_the_surface_and_the_hand_written_calls_are_the_whole_service() -> None:
    described = [c.method for c in rpc.SURFACE]
    assert len(described) == len(set(described))
    assert sorted(described + list(rpc.BY_HAND)) == sorted(SERVICE.methods_by_name)


def test_each_call_builds_its_methods_request_and_has_a_handler() -> None:
    for c in rpc.SURFACE:
        m = SERVICE.methods_by_name[c.method]
        params = list(inspect.signature(c.request).parameters.values())[1:]
        needed = [p for p in params if p.default is inspect.Parameter.empty]
        req = c.request("cid", *[_sample(p.name) for p in needed])
        assert req.DESCRIPTOR is m.input_type, c.method
        assert inspect.iscoroutinefunction(getattr(MasterServicer, c.method)), c.method
        if c.packed is not None:
            assert inspect.iscoroutinefunction(getattr(MasterServicer, c.packed.name))


def test_both_clients_have_one_method_per_call() -> None:
    for client, kind in ((SyncMaster, rpc.SyncCall), (MasterClient, rpc.AsyncCall)):
        bound = {v.call.method: k for k, v in vars(client).items() if isinstance(v, kind)}
        assert sorted(bound) == sorted(c.method for c in rpc.SURFACE), client.__name__
        for c in rpc.SURFACE:
            assert getattr(client, bound[c.method]).__doc__ == c.doc


def test_the_fast_op_table_is_the_surfaces_fast_calls() -> None:
    fast = {c.fast: c.method for c in rpc.SURFACE if c.fast}
    packed = {c.packed.code: c.packed.name for c in rpc.SURFACE if c.packed is not None}
    kept = {op.code: op.name for op in KEPT_OPS}
    assert {op.code: op.name for op in OPS} == fast | packed | kept
    assert len(fast) + len(packed) + len(kept) == len(OPS)  # no code used twice


def _sample(name: str) -> object:
    return {
        "key": "k",
        "keys": ["k"],
        "items": [("k", 1)],
        "size": 1,
        "capacity": 1,
        "token": 1,
        "request_id": 1,
        "ok": True,
        "target": "k",
        "prefix": "p",
        "pattern": "p",
    }.get(name, "x")
