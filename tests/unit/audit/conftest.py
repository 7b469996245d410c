"""Fixtures for the audit unit tests: upgraded SQLite files in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from mooncake_core.conductor.audit import AuditWriter, WriterOptions, sample, upgrade

T0 = 1_800_000_000.0
"""Scenario start (2027-01-15T08:00:00Z), far from "now" so age retention is explicit."""


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """An empty audit database upgraded to head."""
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    upgrade(url)
    return url


@pytest.fixture
def filled_url(db_url: str) -> str:
    """The documented four-decision scenario, written through the real writer."""
    w = AuditWriter.open(db_url, WriterOptions(batch_size=2))
    for d, c in sample.scenario(T0):
        w.submit(d, c)
    w.update_actual("req-a", 1.50, 0.050)
    w.update_actual("req-c", 0.50, None)
    w.close()
    return db_url
