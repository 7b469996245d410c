"""Pure helpers of the HA pieces: key layout, prefix ranges, batching under etcd's limit."""

from __future__ import annotations

import json

import pytest

from mooncake_core.store.ha.election import parse_ha_url
from mooncake_core.store.ha.etcd import prefix_end
from mooncake_core.store.ha.replication import CHUNK_BYTES, HaKeys, _batch, _chunks


def test_prefix_end() -> None:
    assert prefix_end(b"/a/log/") == b"/a/log0"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff\xff") == b"\x00"


def test_key_layout_sorts_by_seq() -> None:
    k = HaKeys("c1")
    assert k.leader == b"/mooncake/c1/master/leader"
    assert k.log_key(42) == b"/mooncake/c1/master/log/00000000000000000042"
    assert sorted([k.log_key(10), k.log_key(9), k.log_key(100)]) == [
        k.log_key(9),
        k.log_key(10),
        k.log_key(100),
    ]
    assert k.snap_chunk(5, 2) == b"/mooncake/c1/master/snap/00000000000000000005/000002"


def test_parse_ha_url() -> None:
    assert parse_ha_url("etcd://127.0.0.1:2379") == "http://127.0.0.1:2379"
    assert parse_ha_url("http://127.0.0.1:2379/") == "http://127.0.0.1:2379"
    with pytest.raises(ValueError, match="etcd://HOST:PORT"):
        parse_ha_url("zk://x")


def test_batches_stay_under_the_etcd_request_limit() -> None:
    big = [{"t": "removed", "key": "k" * 4000, "s": i} for i in range(400)]  # ~1.6 MB
    value, n = _batch(big)
    assert 0 < n < 400 and len(value) <= CHUNK_BYTES + 4100
    assert [r["s"] for r in json.loads(value)] == list(range(n))
    chunks = _chunks(big)
    assert sum(len(json.loads(c)) for c in chunks) == 400
    assert all(len(c) <= CHUNK_BYTES + 4100 for c in chunks)
    one = [{"t": "removed", "key": "x" * (CHUNK_BYTES + 10), "s": 1}]
    assert _batch(one)[1] == 1  # a single oversized record still goes alone
