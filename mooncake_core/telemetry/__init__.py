"""Telemetry: one read-model for the CLI, ``mooncake top``, the dashboard and Prometheus.

Per process, a :class:`TelemetryRegistry` holds snapshot functions and serves them as a
versioned JSON document (``/telemetry``) and Prometheus text (``/metrics``) through
:func:`serve_telemetry` or :func:`telemetry_routes`. Per cluster, a :class:`Collector`
polls every component and merges the answers into one immutable :class:`ClusterView`.
See docs/metrics.md.
"""

from .builder import AuditDigest, PollResult, ViewBuilder
from .collector import AuditFeed, Collector, poll_target
from .plain import to_plain
from .procnet import IfaceCounters, iface_addresses, parse_proc_net_dev, read_proc_net_dev
from .prometheus import DocumentCollector, exposition, metrics_from_document
from .rates import RateBook, RateWindow
from .registry import SCHEMA, ComponentInfo, TelemetryRegistry
from .server import TelemetryServer, serve_telemetry, telemetry_routes
from .targets import (
    Target,
    merge_targets,
    parse_target,
    targets_from_config,
    targets_from_run_state,
)
from .view import (
    ClusterView,
    DecisionView,
    HostNicView,
    InstanceQueueView,
    NicView,
    NodeView,
    SchedulerView,
    SegmentView,
    StoreView,
    TransportView,
)

__all__ = [
    "SCHEMA",
    "AuditDigest",
    "AuditFeed",
    "ClusterView",
    "Collector",
    "ComponentInfo",
    "DecisionView",
    "DocumentCollector",
    "HostNicView",
    "IfaceCounters",
    "InstanceQueueView",
    "NicView",
    "NodeView",
    "PollResult",
    "RateBook",
    "RateWindow",
    "SchedulerView",
    "SegmentView",
    "StoreView",
    "Target",
    "TelemetryRegistry",
    "TelemetryServer",
    "TransportView",
    "ViewBuilder",
    "exposition",
    "iface_addresses",
    "merge_targets",
    "metrics_from_document",
    "parse_proc_net_dev",
    "parse_target",
    "poll_target",
    "read_proc_net_dev",
    "serve_telemetry",
    "targets_from_config",
    "targets_from_run_state",
    "telemetry_routes",
    "to_plain",
]
