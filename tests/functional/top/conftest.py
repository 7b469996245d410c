"""Fixtures of the top tests: one live cluster per module (see top_live_procs.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from top_live_procs import LiveCluster, start_live, stop_live


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    cluster = start_live(tmp_path_factory.mktemp("top"))
    try:
        yield cluster
    finally:
        stop_live(cluster)
