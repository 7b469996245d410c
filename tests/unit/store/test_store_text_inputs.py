"""Keys and patterns from people: UTF-8 checked up front, regexes on RE2 (no ReDoS)."""

from __future__ import annotations

import time

import pytest

from mooncake_core.store.client.data import Op, plan_window
from mooncake_core.store.errors import ErrorCode, InvalidArgumentError
from mooncake_core.store.objects import Slice
from mooncake_core.store.validation import MAX_PATTERN, check_key, compile_pattern, plain_keys
from mooncake_core.transfer import OpCode


def test_key_without_utf8_form_is_invalid_key() -> None:
    bad = b"kv/\xff".decode("utf-8", "surrogateescape")
    with pytest.raises(InvalidArgumentError) as e:
        check_key(bad, 128)
    assert e.value.code is ErrorCode.INVALID_KEY
    assert e.value.message.startswith("key is not valid UTF-8: '\\udcff' at character 3")
    check_key("kv/é", 5)  # 5 UTF-8 bytes
    with pytest.raises(InvalidArgumentError, match="key of 7 bytes exceeds max_key_length 5"):
        check_key("kv/éé", 5)


@pytest.mark.parametrize(
    ("keys", "plain"),
    [
        (["a", "kv/0001", "x" * 8], True),
        ([], True),
        (["a", "x" * 9], False),  # longer than max_len
        (["a", ""], False),
        (["kv/é"], False),  # 5 UTF-8 bytes: check_key decides
        (["a", 7], False),
        (["a", b"a"], False),
        (["s\udc80"], False),  # no UTF-8 form
    ],
)
def test_plain_keys_are_those_check_key_surely_passes(keys: list[object], plain: bool) -> None:
    assert plain_keys(keys, 8) is plain
    if plain:
        for k in keys:
            check_key(k, 8)  # type: ignore[arg-type]


def test_redos_pattern_runs_in_linear_time() -> None:
    rx = compile_pattern(r"^kv/moonc([\w/-]+)+!$")
    key = "kv/mooncake/" + "a" * 5000
    t = time.perf_counter()
    assert rx.search(key) is None
    assert time.perf_counter() - t < 0.5
    assert rx.search("kv/mooncake/x!") is not None
    assert compile_pattern("é+$").search("café")


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("x/(", "missing )"),
        (r"(a)\1", "invalid escape sequence"),
        ("a(?=b)", "invalid perl operator"),
        ("a" * (MAX_PATTERN + 1), f"at most {MAX_PATTERN}"),
        ("\udcff", "not valid UTF-8"),
    ],
)
def test_bad_patterns_are_invalid_params(pattern: str, reason: str) -> None:
    with pytest.raises(InvalidArgumentError) as e:
        compile_pattern(pattern)
    assert e.value.code is ErrorCode.INVALID_PARAMS and reason in e.value.message


def test_plan_window_cuts_slices_at_window_edges() -> None:
    region = object()
    replica = (Slice("a", 100, 10), Slice("b", 0, 20), Slice("c", 50, 5))
    ops = plan_window(OpCode.WRITE, region, replica, 5, 20)  # type: ignore[arg-type]
    assert ops == [
        Op(OpCode.WRITE, region, 0, "a", 105, 5),  # type: ignore[arg-type]
        Op(OpCode.WRITE, region, 5, "b", 0, 15),  # type: ignore[arg-type]
    ]
    tail = plan_window(OpCode.WRITE, region, replica, 25, 10)  # type: ignore[arg-type]
    assert [(o.segment, o.seg_offset, o.offset, o.length) for o in tail] == [
        ("b", 15, 0, 5),
        ("c", 50, 5, 5),
    ]
