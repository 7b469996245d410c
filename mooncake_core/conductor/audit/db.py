"""Connecting to the audit database and keeping its schema current (Alembic).

Schema changes only ever happen through the Alembic revisions in ``migrations/`` at the
repository root. Readers and the writer call :func:`require_current_schema` first: a
database that was never upgraded, or that is at an older revision, is refused with a
message that says to run ``mooncake db upgrade`` -- it is never silently recreated.

Locating the migrations: they live in ``migrations/`` next to the ``mooncake_core``
package of a source checkout (the project is installed editable). An install from a
wheel does not ship that folder today; point ``MOONCAKE_MIGRATIONS_DIR`` at a copy of
it, or package it as ``mooncake_core/conductor/audit/migrations`` (looked up too).
Only ``upgrade`` and ``head_revision`` need the folder; checking a database against
:data:`.models.SCHEMA_REVISION` does not.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url

from .models import SCHEMA_REVISION

MIGRATIONS_ENV = "MOONCAKE_MIGRATIONS_DIR"
"""Environment variable naming the migrations folder (overrides the checkout lookup)."""


class SchemaError(RuntimeError):
    """The audit database is missing, not upgraded, or newer than this code."""


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    """Where a database stands against the code.

    Attributes:
        url: Database URL with any password hidden.
        current: Revision stamped in the database (``None``: never upgraded).
        expected: Revision this code reads and writes.
    """

    url: str
    current: str | None
    expected: str

    @property
    def up_to_date(self) -> bool:
        """Whether the database is at the revision this code expects."""
        return self.current == self.expected


def _sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL, ``None`` for in-memory or non-SQLite URLs."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite":
        return None
    db = u.database or ""
    if db in ("", ":memory:") or db.startswith("file:"):
        return None
    return Path(db).expanduser()


def _sqlite_pragmas(foreign_keys: bool) -> Any:
    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        # WAL lets the CLI read while the conductor writes; NORMAL sync is durable across
        # process crashes (only an OS crash can lose the last transactions), the right
        # trade for an audit trail written at tens of thousands of rows per second.
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute(f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}")
        cur.execute("PRAGMA busy_timeout=5000")
        cur.close()

    return on_connect


def make_engine(url: str, *, create_dir: bool = False, foreign_keys: bool = True) -> Engine:
    """Create an engine for the audit database (no tables are created).

    SQLite connections get WAL journaling, ``synchronous=NORMAL``, foreign keys and a
    busy timeout.

    Args:
        url: Any SQLAlchemy URL (``sqlite:///path/audit.db`` by default).
        create_dir: Create the parent folder of a SQLite file (used by ``upgrade``).
        foreign_keys: Enforce foreign keys on SQLite. Migrations turn them off: batch
            mode copies and drops tables, and dropping ``decisions`` with enforcement on
            would cascade-delete every candidate.

    Returns:
        A new engine; the caller disposes of it.

    Raises:
        SchemaError: a SQLite file does not exist and ``create_dir`` is false (readers
            must not create an empty database by opening it).
    """
    path = _sqlite_path(url)
    if path is not None:
        if create_dir:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # Private whatever the umask: SQLite gives -wal and -shm the file's mode.
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        elif not path.exists():
            raise SchemaError(
                f"no audit database at {path}; run `mooncake db upgrade` to create it"
            )
    engine = create_engine(url)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas(foreign_keys))
    return engine


def current_revision(engine: Engine) -> str | None:
    """The revision stamped in the database's ``alembic_version`` table, if any."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        rows = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    if len(rows) > 1:
        raise SchemaError(f"audit database has several schema heads: {sorted(rows)}")
    return rows[0] if rows else None


def schema_status(engine: Engine) -> SchemaStatus:
    """Compare the database's revision with :data:`.models.SCHEMA_REVISION`."""
    return SchemaStatus(
        url=engine.url.render_as_string(hide_password=True),
        current=current_revision(engine),
        expected=SCHEMA_REVISION,
    )


def require_current_schema(engine: Engine) -> None:
    """Refuse a database whose schema is not the one this code uses.

    Raises:
        SchemaError: never upgraded, older, or newer than :data:`.models.SCHEMA_REVISION`.
    """
    st = schema_status(engine)
    if st.current is None:
        raise SchemaError(f"audit database {st.url} has no schema; run `mooncake db upgrade` first")
    if st.current != st.expected:
        known = _known_revisions()
        if known is not None and st.current not in known:
            raise SchemaError(
                f"audit database {st.url} is at schema revision {st.current!r}, which this "
                f"version of mooncake does not know (it uses {st.expected!r}); "
                "it was written by a newer version"
            )
        raise SchemaError(
            f"audit database {st.url} is at schema revision {st.current!r}, this version "
            f"needs {st.expected!r}; run `mooncake db upgrade`"
        )


def migrations_dir() -> Path:
    """The Alembic script folder (``migrations/`` inside this package).

    Looks at ``$MOONCAKE_MIGRATIONS_DIR`` first, then at the ``migrations/`` folder that
    ships inside ``mooncake_core.conductor.audit`` (source checkout, editable install and
    wheel alike).

    Raises:
        SchemaError: the folder cannot be found (a broken install).
    """
    env = os.environ.get(MIGRATIONS_ENV)
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parent / "migrations")
    for c in candidates:
        if (c / "env.py").is_file() and (c / "versions").is_dir():
            return c
    looked = ", ".join(str(c) for c in candidates)
    raise SchemaError(
        f"cannot find the audit migrations (looked in {looked}); reinstall mooncake-py "
        f"or set {MIGRATIONS_ENV} to a folder holding env.py and versions/"
    )


def alembic_config(url: str) -> Any:
    """An Alembic ``Config`` built in code for ``url`` (no ``alembic.ini`` needed).

    Returns:
        ``alembic.config.Config`` with ``script_location`` and ``sqlalchemy.url`` set.
    """
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    # ConfigParser interpolates '%', which may appear in URL-encoded passwords.
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def _known_revisions() -> set[str] | None:
    try:
        from alembic.script import ScriptDirectory

        script = ScriptDirectory(str(migrations_dir()))
    except SchemaError:
        return None
    return {rev.revision for rev in script.walk_revisions()}


def head_revision() -> str:
    """The newest revision in ``migrations/``."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(migrations_dir())).get_current_head()
    if head is None:
        raise SchemaError(f"no revisions in {migrations_dir()}")
    return head


def upgrade(url: str, revision: str = "head") -> SchemaStatus:
    """Create or upgrade the audit database to ``revision`` (existing rows are kept).

    Args:
        url: Database URL; a missing SQLite file (and its folder) is created.
        revision: Target revision, ``head`` by default.

    Returns:
        The schema status after the upgrade.
    """
    from alembic import command

    engine = make_engine(url, create_dir=True, foreign_keys=False)
    try:
        cfg = alembic_config(url)
        with engine.begin() as conn:
            # env.py uses this connection, so the SQLite pragmas apply to migrations too.
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
        return schema_status(engine)
    finally:
        engine.dispose()
