"""Cluster operations: plan, launch (local and SSH), supervise, check and drain.

See ``docs/cluster.md``. The front ends (``mooncake cluster``, ``mooncake node``) are
thin layers over :class:`Supervisor`, :func:`run_checks` and the drain functions.
"""

from .checks import CHECKS, Check, CheckResult, run_checks
from .drain import NodeScan, classify, drain_node, node_of, node_segments, scan_node
from .launcher import Launcher, Started
from .local import LocalLauncher, tail_file
from .ports import PortUse, port_in_use
from .probes import ProbeResult, http_get_json, probe
from .runstate import ComponentRecord, RunState
from .spec import ROLE_COMMANDS, ROLE_ORDER, ComponentSpec, Probe, hashing_of, plan
from .ssh import SshError, SshLauncher
from .supervisor import (
    ClusterError,
    ComponentStatus,
    Supervisor,
    ensure_secret,
    resolve_config_file,
)

__all__ = [
    "CHECKS",
    "ROLE_COMMANDS",
    "ROLE_ORDER",
    "Check",
    "CheckResult",
    "ClusterError",
    "ComponentRecord",
    "ComponentSpec",
    "ComponentStatus",
    "Launcher",
    "LocalLauncher",
    "NodeScan",
    "PortUse",
    "Probe",
    "ProbeResult",
    "RunState",
    "SshError",
    "SshLauncher",
    "Started",
    "Supervisor",
    "classify",
    "drain_node",
    "ensure_secret",
    "hashing_of",
    "http_get_json",
    "node_of",
    "node_segments",
    "plan",
    "port_in_use",
    "probe",
    "resolve_config_file",
    "run_checks",
    "scan_node",
    "tail_file",
]
