"""``mooncake_core._flat``: the audit's wire encoding (C), byte for byte and round trips.

The conductor packs every decision with it on the decision path and the writer process
unpacks it; a mistake here writes another decision's numbers into the audit, so the
layout is pinned exactly and every malformed input must fail with a named error.
"""

from __future__ import annotations

import contextlib
import enum
import math
import struct
from collections import namedtuple
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mooncake_core import _flat

FUZZ = settings(derandomize=True, max_examples=400, deadline=None)


class Tier(enum.StrEnum):
    HBM = "hbm"


Plan = namedtuple("Plan", "name blocks source")


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (None, b"\x00"),
        (False, b"\x01"),
        (True, b"\x02"),
        (5, b"\x09\x05"),
        (-128, b"\x09\x80"),
        (128, b"\x0a" + struct.pack("<i", 128)),
        (-(2**31), b"\x0a" + struct.pack("<i", -(2**31))),
        (2**31, b"\x03" + struct.pack("<q", 2**31)),
        (-(2**63), b"\x03" + struct.pack("<q", -(2**63))),
        (2**63, b"\x04" + struct.pack("<Q", 2**63)),
        (2**64 - 1, b"\x04" + b"\xff" * 8),
        (0.0, b"\x0b"),
        (-0.0, b"\x05" + struct.pack("<d", -0.0)),
        (1.5, b"\x05" + struct.pack("<d", 1.5)),
        ("", b"\x0c\x00"),
        ("hé", b"\x0c\x03h\xc3\xa9"),
        ("x" * 256, b"\x06" + struct.pack("<I", 256) + b"x" * 256),
        ((), b"\x0d\x00"),
        ([], b"\x0e\x00"),
        ((1, [None]), b"\x0d\x02\x09\x01\x0e\x01\x00"),
        (
            list(range(256)),
            b"\x08"
            + struct.pack("<I", 256)
            + b"".join(
                b"\x09" + struct.pack("<b", i) if i < 128 else b"\x0a" + struct.pack("<i", i)
                for i in range(256)
            ),
        ),
    ],
)
def test_each_value_has_exactly_this_layout(value: Any, encoded: bytes) -> None:
    assert _flat.pack(value) == encoded
    back = _flat.unpack(encoded)
    assert back == value and type(back) is type(value)
    if isinstance(value, float):
        assert math.copysign(1.0, back) == math.copysign(1.0, value)


def test_a_repeated_tuple_is_written_once_and_comes_back_as_the_same_object() -> None:
    holder = ("prefill-2", Tier.HBM)
    other = ("prefill-2", Tier.HBM)  # equal, not the same object: written in full
    data = _flat.pack([(holder, 1), (holder, 2), other])
    # list(3), tuple#0(2), tuple#1 holder(2) "prefill-2" "hbm" 1, tuple#2(2) ref#1 2,
    # tuple#3 other(2) "prefill-2" "hbm"
    assert data == (
        b"\x0e\x03"
        b"\x0d\x02\x0d\x02\x0c\x09prefill-2\x0c\x03hbm\x09\x01"
        b"\x0d\x02\x0f\x01\x00\x09\x02"
        b"\x0d\x02\x0c\x09prefill-2\x0c\x03hbm"
    )
    back = _flat.unpack(data)
    assert back == [(("prefill-2", "hbm"), 1), (("prefill-2", "hbm"), 2), ("prefill-2", "hbm")]
    assert back[0][0] is back[1][0] and back[2] is not back[0][0]


def test_subclasses_travel_as_their_base_type() -> None:
    p = Plan("p0", 3, ("p1", Tier.HBM))
    back = _flat.unpack(_flat.pack([p, Tier.HBM]))
    assert back == [("p0", 3, ("p1", "hbm")), "hbm"]
    assert type(back[0]) is tuple and type(back[1]) is str


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (2**64, ValueError, r"int outside"),
        (-(2**63) - 1, ValueError, r"int outside"),
        (b"bytes", TypeError, r"cannot encode a bytes"),
        ({"a": 1}, TypeError, r"cannot encode a dict"),
        ([1, {2}], TypeError, r"cannot encode a set"),
        ("\ud800", UnicodeEncodeError, r"surrogates"),
    ],
)
def test_what_it_cannot_carry_is_refused_by_name(value: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        _flat.pack(value)


def test_nesting_is_bounded_both_ways() -> None:
    deep: Any = ()
    for _ in range(_flat.MAX_DEPTH - 1):
        deep = (deep,)
    assert _flat.unpack(_flat.pack(deep)) == deep  # MAX_DEPTH containers in all: fine
    with pytest.raises(ValueError, match="nested over 32 deep"):
        _flat.pack((deep,))
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(ValueError, match="nested over"):
        _flat.pack(cyclic)
    with pytest.raises(ValueError, match="nested too deep"):
        _flat.unpack(b"\x0d\x01" * 40 + b"\x00")


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", r"truncated at byte 0 of 0"),
        (b"\x09", r"truncated int"),
        (b"\x0a\x01\x02", r"truncated int"),
        (b"\x05\x00", r"truncated float"),
        (b"\x0c\x05abc", r"truncated str"),
        (b"\x06\xff\xff\xff\xff", r"truncated str"),
        (b"\x0c\x02\xc3\x28", r"not UTF-8"),
        (b"\x10", r"unknown tag at byte 0"),
        (b"\xff", r"unknown tag"),
        (b"\x00\x00", r"trailing bytes at byte 1 of 2"),
        (b"\x07\x01\x00", r"truncated count"),
        # A count no input this short can hold: refused before anything is allocated.
        (b"\x08\xff\xff\xff\xff\x00", r"count larger than the bytes left"),
        (b"\x0f\x00\x00", r"reference to nothing"),
        (b"\x0d\x01\x0f\x00\x00", r"reference to an unfinished tuple"),
        (b"\x0e\x01\x0f\x00", r"truncated reference"),
    ],
)
def test_malformed_input_is_refused_with_what_and_where(data: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _flat.unpack(data)


scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=300),
)
value = st.recursive(
    scalar, lambda inner: st.lists(inner, max_size=5) | st.tuples(inner, inner), max_leaves=40
)


@FUZZ
@given(value)
def test_any_plain_value_comes_back_equal(v: Any) -> None:
    assert _flat.unpack(_flat.pack(v)) == v


@FUZZ
@given(st.binary(max_size=64))
def test_any_bytes_unpack_or_fail_with_a_value_error(data: bytes) -> None:
    try:
        _flat.unpack(data)
    except ValueError as exc:
        assert str(exc).startswith("flat.unpack: ")


@FUZZ
@given(value, st.integers(min_value=0), st.integers(min_value=0, max_value=255))
def test_a_corrupted_byte_never_crashes(v: Any, where: int, byte: int) -> None:
    data = bytearray(_flat.pack(v))
    data[where % len(data)] = byte
    with contextlib.suppress(ValueError):
        _flat.unpack(bytes(data))
    data = _flat.pack(v)
    for cut in range(len(data)):  # every truncation is named, none reads past the end
        with pytest.raises(ValueError, match=r"flat\.unpack"):
            _flat.unpack(data[:cut])


def _ring(size: int) -> bytearray:
    # An 8-aligned buffer is what mmap gives; a bytearray's storage is 8-aligned too.
    buf = bytearray(_flat.RING_DATA + size)
    _flat.ring_set(buf, _flat.RING_SIZE, size)
    return buf


def test_ring_records_are_read_back_with_their_kind_and_next_position() -> None:
    buf = _ring(64)
    assert _flat.ring_push(buf, 2, ("a", 1)) == 1
    assert _flat.ring_push(buf, 0, None) == 2
    kind, payload, nxt = _flat.ring_read(buf, 0)
    assert (kind, _flat.unpack(payload), nxt) == (2, ("a", 1), 8 + 8)  # 7 bytes, padded
    kind, payload, nxt = _flat.ring_read(buf, nxt)
    assert (kind, _flat.unpack(payload), nxt) == (0, None, 16 + 8 + 8)
    assert _flat.ring_read(buf, nxt) is None
    assert _flat.ring_get(buf, _flat.RING_HEAD) == nxt
    assert _flat.ring_get(buf, _flat.RING_COUNT) == 2


def test_ring_refuses_what_does_not_fit_and_wraps_a_record_to_the_start() -> None:
    buf = _ring(48)
    assert _flat.ring_push(buf, 0, "x" * 20) == 1  # 8 + 2 + 20 -> 32 bytes
    assert _flat.ring_push(buf, 0, "y" * 20) == 0  # 16 left: full, nothing written
    assert _flat.ring_get(buf, _flat.RING_HEAD) == 32
    _flat.ring_set(buf, _flat.RING_TAIL, 32)  # the reader released the first
    assert _flat.ring_push(buf, 0, "y" * 20) == 2  # 16 skipped at the end, then 32
    assert _flat.ring_get(buf, _flat.RING_HEAD) == 32 + 16 + 32
    _, payload, nxt = _flat.ring_read(buf, 32)
    assert (_flat.unpack(payload), nxt) == ("y" * 20, 80)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b.__setitem__(slice(256, 260), (1000).to_bytes(4, "little")), "runs past"),
        (lambda b: b.__setitem__(slice(128, 136), (7).to_bytes(8, "little")), "does not fit"),
        (lambda b: b.__setitem__(slice(128, 136), (1 << 40).to_bytes(8, "little")), "not fit"),
    ],
)
def test_ring_damaged_headers_are_named_not_followed(damage: Any, message: str) -> None:
    buf = _ring(64)
    _flat.ring_push(buf, 0, "abc")
    damage(buf)
    with pytest.raises(ValueError, match=message):
        _flat.ring_read(buf, 0)


def test_ring_positions_and_fields_outside_the_ring_are_refused() -> None:
    buf = _ring(64)
    _flat.ring_push(buf, 0, 1)
    with pytest.raises(ValueError, match="not in the ring"):
        _flat.ring_read(buf, 64)
    with pytest.raises(ValueError, match="not in the ring"):
        _flat.ring_read(buf, 4)
    with pytest.raises(ValueError, match="header word"):
        _flat.ring_set(buf, 256, 1)
    with pytest.raises(ValueError, match="header word"):
        _flat.ring_get(buf, 12)
    with pytest.raises(ValueError, match="too small"):
        _flat.ring_push(bytearray(100), 0, 1)
    with pytest.raises(ValueError, match="kind"):
        _flat.ring_push(buf, -1, 1)


def test_ring_goes_back_to_the_start_past_its_soft_end_only_when_the_reader_kept_up() -> None:
    buf = _ring(96)
    _flat.ring_set(buf, _flat.RING_SOFT, 32)
    assert _flat.ring_push(buf, 0, "a" * 20) == 1  # 0..32
    assert _flat.ring_push(buf, 0, "b" * 20) == 2  # 32..64: unread, so no early wrap
    assert _flat.ring_get(buf, _flat.RING_HEAD) == 64
    _flat.ring_set(buf, _flat.RING_TAIL, 64)  # the reader kept up
    assert _flat.ring_push(buf, 0, "c" * 20) == 3  # past the soft end: back to 0
    assert _flat.ring_get(buf, _flat.RING_HEAD) == 96 + 32
    _, payload, nxt = _flat.ring_read(buf, 64)
    assert (_flat.unpack(payload), nxt) == ("c" * 20, 128)
