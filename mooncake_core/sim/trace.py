"""Loader for the public Mooncake trace format, with replay speed, sampling and validation.

One JSON object per line (``README_traces.md`` of the FAST'25 release)::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}

``timestamp`` is the arrival in milliseconds, ``hash_ids`` are chained block ids over
512-token blocks (the partial last block has an id too, so a record has at most
``ceil(input_length / 512)`` ids). A malformed line raises :class:`TraceError` naming the
file, the 1-based line number and the field; nothing is half-loaded.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "TRACE_BLOCK_TOKENS",
    "Sample",
    "TraceError",
    "TraceRequest",
    "load_trace",
    "parse_sample",
    "parse_trace",
]

TRACE_BLOCK_TOKENS = 512
"""Tokens per ``hash_ids`` block in the public traces."""

_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


class TraceError(ValueError):
    """A trace line is malformed.

    Attributes:
        source: file name (or ``<memory>``).
        line: 1-based line number.
        field: offending field, or ``None`` when the whole line is bad.
    """

    def __init__(self, source: str, line: int, field: str | None, message: str) -> None:
        where = f"{source}:{line}" + (f": field {field!r}" if field else "")
        super().__init__(f"{where}: {message}")
        self.source = source
        self.line = line
        self.field = field


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a (possibly scaled and sampled) trace.

    Attributes:
        rid: position in the loaded trace (0-based), used as the request id.
        arrival_s: arrival time in seconds, after the replay speed is applied.
        input_length: prompt tokens.
        output_length: generated tokens.
        hash_ids: chained block ids (512-token blocks; the last may be partial).
        line: 1-based line of the source file, for messages.
    """

    rid: int
    arrival_s: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]
    line: int = 0


@dataclass(frozen=True, slots=True)
class Sample:
    """Which records to keep.

    Attributes:
        kind: ``all``, ``first`` (the first ``n``), ``every`` (every ``n``-th, starting
            with the first) or ``fraction`` (each record kept with probability
            ``fraction``, drawn from a generator seeded with the loader's seed).
        n: count for ``first`` / step for ``every``.
        fraction: probability for ``fraction``.
    """

    kind: str = "all"
    n: int = 0
    fraction: float = 1.0


_SAMPLE_RE = re.compile(r"^(first|every|fraction):(.+)$")


def parse_sample(text: str | None) -> Sample:
    """Parse ``first:N``, ``every:K``, ``fraction:F`` or ``all`` (``None`` means all).

    Raises:
        ValueError: an unknown form or an out-of-range number, naming the text.
    """
    if text is None or text.strip() in ("", "all"):
        return Sample()
    m = _SAMPLE_RE.match(text.strip())
    if not m:
        raise ValueError(f"sample {text!r}: expected 'all', 'first:N', 'every:K' or 'fraction:F'")
    kind, value = m.group(1), m.group(2)
    try:
        if kind == "fraction":
            f = float(value)
            if not 0.0 < f <= 1.0:
                raise ValueError
            return Sample("fraction", 0, f)
        n = int(value)
        if n < 1:
            raise ValueError
        return Sample(kind, n, 1.0)
    except ValueError:
        what = "a number in (0, 1]" if kind == "fraction" else "an integer >= 1"
        raise ValueError(f"sample {text!r}: {kind} needs {what}") from None


def _int_field(obj: dict, name: str, source: str, line: int) -> int:
    if name not in obj:
        raise TraceError(source, line, name, "missing")
    v = obj[name]
    if isinstance(v, bool) or not isinstance(v, int):
        raise TraceError(source, line, name, f"must be an integer, got {v!r}")
    if v < 0:
        raise TraceError(source, line, name, f"must be >= 0, got {v}")
    return v


def _record(
    text: str, source: str, line: int, block_tokens: int
) -> tuple[float, int, int, tuple[int, ...]]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(source, line, None, f"not JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(obj, dict):
        raise TraceError(source, line, None, f"not a JSON object: {text[:60]!r}")
    ts = obj.get("timestamp")
    if "timestamp" not in obj:
        raise TraceError(source, line, "timestamp", "missing")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or ts != ts:
        raise TraceError(source, line, "timestamp", f"must be a number of ms, got {ts!r}")
    if ts < 0:
        raise TraceError(source, line, "timestamp", f"must be >= 0, got {ts}")
    inp = _int_field(obj, "input_length", source, line)
    outp = _int_field(obj, "output_length", source, line)
    if "hash_ids" not in obj:
        raise TraceError(source, line, "hash_ids", "missing")
    ids = obj["hash_ids"]
    if not isinstance(ids, list) or any(
        isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in ids
    ):
        raise TraceError(
            source, line, "hash_ids", f"must be a list of non-negative integers, got {ids!r:.80}"
        )
    most = -(-inp // block_tokens)
    if len(ids) > most:
        raise TraceError(
            source,
            line,
            "hash_ids",
            f"{len(ids)} ids for input_length {inp} (at most {most} blocks of {block_tokens})",
        )
    return float(ts), inp, outp, tuple(ids)


def parse_trace(
    lines: Iterable[str],
    *,
    source: str = "<memory>",
    speed: float = 1.0,
    sample: Sample | None = None,
    seed: int = 0,
    block_tokens: int = TRACE_BLOCK_TOKENS,
    backwards_tolerance_ms: float = 1000.0,
) -> list[TraceRequest]:
    """Validate, scale and sample trace lines.

    Blank lines are skipped. Timestamps may step back by at most
    ``backwards_tolerance_ms`` (clock jitter in a merged log); such records are then
    ordered by timestamp (stably). Arrivals are ``timestamp / 1000 / speed`` seconds.

    Args:
        lines: the JSONL text, one record per line.
        source: name used in error messages.
        speed: replay speed; 2.0 replays twice as fast (arrivals halved).
        sample: which records to keep (default all).
        seed: seed of the ``fraction`` sampler.
        block_tokens: tokens per hash block (512 in the public traces).
        backwards_tolerance_ms: largest step back in time accepted.

    Returns:
        Requests in arrival order, ``rid`` numbered 0.. after sampling.

    Raises:
        TraceError: a malformed line (file, line, field in the message).
        ValueError: a bad ``speed``, ``block_tokens`` or tolerance.
    """
    if not speed > 0 or speed != speed or speed == float("inf"):
        raise ValueError(f"speed must be a positive finite number, got {speed!r}")
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
    if backwards_tolerance_ms < 0:
        raise ValueError(f"backwards_tolerance_ms must be >= 0, got {backwards_tolerance_ms}")
    smp = sample or Sample()
    rng = random.Random(seed)
    raw: list[tuple[float, int, int, tuple[int, ...], int]] = []
    latest = float("-inf")
    kept_index = 0
    for lineno, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        ts, inp, outp, ids = _record(text, source, lineno, block_tokens)
        if ts < latest - backwards_tolerance_ms:
            raise TraceError(
                source,
                lineno,
                "timestamp",
                f"{ts:g} ms goes back {latest - ts:g} ms before an earlier record "
                f"(tolerance {backwards_tolerance_ms:g} ms)",
            )
        latest = max(latest, ts)
        position = kept_index
        kept_index += 1
        if smp.kind == "first" and position >= smp.n:
            continue
        if smp.kind == "every" and position % smp.n:
            continue
        # Draw for every record (kept or not) so the choice of one record does not
        # depend on earlier ones: same seed, same subset.
        if smp.kind == "fraction" and rng.random() >= smp.fraction:
            continue
        raw.append((ts, inp, outp, ids, lineno))
    raw.sort(key=lambda r: r[0])  # stable: equal timestamps keep file order
    return [
        TraceRequest(i, ts / 1000.0 / speed, inp, outp, ids, lineno)
        for i, (ts, inp, outp, ids, lineno) in enumerate(raw)
    ]


def load_trace(
    path: str | Path,
    *,
    speed: float = 1.0,
    sample: Sample | str | None = None,
    seed: int = 0,
    block_tokens: int = TRACE_BLOCK_TOKENS,
    backwards_tolerance_ms: float = 1000.0,
) -> list[TraceRequest]:
    """Read a JSONL trace file (see :func:`parse_trace` for the arguments).

    Raises:
        FileNotFoundError: no such file.
        TraceError: a malformed line.
        ValueError: bad arguments.
    """
    p = Path(path)
    smp = parse_sample(sample) if isinstance(sample, str) or sample is None else sample
    with p.open(encoding="utf-8") as fh:
        return parse_trace(
            fh,
            source=str(p),
            speed=speed,
            sample=smp,
            seed=seed,
            block_tokens=block_tokens,
            backwards_tolerance_ms=backwards_tolerance_ms,
        )
