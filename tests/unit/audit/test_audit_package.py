"""The audit package's public surface, and that records load without SQLAlchemy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import mooncake_core.conductor.audit as audit

ROOT = Path(__file__).resolve().parents[3]


def test_every_public_name_resolves() -> None:
    for name in audit.__all__:
        assert getattr(audit, name) is not None, name
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        _ = audit.Nope  # type: ignore[attr-defined]


def test_records_import_does_not_load_sqlalchemy() -> None:
    # The conductor builds records on its decision path; that must not pull in a DB layer.
    code = (
        "import sys\n"
        "from mooncake_core.conductor.audit import DecisionRecord, CandidateRecord, explain\n"
        "assert 'sqlalchemy' not in sys.modules, 'sqlalchemy loaded'\n"
        "from mooncake_core.conductor.audit import AuditWriter\n"
        "assert 'sqlalchemy' in sys.modules\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
