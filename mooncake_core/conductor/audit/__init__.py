"""Scheduling audit: why each request went where (see docs/audit.md).

Records (:class:`DecisionRecord`, :class:`CandidateRecord`) go to an
:class:`AuditWriter`, which stores them in batches off the decision path; :class:`AuditReader`
lists, explains and aggregates them. The schema is managed by Alembic (``migrations/``).
"""

from . import sample
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
from .explain import explain, fmt_s
from .queries import AuditReader, AuditStats, DecisionFilter, ListedDecision, StatsBucket
from .records import ROLES, AuditEntry, CandidateRecord, DecisionRecord
from .retention import RetentionResult, apply_retention
from .timespec import format_time, parse_duration, parse_when
from .writer import AuditWriter, WriterOptions, WriterSnapshot

__all__ = [
    "ROLES",
    "AuditEntry",
    "AuditReader",
    "AuditStats",
    "AuditWriter",
    "CandidateRecord",
    "DecisionFilter",
    "DecisionRecord",
    "ListedDecision",
    "RetentionResult",
    "SchemaError",
    "SchemaStatus",
    "StatsBucket",
    "WriterOptions",
    "WriterSnapshot",
    "apply_retention",
    "explain",
    "fmt_s",
    "format_time",
    "head_revision",
    "make_engine",
    "migrations_dir",
    "parse_duration",
    "parse_when",
    "require_current_schema",
    "sample",
    "schema_status",
    "upgrade",
]
