"""Transport selection, the refusal messages and the rdma options (no device needed)."""

import pytest

from mooncake_core.config.models import TransferConfig
from mooncake_core.transfer import TransferEngine, TransferError
from mooncake_core.transfer.rdma import (
    INSTALL_HINT,
    RdmaOptions,
    RdmaSupport,
    probe,
    rdma_devices,
    refusal,
    select_transport,
)


def pick(protocol, *, shm=False, local=False, peer=("tcp",)):
    return select_transport(
        protocol, name="h:1/seg", same_host_shm=shm, local_rdma=local, peer_transports=peer
    )


@pytest.mark.parametrize(
    ("shm", "local", "peer", "want"),
    [
        (False, False, ("tcp",), "tcp"),
        (False, False, ("tcp", "rdma"), "tcp"),  # peer offers it, we have no device
        (False, True, ("tcp",), "tcp"),  # we have a device, peer does not offer it
        (False, True, ("tcp", "rdma"), "rdma"),
        (True, True, ("tcp", "shm", "rdma"), "shm"),  # same host: shm beats rdma
        (True, False, ("tcp", "shm"), "shm"),
    ],
)
def test_auto(shm, local, peer, want):
    assert pick("auto", shm=shm, local=local, peer=peer) == want


def test_explicit_protocols():
    assert pick("tcp", shm=True, local=True, peer=("tcp", "shm", "rdma")) == "tcp"
    assert pick("shm", shm=True) == "shm"
    with pytest.raises(TransferError, match="shm requested but h:1/seg is not shm-backed"):
        pick("shm")
    assert pick("rdma", local=True, peer=("tcp", "rdma")) == "rdma"
    assert pick("rdma", shm=True, local=True, peer=("tcp", "shm", "rdma")) == "rdma"
    with pytest.raises(TransferError, match=r"h:1/seg does not offer rdma \(it offers \['tcp'\]\)"):
        pick("rdma", local=True)
    with pytest.raises(TransferError, match="no RDMA device open"):
        pick("rdma", peer=("rdma",))
    with pytest.raises(TransferError, match="unknown transfer protocol 'udp'"):
        pick("udp")


def test_refusal_names_what_is_missing(tmp_path):
    none = RdmaSupport((), None, str(tmp_path))
    msg = refusal(none)
    assert msg is not None
    assert f"no RDMA device found ({tmp_path} is empty or missing)" in msg
    assert "rdma link add rxe0 type rxe" in msg
    no_pyverbs = RdmaSupport(("mlx5_0",), "No module named 'pyverbs'", str(tmp_path))
    msg = refusal(no_pyverbs)
    assert msg is not None
    assert "devices ['mlx5_0'] exist, but pyverbs is not installed" in msg
    assert "No module named 'pyverbs'" in msg and INSTALL_HINT in msg
    assert INSTALL_HINT == "pip install 'mooncake-py[rdma]'"
    ok = RdmaSupport(("mlx5_0",), None)
    assert refusal(ok) is None and ok.usable
    assert not none.usable and not no_pyverbs.usable


def test_probe_reads_sysfs(tmp_path):
    assert probe(str(tmp_path / "missing")) == RdmaSupport((), None, str(tmp_path / "missing"))
    (tmp_path / "mlx5_1").mkdir()
    (tmp_path / "mlx5_0").mkdir()
    assert rdma_devices(str(tmp_path)) == ["mlx5_0", "mlx5_1"]
    assert probe(str(tmp_path)).devices == ("mlx5_0", "mlx5_1")


def test_engine_refusal_without_device():
    if rdma_devices():
        pytest.skip("this machine has an RDMA device")
    with pytest.raises(TransferError, match="rdma requested but no RDMA device found"):
        TransferEngine(TransferConfig(protocol="rdma"))
    # auto quietly stays on tcp/shm and advertises no rdma
    with TransferEngine(TransferConfig(protocol="auto")) as eng:
        eng.allocate_memory(4096, name="seg")
        info = eng._lookup("seg", "127.0.0.1")
        assert info["transports"] == ["tcp", "shm"]
        assert eng.snapshot().transport("rdma").bytes == 0


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"port": 0}, "port must be 1..255"),
        ({"gid_index": -1}, "gid_index"),
        ({"window": 0}, "window must be 1..4096"),
        ({"poll_idle_s": 0}, "poll_idle_s"),
    ],
)
def test_options_are_checked(kw, message):
    with pytest.raises(ValueError, match=message):
        RdmaOptions(**kw)


def test_rdma_status_says_why_it_is_not_used():
    if rdma_devices():
        pytest.skip("this machine has an RDMA device")
    with TransferEngine(TransferConfig(protocol="tcp")) as eng:
        assert eng.rdma_status().reason == "protocol is tcp"
    with TransferEngine(TransferConfig(protocol="auto")) as eng:
        status = eng.rdma_status()
        assert status.device is None and status.links == 0
        assert status.reason is not None and "no RDMA device found" in status.reason
