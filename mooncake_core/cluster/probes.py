"""Readiness and health probes: one short request, a yes/no answer and what was seen."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from .spec import Probe


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """Outcome of one probe; ``info`` is the JSON body of an HTTP health answer."""

    ok: bool
    detail: str
    info: dict[str, object] = field(default_factory=dict)


def probe(p: Probe, timeout_s: float = 1.0, secret: bytes | None = None) -> ProbeResult:
    """Run probe ``p`` once.

    Args:
        p: what to ask.
        timeout_s: time limit of the one request.
        secret: cluster secret, for probes that speak the authenticated RPC (workers).

    Returns:
        The result (never raises for an unreachable or unhealthy component).

    Raises:
        ValueError: ``p.kind`` is unknown.
    """
    if p.kind == "http":
        return http_get_json(p.target, timeout_s)
    if p.kind == "tcp":
        host, port = p.target.rsplit(":", 1)
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s):
                return ProbeResult(True, "accepting connections")
        except OSError as exc:
            return ProbeResult(False, f"cannot connect to {p.target}: {exc}")
    if p.kind == "worker":
        return _worker_probe(p.target, timeout_s, secret)
    raise ValueError(f"unknown probe kind {p.kind!r}")


def http_get_json(url: str, timeout_s: float = 1.0) -> ProbeResult:
    """GET ``url``; ok when it answers 200 (a JSON body is returned in ``info``)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            body = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        return ProbeResult(False, f"GET {url} answered {exc.code}")
    except (OSError, ValueError) as exc:
        return ProbeResult(False, f"GET {url} failed: {getattr(exc, 'reason', exc)}")
    info: dict[str, object] = {}
    try:
        data = json.loads(body)
        if isinstance(data, dict):
            info = data
    except ValueError:
        pass
    return ProbeResult(status == 200, f"GET {url} answered {status}", info)


def _worker_probe(address: str, timeout_s: float, secret: bytes | None) -> ProbeResult:
    # Imported here: grpc, which `cluster status` pays for only when a worker is
    # configured (not the worker package: that loads torch).
    from mooncake_core.rpc.worker_health import probe_worker

    try:
        ok = probe_worker(address, timeout_s, secret)
    except Exception as exc:  # a probe must report, never crash the supervisor
        return ProbeResult(False, f"worker probe of {address} failed: {exc}")
    return ProbeResult(ok, f"worker at {address} {'answers' if ok else 'does not answer'}")
