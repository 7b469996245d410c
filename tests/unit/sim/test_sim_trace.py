"""Trace loader: scaling, sampling and validation errors that name the line and field."""

import json
from pathlib import Path

import pytest

from mooncake_core.sim import TraceError, load_trace, parse_sample, parse_trace
from mooncake_core.sim.trace import Sample


def line(ts: float = 0, inp: int = 1024, out: int = 5, ids: object = (1, 2)) -> str:
    return json.dumps(
        {"timestamp": ts, "input_length": inp, "output_length": out, "hash_ids": list(ids)}  # type: ignore[call-overload]
    )


def good(n: int = 5) -> list[str]:
    return [line(ts=1000 * i, ids=(i, 100 + i)) for i in range(n)]


def test_parse_scales_time_and_numbers_requests() -> None:
    reqs = parse_trace(good(3), speed=2.0)
    assert [r.arrival_s for r in reqs] == [0.0, 0.5, 1.0]
    assert [r.rid for r in reqs] == [0, 1, 2]
    assert reqs[1].hash_ids == (1, 101)
    assert reqs[2].line == 3


@pytest.mark.parametrize(
    ("text", "field", "fragment"),
    [
        ("{not json", None, "not JSON"),
        ("[1, 2]", None, "not a JSON object"),
        ('{"input_length": 5, "output_length": 1, "hash_ids": [1]}', "timestamp", "missing"),
        (line(ts=-1), "timestamp", ">= 0"),
        (
            '{"timestamp": "x", "input_length": 5, "output_length": 1, "hash_ids": []}',
            "timestamp",
            "number",
        ),
        (line(inp=-3, ids=()), "input_length", ">= 0"),
        (
            '{"timestamp": 0, "input_length": 5.5, "output_length": 1, "hash_ids": []}',
            "input_length",
            "integer",
        ),
        ('{"timestamp": 0, "input_length": 5, "hash_ids": []}', "output_length", "missing"),
        (line(out=-1), "output_length", ">= 0"),
        ('{"timestamp": 0, "input_length": 5, "output_length": 1}', "hash_ids", "missing"),
        (line(ids=["a"]), "hash_ids", "list of non-negative integers"),
        (line(ids=[-4]), "hash_ids", "list of non-negative integers"),
        (
            '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": 7}',
            "hash_ids",
            "list",
        ),
        (line(inp=1025, ids=(1, 2, 3, 4)), "hash_ids", "at most 3 blocks"),
    ],
)
def test_malformed_line_names_line_and_field(text: str, field: str | None, fragment: str) -> None:
    lines = [*good(2), text]
    with pytest.raises(TraceError) as exc:
        parse_trace(lines, source="t.jsonl")
    assert exc.value.line == 3
    assert exc.value.field == field
    assert str(exc.value).startswith("t.jsonl:3")
    assert fragment in str(exc.value)


def test_partial_last_block_id_is_allowed() -> None:
    (r,) = parse_trace([line(inp=1025, ids=(1, 2, 3))])
    assert r.hash_ids == (1, 2, 3)


def test_timestamps_backwards_beyond_tolerance_rejected_within_sorted() -> None:
    lines = [line(ts=5000), line(ts=4500, ids=(7,)), line(ts=6000)]
    reqs = parse_trace(lines, backwards_tolerance_ms=1000)
    assert [r.arrival_s for r in reqs] == [4.5, 5.0, 6.0]
    assert reqs[0].hash_ids == (7,)
    with pytest.raises(TraceError, match="goes back 500 ms") as exc:
        parse_trace(lines, backwards_tolerance_ms=100)
    assert exc.value.line == 2 and exc.value.field == "timestamp"


def test_blank_lines_skipped_and_line_numbers_kept() -> None:
    with pytest.raises(TraceError) as exc:
        parse_trace([line(), "", "   ", "oops"])
    assert exc.value.line == 4


def test_sampling_first_every_fraction() -> None:
    lines = good(10)
    assert len(parse_trace(lines, sample=parse_sample("first:3"))) == 3
    every = parse_trace(lines, sample=parse_sample("every:4"))
    assert [r.hash_ids[0] for r in every] == [0, 4, 8]
    assert [r.rid for r in every] == [0, 1, 2]
    a = parse_trace(lines, sample=parse_sample("fraction:0.5"), seed=3)
    b = parse_trace(lines, sample=parse_sample("fraction:0.5"), seed=3)
    assert [r.hash_ids for r in a] == [r.hash_ids for r in b]
    assert 0 < len(a) < 10
    assert parse_sample(None) == Sample() == parse_sample("all")


@pytest.mark.parametrize(
    "text", ["first:0", "every:-1", "fraction:0", "fraction:1.5", "last:3", "first:x"]
)
def test_bad_sample_specs(text: str) -> None:
    with pytest.raises(ValueError, match="sample"):
        parse_sample(text)


@pytest.mark.parametrize("speed", [0.0, -1.0, float("inf"), float("nan")])
def test_bad_speed(speed: float) -> None:
    with pytest.raises(ValueError, match="speed"):
        parse_trace(good(1), speed=speed)


def test_load_trace_from_file_names_the_file(tmp_path: Path) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text("\n".join([*good(2), line(out=-2)]) + "\n")
    with pytest.raises(TraceError, match=r"bad\.jsonl:3: field 'output_length'"):
        load_trace(p)
    p.write_text("\n".join(good(4)) + "\n")
    assert len(load_trace(p, sample="every:2")) == 2
    with pytest.raises(FileNotFoundError):
        load_trace(tmp_path / "missing.jsonl")
