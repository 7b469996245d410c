"""What the dashboard reads: the telemetry ClusterView, the master, the audit database.

A :class:`~mooncake_core.telemetry.Collector` is polled in one daemon thread (its HTTP
calls block; they must stay off the event loop) and the newest view is swapped in as one
reference, so request handlers always see a consistent picture. The master is reached
through the async :class:`MasterClient`, created on the app's event loop by
:meth:`Backend.open`. Audit queries run in a worker thread (SQLAlchemy is blocking).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mooncake_core.telemetry import (
    ClusterView,
    Collector,
    Target,
    merge_targets,
    parse_target,
    targets_from_config,
    targets_from_run_state,
)

from .options import WebOptions

if TYPE_CHECKING:
    from mooncake_core.cluster.replica_copy import ReplicaCopier
    from mooncake_core.config import ClusterConfig
    from mooncake_core.store.client.async_master import MasterClient

__all__ = ["Backend", "NicPoint", "audit_url_for", "master_address", "read_token"]


@dataclass(frozen=True, slots=True)
class NicPoint:
    """One sample of one NIC's Transfer Engine rates (bytes/s)."""

    t: float
    tx: float
    rx: float


def master_address(cfg: ClusterConfig, given: str | None) -> str:
    """The master to talk to: ``given``, else the config's (etcd URL under HA)."""
    return given or cfg.master_target


def audit_url_for(cfg: ClusterConfig, given: str | None) -> str | None:
    """Audit database to read (``None``: none). A SQLite file is read only if it exists:
    the dashboard must never create a database. With ``audit.enabled: false`` the
    conductor writes none, so the config's database (a leftover of an earlier run, if
    any) is not shown either; ``given`` still names one explicitly."""
    if given is not None:
        return given or None
    if not cfg.audit.enabled:
        return None
    url = cfg.audit_url
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return None
    return url


def read_token(path: Path) -> str | None:
    """The control token derived from the secret at ``path`` (``None``: no file).

    Raises:
        ValueError: The file exists but is empty.
        OSError: It exists but cannot be read.
    """
    from mooncake_core.store.auth import control_token, read_secret

    if not path.is_file():
        return None
    return control_token(read_secret(path))


def _targets(cfg: ClusterConfig, opts: WebOptions) -> list[Target]:
    extra = [parse_target(t) for t in opts.targets]
    if opts.targets_only:
        return extra
    return merge_targets(targets_from_config(cfg), targets_from_run_state(cfg.state_path), extra)


class Backend:
    """The dashboard's read side and its master connection.

    Args:
        cfg: Cluster config.
        opts: Dashboard options.

    Raises:
        ValueError: A malformed ``--target`` or duplicate target names.
        OSError: The secret file exists but cannot be read.
    """

    def __init__(self, cfg: ClusterConfig, opts: WebOptions) -> None:
        self.cfg = cfg
        self.opts = opts
        self.master = master_address(cfg, opts.master)
        self.secret_path = opts.secret_file or cfg.secret_path
        self.secret = self._read_secret()
        self._audit_url = audit_url_for(cfg, opts.audit_url)
        self.collector = Collector(
            _targets(cfg, opts),
            timeout_s=opts.poll_timeout_s,
            window_s=max(2.0, 5 * opts.interval_s),
            audit_url=self._audit_url,
        )
        self.view: ClusterView | None = None
        self.version = 0
        self.history: dict[tuple[str, str], deque[NicPoint]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._mc: MasterClient | None = None
        self._lock = threading.Lock()  # guards ``history`` (written by the poll thread)
        # The collector's builder keeps rate state: one poll at a time (the thread and an
        # action that wants a fresh view may both poll).
        self._poll_lock = threading.Lock()

    @property
    def audit_url(self) -> str | None:
        """The audit database read (:func:`audit_url_for`). While the config's does not
        exist yet it is looked for again on each use: the conductor creates it when it
        starts, which may be after the dashboard."""
        if self._audit_url is None:
            self._find_audit()
        return self._audit_url

    def _find_audit(self) -> None:
        """Take the config's audit database once it exists (not when one was named)."""
        if self._audit_url is None and self.opts.audit_url is None:
            url = audit_url_for(self.cfg, None)
            if url is not None:
                self._audit_url = url
                self.collector.attach_audit(url)

    def _read_secret(self) -> bytes | None:
        from mooncake_core.store.auth import read_secret

        return read_secret(self.secret_path) if self.secret_path.is_file() else None

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> None:
        """Start polling and connect the master client (call on the app's event loop)."""
        from mooncake_core.store.client.async_master import MasterClient

        self._mc = MasterClient.for_target(
            self.master, client_id="mooncake-web", secret=self.secret
        )
        self.poll_once()
        self._thread = threading.Thread(target=self._run, name="web-collector", daemon=True)
        self._thread.start()

    async def close(self) -> None:
        """Stop polling, close the collector and the master client."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.collector.close()
        if self._mc is not None:
            await self._mc.close()
            self._mc = None

    @property
    def mc(self) -> MasterClient:
        """The master client.

        Raises:
            RuntimeError: :meth:`open` was not called.
        """
        if self._mc is None:
            raise RuntimeError("backend not open")
        return self._mc

    def replica_copier(self) -> ReplicaCopier:
        """A copier for drains (blocking: starts a Transfer Engine; the caller closes it).

        It binds the master's host address, as ``mooncake node drain`` does, and uses
        the cluster secret for the data-plane handshake.

        Raises:
            TransferError: The engine could not start.
        """
        from mooncake_core.cluster.replica_copy import ReplicaCopier

        host = self.master.rsplit(":", 1)[0].strip("[]") or "127.0.0.1"
        return ReplicaCopier(self.cfg.transfer, secret=self.secret, host=host)

    # --------------------------------------------------------------------- polling
    def _run(self) -> None:
        while not self._stop.wait(self.opts.interval_s):
            self.poll_once()

    def poll_once(self) -> ClusterView:
        """Poll every target once and publish the new view (thread-safe; blocking, so
        call it from a thread, not the event loop)."""
        with self._poll_lock:
            self._find_audit()  # a database created since the last poll
            view = self.collector.poll()
            self._record(view)
            self.view = view
            self.version += 1
            return view

    def _record(self, view: ClusterView) -> None:
        with self._lock:
            self._record_locked(view)

    def _record_locked(self, view: ClusterView) -> None:
        for nic in view.nics:
            if nic.te_tx_bps is None and nic.te_rx_bps is None:
                continue
            hist = self.history.setdefault((nic.node, nic.nic), deque(maxlen=self.opts.history))
            hist.append(NicPoint(view.taken_at, nic.te_tx_bps or 0.0, nic.te_rx_bps or 0.0))

    def current(self) -> ClusterView:
        """The newest view (polls once if none exists yet)."""
        return self.view if self.view is not None else self.poll_once()

    def nic_history(self, node: str, nic: str) -> Sequence[NicPoint]:
        """Samples of one NIC, oldest first (empty when never seen moving)."""
        with self._lock:
            return tuple(self.history.get((node, nic), ()))

    @staticmethod
    def now() -> float:
        """Wall time (one place, so handlers agree)."""
        return time.time()
