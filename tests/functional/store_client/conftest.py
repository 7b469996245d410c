"""Fixtures: one real master + two real store nodes per module, clients in the test process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from store_client_procs import Cluster, make_client, start_cluster

from mooncake_core.store.client import Client


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Shared by the round-trip and CLI modules (tests use distinct key prefixes)."""
    c = start_cluster(tmp_path_factory.mktemp("store_client"))
    yield c
    c.close()


@pytest.fixture(scope="session")
def client(cluster: Cluster) -> Iterator[Client]:
    """A client hosting no segment (auto transport: shm to the nodes on this host)."""
    with make_client(cluster) as c:
        yield c


@pytest.fixture(scope="session")
def tcp_client(cluster: Cluster) -> Iterator[Client]:
    """A client forced onto tcp."""
    with make_client(cluster, transport="tcp") as c:
        yield c
