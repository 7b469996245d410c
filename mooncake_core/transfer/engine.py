"""TransferEngine: register memory, open remote segments, submit batches, read counters.

::

    initiator process                                         target process
    register_memory --> Region                                register_memory(name="store-0")
    open_segment("h:p/store-0") --HELLO/AUTH, LOOKUP-------->  DataServer (one per NIC)
    submit(batch, requests)                                        | START_DATA
      |-- shm (same host, shm-backed): ShmTransport, C memcpy      v
      '-- tcp: slicing.plan -> EndpointPool[(local NIC, remote)] --> _native.SegTable.serve
             Endpoint: N connections x 1 thread, _native.transfer    (reads/writes in place)
      results -> TcpInitiator.chunk_done: complete / retry elsewhere / pause NIC

Threads: per NIC server one accept thread plus one per connection; on the initiator one
per data connection and one shm copy thread. Bytes move in C with the GIL released;
Python plans and books.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

from mooncake_core.config.models import TransferConfig

from ._c import native as _native
from .batch import Batch, Outcome, RequestState
from .directory import PeerDirectory, RemoteSegment, SegmentDirectory
from .endpoint import Slice
from .protocol import Op
from .rdma import RdmaOptions, RdmaStatus, probe, refusal, select_transport
from .rdma_info import SegmentKey
from .region import Region, allocate_shm, resolve_buffer
from .request import OpCode, TransferError, TransferRequest, TransferState, TransferStatus
from .server import DataServer
from .shm import INLINE_MAX as SHM_INLINE_MAX
from .shm import Job, ShmTransport, remove_ledgers, served
from .stats import Counters, TransferSnapshot, nic_stats, transport_stats
from .tcp import TcpInitiator
from .validation import check_location, validate_request

TRANSPORTS = ("tcp", "shm", "rdma")

BY_ADDRESS = "/by-address"
"""Segment name (``host:port//by-address``) of every region registered ``by_address``: a
request's target offset is then an absolute address in the target process, which the
target's data plane checks against those regions (one must hold the whole range)."""
BY_ADDRESS_ID = 0xFFFFFFFF
BY_ADDRESS_LISTED = 256
"""At most this many regions are listed in the by-address LOOKUP reply (a control frame)."""

log = logging.getLogger(__name__)


def default_host_id() -> str:
    """Hostname plus kernel boot id: equal on one machine, different across machines."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "unknown-boot"
    return f"{socket.gethostname()}/{boot}"


def _shm_copy(req: TransferRequest, base: int) -> tuple[int, int, int]:
    """``(dst, src, length)`` of a shm request whose peer segment is mapped at ``base``."""
    remote = base + req.target_offset
    local = req.local.address + req.local_offset
    if req.op == OpCode.READ:
        return (local, remote, req.length)
    return (remote, local, req.length)


class TransferEngine:
    """The data plane of one process.

    Args:
        config: Transfer section of the cluster config.
        nics: IPv4 addresses of the local NICs; a data server listens on each.
        port: Port of the first NIC's server (0 = any); the others try the same port.
        secret: Cluster secret; when set every connection is authenticated both ways.
        topology: Optional ``Topology``-like object (``preferred``, ``secondary``,
            ``address_of``) ranking NICs per memory location.
        host_id: Identity of this host for shm (default: hostname + boot id). Give
            distinct ids to processes that must not share memory (namespace tests).
        directory: Segment metadata service (default: peer-to-peer).
        rdma_options: Device, port, GID index and window of the rdma transport.

    Raises:
        TransferError: ``protocol: rdma`` configured but no usable device or no pyverbs
            (see ``rdma.refusal``), or no NIC.
    """

    def __init__(
        self,
        config: TransferConfig,
        *,
        nics: Sequence[str] = ("127.0.0.1",),
        port: int = 0,
        secret: bytes | None = None,
        topology: Any = None,
        host_id: str | None = None,
        directory: SegmentDirectory | None = None,
        rdma_options: RdmaOptions | None = None,
    ) -> None:
        if not nics:
            raise TransferError("TransferEngine needs at least one NIC address")
        self._rdma_dev = _open_rdma(config.protocol, rdma_options or RdmaOptions())
        self.config = config
        self.nics = tuple(nics)
        self._port = port
        self._secret = secret
        self._topology = topology
        self.host_id = host_id or default_host_id()
        self._directory: SegmentDirectory = directory or PeerDirectory(
            secret, config.connect_timeout_s
        )
        self._table = _native.SegTable()
        self._servers: dict[str, DataServer] = {}
        self._regions: set[Region] = set()
        self._exposed: dict[str, Region] = {}
        self._by_address: list[Region] = []  # registration order
        self._seg_ids = itertools.count(1)
        self._batch_ids = itertools.count(1)
        self._batches: dict[int, Batch] = {}
        self._lock = threading.Lock()
        self._outcome = Outcome()
        self._stats = Counters()
        # Counts of exited initiators' shm ledgers, per segment file (see shm.served).
        self._shm_folded: dict[str, list[int]] = {}
        self._fold_lock = threading.Lock()
        self._tcp = TcpInitiator(config, secret, self._outcome, self._stats, self._local_nics)
        self._shm = ShmTransport(self._shm_done)
        self._mrs: dict[Region, Any] = {}  # rdma memory regions, when a device is open
        self._rdma: Any = None
        if self._rdma_dev is not None:
            from .rdma_transport import RdmaInitiator

            self._rdma = RdmaInitiator(
                config,
                rdma_options or RdmaOptions(),
                self._rdma_dev,
                secret,
                self._outcome,
                self._stats,
                self._mrs_lkey,
                self._rdma_to_tcp,
            )
        self._started = False
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> TransferEngine:
        """Start one data server per NIC.

        Raises:
            TransferError: A NIC address cannot be bound.
        """
        if self._started:
            return self
        io_timeout = self._tcp.io_timeout_s
        port = self._port
        try:
            for nic in self.nics:
                try:
                    srv = self._server(nic, port, io_timeout)
                except OSError:
                    if nic == self.nics[0]:
                        raise
                    srv = self._server(nic, 0, io_timeout)  # same port taken on this NIC
                self._servers[nic] = srv
                port = port or srv.port
        except OSError as exc:
            self.close()
            raise TransferError(f"cannot start data server on {nic}:{port}: {exc}") from exc
        self._started = True
        return self

    def _server(self, nic: str, port: int, io_timeout: float) -> DataServer:
        args = (
            nic,
            port,
            self._table,
            self._secret,
            self._lookup,
            self.config.connect_timeout_s,
            io_timeout,
        )
        if self._rdma_dev is None:
            return DataServer(*args)
        from .rdma_server import RdmaAcceptor, RdmaDataServer

        return RdmaDataServer(RdmaAcceptor(self._rdma_dev, self._rdma_key), *args)

    def close(self) -> None:
        """Stop servers, end transfers in flight, unmap and delete shm segments."""
        if self._closed:
            return
        self._closed = True
        if self._rdma is not None:
            self._rdma.close()
        self._tcp.close()
        self._shm.close()
        for srv in self._servers.values():
            srv.close()
        for region in list(self._regions):
            self._release_region(region)
        if self._rdma_dev is not None:
            self._rdma_dev.close()

    def __enter__(self) -> TransferEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def segment_name(self) -> str:
        """``host:port`` of the first NIC's server: this engine's name for peers."""
        srv = self._servers.get(self.nics[0])
        if srv is None:
            raise TransferError("engine not started")
        return srv.endpoint

    # ------------------------------------------------------------------ memory

    def register_memory(
        self,
        obj: Any,
        length: int | None = None,
        *,
        location: str = "cpu:0",
        name: str | None = None,
        by_address: bool = False,
    ) -> Region:
        """Register local memory for transfers, and optionally expose it as a segment.

        Args:
            obj: bytearray, mmap, numpy array, CPU torch tensor, writable memoryview, or a
                raw int address (then ``length`` is required).
            length: Bytes to register (default: the whole buffer).
            location: ``cpu:N`` (used to rank NICs by topology).
            name: Expose as segment ``<segment_name>/<name>`` for peers; None keeps it private.
            by_address: Also expose it to peers by absolute address (segment
                ``<segment_name>/`` + ``BY_ADDRESS``; upstream's raw-address transfers).

        Returns:
            The region handle.

        Raises:
            TransferError: Unusable buffer, bad location, or a name already in use.
        """
        addr, total, keep = resolve_buffer(obj, length)
        region = Region(addr, total, check_location(location), name, keep)
        return self._add_region(region, by_address)

    def allocate_memory(
        self,
        length: int,
        *,
        location: str = "cpu:0",
        name: str | None = None,
        by_address: bool = False,
    ) -> Region:
        """Allocate shared-memory-backed memory (so same-host peers can use shm) and register it.

        Raises:
            TransferError: Bad length or name, or /dev/shm unavailable.
        """
        buf, path = allocate_shm(length)
        try:
            region = Region(
                _native_address(buf), length, check_location(location), name, buf, shm_path=path
            )
            return self._add_region(region, by_address)
        except BaseException:
            os.unlink(path)
            buf.close()
            raise

    def _add_region(self, region: Region, by_address: bool = False) -> Region:
        with self._lock:
            if self._closed:
                raise TransferError("engine is closed")
            name = region.name
            if name is not None and (not name or "/" in name or name in self._exposed):
                raise TransferError(f"segment name {name!r} is empty, has '/', or is taken")
            if region.name is not None or by_address:
                region.segment_id = next(self._seg_ids)
                self._table.add(region.segment_id, region.address, region.length, by_address)
            if region.name is not None:
                self._exposed[region.name] = region
            if by_address:
                self._by_address.append(region)
            self._regions.add(region)
        if self._rdma_dev is not None:
            self._register_rdma(region)
        return region

    def _register_rdma(self, region: Region) -> None:
        """Give a region an rdma memory region (required with ``protocol: rdma``)."""
        try:
            mr = self._rdma_dev.register(region.address, region.length)
        except TransferError as exc:
            if self.config.protocol == "rdma":
                self._release_region(region)
                raise
            log.warning("%r stays tcp/shm only: %s", region, exc)
            return
        with self._lock:
            self._mrs[region] = mr

    def _mrs_lkey(self, region: Region) -> int | None:
        with self._lock:
            mr = self._mrs.get(region)
        return None if mr is None else int(mr.lkey)

    def _rdma_key(self, segment_id: int) -> SegmentKey:
        """Memory key of an exposed segment (for the rdma acceptor).

        Raises:
            KeyError: Unknown id, or the segment has no rdma memory region.
        """
        with self._lock:
            for region in self._exposed.values():
                if region.segment_id == segment_id and region in self._mrs:
                    mr = self._mrs[region]
                    return SegmentKey(segment_id, int(mr.rkey), region.address, region.length)
        raise KeyError(f"no rdma-registered segment with id {segment_id} here")

    def _rdma_to_tcp(self, items: list[tuple[RequestState, bool, int, int, int]]) -> None:
        """Send rdma slices over tcp instead (their regions stay counted in flight)."""
        slices = []
        for st, write, remote_off, local_addr, length in items:
            op = int(Op.WRITE if write else Op.READ)
            seg_id = st.request.segment.info.segment_id
            slices.append(Slice(st, op, seg_id, remote_off, local_addr, length))
        self._tcp._reroute(slices)

    def unregister_memory(self, region: Region) -> None:
        """Unregister (and stop exposing) a region; engine-allocated shm is freed.

        Raises:
            TransferError: Unknown region, or transfers on it still in flight.
        """
        with self._lock:
            if region not in self._regions:
                raise TransferError(f"{region!r} is not registered with this engine")
            if region.inflight:
                raise TransferError(f"{region!r} has {region.inflight} slices in flight")
        self._release_region(region)

    def _release_region(self, region: Region) -> None:
        with self._lock:
            if region in self._regions:
                self._regions.discard(region)
            if region.name is not None and self._exposed.get(region.name) is region:
                del self._exposed[region.name]
            if region in self._by_address:
                self._by_address.remove(region)
        region.registered = False
        with self._lock:
            mr = self._mrs.pop(region, None)
        if region.segment_id is not None:
            self._table.remove(region.segment_id)  # waits for requests being served
        if mr is not None:
            # Queue pairs still holding the rkey now fail with REM_ACCESS_ERR.
            with contextlib.suppress(Exception):
                mr.close()
        if region.shm_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(region.shm_path)
            remove_ledgers(region.shm_path)

    # ------------------------------------------------------------------ segments

    def open_segment(self, name: str) -> RemoteSegment:
        """Resolve a remote segment and choose its transport.

        Args:
            name: ``host:port/segment`` (``host:port`` alone: its only segment).

        Raises:
            TransferError: Unreachable, unknown, auth failure, or the configured protocol
                cannot reach it (``shm`` to another host or a non-shm segment).
        """
        info = self._directory.resolve(name)
        same_host = info.shm_path is not None and info.host_id == self.host_id
        transport = select_transport(
            self.config.protocol,
            name=info.name,
            same_host_shm=same_host,
            local_rdma=self._rdma is not None,
            peer_transports=info.transports,
        )
        if transport == "shm" and info.shm_path is not None:
            self._shm.map(info.shm_path, info.size)
        elif not info.nics and not info.secondary_nics:
            raise TransferError(f"{info.name} has no reachable NIC")
        return RemoteSegment(info, transport)

    def _lookup(self, name: str, nic: str) -> dict[str, Any]:
        if name == BY_ADDRESS:
            return self._lookup_by_address()
        with self._lock:
            if name:
                region = self._exposed.get(name)
            else:
                region = next(iter(self._exposed.values())) if len(self._exposed) == 1 else None
            known = sorted(self._exposed)
        if region is None or region.segment_id is None:
            raise KeyError(f"no segment {name!r} here; exposed: {known}")
        pref, sec = self._local_nics(region.location)
        srv = self._servers
        return {
            "segment": region.name,
            "segment_id": region.segment_id,
            "size": region.length,
            "location": region.location,
            "nics": [srv[n].endpoint for n in pref if n in srv],
            "secondary_nics": [srv[n].endpoint for n in sec if n in srv],
            "host_id": self.host_id,
            "shm_path": region.shm_path,
            "transports": ["tcp"]
            + (["shm"] if region.shm_path else [])
            + (["rdma"] if region in self._mrs else []),
        }

    def _lookup_by_address(self) -> dict[str, Any]:
        """LOOKUP reply of the by-address segment: the whole address space (the target
        checks every range), and the regions behind it, oldest first."""
        with self._lock:
            regions = [(r.address, r.length) for r in self._by_address]
        pref, sec = self._local_nics("cpu:0")
        srv = self._servers
        return {
            "segment": BY_ADDRESS,
            "segment_id": BY_ADDRESS_ID,
            "size": (1 << 64) - 1,
            "location": "cpu:0",
            "nics": [srv[n].endpoint for n in pref if n in srv],
            "secondary_nics": [srv[n].endpoint for n in sec if n in srv],
            "host_id": self.host_id,
            "shm_path": None,
            "transports": ["tcp"],
            "regions": [list(r) for r in regions[:BY_ADDRESS_LISTED]],
            "regions_total": len(regions),
        }

    def _local_nics(self, location: str) -> tuple[list[str], list[str]]:
        """(preferred, secondary) NIC addresses for memory at ``location``."""
        topo = self._topology
        if topo is None:
            return list(self.nics), []
        ours = set(self.nics)

        def addrs(names: Sequence[str]) -> list[str]:
            out = [topo.address_of(n) for n in names]
            return [a for a in out if a in ours]

        pref = addrs(topo.preferred(location))
        sec = [a for a in addrs(topo.secondary(location)) if a not in pref]
        rest = [n for n in self.nics if n not in pref and n not in sec]
        return (pref or sec or rest), (sec + rest if pref else rest if sec else [])

    # ------------------------------------------------------------------ batches

    def allocate_batch(self, capacity: int) -> Batch:
        """A batch for up to ``capacity`` requests.

        Raises:
            TransferError: capacity < 1.
        """
        if capacity < 1:
            raise TransferError(f"batch capacity must be >= 1, got {capacity}")
        batch = Batch(next(self._batch_ids), capacity)
        with self._lock:
            self._batches[batch.batch_id] = batch
        return batch

    def free_batch(self, batch: Batch) -> None:
        """Release a batch.

        Raises:
            TransferError: Requests still WAITING, or an unknown/freed batch.
        """
        self._expire(batch)
        with self._outcome.cv:
            waiting = sum(1 for r in batch.requests if r.state is TransferState.WAITING)
        if waiting:
            raise TransferError(f"{batch!r} has {waiting} requests still pending")
        with self._lock:
            if self._batches.pop(batch.batch_id, None) is None:
                raise TransferError(f"{batch!r} is not allocated")
        batch.freed = True

    def submit(self, batch: Batch, requests: Sequence[TransferRequest]) -> None:
        """Submit requests; they run asynchronously (poll ``status`` or ``wait``).

        Every request is validated first; on any error nothing is submitted.

        Raises:
            TransferError: Freed or full batch, unregistered region, unopened segment, or
                a range outside the local region or the remote segment (naming it).
        """
        if self._closed:
            raise TransferError("engine is closed")
        if batch.freed or batch.batch_id not in self._batches:
            raise TransferError(f"{batch!r} is not allocated")
        if len(batch.requests) + len(requests) > batch.capacity:
            raise TransferError(
                f"{batch!r} cannot take {len(requests)} more requests (capacity {batch.capacity})"
            )
        for i, req in enumerate(requests):
            validate_request(i, req, self._regions)
        deadline = time.monotonic() + self.config.request_timeout_s
        states = [RequestState(r, r.segment.transport, deadline) for r in requests]
        tcp: list[RequestState] = []
        rdma: list[RequestState] = []
        # shm jobs first: mapping is the last thing that can fail, and nothing is
        # counted in flight or added to the batch before it succeeded.
        jobs = [self._shm_job(st) for st in states if st.transport == "shm" and st.request.length]
        with self._outcome.cv:
            batch.requests.extend(states)
            for st in states:
                if st.request.length == 0:
                    st.state = TransferState.COMPLETED
                elif st.transport == "shm":
                    st.pending = 1
                    st.request.local.acquire(1)
                elif st.transport == "rdma" and self._rdma is not None:
                    rdma.append(st)
                else:
                    tcp.append(st)
        if jobs:
            self._shm.submit(jobs)
        if tcp:
            self._tcp.submit(tcp)
        if rdma:
            self._rdma.submit(rdma)

    def run_now(self, requests: Sequence[TransferRequest]) -> bool:
        """Do ``requests`` at once in this thread if every one goes over shm and they
        total at most :data:`.shm.INLINE_MAX` bytes; False (nothing done): they do not,
        submit them in a batch.

        The same copies, checks and counters as a batch, without its bookkeeping (a
        batch, a state per request, a condition to wait on), and with one map lookup,
        region pin and counter update per segment or region, not per request: ~10 us
        less for one 4 KiB request (docs/transfer.md).

        Raises:
            TransferError: the engine is closed, or a request is invalid (as
                :meth:`submit`; nothing was copied).
        """
        total = 0
        for req in requests:
            if req.segment.transport != "shm" or req.segment.info.shm_path is None:
                return False
            total += req.length
        if total > SHM_INLINE_MAX:
            return False
        if self._closed:
            raise TransferError("engine is closed")
        regions = self._regions
        for i, req in enumerate(requests):
            validate_request(i, req, regions)
        bases: dict[str, int] = {}
        pins: dict[Region, int] = {}
        done: dict[tuple[str, bool], list[int]] = {}
        copies = []
        for req in requests:
            info = req.segment.info
            path = info.shm_path or ""
            base = bases.get(path)
            if base is None:
                base = bases[path] = self._shm.map(path, info.size)
            copies.append(_shm_copy(req, base))
            pins[req.local] = pins.get(req.local, 0) + 1
            tally = done.setdefault((path, req.op == OpCode.READ), [0, 0])
            tally[0] += req.length
            tally[1] += 1
        held: list[tuple[Region, int]] = []
        try:
            for region, n in pins.items():
                region.acquire(n)  # unregister waits for the copy
                held.append((region, n))
            self._shm.copy_now(copies)
        finally:
            for region, n in held:
                region.release(n)
        with self._outcome.cv:
            self._stats.add("shm|requests_completed", len(requests))
            for (path, read), (nbytes, count) in done.items():
                self._count_shm(path, read, nbytes, count)
        return True

    def shm_mapping(self, segment: RemoteSegment) -> tuple[int, int] | None:
        """``(base address, size)`` of a same-host segment's mapping in this process
        (mapped on first use), or None: the segment does not go over shm.

        For callers that copy many small slices of one segment themselves (the store
        client's batches): they bounds-check each slice against ``size``, pin their
        regions while copying and report the copies with :meth:`count_shm_copies`.

        Raises:
            TransferError: the engine is closed, or the file cannot be mapped.
        """
        info = segment.info
        if segment.transport != "shm" or info.shm_path is None:
            return None
        if self._closed:
            raise TransferError("engine is closed")
        return self._shm.map(info.shm_path, info.size), info.size

    def count_shm_copies(self, segment: RemoteSegment, read: bool, nbytes: int, count: int) -> None:
        """Count ``count`` finished copies (``nbytes`` together) to or from ``segment``
        made through :meth:`shm_mapping`, as if they had been requests of a batch."""
        with self._outcome.cv:
            self._stats.add("shm|requests_completed", count)
            self._count_shm(segment.info.shm_path, read, nbytes, count)
        self._shm.bytes += nbytes

    def _count_shm(self, path: str | None, read: bool, nbytes: int, count: int = 1) -> None:
        # Finished shm copies (``count`` slices, ``nbytes`` together) of one segment file
        # and direction; the caller holds the outcome lock.
        self._stats.add("shm|bytes", nbytes)
        self._stats.add("shm|slices", count)
        if path is not None:
            self._shm.account(path, read, nbytes, count)

    def _shm_job(self, st: RequestState) -> Job:
        req = st.request
        info = req.segment.info
        if info.shm_path is None:  # open_segment only picks shm when there is a path
            raise TransferError(f"{info.name} has no shared-memory file")
        return (st, *_shm_copy(req, self._shm.map(info.shm_path, info.size)))

    def _shm_done(self, states: list[Any]) -> None:
        with self._outcome.cv:
            for st in states:
                req = st.request
                if self._outcome.complete(st, req.length):
                    self._stats.add("shm|requests_completed")
                self._count_shm(req.segment.info.shm_path, req.op == OpCode.READ, req.length)
            self._outcome.cv.notify_all()
        for st in states:
            st.request.local.release(1)

    def _expire(self, batch: Batch) -> float | None:
        """Fail overdue requests; return the earliest deadline still pending."""
        now = time.monotonic()
        nearest: float | None = None
        with self._outcome.cv:
            for st in batch.requests:
                if st.state is not TransferState.WAITING:
                    continue
                if now >= st.deadline:
                    if self._outcome.fail(
                        st, f"timed out after {self.config.request_timeout_s}s ({st.transport})"
                    ):
                        self._stats.add(f"{st.transport}|requests_failed")
                elif nearest is None or st.deadline < nearest:
                    nearest = st.deadline
        return nearest

    def status(self, batch: Batch, index: int) -> TransferStatus:
        """Status of request ``index`` of ``batch``.

        Raises:
            TransferError: Index out of range.
        """
        if not 0 <= index < len(batch.requests):
            raise TransferError(f"{batch!r} has no request {index}")
        self._expire(batch)
        with self._outcome.cv:
            return batch.requests[index].status()

    def batch_status(self, batch: Batch) -> list[TransferStatus]:
        """Statuses of every request of ``batch``, in submission order."""
        self._expire(batch)
        with self._outcome.cv:
            return [r.status() for r in batch.requests]

    def wait(self, batch: Batch, timeout: float | None = None) -> list[TransferStatus]:
        """Block until no request of ``batch`` is WAITING, or ``timeout`` passes.

        Returns:
            The statuses (some may still be WAITING if ``timeout`` expired first).
        """
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            nearest = self._expire(batch)
            with self._outcome.cv:
                if all(r.state is not TransferState.WAITING for r in batch.requests):
                    return [r.status() for r in batch.requests]
                now = time.monotonic()
                limits = [t for t in (end, nearest) if t is not None]
                if end is not None and now >= end:
                    return [r.status() for r in batch.requests]
                self._outcome.cv.wait(max(0.0, min(limits) - now) if limits else None)

    # ------------------------------------------------------------------ sync helpers

    def read(
        self,
        region: Region,
        local_offset: int,
        segment: RemoteSegment,
        target_offset: int,
        length: int,
    ) -> None:
        """Synchronous READ of ``length`` bytes (segment -> region).

        Raises:
            TransferError: The request failed (with its reason) or was invalid.
        """
        self._sync(OpCode.READ, region, local_offset, segment, target_offset, length)

    def write(
        self,
        region: Region,
        local_offset: int,
        segment: RemoteSegment,
        target_offset: int,
        length: int,
    ) -> None:
        """Synchronous WRITE of ``length`` bytes (region -> segment).

        Raises:
            TransferError: The request failed (with its reason) or was invalid.
        """
        self._sync(OpCode.WRITE, region, local_offset, segment, target_offset, length)

    def _sync(
        self,
        op: OpCode,
        region: Region,
        local_offset: int,
        segment: RemoteSegment,
        target_offset: int,
        length: int,
    ) -> None:
        batch = self.allocate_batch(1)
        try:
            self.submit(
                batch, [TransferRequest(op, region, local_offset, segment, target_offset, length)]
            )
            (st,) = self.wait(batch)
        finally:
            with contextlib.suppress(TransferError):
                self.free_batch(batch)
        if st.state is not TransferState.COMPLETED:
            raise TransferError(
                f"{op.name} {segment.name}@{target_offset}+{length} failed: {st.reason}"
            )

    # ------------------------------------------------------------------ counters

    def rdma_status(self) -> RdmaStatus:
        """The rdma transport: device in use and its counters, or why it is not used."""
        if self._rdma is not None:
            return self._rdma.status()
        if self.config.protocol not in ("auto", "rdma"):
            return RdmaStatus(None, reason=f"protocol is {self.config.protocol}")
        return RdmaStatus(None, reason=refusal(probe()) or "the RDMA device did not open")

    def snapshot(self) -> TransferSnapshot:
        """Immutable counters: per NIC (both roles) and per transport."""
        values = self._stats.copy()
        now = time.monotonic()
        nics = []
        tcp_served = (0, 0)
        for nic in self.nics:
            srv = self._servers.get(nic)
            with self._tcp._hlock:
                health = self._tcp.local_health.state(nic, now)
            native = srv.native_counters() if srv else {}
            tcp_served = (
                tcp_served[0] + native.get("bytes_sent", 0) + native.get("bytes_received", 0),
                tcp_served[1] + native.get("slices_sent", 0) + native.get("slices_received", 0),
            )
            nics.append(
                nic_stats(
                    nic,
                    values,
                    native,
                    srv.counters.copy() if srv else {},
                    health.paused,
                    health.paused_until,
                )
            )
        with self._lock:
            shm_paths = [r.shm_path for r in self._exposed.values() if r.shm_path]
        # One snapshot at a time folds (two would count an exited initiator twice).
        with self._fold_lock:
            shm_served = [served(p, self._shm_folded.setdefault(p, [0, 0])) for p in shm_paths]
        by_transport = {
            "shm": (sum(b for b, _ in shm_served), sum(r for _, r in shm_served)),
            "tcp": tcp_served,  # payload the data servers on our NICs moved for peers
        }
        transports = tuple(
            transport_stats(t, values, by_transport.get(t, (0, 0))) for t in TRANSPORTS
        )
        with self._outcome.cv:
            pending = sum(
                1
                for b in self._batches.values()
                for r in b.requests
                if r.state is TransferState.WAITING
            )
        name = self.segment_name if self._servers else ""
        return TransferSnapshot(
            name,
            now,
            tuple(nics),
            transports,
            len(self._tcp.pool),
            pending,
            self._tcp.paused_remotes(),
        )


def _open_rdma(protocol: str, options: RdmaOptions) -> Any:
    """The rdma device for this engine: required for ``rdma``, opportunistic for ``auto``.

    Raises:
        TransferError: ``rdma`` requested and no device, no pyverbs, or it will not open.
    """
    if protocol not in ("rdma", "auto"):
        return None
    support = probe()
    msg = refusal(support)
    if msg is not None:
        if protocol == "rdma":
            raise TransferError(msg)
        return None
    from .rdma_verbs import RdmaDevice

    try:
        return RdmaDevice.open(options, support.devices)
    except TransferError as exc:
        if protocol == "rdma":
            raise
        log.warning("rdma not used (protocol auto): %s", exc)
        return None


def _native_address(buf: Any) -> int:
    return int(_native.buffer_address(buf)[0])
