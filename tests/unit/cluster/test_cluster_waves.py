"""`cluster up` starts components that do not depend on each other together."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from mooncake_core.cluster.supervisor import _waves


def _names(roles: list[tuple[str, str]]) -> list[list[str]]:
    specs: list[Any] = [SimpleNamespace(name=n, role=r) for n, r in roles]
    return [[s.name for s in wave] for wave in _waves(specs)]


def test_stores_workers_and_the_front_start_together_masters_and_etcd_alone() -> None:
    roles = [
        ("etcd", "etcd"), ("master", "master"), ("master-1", "master"),
        ("store-0", "store"), ("store-1", "store"), ("store-2", "store"),
        ("prefill-0", "prefill"), ("prefill-1", "prefill"), ("decode-0", "decode"),
        ("conductor", "conductor"), ("dashboard", "dashboard"),
    ]  # fmt: skip
    assert _names(roles) == [
        ["etcd"], ["master"], ["master-1"],
        ["store-0", "store-1", "store-2"],
        ["prefill-0", "prefill-1", "decode-0"],
        ["conductor", "dashboard"],
    ]  # fmt: skip


def test_a_partial_plan_keeps_its_order() -> None:
    assert _names([("store-1", "store"), ("decode-0", "decode")]) == [["store-1"], ["decode-0"]]
    assert _names([("master", "master"), ("dashboard", "dashboard")]) == [
        ["master"],
        ["dashboard"],
    ]
