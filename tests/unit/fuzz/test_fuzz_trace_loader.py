"""Fuzz the trace loader: any JSONL text either parses or raises TraceError naming the line."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mooncake_core.sim.trace import TraceError, load_trace, parse_trace

FUZZ = settings(derandomize=True, max_examples=300, deadline=None)

GOOD = '{"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]}'

json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
json_value = st.recursive(
    json_scalar,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=10,
)
record = st.fixed_dictionaries(
    {},
    optional={
        "timestamp": json_value,
        "input_length": json_value,
        "output_length": json_value,
        "hash_ids": json_value,
    },
)
line = st.one_of(
    st.text(max_size=60),
    record.map(json.dumps),
    json_value.map(json.dumps),
    st.just(GOOD),
)


@FUZZ
@given(st.lists(line, min_size=1, max_size=6))
def test_fuzz_trace_lines_parse_or_name_the_line(lines: list[str]) -> None:
    text = "\n".join(ln.replace("\n", " ").replace("\r", " ") for ln in lines)
    try:
        reqs = parse_trace(text.split("\n"), source="fuzz.jsonl")
    except TraceError as e:
        assert e.source == "fuzz.jsonl"
        assert 1 <= e.line <= len(lines)
        assert str(e).startswith(f"fuzz.jsonl:{e.line}")
        assert e.field in (None, "timestamp", "input_length", "output_length", "hash_ids")
    else:
        for r in reqs:
            assert r.input_length >= 0 and r.output_length >= 0


@settings(
    derandomize=True,
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(bad=record.map(json.dumps), pos=st.integers(min_value=0, max_value=3))
def test_fuzz_trace_file_error_names_the_file_and_line(tmp_path: Path, bad: str, pos: int) -> None:
    rows = [GOOD] * 4
    rows.insert(pos, bad)
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(rows) + "\n")
    try:
        load_trace(p)
    except TraceError as e:
        assert e.line == pos + 1, str(e)
        assert str(p) in str(e)
