"""Frame codec (Python) and the C parser the server uses: agreement and fuzzing."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mooncake_core.transfer import auth
from mooncake_core.transfer._c import native
from mooncake_core.transfer.protocol import (
    HEADER_SIZE,
    MAX_CONTROL_LENGTH,
    MAX_DATA_LENGTH,
    FrameDecoder,
    Header,
    Op,
    ProtocolError,
    decode_header,
    encode_frame,
)


def test_header_layout_is_fixed():
    raw = Header(
        Op.WRITE, segment=7, status=2, request_id=9, offset=11, length=13, flags=1
    ).encode()
    assert len(raw) == HEADER_SIZE == native.HEADER_SIZE == 40
    assert raw[:4] == b"MCTE"
    assert struct.unpack("<BBHIIQQQ", raw[4:]) == (1, 2, 1, 7, 2, 9, 11, 13)


def test_roundtrip_and_c_parser_agree():
    h = Header(Op.READ_RESP, segment=3, status=1, request_id=2**63, offset=2**40, length=4096)
    assert decode_header(h.encode()) == h
    assert native.parse_header(h.encode()) == (3, 0, 3, 1, 2**63, 2**40, 4096)


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (b"XXXX" + Header(Op.READ).encode()[4:], "magic"),
        (Header(Op.READ).encode()[:4] + b"\x02" + Header(Op.READ).encode()[5:], "version"),
        (Header(Op.READ).encode()[:5] + b"\x63" + Header(Op.READ).encode()[6:], "op"),
        (Header(Op.READ, length=MAX_DATA_LENGTH + 1).encode(), "length"),
    ],
)
def test_bad_headers_rejected_by_both_parsers(raw, match):
    with pytest.raises(ProtocolError, match=match):
        decode_header(raw)
    with pytest.raises(ValueError, match=match):
        native.parse_header(raw)


def test_control_frames_have_a_small_limit():
    with pytest.raises(ProtocolError, match="absurd length"):
        decode_header(Header(Op.LOOKUP, length=MAX_CONTROL_LENGTH + 1).encode())
    with pytest.raises(ProtocolError, match="too long"):
        encode_frame(Header(Op.LOOKUP), b"x" * (MAX_CONTROL_LENGTH + 1))
    with pytest.raises(ValueError, match="unknown op"):
        native.parse_header(Header(Op.LOOKUP).encode())  # not a data-plane op


def test_decoder_reassembles_split_frames():
    a = encode_frame(Header(Op.LOOKUP), b"store-0")
    b = encode_frame(Header(Op.START_DATA))
    c = Header(Op.READ, segment=1, length=1 << 20).encode()  # READ: length is bytes wanted
    stream = a + b + c
    dec = FrameDecoder()
    frames = []
    for i in range(0, len(stream), 7):
        frames += dec.feed(stream[i : i + 7])
    assert [f.header.op for f in frames] == [Op.LOOKUP, Op.START_DATA, Op.READ]
    assert frames[0].payload == b"store-0" and frames[0].header.length == 7
    assert frames[2].payload == b""


def test_decoder_stays_poisoned():
    dec = FrameDecoder()
    with pytest.raises(ProtocolError):
        dec.feed(b"\x00" * HEADER_SIZE)
    with pytest.raises(ProtocolError):
        dec.feed(Header(Op.START_DATA).encode())


@given(st.binary(max_size=400))
def test_random_bytes_only_ever_raise_protocol_error(data):
    dec = FrameDecoder()
    try:
        for f in dec.feed(data):
            assert isinstance(f.header.op, Op)
    except ProtocolError:
        pass


@given(st.binary(min_size=HEADER_SIZE, max_size=HEADER_SIZE))
def test_c_and_python_parsers_agree_on_random_headers(raw):
    try:
        py = decode_header(raw)
    except ProtocolError:
        py = None
    try:
        c = native.parse_header(raw)
    except ValueError:
        c = None
    if py is not None and py.op in (Op.READ, Op.WRITE, Op.READ_RESP, Op.WRITE_ACK):
        assert c == (py.op, py.flags, py.segment, py.status, py.request_id, py.offset, py.length)
    else:
        assert c is None


def test_auth_proofs():
    sn, cn = auth.new_nonce(), auth.new_nonce()
    assert sn != cn and len(sn) == auth.NONCE_SIZE
    proof = auth.client_proof(b"s", sn, cn)
    assert auth.verify(proof, auth.client_proof(b"s", sn, cn))
    assert not auth.verify(proof, auth.client_proof(b"other", sn, cn))
    assert not auth.verify(proof, auth.client_proof(b"s", auth.new_nonce(), cn))  # replay
    assert not auth.verify(proof, auth.server_proof(b"s", sn, cn))  # roles differ
    assert not auth.verify(proof, proof[:-1])
