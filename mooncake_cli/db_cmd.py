"""`mooncake db`: create and upgrade the scheduling audit database (Alembic)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from .common import ConfigOption, JsonOption, fail, load, out, write_stdout

app = typer.Typer(help="Audit database schema: upgrade, current revision.", no_args_is_help=True)

UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="Audit database SQLAlchemy URL (default: audit.url from the cluster config).",
        show_default=False,
    ),
]


def audit_url(url: str | None, config: Path | None) -> str:
    """The database URL: ``--url`` if given, else the cluster config's ``audit_url``."""
    if url:
        return url
    return str(load(config).audit_url)


@app.command("upgrade")
def upgrade(
    url: UrlOption = None,
    config: ConfigOption = None,
    revision: Annotated[str, typer.Option("--revision", help="Target revision.")] = "head",
    as_json: JsonOption = False,
) -> None:
    """Create the audit database or bring it to the newest schema; rows are kept."""
    from mooncake_core.conductor.audit import SchemaError, make_engine, schema_status
    from mooncake_core.conductor.audit import upgrade as run_upgrade

    target = audit_url(url, config)
    before: str | None = None
    try:
        try:
            engine = make_engine(target)
        except SchemaError:
            pass  # no file yet: upgrade creates it
        else:
            before = schema_status(engine).current
            engine.dispose()
        st = run_upgrade(target, revision)
    except SchemaError as exc:
        fail(str(exc))
    except Exception as exc:  # alembic/SQLAlchemy errors: say which database and why
        fail(f"upgrading {target} failed: {exc}")
    if as_json:
        write_stdout(json.dumps({"url": st.url, "before": before, "current": st.current}))
    elif before == st.current:
        out.print(f"{st.url}: already at revision {st.current}", highlight=False)
    else:
        out.print(
            f"{st.url}: upgraded from {before or 'empty'} to revision {st.current}",
            highlight=False,
        )


@app.command("current")
def current(
    url: UrlOption = None,
    config: ConfigOption = None,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 unless the schema is current.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Show the schema revision of the audit database and whether it is current."""
    from mooncake_core.conductor.audit import SchemaError, make_engine, schema_status

    target = audit_url(url, config)
    try:
        engine = make_engine(target)
        try:
            st = schema_status(engine)
        finally:
            engine.dispose()
    except SchemaError as exc:
        fail(str(exc))
    if as_json:
        write_stdout(
            json.dumps(
                {
                    "url": st.url,
                    "current": st.current,
                    "expected": st.expected,
                    "up_to_date": st.up_to_date,
                }
            )
        )
    else:
        state = "up to date" if st.up_to_date else "needs `mooncake db upgrade`"
        out.print(
            f"{st.url}: revision {st.current or 'none (empty database)'}, "
            f"this version uses {st.expected}: {state}",
            highlight=False,
        )
    if check and not st.up_to_date:
        raise typer.Exit(1)
