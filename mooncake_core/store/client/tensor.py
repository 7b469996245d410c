"""Encoding of CPU tensors as store objects: a small header, then the raw bytes.

Layout: ``b"MCT1"``, a little-endian u32 header length, a JSON header
``{"dtype": "float32", "shape": [2, 3]}``, then the tensor's bytes in C order. torch
is imported only when a tensor is stored or read.
"""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING

from ..errors import ErrorCode, InvalidArgumentError

if TYPE_CHECKING:
    import torch

MAGIC = b"MCT1"
_LEN = struct.Struct("<I")


def encode(tensor: torch.Tensor) -> bytes:
    """Header + bytes of a CPU tensor.

    Raises:
        InvalidArgumentError: not a CPU tensor, or an empty one.
    """
    import torch

    if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu":
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS, f"put_tensor needs a CPU torch.Tensor, got {type(tensor)}"
        )
    t = tensor.detach().contiguous()
    dtype = str(t.dtype).removeprefix("torch.")
    head = json.dumps({"dtype": dtype, "shape": list(t.shape)}).encode()
    # view as bytes so dtypes numpy lacks (bfloat16) work too
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return MAGIC + _LEN.pack(len(head)) + head + raw


def decode(key: str, data: bytes) -> torch.Tensor:
    """The tensor encoded in ``data`` (a writable copy).

    Raises:
        InvalidArgumentError: ``data`` is not an encoded tensor.
    """
    import torch

    try:
        if data[:4] != MAGIC:
            raise ValueError("no tensor header")
        (n,) = _LEN.unpack_from(data, 4)
        head = json.loads(data[8 : 8 + n])
        dtype = getattr(torch, head["dtype"])
        shape = [int(x) for x in head["shape"]]
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown dtype {head['dtype']!r}")
        body = bytearray(data[8 + n :])
        if not body:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(body, dtype=dtype).reshape(shape)
    except (ValueError, KeyError, TypeError, struct.error, AttributeError, RuntimeError) as exc:
        raise InvalidArgumentError(
            ErrorCode.INVALID_PARAMS, f"{key!r} is not a tensor stored by put_tensor: {exc}"
        ) from None
