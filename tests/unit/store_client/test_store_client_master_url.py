"""`ClientOptions.master` forms: a fixed ``host:port`` or ``etcd://host:port[/cluster]``."""

from __future__ import annotations

import pytest

from mooncake_core.store.errors import UnavailableError
from mooncake_core.store.ha.discovery import SyncLeaderResolver, split_master_url


def test_fixed_address_is_kept() -> None:
    assert split_master_url("10.0.0.1:50051") == (None, "10.0.0.1:50051")


def test_etcd_url_with_and_without_cluster() -> None:
    assert split_master_url("etcd://127.0.0.1:2379") == ("http://127.0.0.1:2379", "default")
    assert split_master_url("etcd://127.0.0.1:2379/") == ("http://127.0.0.1:2379", "default")
    assert split_master_url("etcd://h:2379/prod") == ("http://h:2379", "prod")


def test_etcd_url_without_host_is_refused() -> None:
    with pytest.raises(ValueError, match="no etcd host"):
        split_master_url("etcd:///prod")


def test_unreachable_etcd_is_unavailable() -> None:
    # Port 1 on loopback refuses at once: no leader, a clear UnavailableError.
    with pytest.raises(UnavailableError, match=r"leader lookup at http://127\.0\.0\.1:1"):
        SyncLeaderResolver("http://127.0.0.1:1", timeout_s=1.0)()
