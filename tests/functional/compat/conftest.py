"""Compat suite: the module-scoped ``master`` fixture (see ``compat_master``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from compat_master import LEASE_MS, UpstreamMaster, start_master, stop_master


@pytest.fixture(scope="module")
def master() -> Iterator[UpstreamMaster]:
    m = start_master(f"--default_kv_lease_ttl={LEASE_MS}")
    yield m
    stop_master(m)
