"""Exact tests of ``mooncake._engine_addr``: metadata strings, address ranges, maps."""

from __future__ import annotations

import pytest

from mooncake._engine_addr import (
    HTTP,
    P2P,
    AddressMap,
    host_memory_ok,
    parse_metadata,
    split_hostname,
)


def test_parse_metadata_forms_and_refusals() -> None:
    assert parse_metadata("P2PHANDSHAKE") == (P2P, "")
    assert parse_metadata("p2phandshake") == (P2P, "")
    assert parse_metadata("http://127.0.0.1:8080/metadata") == (
        HTTP,
        "http://127.0.0.1:8080/metadata",
    )
    assert parse_metadata("127.0.0.1:8080/metadata", "http") == (
        HTTP,
        "http://127.0.0.1:8080/metadata",
    )
    assert parse_metadata("anything", "p2p") == (P2P, "")
    for bad, kind in (("127.0.0.1:2379", None), ("etcd://h:2379", None), ("h:6379", "redis")):
        with pytest.raises(ValueError, match="not supported here"):
            parse_metadata(bad, kind)


def test_split_hostname() -> None:
    assert split_hostname("127.0.0.1:12345") == ("127.0.0.1", 12345)
    assert split_hostname("node-a") == ("node-a", None)
    assert split_hostname("node-a:x") == ("node-a:x", None)
    assert split_hostname("::1") == ("::1", None)


def test_address_map_find_is_inside_one_range() -> None:
    m: AddressMap[str] = AddressMap()
    m.add(0x1000, 0x100, "a")
    m.add(0x1100, 0x100, "b")  # adjacent, not overlapping
    assert m.find(0x1000, 0x100) == (0x1000, "a")
    assert m.find(0x10FF, 1) == (0x1000, "a")
    assert m.find(0x10FF, 2) is None  # spans two ranges
    assert m.find(0x1100, 0) == (0x1100, "b")
    assert m.find(0x1200, 0) is None  # one past the end
    assert m.find(0xFFF, 1) is None
    assert m.find(-1, 1) is None
    with pytest.raises(ValueError, match="overlaps"):
        m.add(0x11FF, 0x10, "c")
    with pytest.raises(ValueError, match="overlaps"):
        m.add(0xF00, 0x101, "c")
    with pytest.raises(ValueError, match="empty"):
        m.add(0x3000, 0, "c")
    assert m.get(0x1100) == "b" and m.get(0x1101) is None
    assert m.remove(0x1000) == "a" and m.remove(0x1000) is None
    assert m.find(0x1000, 1) is None and len(m) == 1


MAPS = """\
00400000-00401000 r-xp 00000000 08:01 1 /bin/x
7f0000000000-7f0000010000 rw-p 00000000 00:00 0
7f0000010000-7f0000020000 rw-s 00000000 00:01 2 /dev/shm/seg
7f0000020000-7f0000030000 ---p 00000000 00:00 0
7f0000040000-7f0000050000 rw-p 00000000 00:00 0
"""


def test_host_memory_ok() -> None:
    assert host_memory_ok(0x7F0000000000, 0x10000, MAPS)
    assert host_memory_ok(0x7F000000F000, 0x2000, MAPS)  # spans adjacent rw mappings
    assert not host_memory_ok(0x7F000001F000, 0x2000, MAPS)  # into a ---p reservation
    assert not host_memory_ok(0x7F0000020000, 16, MAPS)  # device-pointer-like
    assert not host_memory_ok(0x7F000002F000, 0x12000, MAPS)
    assert not host_memory_ok(0x7F0000030000, 16, MAPS)  # a hole
    assert not host_memory_ok(0x400000, 16, MAPS)  # read-only text
    assert not host_memory_ok(0, 16, MAPS)
    assert not host_memory_ok(0x7F0000040000, 0, MAPS)
