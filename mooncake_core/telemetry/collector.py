"""The cluster-level collector: polls every component's endpoint and builds a ClusterView.

This is the IO shell around :class:`ViewBuilder`: one HTTP GET per page with a timeout,
all targets in parallel threads, so one component that stops answering costs at most
``timeout_s`` and shows as down instead of stalling the others.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .builder import AuditDigest, PollResult, ViewBuilder
from .registry import SCHEMA
from .targets import Target
from .view import ClusterView, DecisionView

__all__ = ["AuditFeed", "Collector", "poll_target"]


# Plain stdlib HTTP: no proxies from the environment (targets are cluster-internal), and
# no client library that would drag a terminal UI package into mooncake_core.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_MAX_BODY = 64 << 20


class _NotFound(Exception):
    pass


def poll_target(target: Target, timeout_s: float) -> PollResult:
    """Read one target's pages.

    The master serves ``/health`` and ``/snapshot``; every other component ``/telemetry``
    (schema ``mooncake.telemetry/1``), else at least ``/health``.

    Args:
        target: What to read.
        timeout_s: Timeout of each socket operation of each request.

    Returns:
        The result; ``ok`` False with the reason when nothing answered.
    """
    start = time.monotonic()
    health: dict[str, Any] | None
    try:
        if target.role == "master":
            health = _json(target.url + "/health", timeout_s)
            snap = _json(target.url + "/snapshot", timeout_s)
            return PollResult(
                target, True, latency_s=time.monotonic() - start, health=health, master=snap
            )
        try:
            doc = _json(target.url + "/telemetry", timeout_s)
        except _NotFound:
            try:
                health = _json(target.url + "/health", timeout_s)
            except _NotFound:
                health = None  # it answers HTTP, so it is up; it just has no health page
            return PollResult(target, True, latency_s=time.monotonic() - start, health=health)
        if not str(doc.get("schema", "")).startswith(SCHEMA.rsplit("/", 1)[0] + "/1"):
            raise ValueError(f"unsupported telemetry schema {doc.get('schema')!r}")
        return PollResult(target, True, latency_s=time.monotonic() - start, telemetry=doc)
    except (_NotFound, ValueError, OSError) as exc:
        return PollResult(target, False, error=_reason(exc), latency_s=time.monotonic() - start)


def _json(url: str, timeout_s: float) -> dict[str, Any]:
    try:
        with _OPENER.open(url, timeout=timeout_s) as r:
            body = r.read(_MAX_BODY)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise _NotFound(url) from None
        raise
    data = json.loads(body)
    if not isinstance(data, dict):
        raise ValueError(f"{url} did not return a JSON object")
    return data


def _reason(exc: Exception) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, _NotFound):
        return "HTTP 404"
    cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(cause, ConnectionRefusedError):
        return "refused"
    if isinstance(cause, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(cause, ConnectionResetError):
        return "reset"
    return f"{type(exc).__name__}: {exc}"[:120]


class AuditFeed:
    """Reads the newest decisions from the audit database (read-only, each poll).

    Args:
        url: SQLAlchemy URL of the audit database.
        window_s: Window for the decisions-per-second figure.
        limit: Decisions listed.
    """

    def __init__(self, url: str, window_s: float = 10.0, limit: int = 50) -> None:
        self.url = url
        self.window_s = window_s
        self.limit = limit
        self._reader: Any = None
        self.error: str | None = None

    def read(self, now: float) -> AuditDigest | None:
        """Digest of the newest decisions, or ``None`` (reason in ``error``) when the
        database is missing, not upgraded or unreadable."""
        from mooncake_core.conductor.audit import DecisionFilter, SchemaError

        try:
            if self._reader is None:
                from mooncake_core.conductor.audit import AuditReader

                self._reader = AuditReader.open(self.url)
            rows = self._reader.find(DecisionFilter(limit=self.limit))
            recent = self._reader.count(DecisionFilter(since=now - self.window_s))
            rejected_rows = self._reader.find(
                DecisionFilter(rejected_only=True, since=now - 300.0, limit=1000)
            )
        except (SchemaError, Exception) as exc:  # a busy or missing DB must not stop top
            self.error = f"{type(exc).__name__}: {exc}"[:200]
            self.close()
            return None
        self.error = None
        last = tuple(
            DecisionView(
                time=r.decision.time,
                request_id=r.decision.request_id,
                prefill=r.decision.chosen_prefill,
                decode=r.decision.chosen_decode,
                predicted_ttft_s=r.decision.predicted_ttft_s,
                actual_ttft_s=r.decision.actual_ttft_s,
                admitted=r.decision.admitted,
                reject_reason=r.decision.reject_reason,
                prompt_tokens=r.decision.prompt_tokens,
            )
            for r in rows
        )
        reasons = Counter(r.decision.reject_reason or "unknown" for r in rejected_rows)
        matched = sum(r.matched_prefix_blocks or 0 for r in rows if r.decision.admitted)
        blocks = sum(r.decision.prompt_blocks for r in rows if r.decision.admitted)
        return AuditDigest(
            last=last,
            recent_count=recent,
            window_s=self.window_s,
            rejected=tuple(sorted(reasons.items(), key=lambda x: (-x[1], x[0]))),
            hit_rate=matched / blocks if blocks else None,
        )

    def explain(self, request_id: str) -> str | None:
        """``audit explain`` text for ``request_id`` (``None``: unknown request).

        Raises:
            SchemaError: The database is missing or not upgraded.
        """
        from mooncake_core.conductor.audit import AuditReader

        with AuditReader.open(self.url) as reader:
            return reader.explain(request_id)

    def close(self) -> None:
        """Release the database connection."""
        if self._reader is not None:
            try:
                self._reader.close()
            finally:
                self._reader = None


class Collector:
    """Polls a fixed set of targets and merges the answers into a :class:`ClusterView`.

    Args:
        targets: What to poll (see :mod:`.targets`).
        timeout_s: Per-request timeout; keep it below the refresh interval.
        window_s: Width of the rate window.
        audit_url: Audit database to read the last decisions from (``None``: none).

    Raises:
        ValueError: ``timeout_s`` not positive or duplicate target names.
    """

    def __init__(
        self,
        targets: Sequence[Target],
        *,
        timeout_s: float = 1.0,
        window_s: float = 10.0,
        audit_url: str | None = None,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        names = [t.name for t in targets]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate target names: {', '.join(dup)}")
        self.targets = tuple(targets)
        self.timeout_s = timeout_s
        self.builder = ViewBuilder(window_s=window_s)
        self._window_s = window_s
        self.audit = AuditFeed(audit_url, window_s=window_s) if audit_url else None
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, min(16, len(self.targets))), thread_name_prefix="collector"
        )

    def attach_audit(self, audit_url: str) -> None:
        """Read the last decisions from ``audit_url`` from now on (if no database is
        read yet: a database found after start)."""
        if self.audit is None:
            self.audit = AuditFeed(audit_url, window_s=self._window_s)

    def poll(self, now: float | None = None) -> ClusterView:
        """Poll every target once (in parallel) and return the new view.

        Args:
            now: Wall time to stamp (default ``time.time()`` after the polls returned).
        """
        results = list(self._pool.map(lambda t: poll_target(t, self.timeout_s), self.targets))
        now = time.time() if now is None else now
        digest = self.audit.read(now) if self.audit is not None else None
        return self.builder.update(results, now, digest)

    def close(self) -> None:
        """Stop the threads and close the audit reader."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.audit is not None:
            self.audit.close()

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
