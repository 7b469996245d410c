"""FrontDoor's outcome_of: which audit outcome each way of ending a request records."""

from __future__ import annotations

import asyncio

import pytest

from mooncake_core.conductor.audit import OUTCOMES
from mooncake_core.conductor.service.frontdoor import Rejected, ServingError, outcome_of


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (
            Rejected("decode_kv_full", "RESOURCE_EXHAUSTED: no room", 1.0),
            ("rejected", "decode_kv_full: RESOURCE_EXHAUSTED: no room"),
        ),
        (
            ServingError("rejected at decode join: decode_full"),
            ("failed", "rejected at decode join: decode_full"),
        ),
        (asyncio.CancelledError(), ("cancelled", "request task cancelled")),
        (GeneratorExit(), ("cancelled", "stream closed before the last token (client gone)")),
        (RuntimeError("boom"), ("failed", "RuntimeError: boom")),
        (KeyboardInterrupt(), ("cancelled", "KeyboardInterrupt")),
    ],
)
def test_outcome_of_each_way_a_request_ends(exc: BaseException, expected: tuple[str, str]) -> None:
    assert outcome_of(exc) == expected
    assert outcome_of(exc)[0] in OUTCOMES
