"""Where the collector polls: targets from the cluster config and from the run state."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mooncake_core.config import ClusterConfig

__all__ = [
    "Target",
    "merge_targets",
    "parse_target",
    "targets_from_config",
    "targets_from_run_state",
]

_ROLES_POLLED = {"master", "store", "conductor", "transfer", "prefill", "decode", "dashboard"}


@dataclass(frozen=True, slots=True)
class Target:
    """One HTTP endpoint to poll.

    Attributes:
        name: Component name (unique).
        role: ``master`` (read ``/snapshot`` and ``/health``) or any other role (read
            ``/telemetry``, falling back to ``/health``).
        url: Base URL, e.g. ``http://127.0.0.1:9003``.
    """

    name: str
    role: str
    url: str


def targets_from_config(cfg: ClusterConfig) -> list[Target]:
    """Targets implied by ``mooncake.yaml``: the master's metrics port, each store node's
    metrics port, each prefill and decode worker's ``metrics_port`` (workers without one
    are skipped: they serve no HTTP) and the conductor's front door.

    Args:
        cfg: The cluster config.

    Returns:
        Targets in a stable order (master, store nodes, prefill, decode, conductor).
    """

    def addr(host: str) -> str:
        try:
            return cfg.host(host).address
        except KeyError:
            return "127.0.0.1"

    out = [Target("master", "master", f"http://{addr(cfg.master.host)}:{cfg.master.metrics_port}")]
    for n in cfg.store_nodes:
        out.append(Target(n.name, "store", f"http://{addr(n.host)}:{n.metrics_port}"))
    for role, workers in (("prefill", cfg.prefill_workers), ("decode", cfg.decode_workers)):
        for w in workers:
            if w.metrics_port is not None:
                out.append(Target(w.name, role, f"http://{addr(w.host)}:{w.metrics_port}"))
    c = cfg.conductor
    out.append(Target("conductor", "conductor", f"http://{addr(c.host)}:{c.http_port}"))
    return out


def targets_from_run_state(state_dir: Path) -> list[Target]:
    """Targets from ``<state_dir>/run/*.json`` written by ``mooncake cluster up``.

    A record's HTTP port is the one whose key ends in ``telemetry_port``, else
    ``metrics_port``, else ``http_port`` or ``port`` (dashboard). Unreadable files and
    records without an HTTP port are skipped: a half-written cluster must not stop
    ``top``.

    Args:
        state_dir: Cluster state directory (``~`` expanded).

    Returns:
        Targets in file-name order.
    """
    run = state_dir / "run"
    if not run.is_dir():
        return []
    out: list[Target] = []
    for path in sorted(run.glob("*.json")):
        try:
            rec = json.loads(path.read_text())
            name, role, address = str(rec["name"]), str(rec["role"]), str(rec["address"])
            ports = {str(k).rsplit(".", 1)[-1]: int(v) for k, v in dict(rec["ports"]).items()}
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if role not in _ROLES_POLLED:
            continue
        for key in ("telemetry_port", "metrics_port", "http_port", "port"):
            if key in ports:
                out.append(Target(name, role, f"http://{address}:{ports[key]}"))
                break
    return out


def merge_targets(*lists: list[Target]) -> list[Target]:
    """Concatenate target lists; a later list's target replaces an earlier one of the same
    name (the run state knows the ports actually used, ``--target`` wins over both)."""
    order: list[str] = []
    by_name: dict[str, Target] = {}
    for lst in lists:
        for t in lst:
            if t.name not in by_name:
                order.append(t.name)
            by_name[t.name] = t
    return [by_name[n] for n in order]


def parse_target(text: str) -> Target:
    """Parse ``NAME=URL`` or ``NAME:ROLE=URL`` (the ``--target`` option).

    Raises:
        ValueError: Not in that form, or the URL is not http(s).
    """
    left, sep, url = text.partition("=")
    if not sep or not left or not url:
        raise ValueError(f"target {text!r} is not NAME=URL or NAME:ROLE=URL")
    name, _, role = left.partition(":")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"target {text!r}: URL must start with http:// or https://")
    return Target(name, role or "transfer", url.rstrip("/"))
