"""The RDMA info block: exact layout, bounds, and fuzzing (no device needed)."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mooncake_core.transfer.rdma_info import (
    ENTRY_SIZE,
    FIXED_SIZE,
    KIND_REPLY,
    KIND_REQUEST,
    MAX_SEGMENTS,
    RdmaInfo,
    RdmaInfoError,
    SegmentKey,
    decode,
    gid_bytes,
    gid_text,
    mtu_bytes,
)

GID = bytes(range(16))


def reply(**kw):
    fields = dict(
        kind=KIND_REPLY,
        qp_num=0x123456,
        psn=0xABCDEF,
        lid=7,
        port=1,
        mtu=5,
        max_rd_atomic=16,
        gid=GID,
        segments=(SegmentKey(3, rkey=0xDEADBEEF, addr=0x7F0000001000, length=1 << 20),),
    )
    fields.update(kw)
    return RdmaInfo(**fields)


def test_layout_is_exact():
    data = reply().encode()
    assert FIXED_SIZE == 40 and ENTRY_SIZE == 24
    assert len(data) == 64
    assert data[:4] == b"MCRD" and data[4] == 1 and data[5] == KIND_REPLY
    assert struct.unpack_from("<HIIHBBB", data, 6) == (1, 0x123456, 0xABCDEF, 7, 1, 5, 16)
    assert data[21:24] == b"\0\0\0" and data[24:40] == GID
    assert struct.unpack_from("<IIQQ", data, 40) == (3, 0xDEADBEEF, 0x7F0000001000, 1 << 20)


def test_roundtrip_and_key_lookup():
    info = reply(segments=(SegmentKey(3, 1, 4096, 10), SegmentKey(9, 2, 8192, 20)))
    back = decode(info.encode())
    assert back == info
    assert back.key_for(9) == SegmentKey(9, 2, 8192, 20)
    assert back.key_for(4) is None
    req = RdmaInfo(KIND_REQUEST, 1, 0, 0, 1, 1, 1, bytes(16), (SegmentKey(5),))
    assert decode(req.encode()) == req


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": 3}, "kind must be"),
        ({"qp_num": 0}, "qp_num 0"),
        ({"qp_num": 1 << 24}, "qp_num"),
        ({"psn": 1 << 24}, "psn"),
        ({"lid": 1 << 16}, "lid"),
        ({"port": 0}, "port 0"),
        ({"mtu": 6}, "not an ibv_mtu"),
        ({"max_rd_atomic": 0}, "max_rd_atomic"),
        ({"gid": b"short"}, "gid must be 16 bytes"),
        ({"segments": (SegmentKey(0, 1, 4096, 1),)}, "segment id 0"),
        ({"segments": (SegmentKey(1, 1, 4096, 1), SegmentKey(1, 1, 4096, 1))}, "repeated"),
        ({"segments": (SegmentKey(1, 1, 0, 1),)}, "empty or wraps"),
        ({"segments": (SegmentKey(1, 1, 4096, 0),)}, "empty or wraps"),
        ({"segments": (SegmentKey(1, 1, (1 << 64) - 10, 11),)}, "wraps past 2\\^64"),
        ({"segments": (SegmentKey(1, 1 << 32, 4096, 1),)}, "rkey"),
        ({"segments": tuple(SegmentKey(i + 1, 1, 4096, 1) for i in range(257))}, "at most 256"),
    ],
)
def test_bad_values_are_refused(change, message):
    with pytest.raises(RdmaInfoError, match=message):
        reply(**change)


def test_request_entries_carry_no_keys():
    with pytest.raises(RdmaInfoError, match="carries keys"):
        RdmaInfo(KIND_REQUEST, 1, 0, 0, 1, 1, 1, GID, (SegmentKey(5, rkey=1),))


def test_bad_bytes_are_refused():
    good = reply().encode()
    with pytest.raises(RdmaInfoError, match="needs 40 bytes"):
        decode(good[:39])
    with pytest.raises(RdmaInfoError, match="bad rdma info magic"):
        decode(b"XXXX" + good[4:])
    with pytest.raises(RdmaInfoError, match="unsupported rdma info version 2"):
        decode(good[:4] + b"\x02" + good[5:])
    with pytest.raises(RdmaInfoError, match="reserved bytes must be zero"):
        decode(good[:22] + b"\x01" + good[23:])
    with pytest.raises(RdmaInfoError, match="1 entries need 64"):
        decode(good + b"\0")
    with pytest.raises(RdmaInfoError, match="1 entries need 64"):
        decode(good[:-1])
    too_many = bytearray(good)
    struct.pack_into("<H", too_many, 6, MAX_SEGMENTS + 1)
    with pytest.raises(RdmaInfoError, match="at most 256"):
        decode(bytes(too_many))


keys = st.builds(
    SegmentKey,
    segment_id=st.integers(1, (1 << 32) - 1),
    rkey=st.integers(0, (1 << 32) - 1),
    addr=st.integers(1, 1 << 62),
    length=st.integers(1, 1 << 40),
)
infos = st.builds(
    RdmaInfo,
    kind=st.just(KIND_REPLY),
    qp_num=st.integers(1, (1 << 24) - 1),
    psn=st.integers(0, (1 << 24) - 1),
    lid=st.integers(0, 0xFFFF),
    port=st.integers(1, 255),
    mtu=st.integers(1, 5),
    max_rd_atomic=st.integers(1, 255),
    gid=st.binary(min_size=16, max_size=16),
    segments=st.lists(keys, max_size=8, unique_by=lambda k: k.segment_id).map(tuple),
)


@settings(max_examples=200, deadline=None)
@given(infos)
def test_fuzz_roundtrip(info):
    assert decode(info.encode()) == info


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_random_bytes_only_raise_rdma_info_error(data):
    try:
        info = decode(data)
    except RdmaInfoError:
        return
    assert info.encode() == data


@settings(max_examples=200, deadline=None)
@given(infos, st.integers(0, 10_000), st.integers(0, 255))
def test_fuzz_corrupted_block_decodes_validly_or_raises(info, where, value):
    data = bytearray(info.encode())
    data[where % len(data)] = value
    try:
        back = decode(bytes(data))
    except RdmaInfoError:
        return
    assert back.encode() == bytes(data)


def test_gid_text_and_mtu():
    text = gid_text(GID)
    assert text == "0001:0203:0405:0607:0809:0a0b:0c0d:0e0f"
    assert gid_bytes(text) == GID
    for bad in ("0001:0203", "zzzz:0203:0405:0607:0809:0a0b:0c0d:0e0f", "1:2:3:4:5:6:7:8"):
        with pytest.raises(RdmaInfoError, match="bad gid text"):
            gid_bytes(bad)
    with pytest.raises(RdmaInfoError, match="16 bytes"):
        gid_text(b"\0")
    assert [mtu_bytes(m) for m in range(1, 6)] == [256, 512, 1024, 2048, 4096]
    with pytest.raises(RdmaInfoError, match="ibv_mtu"):
        mtu_bytes(0)
