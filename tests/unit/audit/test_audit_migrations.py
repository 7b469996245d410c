"""Alembic migrations: empty DB, older DB with rows, models == migrations, refusals."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from mooncake_core.conductor.audit import (
    AuditReader,
    AuditWriter,
    SchemaError,
    head_revision,
    make_engine,
    schema_status,
    upgrade,
)
from mooncake_core.conductor.audit.models import SCHEMA_REVISION, metadata


def _url(tmp_path: Path, name: str = "audit.db") -> str:
    return f"sqlite:///{tmp_path / name}"


def test_models_revision_constant_is_the_migrations_head() -> None:
    assert head_revision() == SCHEMA_REVISION == "0006"


def test_upgrade_empty_database_creates_schema(tmp_path: Path) -> None:
    url = _url(tmp_path, "sub/dir/audit.db")  # parent folders are created
    st = upgrade(url)
    assert (st.current, st.expected, st.up_to_date) == (SCHEMA_REVISION, SCHEMA_REVISION, True)
    con = sqlite3.connect(tmp_path / "sub/dir/audit.db")
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"alembic_version", "decisions", "candidates"}
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # Upgrading again is a no-op.
    assert upgrade(url).current == SCHEMA_REVISION


def test_models_match_migrations_autogenerate_reports_no_diff(tmp_path: Path) -> None:
    url = _url(tmp_path)
    upgrade(url)
    engine = make_engine(url)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(ctx, metadata)
    engine.dispose()
    assert diff == []


def test_autogenerate_comparison_sees_a_difference_at_revision_0001(tmp_path: Path) -> None:
    # Guards the test above against passing vacuously.
    url = _url(tmp_path)
    upgrade(url, "0001")
    engine = make_engine(url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    engine.dispose()
    added = sorted(d[3].name for d in diff if d[0] == "add_column")
    assert added == [
        "actual_tbt_s",
        "actual_ttft_s",
        "kv_capacity_tokens",
        "kv_reported_tokens",
        "kv_tokens",
        "migration_bandwidth_bps",
        "migration_bandwidth_source",
        "model_ttft_s",
        "outcome",
        "outcome_detail",
        "overhead_time_s",
        "predicted_overhead_s",
        "transfer_source",
    ]


def test_upgrade_from_first_revision_keeps_rows(tmp_path: Path) -> None:
    url = _url(tmp_path)
    assert upgrade(url, "0001").current == "0001"
    con = sqlite3.connect(tmp_path / "audit.db")
    con.execute(
        "INSERT INTO decisions (id, time, request_id, prompt_tokens, prompt_blocks, "
        "first_block_key, block_key_count, policy, chosen_prefill, chosen_decode, "
        "predicted_ttft_s, predicted_tbt_s, admitted, reject_reason, retry_after_s, "
        "migration_source, migration_blocks) VALUES "
        "(7, 100.5, 'old-1', 32, 2, 'ab', 2, 'cache_aware', 'prefill-0', 'decode-0', "
        "0.25, 0.04, 1, NULL, NULL, NULL, 0)"
    )
    con.execute(
        "INSERT INTO candidates (decision_id, instance, role, matched_prefix_blocks, "
        "queue_time_s, transfer_time_s, prefill_time_s, predicted_ttft_s, predicted_tbt_s, "
        "chosen, why_not, transfer_blocks) VALUES "
        "(7, 'prefill-0', 'prefill', 2, 0.1, 0.0, 0.15, 0.25, NULL, 1, NULL, 0)"
    )
    con.commit()
    con.close()

    # The writer and the reader refuse the old schema and say what to do.
    with pytest.raises(
        SchemaError, match=rf"revision '0001'.*needs '{SCHEMA_REVISION}'.*mooncake db upgrade"
    ):
        AuditWriter.open(url)
    with pytest.raises(SchemaError, match="mooncake db upgrade"):
        AuditReader.open(url)

    assert upgrade(url).current == SCHEMA_REVISION
    with AuditReader.open(url) as r:
        entry = r.get("old-1")
    assert entry is not None
    assert entry.id == 7
    assert entry.decision.policy == "cache_aware"
    assert entry.decision.predicted_ttft_s == 0.25
    assert entry.decision.actual_ttft_s is None
    assert [(c.instance, c.matched_prefix_blocks, c.chosen) for c in entry.candidates] == [
        ("prefill-0", 2, True)
    ]


def test_unupgraded_database_is_refused_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    with pytest.raises(SchemaError, match=r"no audit database at .*nope\.db.*mooncake db upgrade"):
        AuditWriter.open(f"sqlite:///{missing}")
    assert not missing.exists()

    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    with pytest.raises(SchemaError, match="has no schema; run `mooncake db upgrade`"):
        AuditWriter.open(f"sqlite:///{empty}")
    con = sqlite3.connect(empty)
    assert con.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0


def test_unknown_newer_revision_is_refused(tmp_path: Path) -> None:
    url = _url(tmp_path)
    upgrade(url)
    con = sqlite3.connect(tmp_path / "audit.db")
    con.execute("UPDATE alembic_version SET version_num = '9999'")
    con.commit()
    con.close()
    engine = make_engine(url)
    assert schema_status(engine).current == "9999"
    engine.dispose()
    with pytest.raises(SchemaError, match="written by a newer version"):
        AuditReader.open(url)


def test_alembic_command_line_with_x_url(tmp_path: Path) -> None:
    # The repository's alembic.ini + env.py work with plain `alembic`, URL from -x.
    from alembic.config import main as alembic_main

    repo = Path(__file__).resolve().parents[3]
    url = _url(tmp_path)
    alembic_main(["-c", str(repo / "alembic.ini"), "-x", f"url={url}", "upgrade", "0001"])
    alembic_main(["-c", str(repo / "alembic.ini"), "-x", f"url={url}", "upgrade", "head"])
    engine = make_engine(url)
    assert schema_status(engine).current == SCHEMA_REVISION
    engine.dispose()


def test_downgrade_and_upgrade_again_keep_every_row(tmp_path: Path) -> None:
    # Batch mode recreates `decisions` on downgrade; with SQLite foreign keys enforced
    # that drop would cascade-delete all candidates. Migrations run with them off.
    from alembic.config import main as alembic_main

    from mooncake_core.conductor.audit import sample

    url = _url(tmp_path)
    upgrade(url)
    with AuditWriter.open(url) as w:
        for d, c in sample.scenario(1_800_000_000.0):
            w.submit(d, c)
    repo = Path(__file__).resolve().parents[3]
    alembic_main(["-c", str(repo / "alembic.ini"), "-x", f"url={url}", "downgrade", "0001"])
    con = sqlite3.connect(tmp_path / "audit.db")
    counts = [
        con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("decisions", "candidates")
    ]
    cols = [r[1] for r in con.execute("PRAGMA table_info(decisions)")]
    con.close()
    assert counts == [4, 12]
    assert "actual_ttft_s" not in cols
    assert upgrade(url).current == SCHEMA_REVISION
    with AuditReader.open(url) as r:
        entry = r.get("req-a")
    assert entry is not None and len(entry.candidates) == 5


def test_migrations_dir_env_override_and_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mooncake_core.conductor.audit import db, migrations_dir

    shipped = Path(db.__file__).resolve().parent / "migrations"
    assert migrations_dir() == shipped
    copy = tmp_path / "copy"
    shutil.copytree(shipped, copy)
    monkeypatch.setenv(db.MIGRATIONS_ENV, str(copy))
    assert migrations_dir() == copy
    # Pretend to be installed without the folder: the error names every place looked at.
    monkeypatch.setenv(db.MIGRATIONS_ENV, str(tmp_path / "nowhere"))
    monkeypatch.setattr(db, "__file__", str(tmp_path / "site/mooncake_core/conductor/audit/db.py"))
    with pytest.raises(
        SchemaError, match=r"cannot find the audit migrations.*nowhere.*MOONCAKE_MIGRATIONS_DIR"
    ):
        migrations_dir()
