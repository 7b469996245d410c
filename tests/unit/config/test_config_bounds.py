"""Config loading is bounded: size, nesting depth, alias expansion; one line per problem."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mooncake_core.config import ConfigError, load_config
from mooncake_core.config.loader import MAX_CONFIG_BYTES, MAX_DEPTH, MAX_NODES, parse_yaml


def _problem(tmp_path: Path, text: str | bytes) -> str:
    f = tmp_path / "c.yaml"
    f.write_bytes(text.encode() if isinstance(text, str) else text)
    with pytest.raises(ConfigError) as e:
        load_config(f)
    assert len(e.value.problems) == 1
    return e.value.problems[0]


def test_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    lines = ['a0: &a0 ["lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    t = time.perf_counter()
    msg = _problem(tmp_path, "\n".join(lines) + "\n")
    assert time.perf_counter() - t < 5
    assert msg.startswith(f"<file>: more than {MAX_NODES} values once aliases are expanded")
    assert "alias bomb" in msg


def test_recursive_alias_is_refused() -> None:
    with pytest.raises(ValueError, match="alias to an enclosing node"):
        parse_yaml("a: &a [1, *a]\n")


def test_ordinary_anchors_and_merges_still_load() -> None:
    doc = parse_yaml("base: &b {x: 1, y: [1, 2]}\none: {<<: *b, z: 3}\ntwo: *b\n")
    assert doc["one"] == {"x": 1, "y": [1, 2], "z": 3} and doc["two"] == doc["base"]


def test_depth_is_bounded_without_recursion_error(tmp_path: Path) -> None:
    assert parse_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    msg = _problem(tmp_path, "master: " + "[" * 100_000 + "]" * 100_000)
    assert msg == f"<file>: nested deeper than {MAX_DEPTH} levels (line 1)"


def test_size_and_encoding(tmp_path: Path) -> None:
    big = b"#" * (MAX_CONFIG_BYTES + 1)
    assert _problem(tmp_path, big) == (
        f"<file>: larger than {MAX_CONFIG_BYTES} bytes; not a cluster config"
    )
    assert _problem(tmp_path, b"master: {host: \xff}\n") == "<file>: not UTF-8 (byte 15 is 0xff)"


def test_broken_yaml_is_one_line(tmp_path: Path) -> None:
    msg = _problem(tmp_path, "master:\n  port: [1, 2\n  host: x\n")
    assert msg.startswith("<file>: not valid YAML: ") and "(line " in msg and "\n" not in msg


def test_problems_are_capped_and_values_shortened(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("".join(f"k{i}: {'x' * 200}\n" for i in range(30)))
    with pytest.raises(ConfigError) as e:
        load_config(f)
    probs = e.value.problems
    assert len(probs) == 21 and probs[-1] == "... and 10 more problems"
    assert all(len(p) < 140 for p in probs)
