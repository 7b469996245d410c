"""Queue per worker instance as the conductor sees it."""

from __future__ import annotations

from mooncake_core.fmt import seconds
from mooncake_core.telemetry import ClusterView, InstanceQueueView

from .sortable_table import Column, Row, SortableTable

__all__ = ["QueueTable"]


class QueueTable(SortableTable):
    """One row per prefill or decode instance."""

    COLUMNS = (
        Column("Instance", 14, identity=True),
        Column("Role", 7),
        Column("Queued", 6, descending=True),
        Column("Running", 7, descending=True),
        Column("Cap", 4, descending=True),
        Column("T_queue", 8, descending=True),
    )

    def show(self, view: ClusterView) -> None:
        """Rebuild the rows from ``view``."""
        self.set_rows([_row(q) for q in view.scheduler.queues])


def _row(q: InstanceQueueView) -> Row:
    return Row(
        key=q.name,
        cells=(
            q.name,
            q.role,
            str(q.queued),
            str(q.running),
            str(q.capacity) if q.capacity else "-",
            seconds(q.queue_time_s, compact=True),
        ),
        sort=(q.name, q.role, q.queued, q.running, q.capacity, q.queue_time_s),
        search=f"{q.name} {q.role}",
    )
