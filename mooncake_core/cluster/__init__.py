"""Cluster operations: plan, launch (local and SSH), supervise, check and drain.

See ``docs/cluster.md``. The front ends (``mooncake cluster``, ``mooncake node``) are
thin layers over :class:`Supervisor`, :func:`run_checks` and the drain functions.
"""

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
    "ROLE_COMMANDS",
    "ROLE_ORDER",
    "ClusterError",
    "ComponentRecord",
    "ComponentSpec",
    "ComponentStatus",
    "Launcher",
    "LocalLauncher",
    "PortUse",
    "Probe",
    "ProbeResult",
    "RunState",
    "SshError",
    "SshLauncher",
    "Started",
    "Supervisor",
    "ensure_secret",
    "hashing_of",
    "http_get_json",
    "plan",
    "port_in_use",
    "probe",
    "resolve_config_file",
    "tail_file",
]
