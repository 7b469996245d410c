"""tcp transport, initiator side: route slices over NIC paths, retry, pause failing NICs."""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
import time
from array import array
from collections import defaultdict
from collections.abc import Callable

from mooncake_core.config.models import TransferConfig

from . import handshake
from .batch import Outcome, RequestState
from .directory import split_name
from .endpoint import INLINE_MAX, MAX_CHUNK, Endpoint, EndpointPool, Slice
from .health import NicHealth
from .protocol import STATUS_REASONS, Op
from .region import Region
from .request import OpCode, TransferState
from .slicing import pair_paths, plan
from .stats import Counters

_WRITE = int(Op.WRITE)

LocalNics = Callable[[str], tuple[list[str], list[str]]]
"""location -> (preferred local NIC addresses, secondary ones)."""

Path = tuple[str, str]


class TcpInitiator:
    """Cuts requests into slices, deals them over (local NIC, remote server) endpoints.

    Args:
        config: Engine configuration.
        secret: Cluster secret or None.
        outcome: Shared completion bookkeeping.
        stats: Engine counters (``<nic>|bytes_sent``... and ``tcp|...``).
        local_nics: Local NICs to use for a memory location.
    """

    def __init__(
        self,
        config: TransferConfig,
        secret: bytes | None,
        outcome: Outcome,
        stats: Counters,
        local_nics: LocalNics,
    ) -> None:
        self._cfg = config
        self._secret = secret
        self._outcome = outcome
        self._stats = stats
        self._local_nics = local_nics
        self._hlock = threading.Lock()
        self.local_health = NicHealth(
            config.nic_failure_threshold, config.nic_pause_s, config.nic_pause_max_s
        )
        self.remote_health = NicHealth(
            config.nic_failure_threshold, config.nic_pause_s, config.nic_pause_max_s
        )
        self.pool = EndpointPool(
            config.endpoint_pool_cap, config.endpoint_eviction, self._make_endpoint, self._reroute
        )
        self._cursor = itertools.count()
        self._closed = False
        # A stalled peer is noticed within one attempt's share of the request timeout,
        # leaving the remaining attempts time to succeed on another path.
        self.io_timeout_s = max(0.2, config.request_timeout_s / (config.max_retries + 1))

    # ------------------------------------------------------------------ routing

    def paths(self, st: RequestState) -> list[Path]:
        """Paths for a request now: preferred NICs first, secondary if none is usable."""
        now = time.monotonic()
        pref, sec = self._local_nics(st.request.local.location)
        info = st.request.segment.info
        with self._hlock:
            local = [n for n in pref if self.local_health.available(n, now)] or [
                n for n in sec if self.local_health.available(n, now)
            ]
            remote = [r for r in info.nics if self.remote_health.available(r, now)] or [
                r for r in info.secondary_nics if self.remote_health.available(r, now)
            ]
        # Everything paused: keep going over the preferred ones (they act as probes).
        return pair_paths(local or pref or sec, remote or list(info.nics or info.secondary_nics))

    def submit(self, states: list[RequestState]) -> None:
        """Slice and dispatch requests (states already counted and bounds-checked)."""
        per_path: dict[Path, list[Slice]] = defaultdict(list)
        slice_size = int(self._cfg.slice_size)
        cursor = self._cursor
        routes: dict[tuple[str, int], list[Path]] = {}  # paths computed once per submit
        held: dict[Region, int] = {}  # slices per region, counted in flight in one go
        # A lone request keeps every connection of its endpoint busy.
        min_slices = int(self._cfg.connections_per_endpoint) if len(states) == 1 else 1
        for st in states:
            req = st.request
            key = (req.local.location, id(req.segment))
            paths = routes.get(key)
            if paths is None:
                paths = routes[key] = self.paths(st)
            seg_id = req.segment.info.segment_id
            op = int(Op.READ if req.op == OpCode.READ else Op.WRITE)
            base = req.local.address + req.local_offset
            if req.length <= slice_size and (min_slices == 1 or req.length <= INLINE_MAX):
                # The common case: one slice, no plan objects.
                st.pending = 1
                held[req.local] = held.get(req.local, 0) + 1
                s = Slice(st, op, seg_id, req.target_offset, base, req.length)
                s.path = paths[next(cursor) % len(paths)]
                per_path[s.path].append(s)
                continue
            pieces = plan(req.length, slice_size, len(paths), next(cursor) % len(paths), min_slices)
            st.pending = len(pieces)
            held[req.local] = held.get(req.local, 0) + len(pieces)
            for p in pieces:
                s = Slice(st, op, seg_id, req.target_offset + p.offset, base + p.offset, p.length)
                s.path = paths[p.path]
                per_path[s.path].append(s)
        for region, n in held.items():
            region.acquire(n)
        self._dispatch(per_path)

    def _dispatch(self, per_path: dict[Path, list[Slice]]) -> None:
        if self._closed:  # close() interrupted these: end them instead of reconnecting
            self._give_up([s for slices in per_path.values() for s in slices], "engine closed")
            return
        inline = _may_block_here()
        for path, slices in per_path.items():
            ep = self.pool.get(path)
            if (
                inline
                and len(slices) <= MAX_CHUNK
                and sum(s.length for s in slices) <= INLINE_MAX
                and ep.run_inline(slices)
            ):
                continue
            while not ep.enqueue(slices):
                ep = self.pool.get(path)  # evicted meanwhile: the next get creates a fresh one

    def _reroute(self, slices: list[Slice], avoid: Path | None = None) -> None:
        """Slices left in a closed endpoint's queue: send them again (not a retry).

        Args:
            slices: The queued slices.
            avoid: A path that just failed; used only if nothing else is left.
        """
        per_path: dict[Path, list[Slice]] = defaultdict(list)
        for s in slices:
            paths = self.paths(s.req)
            paths = [p for p in paths if p != avoid] or paths
            s.path = paths[next(self._cursor) % len(paths)]
            per_path[s.path].append(s)
        self._dispatch(per_path)

    def _retry(self, slices: list[Slice], failed: Path, reason: str) -> None:
        per_path: dict[Path, list[Slice]] = defaultdict(list)
        give_up: list[Slice] = []
        for s in slices:
            s.attempts += 1
            if s.attempts > self._cfg.max_retries or s.req.state is not TransferState.WAITING:
                give_up.append(s)
                continue
            self._stats.add(f"{failed[0]}|retries")
            paths = self.paths(s.req)
            others = [p for p in paths if p != failed] or paths
            s.path = others[next(self._cursor) % len(others)]
            per_path[s.path].append(s)
        if give_up:
            self._give_up(give_up, f"{reason} (gave up after {give_up[0].attempts} attempts)")
        self._dispatch(per_path)

    def _give_up(self, slices: list[Slice], reason: str) -> None:
        with self._outcome.cv:
            for s in slices:
                s.req.pending -= 1
                if self._outcome.fail(s.req, reason):
                    self._stats.add("tcp|requests_failed")
            self._outcome.cv.notify_all()
        _release(slices)

    # ------------------------------------------------------------------ endpoint callbacks

    def _make_endpoint(self, key: Path) -> Endpoint:
        return Endpoint(key[0], key[1], self._cfg.connections_per_endpoint, self)

    def open_data_connection(self, local_ip: str, remote: str) -> socket.socket:
        """Connect, authenticate and switch a new connection to data mode."""
        host, port, _ = split_name(remote)
        sock = handshake.connect(
            host, port, local_ip=local_ip, secret=self._secret, timeout=self._cfg.connect_timeout_s
        )
        try:
            handshake.send_frame(sock, Op.START_DATA)
            handshake.set_io_timeout(sock, self.io_timeout_s)
        except OSError:
            sock.close()
            raise
        return sock

    def connect_failed(self, ep: Endpoint, chunk: list[Slice], exc: Exception) -> None:
        """A connection could not be opened: blame the side at fault, retry elsewhere."""
        now = time.monotonic()
        with self._hlock:
            if isinstance(exc, handshake.LocalNicError):
                self.local_health.record_failure(ep.local_ip, now)
            else:
                self.remote_health.record_failure(ep.remote, now)
        self._stats.add(f"{ep.local_ip}|errors", len(chunk))
        left = self.pool.drop(ep)
        self._retry(chunk, ep.key, f"connect {ep.local_ip} -> {ep.remote}: {exc}")
        self._reroute(left, avoid=ep.key)

    def paused_remotes(self) -> tuple[str, ...]:
        """Remote servers paused now after repeated failures."""
        now = time.monotonic()
        with self._hlock:
            names = list(self.remote_health.known())
            return tuple(n for n in names if self.remote_health.state(n, now).paused)

    def chunk_done(
        self, ep: Endpoint, chunk: list[Slice], results: array, done: int, err: int, msg: str
    ) -> None:
        """Book a native.transfer result: completions, remote refusals, then failures."""
        nic = ep.local_ip
        sent = recv = n_sent = n_recv = completed = failed = 0
        waiting, finished_ok = TransferState.WAITING, TransferState.COMPLETED
        with self._outcome.cv:
            for i in range(done):
                s = chunk[i]
                status = results[i]
                req = s.req
                if status == 0:
                    n = s.length
                    if s.op == _WRITE:
                        sent += n
                        n_sent += 1
                    else:
                        recv += n
                        n_recv += 1
                    # Outcome.complete inlined: this loop runs once per slice.
                    req.pending -= 1
                    if req.state is waiting:
                        req.transferred += n
                        if req.pending == 0:
                            req.state = finished_ok
                            completed += 1
                else:
                    req.pending -= 1
                    why = STATUS_REASONS.get(status, f"remote status {status}")
                    if self._outcome.fail(req, f"{why} (segment {req.request.segment.name})"):
                        failed += 1
            self._outcome.cv.notify_all()
        _release(chunk[:done])
        st = self._stats
        if completed:
            st.add("tcp|requests_completed", completed)
        if failed:
            st.add("tcp|requests_failed", failed)
        st.add(f"{nic}|bytes_sent", sent)
        st.add(f"{nic}|bytes_received", recv)
        st.add(f"{nic}|slices_sent", n_sent)
        st.add(f"{nic}|slices_received", n_recv)
        st.add("tcp|bytes", sent + recv)
        st.add("tcp|slices", n_sent + n_recv)
        now = time.monotonic()
        if not err:
            with self._hlock:
                self.local_health.record_success(nic, now)
                self.remote_health.record_success(ep.remote, now)
            return
        with self._hlock:
            self.local_health.record_failure(nic, now)
            self.remote_health.record_failure(ep.remote, now)
        self._stats.add(f"{nic}|errors", len(chunk) - done)
        left = self.pool.drop(ep)
        self._retry(chunk[done:], ep.key, f"{ep.local_ip} -> {ep.remote}: {msg}")
        self._reroute(left, avoid=ep.key)

    def close(self) -> None:
        """Close every endpoint (transfers in flight fail with "engine closed")."""
        self._closed = True
        self.pool.close()


def _may_block_here() -> bool:
    """Whether this thread may run a small transfer itself: not an event loop's thread
    (a stalled peer would stall every task of the loop for the I/O timeout)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return True
    return False


def _release(slices: list[Slice]) -> None:
    """Uncount finished slices from their regions (one lock round per region)."""
    if not slices:
        return
    first = slices[0].req.request.local
    if all(s.req.request.local is first for s in slices):
        first.release(len(slices))
        return
    counts: dict[Region, int] = {}
    for s in slices:
        region = s.req.request.local
        counts[region] = counts.get(region, 0) + 1
    for region, n in counts.items():
        region.release(n)
