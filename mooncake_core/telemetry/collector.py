"""The cluster-level collector: polls every component's endpoint and builds a ClusterView.

This is the IO shell around :class:`ViewBuilder`: one HTTP GET per page with a timeout,
all targets in parallel threads, so one component that stops answering costs at most
``timeout_s`` and shows as down instead of stalling the others.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from .builder import AuditDigest, PollResult, ViewBuilder
from .registry import SCHEMA
from .targets import Target
from .view import ClusterView, DecisionView

__all__ = ["AuditFeed", "Collector", "poll_target"]


def poll_target(client: httpx.Client, target: Target) -> PollResult:
    """Read one target's pages.

    The master serves ``/health`` and ``/snapshot``; every other component ``/telemetry``
    (schema ``mooncake.telemetry/1``), else at least ``/health``.

    Args:
        client: HTTP client (its timeout bounds every request).
        target: What to read.

    Returns:
        The result; ``ok`` False with the reason when nothing answered.
    """
    start = time.monotonic()
    try:
        if target.role == "master":
            health = _json(client, target.url + "/health")
            snap = _json(client, target.url + "/snapshot")
            return PollResult(
                target, True, latency_s=time.monotonic() - start, health=health, master=snap
            )
        r = client.get(target.url + "/telemetry")
        if r.status_code == 200:
            doc = r.json()
            if not str(doc.get("schema", "")).startswith(SCHEMA.rsplit("/", 1)[0] + "/1"):
                raise ValueError(f"unsupported telemetry schema {doc.get('schema')!r}")
            return PollResult(target, True, latency_s=time.monotonic() - start, telemetry=doc)
        health = _json(client, target.url + "/health")
        return PollResult(target, True, latency_s=time.monotonic() - start, health=health)
    except (httpx.HTTPError, ValueError, OSError) as exc:
        return PollResult(target, False, error=_reason(exc), latency_s=time.monotonic() - start)


def _json(client: httpx.Client, url: str) -> dict[str, Any]:
    r = client.get(url)
    r.raise_for_status()
    data = r.json()
    if not isinstance(data, dict):
        raise ValueError(f"{url} did not return a JSON object")
    return data


def _reason(exc: Exception) -> str:
    if isinstance(exc, httpx.ConnectError):
        return "refused"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
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
        self.audit = AuditFeed(audit_url, window_s=window_s) if audit_url else None
        self._client = httpx.Client(timeout=timeout_s, trust_env=False)
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, min(16, len(self.targets))), thread_name_prefix="collector"
        )

    def poll(self, now: float | None = None) -> ClusterView:
        """Poll every target once (in parallel) and return the new view.

        Args:
            now: Wall time to stamp (default ``time.time()`` after the polls returned).
        """
        results = list(self._pool.map(lambda t: poll_target(self._client, t), self.targets))
        now = time.time() if now is None else now
        digest = self.audit.read(now) if self.audit is not None else None
        return self.builder.update(results, now, digest)

    def close(self) -> None:
        """Close the HTTP client, the threads and the audit reader."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()
        if self.audit is not None:
            self.audit.close()

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
