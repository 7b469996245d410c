"""A real audit database, created with `mooncake db upgrade` and filled by the writer."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mooncake_cli.main import app
from mooncake_core.conductor.audit import AuditWriter, WriterOptions, sample

SCENARIO_T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


@pytest.fixture
def cli() -> CliRunner:
    # Wide enough that every table row is one line (a pipe otherwise fits 80 columns,
    # which tests/unit/telemetry/test_cli_tables_fit.py checks).
    return CliRunner(env={"COLUMNS": "250"})


@pytest.fixture
def audit_db(tmp_path: Path, cli: CliRunner) -> str:
    """URL of a database upgraded by the CLI, holding the documented scenario."""
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    res = cli.invoke(app, ["db", "upgrade", "--url", url])
    assert res.exit_code == 0, res.output
    w = AuditWriter.open(url, WriterOptions(batch_size=3))
    w.start()
    for d, c in sample.scenario(SCENARIO_T0):
        w.submit(d, c)
    w.update_actual("req-a", 1.50, 0.050)
    w.close()
    return url


# The real-cluster launcher lives with the serving tests; import it, don't copy it.
_SERVING = Path(__file__).resolve().parents[1] / "serving"
if str(_SERVING) not in sys.path:
    sys.path.insert(0, str(_SERVING))
