"""The rdma handshake's control-connection side on real loopback sockets (no verbs).

Every case here is refused or answered before a queue pair would be created, so no
RDMA device is needed: malformed info blocks, requests for unknown or non-rdma segments,
plain LOOKUPs on an rdma-capable server, and an old (tcp-only) server answering an rdma
request with ERROR so that initiators fall back.
"""

import json

import pytest

from mooncake_core.transfer import handshake
from mooncake_core.transfer._c import native
from mooncake_core.transfer.protocol import Op, Status
from mooncake_core.transfer.rdma_info import (
    FLAG_RDMA,
    KIND_REPLY,
    KIND_REQUEST,
    RdmaInfo,
    SegmentKey,
)
from mooncake_core.transfer.rdma_server import RdmaAcceptor, RdmaDataServer
from mooncake_core.transfer.server import DataServer

SECRET = b"s" * 32
REQUEST = RdmaInfo(KIND_REQUEST, 0x42, 7, 0, 1, 3, 4, bytes(16), (SegmentKey(5),))


class NoVerbs:
    """Stands in for rdma_verbs.RdmaDevice; reaching the verbs layer fails the test."""

    name = "none0"

    def queue_pair(self, depth):
        raise AssertionError("the verbs layer must not be reached in this test")


def lookup(name, nic):
    if name != "seg":
        raise KeyError(f"no segment {name!r} here")
    return {"segment": "seg", "segment_id": 5, "size": 4096, "transports": ["tcp", "rdma"]}


def keys(segment_id):
    raise KeyError(f"no rdma-registered segment with id {segment_id} here")


@pytest.fixture(params=["rdma", "tcp-only"])
def server(request):
    args = ("127.0.0.1", 0, native.SegTable(), SECRET, lookup, 5.0, 5.0)
    if request.param == "rdma":
        srv = RdmaDataServer(RdmaAcceptor(NoVerbs(), keys), *args)
    else:
        srv = DataServer(*args)
    yield request.param, srv
    srv.close()


def connect(srv):
    return handshake.connect("127.0.0.1", srv.port, local_ip=None, secret=SECRET, timeout=5.0)


def test_rdma_requests_are_refused_with_a_reason_and_plain_lookups_still_work(server):
    kind, srv = server
    sock = connect(srv)
    try:
        handshake.send_frame(sock, Op.LOOKUP, REQUEST.encode(), flags=FLAG_RDMA)
        reply = handshake.recv_frame(sock)
        assert reply.header.op == Op.ERROR
        assert reply.header.status == Status.UNKNOWN_SEGMENT
        if kind == "rdma":
            assert reply.payload == b"no rdma-registered segment with id 5 here"
        else:  # an old server reads the block as a segment name: unknown, so the initiator falls back
            assert reply.payload.startswith(b"no segment 'MCRD")

        handshake.send_frame(sock, Op.LOOKUP, b"\x00garbage", flags=FLAG_RDMA)
        reply = handshake.recv_frame(sock)
        assert reply.header.op == Op.ERROR
        if kind == "rdma":
            assert reply.header.status == Status.BAD_REQUEST
            assert b"needs 40 bytes" in reply.payload
            assert srv.counters.get("malformed_frames") == 1

        handshake.send_frame(sock, Op.LOOKUP, b"seg")  # the connection is still usable
        reply = handshake.recv_frame(sock)
        assert reply.header.op == Op.LOOKUP_RESP and reply.header.flags == 0
        assert json.loads(reply.payload)["segment_id"] == 5
    finally:
        sock.close()


def test_a_reply_block_sent_as_request_is_refused():
    srv = RdmaDataServer(
        RdmaAcceptor(NoVerbs(), keys), "127.0.0.1", 0, native.SegTable(), None, lookup, 5.0, 5.0
    )
    try:
        sock = handshake.connect("127.0.0.1", srv.port, local_ip=None, secret=None, timeout=5.0)
        bad = RdmaInfo(KIND_REPLY, 1, 1, 0, 1, 1, 1, bytes(16), (SegmentKey(5, 1, 4096, 1),))
        handshake.send_frame(sock, Op.LOOKUP, bad.encode(), flags=FLAG_RDMA)
        reply = handshake.recv_frame(sock)
        assert reply.header.op == Op.ERROR and reply.header.status == Status.BAD_REQUEST
        assert b"not a request" in reply.payload
        sock.close()
    finally:
        srv.close()
