"""Fixtures for the multi-host Transfer Engine tests: a two-namespace rig per test.

Every test here is privileged: it is skipped, with the reason, where network namespaces
cannot be created (not root, no iproute2, a container without CAP_SYS_ADMIN).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

# The rig lives in tests/netns_util.py so bench scripts can share it; test folders here
# are not packages, so make the repository root importable.
_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from tests.netns_util import NetnsPair, netns_pair, netns_unavailable_reason  # noqa: E402

_reason: list[str | None] = []


def _unavailable() -> str | None:
    if not _reason:
        _reason.append(netns_unavailable_reason())
    return _reason[0]


@pytest.fixture
def make_rig() -> Iterator[Callable[..., NetnsPair]]:
    """Factory: ``make_rig(n_links=2, rate="1gbit")`` builds a rig torn down after the test."""
    reason = _unavailable()
    if reason is not None:
        pytest.skip(reason)
    with ExitStack() as stack:

        def factory(
            n_links: int = 2, *, rate: str | None = None, netem: str | None = None
        ) -> NetnsPair:
            return stack.enter_context(netns_pair(n_links, rate=rate, netem=netem))

        yield factory
