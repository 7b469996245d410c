"""Widgets of ``mooncake top`` (one per file)."""

from .decision_table import DecisionTable
from .filter_bar import FilterBar
from .host_nic_table import HostNicTable
from .nic_table import NicTable
from .nic_trend import NicTrend
from .node_table import NodeTable
from .queue_table import QueueTable
from .scheduler_summary import SchedulerSummary, scheduler_text
from .segment_table import SegmentTable
from .sortable_table import Column, Row, SortableTable
from .status_line import StatusLine
from .store_summary import StoreSummary, store_text
from .transport_table import TransportTable

__all__ = [
    "Column",
    "DecisionTable",
    "FilterBar",
    "HostNicTable",
    "NicTable",
    "NicTrend",
    "NodeTable",
    "QueueTable",
    "Row",
    "SchedulerSummary",
    "SegmentTable",
    "SortableTable",
    "StatusLine",
    "StoreSummary",
    "TransportTable",
    "scheduler_text",
    "store_text",
]
