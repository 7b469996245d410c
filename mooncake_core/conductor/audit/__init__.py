"""Scheduling audit: why each request went where (see docs/audit.md).

Records (:class:`DecisionRecord`, :class:`CandidateRecord`) go to an
:class:`AuditWriter`, which stores them in batches off the decision path; :class:`AuditReader`
lists, explains and aggregates them. The schema is managed by Alembic (``migrations/``).
"""

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
from .records import AuditEntry, CandidateRecord, DecisionRecord

__all__ = [
    "AuditEntry",
    "CandidateRecord",
    "DecisionRecord",
    "SchemaError",
    "SchemaStatus",
    "head_revision",
    "make_engine",
    "migrations_dir",
    "require_current_schema",
    "schema_status",
    "upgrade",
]
