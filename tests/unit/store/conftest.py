"""Fixtures for the master core tests: tiny configs, seeded randomness, exact sizes."""

from __future__ import annotations

import random
from typing import Any

import pytest
from store_unit_support import MakeMaster

from mooncake_core.config.models import MasterConfig
from mooncake_core.store import MasterState


@pytest.fixture
def make_master() -> MakeMaster:
    """Build a MasterState with alignment 1 (sizes are exact) and optional segments.

    ``segments`` is a list of ``(name, client_id, capacity)`` mounted at time 0.
    Other keyword arguments are MasterConfig fields.
    """

    def make(
        segments: list[tuple[str, str, int]] | None = None, seed: int = 0, **cfg: Any
    ) -> MasterState:
        m = MasterState(MasterConfig(**cfg), rng=random.Random(seed), alignment=1)
        for name, client, cap in segments or []:
            m.mount_segment(name, client, cap, 0.0)
        m.take_events()
        return m

    return make
