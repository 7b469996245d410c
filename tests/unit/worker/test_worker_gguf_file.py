"""Our GGUF container reader against files the ``gguf`` package writes, and bad files."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from mooncake_core.worker.gguf_file import GGUFFile  # noqa: E402


def _write(path: Path) -> dict[str, np.ndarray]:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint32("test.u32", 7)
    w.add_float32("test.f32", 0.5)
    w.add_bool("test.flag", True)
    w.add_string("test.text", "héllo 🚀")
    w.add_array("test.words", ["a", "bc", "", "日本"])
    w.add_array("test.ints", [1, -2, 3])
    rng = np.random.default_rng(3)
    tensors = {
        "w.f32": rng.standard_normal((3, 64)).astype(np.float32),
        "w.f16": rng.standard_normal((2, 32)).astype(np.float16),
    }
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    q = rng.standard_normal((4, 64)).astype(np.float32)
    w.add_tensor("w.q8", gguf.quants.quantize(q, gguf.GGMLQuantizationType.Q8_0),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)  # fmt: skip
    tensors["w.q8"] = gguf.quants.dequantize(
        gguf.quants.quantize(q, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0
    )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


def test_fields_and_tensors_equal_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    want = _write(path)
    f = GGUFFile(str(path))
    assert f.fields["general.architecture"] == "llama"
    assert (f.fields["test.u32"], f.fields["test.f32"], f.fields["test.flag"]) == (7, 0.5, True)
    assert f.fields["test.text"] == "héllo 🚀"
    assert f.fields["test.words"] == ["a", "bc", "", "日本"]
    assert f.fields["test.ints"] == [1, -2, 3]
    assert set(f.tensors) == set(want)
    for name, arr in want.items():
        got = f.dequantize(name)
        assert got.shape == arr.shape and np.array_equal(got, arr.astype(np.float32)), name


def test_bad_files_are_one_line_errors(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _write(path)
    data = path.read_bytes()
    cases = {
        "no GGUF magic": b"GGML" + data[4:],
        "version 9 is not supported": data[:4] + struct.pack("<I", 9) + data[8:],
        "over the limit": data[:8] + struct.pack("<Q", 1 << 40) + data[16:],
        "truncated GGUF file": data[:200],
        "runs past the end of the file": data[:-64],
    }
    for fragment, body in cases.items():
        bad = tmp_path / "bad.gguf"
        bad.write_bytes(body)
        with pytest.raises(ValueError, match=fragment):
            GGUFFile(str(bad))
