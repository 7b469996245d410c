"""Alembic environment for the scheduling audit database.

The database URL comes from, in order: an open connection handed over by
``mooncake db upgrade`` (``config.attributes["connection"]``), ``alembic -x url=...``,
``sqlalchemy.url`` in the Alembic config, else the cluster config
(``ClusterConfig.audit_url`` of ``$MOONCAKE_CONFIG`` / ``./mooncake.yaml`` / the
embedded default). The one target metadata is ``mooncake_core.conductor.audit.models``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from mooncake_core.conductor.audit.db import make_engine
from mooncake_core.conductor.audit.models import metadata

config = context.config
target_metadata = metadata


def _url() -> str:
    x = context.get_x_argument(as_dictionary=True)
    if x.get("url"):
        return x["url"]
    ini = config.get_main_option("sqlalchemy.url")
    if ini:
        return ini
    from mooncake_core.config import load_config

    return load_config(None).audit_url


def _configure(**kw: object) -> None:
    context.configure(
        target_metadata=target_metadata,
        compare_type=True,
        # SQLite cannot ALTER most things in place; batch mode copies the table instead.
        render_as_batch=True,
        **kw,  # type: ignore[arg-type]
    )


def _run(conn: Connection) -> None:
    _configure(connection=conn)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    """Emit SQL to stdout (``alembic upgrade head --sql``)."""
    _configure(url=_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run against a live database."""
    given = config.attributes.get("connection")
    if given is not None:
        _run(given)
        return
    # Foreign keys off: batch mode copies and drops tables (see make_engine).
    engine = make_engine(_url(), create_dir=True, foreign_keys=False)
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
