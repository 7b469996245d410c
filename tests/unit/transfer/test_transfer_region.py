"""Resolving user buffers, shm allocation and the rdma refusal."""

from __future__ import annotations

import mmap
import os

import numpy as np
import pytest
import torch

from mooncake_core.config.models import TransferConfig
from mooncake_core.transfer import TransferEngine, TransferError
from mooncake_core.transfer.rdma import rdma_devices, require_rdma
from mooncake_core.transfer.region import allocate_shm, resolve_buffer


def test_resolve_supported_buffers():
    arr = np.zeros(100, dtype=np.float32)
    assert resolve_buffer(arr, None)[:2] == (arr.ctypes.data, 400)
    t = torch.zeros(10, dtype=torch.float64)
    assert resolve_buffer(t, None)[:2] == (t.data_ptr(), 80)
    m = mmap.mmap(-1, 8192)
    assert resolve_buffer(m, 4096)[1] == 4096
    assert resolve_buffer(0x1000, 64)[:2] == (0x1000, 64)
    b = bytearray(10)
    _, _, keep = resolve_buffer(b, None)
    with pytest.raises(BufferError):
        b.extend(b"x")  # pinned: the registered address cannot move
    del keep


@pytest.mark.parametrize(
    ("obj", "length", "match"),
    [
        (b"read-only", None, "read-only"),
        (0x1000, None, "positive length"),
        (bytearray(10), 11, "outside buffer"),
        (np.zeros((4, 4))[:, 1], None, "contiguous"),
        (torch.zeros(4, 4).t(), None, "contiguous"),
        (True, 4, "bool"),
        ("text", None, "not usable"),
    ],
)
def test_resolve_refusals(obj, length, match):
    with pytest.raises(TransferError, match=match):
        resolve_buffer(obj, length)


def test_allocate_shm_is_private_and_zeroed():
    buf, path = allocate_shm(8192)
    try:
        assert os.stat(path).st_mode & 0o777 == 0o600
        assert bytes(buf[:16]) == b"\0" * 16
    finally:
        buf.close()
        os.unlink(path)
    with pytest.raises(TransferError, match="> 0"):
        allocate_shm(0)


def test_rdma_refusals(tmp_path):
    assert rdma_devices(str(tmp_path / "missing")) == []
    with pytest.raises(TransferError, match="no RDMA device found"):
        require_rdma(str(tmp_path / "missing"))
    (tmp_path / "mlx5_0").mkdir()
    with pytest.raises(TransferError, match="mlx5_0"):
        require_rdma(str(tmp_path))


def test_engine_refuses_rdma_without_device():
    if rdma_devices():
        pytest.skip("this machine has an RDMA device")
    with pytest.raises(TransferError, match="no RDMA device found"):
        TransferEngine(TransferConfig(protocol="rdma"))


def test_engine_local_registration_rules():
    eng = TransferEngine(TransferConfig())
    try:
        r = eng.register_memory(bytearray(64), name="seg")
        with pytest.raises(TransferError, match="taken"):
            eng.register_memory(bytearray(64), name="seg")
        with pytest.raises(TransferError, match="cpu:N"):
            eng.register_memory(bytearray(64), location="disk")
        eng.unregister_memory(r)
        with pytest.raises(TransferError, match="not registered"):
            eng.unregister_memory(r)
        with pytest.raises(TransferError, match="not started"):
            _ = eng.segment_name
    finally:
        eng.close()
