"""rdma transport, initiator side: queue pairs per remote segment, windows, retries, fallback.

::

    submit(states) --slicing.plan--> RdmaSlice --> RdmaLink[(remote server, segment id)]
    RdmaLink thread: connect (tcp control connection: HELLO/AUTH, LOOKUP+FLAG_RDMA
                     REQUEST -> REPLY; QP INIT -> RTR -> RTS), then loop:
                     PostingWindow.take_posts -> post_send (RDMA WRITE/READ, signalled)
                     poll CQ -> PostingWindow.on_completions -> RdmaInitiator.on_events
    on_events: completed -> Outcome; failed -> retry on a new link (bounded) or, once
               the remote is paused for rdma after repeated failures, hand the slice
               to the tcp transport (counted in ``rdma|fallback_slices``)

The control connection stays open while the queue pair lives: the target destroys its
queue pair when it closes. Verbs calls are made only from the link's thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from mooncake_core.config.models import TransferConfig

from . import handshake
from .batch import Outcome, RequestState
from .directory import split_name
from .health import NicHealth
from .protocol import Op
from .rdma import RdmaOptions, RdmaStatus
from .rdma_info import FLAG_RDMA, KIND_REPLY, KIND_REQUEST, RdmaInfoError, SegmentKey, decode
from .rdma_window import PostingWindow, WindowEvents
from .request import OpCode, TransferError, TransferState
from .slicing import plan
from .stats import Counters

log = logging.getLogger(__name__)

NOT_RETRIED = ("REM_ACCESS_ERR", "REM_INV_REQ_ERR", "LOC_PROT_ERR", "LOC_ACCESS_ERR")
"""Completion errors that a retry cannot fix (bad key or range): the request fails."""

LinkKey = tuple[str, int]
"""(remote data server ``host:port``, segment id)."""


class RdmaSlice:
    """One slice on its way over rdma (internal, mutable)."""

    __slots__ = ("attempts", "length", "lkey", "local_addr", "remote_off", "req", "write")

    def __init__(
        self,
        req: RequestState,
        write: bool,
        remote_off: int,
        local_addr: int,
        length: int,
        lkey: int,
    ) -> None:
        self.req = req
        self.write = write
        self.remote_off = remote_off
        self.local_addr = local_addr
        self.length = length
        self.lkey = lkey
        self.attempts = 0


class RdmaInitiator:
    """Moves rdma-transport requests; owns the links and the per-remote rdma health.

    Args:
        config: Engine configuration (slice size, timeouts, retries, pause policy).
        options: rdma knobs.
        device: The engine's ``rdma_verbs.RdmaDevice``.
        secret: Cluster secret for the control connection.
        outcome: Shared completion bookkeeping.
        stats: Engine counters (``rdma|...``).
        lkey_of: Local memory key of a region (None when it has no memory region).
        to_tcp: Send slices over tcp instead: ``(state, write, remote_off, local_addr,
            length)`` tuples; the region stays counted in flight until tcp finishes.
    """

    def __init__(
        self,
        config: TransferConfig,
        options: RdmaOptions,
        device: Any,
        secret: bytes | None,
        outcome: Outcome,
        stats: Counters,
        lkey_of: Callable[[Any], int | None],
        to_tcp: Callable[[list[tuple[RequestState, bool, int, int, int]]], None],
    ) -> None:
        self._cfg = config
        self._opt = options
        self._dev = device
        self._secret = secret
        self._outcome = outcome
        self._stats = stats
        self._lkey_of = lkey_of
        self._to_tcp = to_tcp
        self._lock = threading.Lock()
        self._links: dict[LinkKey, RdmaLink] = {}
        self.health = NicHealth(
            config.nic_failure_threshold, config.nic_pause_s, config.nic_pause_max_s
        )
        self.io_timeout_s = max(0.2, config.request_timeout_s / (config.max_retries + 1))
        self.slice_size = max(4096, min(int(config.slice_size), int(device.max_msg_size)))
        self._closed = False

    # ------------------------------------------------------------------ submit

    def remote_for(self, st: RequestState) -> str | None:
        """The data server to reach this request's segment over rdma, or None (use tcp)."""
        info = st.request.segment.info
        now = time.monotonic()
        with self._lock:
            for r in (*info.nics, *info.secondary_nics):
                if self.health.available(r, now):
                    return r
        return None

    def submit(self, states: list[RequestState]) -> None:
        """Slice and queue requests; those without an rdma path go to tcp whole."""
        fallback: list[tuple[RequestState, bool, int, int, int]] = []
        per_link: dict[LinkKey, list[RdmaSlice]] = {}
        for st in states:
            req = st.request
            write = req.op == OpCode.WRITE
            base = req.local.address + req.local_offset
            pieces = plan(req.length, self.slice_size, 1)
            st.pending = len(pieces)
            req.local.acquire(len(pieces))
            lkey = self._lkey_of(req.local)
            remote = self.remote_for(st)
            if lkey is None or remote is None:
                self._stats.add("rdma|fallback_slices", len(pieces))
                fallback.extend(
                    (st, write, req.target_offset + p.offset, base + p.offset, p.length)
                    for p in pieces
                )
                continue
            key = (remote, req.segment.info.segment_id)
            per_link.setdefault(key, []).extend(
                RdmaSlice(st, write, req.target_offset + p.offset, base + p.offset, p.length, lkey)
                for p in pieces
            )
        if fallback:
            self._to_tcp(fallback)
        for key, slices in per_link.items():
            self._dispatch(key, slices)

    def _dispatch(self, key: LinkKey, slices: list[RdmaSlice]) -> None:
        size = slices[0].req.request.segment.info.size
        if self._closed:
            self._give_up(slices, "engine closed")
            return
        while True:
            with self._lock:
                link = self._links.get(key)
                if link is None or link.closed:
                    link = self._links[key] = RdmaLink(self, key, size)
            if link.enqueue(slices):
                return

    # ------------------------------------------------------------------ link callbacks

    def open_link(self, key: LinkKey, size: int) -> tuple[Any, Any, SegmentKey]:
        """Control connection + connected queue pair for ``key`` (runs in the link thread).

        Returns:
            (socket, ``RcQueuePair``, the segment's key on the target).

        Raises:
            TransferError, OSError, ValueError: Connect, auth, refusal or a bad reply.
        """
        remote, seg_id = key
        host, port, _ = split_name(remote)
        sock = handshake.connect(
            host, port, local_ip=None, secret=self._secret, timeout=self._cfg.connect_timeout_s
        )
        qp = None
        try:
            qp = self._dev.queue_pair(self._opt.window)
            request = qp.info(KIND_REQUEST, (SegmentKey(seg_id),))
            handshake.send_frame(sock, Op.LOOKUP, request.encode(), flags=FLAG_RDMA)
            frame = handshake.recv_frame(sock)
            if frame.header.op == Op.ERROR:
                raise TransferError(
                    f"{remote} refused rdma: {frame.payload.decode(errors='replace')}"
                )
            if frame.header.op != Op.LOOKUP_RESP or not frame.header.flags & FLAG_RDMA:
                raise TransferError(f"{remote} answered rdma with {frame.header.op.name}")
            reply = decode(frame.payload)
            seg = reply.key_for(seg_id)
            if reply.kind != KIND_REPLY or seg is None:
                raise RdmaInfoError(f"{remote} sent no key for segment {seg_id}")
            if seg.length < size:
                # Requests are checked against the LOOKUP size; the key must cover it.
                raise RdmaInfoError(
                    f"{remote}: key of segment {seg_id} covers {seg.length} of {size} bytes"
                )
            qp.connect(reply)
            sock.settimeout(None)  # idle until we close it; the target watches for that
            return sock, qp, seg
        except BaseException:
            if qp is not None:
                qp.close()
            sock.close()
            raise

    def on_events(self, link: RdmaLink, ev: WindowEvents[RdmaSlice]) -> None:
        """Book completions and decide the fate of failed and flushed slices."""
        if ev.stray:
            self._stats.add("rdma|stray_completions", ev.stray)
        if ev.completed:
            self._complete(ev.completed)
            now = time.monotonic()
            with self._lock:
                self.health.record_success(link.remote, now)
        if ev.failed:
            self._failed(link, list(ev.failed))
        if ev.flushed:
            self._stats.add("rdma|flushed_slices", len(ev.flushed))
            self.requeue(list(ev.flushed), avoid=link)

    def _complete(self, done: tuple[RdmaSlice, ...]) -> None:
        finished = nbytes = 0
        with self._outcome.cv:
            for s in done:
                nbytes += s.length
                if self._outcome.complete(s.req, s.length):
                    finished += 1
            self._outcome.cv.notify_all()
        for s in done:
            s.req.request.local.release(1)
        self._stats.add("rdma|bytes", nbytes)
        self._stats.add("rdma|slices", len(done))
        if finished:
            self._stats.add("rdma|requests_completed", finished)

    def _failed(self, link: RdmaLink, failed: list[tuple[RdmaSlice, str]]) -> None:
        if not failed:
            return
        now = time.monotonic()
        with self._lock:
            self.health.record_failure(link.remote, now)
            paused = not self.health.available(link.remote, now)
        self._stats.add("rdma|errors", len(failed))
        retry: list[RdmaSlice] = []
        tcp: list[RdmaSlice] = []
        for s, why in failed:
            if any(code in why for code in NOT_RETRIED):
                self._give_up([s], why)
                continue
            s.attempts += 1
            if s.req.state is not TransferState.WAITING:
                self._give_up([s], why)
            elif paused:
                tcp.append(s)
            elif s.attempts > self._cfg.max_retries:
                self._give_up([s], f"{why} (gave up after {s.attempts} attempts)")
            else:
                retry.append(s)
        if tcp:
            self._stats.add("rdma|fallback_slices", len(tcp))
            self._to_tcp([(s.req, s.write, s.remote_off, s.local_addr, s.length) for s in tcp])
        if retry:
            self._stats.add("rdma|retries", len(retry))
            self.requeue(retry, avoid=link)

    def requeue(self, slices: list[RdmaSlice], avoid: RdmaLink | None = None) -> None:
        """Send slices again on a fresh link (or over tcp if the remote is paused)."""
        if not slices:
            return
        key = avoid.key if avoid is not None else None
        with self._lock:
            if key is not None and self._links.get(key) is avoid:
                del self._links[key]
        by_key: dict[LinkKey, list[RdmaSlice]] = {}
        tcp: list[RdmaSlice] = []
        for s in slices:
            remote = self.remote_for(s.req)
            if remote is None:
                tcp.append(s)
            else:
                by_key.setdefault((remote, s.req.request.segment.info.segment_id), []).append(s)
        if tcp:
            self._stats.add("rdma|fallback_slices", len(tcp))
            self._to_tcp([(s.req, s.write, s.remote_off, s.local_addr, s.length) for s in tcp])
        for k, group in by_key.items():
            self._dispatch(k, group)

    def connect_failed(self, link: RdmaLink, slices: list[RdmaSlice], exc: BaseException) -> None:
        """The link never came up: its slices failed on it."""
        reason = f"rdma connect to {link.remote}: {exc}"
        self._failed(link, [(s, reason) for s in slices])

    def _give_up(self, slices: list[RdmaSlice], reason: str) -> None:
        failed = 0
        with self._outcome.cv:
            for s in slices:
                s.req.pending -= 1
                if self._outcome.fail(s.req, reason):
                    failed += 1
            self._outcome.cv.notify_all()
        for s in slices:
            s.req.request.local.release(1)
        if failed:
            self._stats.add("rdma|requests_failed", failed)

    def paused_remotes(self) -> tuple[str, ...]:
        """Remote servers on which rdma is paused now (their traffic goes over tcp)."""
        now = time.monotonic()
        with self._lock:
            return tuple(r for r in self.health.known() if self.health.state(r, now).paused)

    def status(self) -> RdmaStatus:
        """Counters and state of this transport."""
        with self._lock:
            links = sum(1 for link in self._links.values() if not link.closed)
        st = self._stats
        return RdmaStatus(
            self._dev.name,
            self._dev.port,
            self._dev.gid_index,
            None,
            links,
            st.get("rdma|errors"),
            st.get("rdma|retries"),
            st.get("rdma|fallback_slices"),
            self.paused_remotes(),
        )

    def close(self) -> None:
        """Close every link; slices in flight fail with "engine closed"."""
        self._closed = True
        with self._lock:
            links = list(self._links.values())
            self._links.clear()
        for link in links:
            link.close()
        for link in links:
            link.join(5.0)


class RdmaLink:
    """One RC queue pair to one remote segment, driven by one thread."""

    def __init__(self, owner: RdmaInitiator, key: LinkKey, size: int) -> None:
        self.owner = owner
        self.key = key
        self.size = size
        self.remote = key[0]
        self._cv = threading.Condition()
        self._incoming: list[RdmaSlice] = []
        self.closed = False
        self._window: PostingWindow[RdmaSlice] = PostingWindow(
            owner._opt.window, f"rdma {owner._dev.name} -> {key[0]} segment {key[1]}"
        )
        self._thread = threading.Thread(
            target=self._run, name=f"mc-rdma-{key[0]}-{key[1]}", daemon=True
        )

    def enqueue(self, slices: list[RdmaSlice]) -> bool:
        """Queue slices; False if the link is closing (the caller makes a new one)."""
        with self._cv:
            if self.closed:
                return False
            self._incoming.extend(slices)
            if not self._thread.is_alive() and self._thread.ident is None:
                # Started with its first work, so a failed connect always has slices to blame.
                self._thread.start()
            self._cv.notify_all()
        return True

    def close(self) -> None:
        """Stop: the thread fails what is in flight and returns the rest."""
        with self._cv:
            self.closed = True
            self._cv.notify_all()

    def join(self, timeout: float) -> None:
        """Wait for the thread to finish (if it ever started)."""
        if self._thread.ident is not None:
            self._thread.join(timeout)

    def _take_incoming(self) -> list[RdmaSlice]:
        with self._cv:
            out, self._incoming = self._incoming, []
            return out

    def _run(self) -> None:
        owner = self.owner
        try:
            sock, qp, seg = owner.open_link(self.key, self.size)
        except (OSError, ValueError, TransferError) as exc:
            with self._cv:
                self.closed = True
            owner.connect_failed(self, self._take_incoming(), exc)
            return
        try:
            self._loop(qp, seg)
        finally:
            with self._cv:
                self.closed = True
            qp.close()
            with contextlib.suppress(OSError):
                sock.close()
            left = self._window.take_unposted() + self._take_incoming()
            if owner._closed:
                owner._give_up(left, "engine closed")
            else:
                owner.requeue(left)

    def _loop(self, qp: Any, seg: SegmentKey) -> None:
        owner, window = self.owner, self._window
        idle_s = owner._opt.poll_idle_s
        last_progress = time.monotonic()
        while True:
            with self._cv:
                while not self.closed and window.idle and not self._incoming:
                    self._cv.wait()
                if self.closed:
                    if window.outstanding:
                        owner.on_events(self, window.expire("engine closed"))
                    return
                window.queue(self._incoming)
                self._incoming = []
            self._post(qp, seg)
            records = qp.poll(window.window)
            now = time.monotonic()
            if records:
                last_progress = now
                owner.on_events(self, window.on_completions(records))
            elif window.outstanding:
                if now - last_progress > owner.io_timeout_s:
                    owner.on_events(self, window.expire())
                else:
                    time.sleep(idle_s)
            else:
                last_progress = now
            if window.broken and not window.outstanding:
                return

    def _post(self, qp: Any, seg: SegmentKey) -> None:
        window = self._window
        posts = window.take_posts()
        for i, (wr_id, s) in enumerate(posts):
            try:
                qp.post(
                    wr_id,
                    s.write,
                    s.local_addr,
                    s.length,
                    s.lkey,
                    seg.addr + s.remote_off,
                    seg.rkey,
                )
            except Exception as exc:  # PyverbsError; any error ends this QP
                ids = [w for w, _ in posts[i:]]
                self.owner.on_events(self, window.post_failed(ids, str(exc)))
                return
