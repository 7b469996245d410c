"""Scheduling audit: why each request went where (see docs/audit.md).

Records (:class:`DecisionRecord`, :class:`CandidateRecord`) go to an
:class:`AuditWriter`, which stores them in batches off the decision path;
:class:`AuditReader` lists, explains and aggregates them. The schema is managed by
Alembic (``migrations/``; ``mooncake db upgrade``).

The records, the explanation text and the time parsing are plain Python and load
eagerly; everything that needs SQLAlchemy (writer, reader, schema helpers) loads on
first use, so the decision path can build records without importing a database layer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import sample
from .explain import explain
from .records import (
    OUTCOME_DETAIL_MAX,
    OUTCOMES,
    ROLES,
    AuditEntry,
    CandidateRecord,
    DecisionRecord,
    Outcome,
)
from .timespec import format_time, parse_duration, parse_when

if TYPE_CHECKING:
    from .db import (
        SchemaError,
        SchemaStatus,
        head_revision,
        make_engine,
        migrations_dir,
        require_current_schema,
        schema_status,
        upgrade,
    )
    from .process_writer import AuditSink, ProcessAuditWriter, open_audit_writer
    from .queries import AuditReader, AuditStats, DecisionFilter, ListedDecision, StatsBucket
    from .retention import RetentionResult, apply_retention
    from .writer import AuditWriter, RecordSource, WriterOptions, WriterSnapshot

_LAZY: dict[str, str] = {
    **dict.fromkeys(
        (
            "SchemaError",
            "SchemaStatus",
            "head_revision",
            "make_engine",
            "migrations_dir",
            "require_current_schema",
            "schema_status",
            "upgrade",
        ),
        ".db",
    ),
    **dict.fromkeys(
        ("AuditReader", "AuditStats", "DecisionFilter", "ListedDecision", "StatsBucket"),
        ".queries",
    ),
    **dict.fromkeys(("RetentionResult", "apply_retention"), ".retention"),
    **dict.fromkeys(("AuditWriter", "RecordSource", "WriterOptions", "WriterSnapshot"), ".writer"),
    **dict.fromkeys(("AuditSink", "ProcessAuditWriter", "open_audit_writer"), ".process_writer"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "OUTCOMES",
    "OUTCOME_DETAIL_MAX",
    "ROLES",
    "AuditEntry",
    "AuditReader",
    "AuditSink",
    "AuditStats",
    "AuditWriter",
    "CandidateRecord",
    "DecisionFilter",
    "DecisionRecord",
    "ListedDecision",
    "Outcome",
    "ProcessAuditWriter",
    "RecordSource",
    "RetentionResult",
    "SchemaError",
    "SchemaStatus",
    "StatsBucket",
    "WriterOptions",
    "WriterSnapshot",
    "apply_retention",
    "explain",
    "format_time",
    "head_revision",
    "make_engine",
    "migrations_dir",
    "open_audit_writer",
    "parse_duration",
    "parse_when",
    "require_current_schema",
    "sample",
    "schema_status",
    "upgrade",
]
