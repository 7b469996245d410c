"""Stop strings across chunk boundaries (exact)."""

from __future__ import annotations

import pytest

from mooncake_web.frontdoor.stops import StopMatcher


def _run(stops: list[str], chunks: list[str]) -> tuple[list[str], bool]:
    m = StopMatcher(stops)
    out = [m.push(c) for c in chunks]
    out.append(m.flush())
    return out, m.stopped


@pytest.mark.parametrize(
    ("stops", "chunks", "want", "stopped"),
    [
        (["\n"], ["ab", "c\nd", "e"], ["ab", "c", "", ""], True),
        (["END"], ["x E", "N", "D y"], ["x ", "", "", ""], True),
        (["END"], ["x E", "N", "o"], ["x ", "", "ENo", ""], False),
        (["END"], ["xEN"], ["x", "EN"], False),
        (["ab", "bc"], ["zb", "c"], ["z", "", ""], True),
        ([], ["a", "b"], ["a", "b", ""], False),
        ([""], ["a"], ["a", ""], False),
        (["stop"], ["stop"], ["", ""], True),
    ],
)
def test_stop_matcher(stops: list[str], chunks: list[str], want: list[str], stopped: bool) -> None:
    assert _run(stops, chunks) == (want, stopped)
