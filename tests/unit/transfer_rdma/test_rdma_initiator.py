"""The rdma initiator's retry and tcp-fallback decisions, with no verbs involved.

The remote is a closed loopback port, so every link fails while connecting its control
connection, before any queue pair would be created: the stand-in device raises if a
verbs call is ever reached. This checks the failure accounting only; the RDMA data path
itself is exercised by tests/functional/transfer_rdma on a machine with a device.
"""

import socket
import threading
import time

from mooncake_core.config.models import TransferConfig
from mooncake_core.transfer.batch import Outcome, RequestState
from mooncake_core.transfer.directory import RemoteSegment, SegmentInfo
from mooncake_core.transfer.rdma import RdmaOptions
from mooncake_core.transfer.rdma_transport import RdmaInitiator, RdmaSlice
from mooncake_core.transfer.region import Region, resolve_buffer
from mooncake_core.transfer.request import OpCode, TransferRequest, TransferState
from mooncake_core.transfer.stats import Counters


class NoVerbs:
    """Stands in for rdma_verbs.RdmaDevice; no test here may reach the verbs layer."""

    name = "none0"
    port = 1
    gid_index = 0
    max_msg_size = 1 << 30

    def queue_pair(self, depth):
        raise AssertionError("the verbs layer must not be reached in this test")


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def setup(**cfg):
    remote = f"127.0.0.1:{closed_port()}"
    config = TransferConfig(connect_timeout_s=2.0, request_timeout_s=20.0, **cfg)
    buf = bytearray(8192)
    addr, length, keep = resolve_buffer(buf, None)
    region = Region(addr, length, "cpu:0", None, keep)
    seg = RemoteSegment(SegmentInfo(f"{remote}/seg", 1, 8192, (remote,)), "rdma")
    outcome, stats = Outcome(), Counters()
    sent_to_tcp: list = []
    tcp_called = threading.Event()

    def to_tcp(items):
        sent_to_tcp.extend(items)
        tcp_called.set()

    init = RdmaInitiator(
        config, RdmaOptions(), NoVerbs(), None, outcome, stats, lambda r: 0x1234, to_tcp
    )

    def state():
        req = TransferRequest(OpCode.WRITE, region, 0, seg, 0, 8192)
        return RequestState(req, "rdma", time.monotonic() + 20)

    return init, region, remote, outcome, stats, sent_to_tcp, tcp_called, state


def wait_until(pred, timeout=15.0):
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.01)


def test_repeated_failures_pause_rdma_and_hand_slices_to_tcp():
    init, region, remote, _, stats, sent, called, state = setup(
        max_retries=3, nic_failure_threshold=2, nic_pause_s=30.0, nic_pause_max_s=60.0
    )
    try:
        st = state()
        init.submit([st])
        assert called.wait(15)
        assert sent == [(st, True, 0, region.address, 8192)]
        assert stats.get("rdma|errors") == 2  # first link, then the retry's link
        assert stats.get("rdma|retries") == 1
        assert stats.get("rdma|fallback_slices") == 1
        assert init.paused_remotes() == (remote,)
        status = init.status()
        assert (status.device, status.errors, status.retries) == ("none0", 2, 1)
        assert status.fallback_slices == 1 and status.paused_remotes == (remote,)
        assert st.state is TransferState.WAITING and st.pending == 1
        assert region.inflight == 1  # still counted: tcp releases it when it finishes
        # While paused, new requests go to tcp at once, whole.
        called.clear()
        st2 = state()
        init.submit([st2])
        assert called.is_set() and sent[-1] == (st2, True, 0, region.address, 8192)
        assert stats.get("rdma|errors") == 2 and stats.get("rdma|fallback_slices") == 2
    finally:
        init.close()


def test_retries_are_bounded_then_the_request_fails_with_the_reason():
    init, region, remote, _, stats, sent, _, state = setup(max_retries=1, nic_failure_threshold=100)
    try:
        st = state()
        init.submit([st])
        wait_until(lambda: st.state is not TransferState.WAITING)
        assert st.state is TransferState.FAILED
        assert st.reason is not None
        assert st.reason.startswith(f"rdma connect to {remote}: ")
        assert st.reason.endswith("(gave up after 2 attempts)")
        assert sent == [] and stats.get("rdma|requests_failed") == 1
        wait_until(lambda: region.inflight == 0)
    finally:
        init.close()


def test_access_errors_are_not_retried():
    init, region, remote, _, stats, sent, _, state = setup(max_retries=3)
    try:
        st = state()
        st.pending = 1
        region.acquire(1)
        s = RdmaSlice(st, True, 0, region.address, 8192, 0x1234)

        class Link:
            pass

        link = Link()
        link.remote = remote
        init._failed(link, [(s, "qp: IBV_WC_REM_ACCESS_ERR (vendor_err 0x0)")])
        assert st.state is TransferState.FAILED and "REM_ACCESS_ERR" in st.reason
        assert stats.get("rdma|retries") == 0 and sent == [] and region.inflight == 0
    finally:
        init.close()
