"""The dashboard's drain jobs: arguments and a node never drained (stops are covered
against a real master in tests/functional/web/test_web_drain_cancel.py)."""

from __future__ import annotations

from typing import Any

import pytest

from mooncake_web.drains import DrainJobs


class _Recorder:
    """Stands in for the Transfer Engine copier: records what it was asked to copy."""

    def __init__(self) -> None:
        self.copies: list[int] = []
        self.segments: list[Any] = []

    def set_segments(self, segments: Any) -> None:
        self.segments = list(segments)

    def copy(self, size: int, source: Any, target: Any) -> None:
        self.copies.append(size)

    def close(self) -> None:
        pass


def test_bad_wait_and_unknown_node() -> None:
    with pytest.raises(ValueError, match="wait_s must be >= 0, got -1"):
        DrainJobs(_Recorder, wait_s=-1)  # type: ignore[arg-type]
    assert DrainJobs(_Recorder).get("store-0") is None  # type: ignore[arg-type]


async def test_cancel_of_a_node_never_drained() -> None:
    assert await DrainJobs(_Recorder).cancel("store-0") is False  # type: ignore[arg-type]
