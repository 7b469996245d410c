"""Shared types of the master core tests (a plain module: conftest is not importable)."""

from __future__ import annotations

from collections.abc import Callable

from mooncake_core.store import MasterState

MakeMaster = Callable[..., MasterState]
"""``make_master(segments=[(name, client, capacity)], seed=0, **MasterConfig fields)``."""
