"""The store client: put and get objects through the Transfer Engine (upstream's API shape).

::

    with Client(ClientOptions(master="127.0.0.1:50051",
                              segments=(SegmentSpec("node-a", 256 << 20),))) as c:
        c.put("k", b"value", ReplicateConfig(replica_num=2))
        assert c.get("k") == b"value"
        addr = c.register_buffer(buf)             # zero-copy paths
        c.put_from("big", addr, len(buf))
        n = c.get_into("big", addr, len(buf))

Writes: ``PutStart`` (the master allocates replicas and slices) -> every slice of every
replica written at once (memcpy into this process's own segments, the Transfer Engine
for the rest: shm on this host, tcp across hosts) -> ``PutEnd``; ``PutRevoke`` if any
slice failed, so readers never see a partial object. Reads: ``GetReplicaList`` (grants
a lease) -> the slices of one replica, this process's own replica first; a replica that
fails is skipped for the next; when none is readable the call raises
:class:`UnavailableError`, never returns partial bytes. A read whose transfer did not
finish inside its lease (counted from before the GetReplicaList) is read again (the
ranges may have been freed and reused meanwhile), up to three tries, then
:class:`UnavailableError`; a batch item that outlasts its lease gets that error.

Every argument is checked before memory or the master is touched (keys, sizes, buffer
bounds, batch shapes): a bad call changes nothing. Errors are the master's
:class:`StoreError` families and codes. Batch calls return one result per item (a value
or the item's :class:`StoreError`) and raise only for whole-call problems.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from mooncake_core.transfer import OpCode, Region, TransferEngine, TransferError

from ..errors import ConflictError, ErrorCode, InvalidArgumentError, StoreError, UnavailableError
from ..objects import ObjectInfo, Replica
from ..pins import Pin
from ..results import GetResult, ListKeysResult, RemoveManyResult, ReplicateConfig
from ..validation import check_key, compile_pattern, utf8_of
from . import tensor as client_tensor
from .async_master import default_client_id
from .batch import BatchOps
from .data import (
    LEASE_TRIES,
    Buffers,
    DataPath,
    bytes_of,
    lease_outlasted_error,
    outlasted,
    plan,
    plan_window,
    unreadable_error,
    write_too_late,
)
from .grants import GrantPocket, HeldGrant
from .heartbeat import Heartbeat, Mount
from .options import ClientOptions
from .sync_master import SyncMaster

if TYPE_CHECKING:
    import torch

    from mooncake_core.transfer import TransferSnapshot

_MIN_STAGING = 1 << 20
STREAM_WINDOW = 16 << 20
"""Most bytes :meth:`Client.put_file` holds in memory at once (also capped by the
master's ``max_slice_size``)."""
_RANK = {"local": 0, "shm": 1, "unknown": 2, "tcp": 3}
"""Read preference by how a segment is reached (lower first)."""
OVERLAP_MAX = 1 << 20
"""Largest object a get reads from its remembered location while it asks the master
(see :meth:`Client._overlapped`): above it the transfer, not the lookup, is the cost."""
LOCATIONS_MAX = 4096
"""Most remembered locations (the oldest is forgotten first)."""


class Readable(Protocol):
    """What :meth:`Client.put_file` reads from: a binary file object (``open(p, "rb")``,
    ``sys.stdin.buffer``, ``io.BytesIO``)."""

    def readinto(self, buffer: memoryview, /) -> int | None: ...


class Client(BatchOps):
    """A store client: optionally hosts segments, reads and writes any segment.

    Args:
        options: connection, hosted segments and transport; ``None``: built from
            ``fields`` (``Client(master="127.0.0.1:50051")``).
        fields: :class:`ClientOptions` fields when ``options`` is None.
    """

    def __init__(self, options: ClientOptions | None = None, **fields: Any) -> None:
        self.options = options if options is not None else ClientOptions(**fields)
        self.client_id = self.options.client_id or default_client_id()
        self._master: SyncMaster | None = None
        self._engine: TransferEngine | None = None
        self._heartbeat: Heartbeat | None = None
        self._data: DataPath | None = None
        self._buffers = Buffers()
        self._local: dict[str, Region] = {}
        self._staging: Region | None = None
        self._staging_lock = threading.Lock()
        self._grants = GrantPocket()
        """The space of this client's next put, granted ahead (:mod:`.grants`)."""
        self._locations: dict[str, tuple[int, int, Replica]] = {}
        """Key -> (version, size, replica) of its last tcp read (:meth:`_overlapped`)."""
        self.overlapped_reads = [0, 0]
        """Gets that read a remembered location meanwhile: [used, void]."""
        self._closed = False

    # ---------------------------------------------------------------- lifecycle
    def setup(self) -> Client:
        """Connect to the master, start the Transfer Engine, mount the hosted segments.

        Raises:
            UnavailableError: the master is unreachable within ``connect_timeout_s``.
            ConflictError: a segment name is already mounted by another client.
            StoreError: anything else the master refused; nothing is left running.
        """
        if self._master is not None:
            return self  # already set up (setup() then `with`)
        if self._closed:
            raise UnavailableError(ErrorCode.UNAVAILABLE, "client is closed; make a new one")
        o = self.options
        try:
            self._master = SyncMaster(
                o.master,
                self.client_id,
                o.secret,
                o.rpc_timeout_s,
                fast=o.fast_control,
                fast_unix=o.fast_unix,
            )
            self._master.wait_ready(o.connect_timeout_s)
            try:
                eng = TransferEngine(
                    o.engine_config(), nics=(o.host,), port=o.data_port, secret=o.secret
                )
                self._engine = eng.start()
                for spec in o.segments:
                    region = eng.allocate_memory(spec.size, location=spec.location, name=spec.name)
                    self._local[spec.name] = region
            except TransferError as exc:
                raise UnavailableError(ErrorCode.UNAVAILABLE, f"transfer engine: {exc}") from exc
            timeout = o.transfer.request_timeout_s + 5.0
            self._data = DataPath(
                eng, self._local, self._segment_table, timeout, o.heartbeat_interval_s
            )
            if o.segments:
                mounts = [
                    Mount(s.name, s.size, eng.segment_name, s.location, s.ssd_capacity)
                    for s in o.segments
                ]
                self._heartbeat = Heartbeat(
                    o.master,
                    self.client_id,
                    o.secret,
                    mounts,
                    o.heartbeat_interval_s,
                    o.rpc_timeout_s,
                )
                self._heartbeat.start()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Unmount hosted segments, stop heartbeats and the engine (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._master is not None:
            for gid in self._grants.take_all():  # else held until put_release_s
                with contextlib.suppress(StoreError):
                    self._master.put_commit("", release=gid)
            batch = self._grants.take_all_batch()
            if batch:
                with contextlib.suppress(StoreError):
                    self._master.batch_put_commit([], release=batch)
        if self._heartbeat is not None:
            self._heartbeat.stop(unmount=True)
        if self._engine is not None:
            self._engine.close()
        if self._data is not None:
            self._data.close()
        if self._master is not None:
            self._master.close()

    def __enter__(self) -> Client:
        return self.setup()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def transfer_address(self) -> str:
        """``host:port`` of this client's Transfer Engine data server."""
        return self._eng.segment_name

    @property
    def remounts(self) -> int:
        """Times the master forgot this client and its segments were mounted again."""
        return self._heartbeat.remounts if self._heartbeat is not None else 0

    @property
    def segments(self) -> tuple[str, ...]:
        """Names of the segments this client hosts."""
        return tuple(self._local)

    def segment_memory(self, name: str) -> memoryview:
        """The bytes of a segment this client hosts (the store node's SSD tier copies
        objects out of it and stages them back into it).

        Raises:
            InvalidArgumentError: this client does not host ``name``.
            UnavailableError: the client is not set up or is closed.
        """
        _ = self._eng  # raises when not set up or closed
        region = self._local.get(name)
        if region is None:
            raise InvalidArgumentError(
                ErrorCode.INVALID_PARAMS,
                f"segment {name!r} is not hosted here (hosted: {sorted(self._local)})",
            )
        return region.view()

    def transfer_snapshot(self) -> TransferSnapshot:
        """Counters of this client's Transfer Engine (per NIC and per transport).

        Thread-safe; served as the ``transfer`` snapshot of a telemetry registry.

        Returns:
            The engine's immutable snapshot.

        Raises:
            UnavailableError: the client is not set up or is closed.
        """
        return self._eng.snapshot()

    @property
    def _m(self) -> SyncMaster:
        if self._master is None or self._closed:
            raise UnavailableError(ErrorCode.UNAVAILABLE, "client is not set up (call setup())")
        return self._master

    @property
    def _eng(self) -> TransferEngine:
        if self._engine is None or self._closed:
            raise UnavailableError(ErrorCode.UNAVAILABLE, "client is not set up (call setup())")
        return self._engine

    @property
    def _dp(self) -> DataPath:
        if self._data is None or self._closed:
            raise UnavailableError(ErrorCode.UNAVAILABLE, "client is not set up (call setup())")
        return self._data

    def _segment_table(self) -> dict[str, tuple[str, str]]:
        snap = self._m.get_snapshot()
        return {s.name: (s.transport_address, s.client_id) for s in snap.segments}

    def transport_of(self, segment: str) -> str:
        """How this client reaches ``segment``: local, shm, tcp (unknown before first use)."""
        return self._dp.transport_of(segment)

    # ----------------------------------------------------------------- buffers
    def register_buffer(self, buffer: Any, size: int | None = None) -> int:
        """Register memory for ``put_from``/``get_into`` (zero-copy).

        Args:
            buffer: bytearray, numpy array, CPU tensor, writable memoryview, mmap, or an
                int address (then ``size`` is required).
            size: bytes to register (default: the whole buffer).

        Returns:
            The buffer's start address (pass addresses inside it to the ``*_from`` /
            ``*_into`` calls).

        Raises:
            InvalidArgumentError: an unusable buffer or an already registered address.
        """
        try:
            region = self._eng.register_memory(buffer, size)
        except TransferError as exc:
            raise InvalidArgumentError(ErrorCode.INVALID_PARAMS, str(exc)) from None
        try:
            self._buffers.add(region)
        except StoreError:
            self._eng.unregister_memory(region)
            raise
        return region.address

    def unregister_buffer(self, address: int) -> None:
        """Unregister the buffer that starts at ``address``.

        Raises:
            InvalidArgumentError: nothing registered there.
        """
        self._eng.unregister_memory(self._buffers.remove(address))

    def _stage(self, size: int) -> Region:
        # Caller holds _staging_lock. Grown to a power of two so repeated puts reuse it.
        st = self._staging
        if st is None or st.length < size:
            if st is not None:
                self._eng.unregister_memory(st)
                self._staging = None
            n = max(_MIN_STAGING, 1 << (size - 1).bit_length())
            self._staging = st = self._eng.register_memory(bytearray(n))
        return st

    # ------------------------------------------------------------------ checks
    def _check_key(self, key: str) -> None:
        check_key(key, self.options.master_config.max_key_length)

    def _check_size(self, key: str, size: int) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise InvalidArgumentError(
                ErrorCode.INVALID_PARAMS,
                f"object {key!r}: size must be a positive int (empty values are not "
                f"stored), got {size!r}",
            )
        limit = self.options.master_config.max_object_size
        if size > limit:
            raise InvalidArgumentError(
                ErrorCode.OBJECT_TOO_LARGE,
                f"object {key!r} of {size} bytes exceeds max_object_size {limit}",
            )

    # ------------------------------------------------------------------ writes
    def put(
        self, key: str, value: bytes | bytearray | memoryview, config: ReplicateConfig | None = None
    ) -> None:
        """Store ``value`` under a new key (copied through a staging buffer).

        Raises:
            InvalidArgumentError: bad key, empty or oversize value, bad config.
            ConflictError: the key exists (use :meth:`upsert`).
            CapacityError: not enough segments or space.
            UnavailableError: the master or every path to a replica failed (revoked).
        """
        self._put_bytes(key, value, config, upsert=False)

    def upsert(
        self, key: str, value: bytes | bytearray | memoryview, config: ReplicateConfig | None = None
    ) -> None:
        """Store ``value`` under ``key``, replacing an existing object (same errors as put)."""
        self._put_bytes(key, value, config, upsert=True)

    def _put_bytes(
        self,
        key: str,
        value: bytes | bytearray | memoryview,
        config: ReplicateConfig | None,
        *,
        upsert: bool,
    ) -> None:
        self._check_key(key)
        view = memoryview(value).cast("B")
        self._check_size(key, view.nbytes)
        with self._staging_lock:
            st = self._stage(view.nbytes)
            st.view()[: view.nbytes] = view
            self._put_region(key, st, 0, view.nbytes, config, upsert)

    def put_from(
        self, key: str, buffer_ptr: int, size: int, config: ReplicateConfig | None = None
    ) -> None:
        """Store ``size`` bytes at ``buffer_ptr`` (inside a registered buffer), zero-copy.

        Raises:
            InvalidArgumentError: bad key or size, or the range is not registered.
            (and the errors of :meth:`put`)
        """
        self._check_key(key)
        self._check_size(key, size)
        region, off = self._buffers.find(buffer_ptr, size)
        self._put_region(key, region, off, size, config, upsert=False)

    def upsert_from(
        self, key: str, buffer_ptr: int, size: int, config: ReplicateConfig | None = None
    ) -> None:
        """:meth:`put_from` that replaces an existing object."""
        self._check_key(key)
        self._check_size(key, size)
        region, off = self._buffers.find(buffer_ptr, size)
        self._put_region(key, region, off, size, config, upsert=True)

    def put_file(
        self,
        key: str,
        source: Readable,
        size: int,
        config: ReplicateConfig | None = None,
        *,
        upsert: bool = False,
    ) -> None:
        """Store ``size`` bytes read from ``source`` (a binary file object), streamed.

        The size is checked and the replicas allocated (``PutStart``) before a byte is
        read; the bytes then pass through one staging buffer of at most
        ``max_slice_size`` (and :data:`STREAM_WINDOW`) bytes, window by window, so
        memory stays bounded whatever the object's size. Readers see the object only
        after its last window is written (``PutEnd``); any failure revokes it.

        Raises:
            InvalidArgumentError: bad key or size (nothing read), or ``source`` ended
                before ``size`` bytes (revoked).
            OSError: reading ``source`` failed (revoked).
            (and the errors of :meth:`put`)
        """
        self._check_key(key)
        self._check_size(key, size)
        window = min(size, self.options.master_config.max_slice_size, STREAM_WINDOW)
        with self._staging_lock:
            st = self._stage(window)
            asked = time.monotonic()
            replicas = (self._m.upsert if upsert else self._m.put_start)(key, size, config)
            try:
                self._stream_windows(key, source, size, window, st, replicas, asked)
            except BaseException:
                self._revoke([key])
                raise
            self._m.put_end(key)

    def _stream_windows(
        self,
        key: str,
        source: Readable,
        size: int,
        window: int,
        st: Region,
        replicas: Sequence[Replica],
        asked: float,
    ) -> None:
        view = st.view()
        timeout = self._m.write_window(self.options.master_config.put_timeout_s)
        pos = 0
        while pos < size:
            n = min(window, size - pos)
            got = 0
            while got < n:
                k = source.readinto(view[got:n])
                if not k:
                    raise InvalidArgumentError(
                        ErrorCode.INVALID_PARAMS,
                        f"put {key!r}: the source ended after {pos + got} of {size} bytes; revoked",
                    )
                got += k
            late = write_too_late(key, asked, timeout, time.monotonic())
            if late is not None:
                raise late
            ops = [o for r in replicas for o in plan_window(OpCode.WRITE, st, r, pos, n)]
            (err,) = self._dp.run([ops])
            if err is not None:
                raise UnavailableError(
                    ErrorCode.UNAVAILABLE, f"put {key!r}: writing a replica failed ({err}); revoked"
                )
            pos += n

    def _put_region(
        self,
        key: str,
        region: Region,
        off: int,
        size: int,
        config: ReplicateConfig | None,
        upsert: bool,
        avoid: Collection[str] = (),
    ) -> None:
        # A replica target that cannot be reached (its node died, its data port
        # refuses) fails the attempt: it is revoked, and PutStart is asked again naming
        # the failed segments, so the master places the write elsewhere and stops
        # placing anyone's writes there. Until rpc_timeout_s, while new segments fail.
        # ``avoid``: segments a first attempt (a batch put) already failed on.
        if not upsert and not avoid and self._put_granted(key, region, off, size, config):
            return
        deadline = time.monotonic() + self.options.rpc_timeout_s
        avoid = set(avoid)
        while True:
            try:
                start = self._m.upsert if upsert else self._m.put_start
                asked = time.monotonic()
                replicas = start(key, size, config, avoid=sorted(avoid))
            except StoreError as exc:
                if not avoid:
                    raise
                raise UnavailableError(
                    ErrorCode.UNAVAILABLE,
                    f"put {key!r}: writing a replica failed on {', '.join(sorted(avoid))}; "
                    f"revoked, and placing it elsewhere failed: {exc.message}",
                ) from None
            window = self._m.write_window(self.options.master_config.put_timeout_s)
            late = write_too_late(key, asked, window, time.monotonic())
            if late is not None:
                self._revoke([key])
                raise late
            ops = [o for r in replicas for o in plan(OpCode.WRITE, region, off, r)]
            (err,), (bad,) = self._dp.run_reporting([ops])
            if err is None:
                break
            self._revoke([key])
            if not bad - avoid or time.monotonic() >= deadline:
                raise UnavailableError(
                    ErrorCode.UNAVAILABLE, f"put {key!r}: writing a replica failed ({err}); revoked"
                )
            avoid |= bad
        self._end_put(key, size, config, upsert)

    def _end_put(self, key: str, size: int, config: ReplicateConfig | None, upsert: bool) -> None:
        """PutEnd, asking for a grant for the next put of this size (not after an
        upsert: that one replaces a key, a grant only stores new ones)."""
        want = 0 if upsert or not self._grants.wants(size, config) else size
        self._commit(key, 0, size, config, want)

    def _commit(
        self, key: str, grant_id: int, size: int, config: ReplicateConfig | None, want: int
    ) -> None:
        """PutCommit of ``key`` (``grant_id`` 0: its PutStart's), giving back a grant
        this client will not use and keeping the grant it gets for a next put of
        ``want`` bytes (0: none asked)."""
        asked = time.monotonic()  # the grant's transfer window counts from here
        got = self._m.put_commit(
            key, grant_id, size, next_size=want, config=config, release=self._grants.to_release()
        )
        if got is not None:
            self._grants.keep(HeldGrant(got[0], size, config, got[1], asked))

    def _put_granted(
        self, key: str, region: Region, off: int, size: int, config: ReplicateConfig | None
    ) -> bool:
        """Put through the grant held for this size, if any: write its replicas, then
        commit the key (one exchange with the master). False: no grant fits, or the
        master no longer knows it, or a transfer failed; the caller puts the usual way
        (PutStart, transfer, PutEnd)."""
        window = self._m.write_window(self.options.master_config.put_timeout_s)
        g = self._grants.take(size, config, time.monotonic(), window)
        if g is None:
            return False
        if write_too_late(key, g.asked, window, time.monotonic()) is not None:
            self._grants.drop(g.grant_id)
            return False
        ops = [o for r in g.replicas for o in plan(OpCode.WRITE, region, off, r)]
        (err,) = self._dp.run([ops])
        if err is not None:
            self._grants.drop(g.grant_id)
            return False
        try:
            self._commit(key, g.grant_id, size, config, size)
        except ConflictError as exc:
            if exc.code == ErrorCode.STALE:
                return False  # expired or forgotten (a new leader): put it again
            if exc.code == ErrorCode.OBJECT_ALREADY_EXISTS:
                self._grants.keep(g)  # unused: good for the next put
            raise
        return True

    def _revoke(self, keys: Sequence[str]) -> None:
        # If this fails too, the master discards the write after put_timeout_s.
        with contextlib.suppress(StoreError):
            self._m.batch_put_revoke(keys)

    # ------------------------------------------------------------------- reads
    def get(self, key: str) -> bytes:
        """The value of ``key``.

        Raises:
            NotFoundError: no such key.
            ConflictError: OBJECT_NOT_READY, still being written.
            UnavailableError: no replica could be read, or every try's transfer
                outlasted its read lease (the bytes might have been reused).
        """
        self._check_key(key)
        out: list[bytes] = []
        for _ in range(LEASE_TRIES):
            asked = time.monotonic()
            out.clear()
            got = self._early(key, OVERLAP_MAX, lambda st, n: out.append(bytes_of(st, 0, n)))
            res = self._m.get_replica_list(key) if got is None else got[0]
            if not out:
                with self._staging_lock:
                    st = self._stage(res.size)
                    self._read(res, st, 0)
                    out.append(bytes_of(st, 0, res.size))
            took = time.monotonic() - asked
            if not outlasted(asked, res.lease_ttl_s, asked + took):
                return out[0]
        raise lease_outlasted_error(key, took, res.lease_ttl_s, LEASE_TRIES)

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        """Read ``key`` into a registered buffer of ``size`` bytes; returns the object size.

        Raises:
            InvalidArgumentError: the range is not registered, or smaller than the object
                (nothing is written then).
            (and the errors of :meth:`get`)
        """
        self._check_key(key)
        region, off = self._buffers.find(buffer_ptr, size)
        dest = region.address + off
        for _ in range(LEASE_TRIES):
            asked = time.monotonic()
            got = self._early(key, size, lambda st, n: ctypes.memmove(dest, st.address, n))
            res = self._m.get_replica_list(key) if got is None else got[0]
            if res.size > size:
                raise InvalidArgumentError(
                    ErrorCode.INVALID_PARAMS,
                    f"get_into {key!r}: buffer of {size} bytes is smaller than the object "
                    f"({res.size} bytes)",
                )
            if got is None or not got[1]:
                self._read(res, region, off)
            took = time.monotonic() - asked
            if not outlasted(asked, res.lease_ttl_s, asked + took):
                return res.size
        raise lease_outlasted_error(key, took, res.lease_ttl_s, LEASE_TRIES)

    def _early(
        self, key: str, limit: int, take: Callable[[Region, int], object]
    ) -> tuple[GetResult, bool] | None:
        """:meth:`_overlapped`, when ``key`` has a remembered location of at most
        ``limit`` bytes and the staging buffer is free (another thread's get is not
        waited for); ``take(staging, size)`` copies the bytes out when they are used."""
        hit = self._locations.get(key)
        if hit is None or hit[1] > limit or not self._staging_lock.acquire(blocking=False):
            return None
        try:
            got = self._overlapped(key, hit)
            if got is not None and got[1]:
                take(self._stage(got[0].size), got[0].size)
            return got
        finally:
            self._staging_lock.release()

    def _overlapped(self, key: str, hit: tuple[int, int, Replica]) -> tuple[GetResult, bool] | None:
        """Read ``key``'s remembered location into the staging buffer while the master
        is asked where ``key`` is (caller holds ``_staging_lock``; ``hit``: its
        ``_locations`` entry, version, size, replica): the two round trips
        overlap, where a get otherwise waits for one, then the other.

        The bytes are used only if the master's answer carries the version they were
        remembered under: every change of an object's replicas (a new object, a replica
        dropped, moved, evicted or staged) gives a new version, so the same version
        means no byte there was reused, from before the lookup until its lease ends.

        Returns:
            ``(answer, True)``: the staging buffer holds ``key``'s bytes; ``(answer,
            False)``: the read is void (the location changed, or the read failed): read
            ``answer`` as usual; ``None``: the fast channel cannot take the lookup
            now: ask the master as usual.

        Raises:
            StoreError: the master's answer (no such key, not ready, ...).
        """
        version, size, replica = hit
        sent = self._m.lookup_start(key)
        if sent is None:
            return None
        pending = self._dp.start([plan(OpCode.READ, self._stage(size), 0, replica)])
        try:
            res = self._m.lookup_finish(sent)
        except StoreError:
            self._locations.pop(key, None)
            raise
        finally:
            (err,) = self._dp.finish(pending)
        if res is None:
            return None
        used = err is None and res.version == version and res.size == size
        self.overlapped_reads[0 if used else 1] += 1
        if not used:
            self._locations.pop(key, None)
        return res, used

    def _remember(self, res: GetResult, replica: Replica) -> None:
        """Keep where ``res.key`` was just read from, when the next get can read there
        while it asks the master: a versioned answer, a small object, and a replica
        reached over tcp (a copy from shm costs less than the lookup it would hide)."""
        locs = self._locations
        tr = self._dp.transport_of
        if (
            not res.version
            or res.size > OVERLAP_MAX
            or any(tr(s.segment) != "tcp" for s in replica)
        ):
            locs.pop(res.key, None)
            return
        if len(locs) >= LOCATIONS_MAX and res.key not in locs:
            with contextlib.suppress(StopIteration, KeyError, RuntimeError):
                del locs[next(iter(locs))]
        locs[res.key] = (res.version, res.size, replica)

    def _order(self, replicas: Sequence[Replica]) -> list[Replica]:
        """Cheapest path first: this process's memory, shm, not yet opened, tcp.

        A replica costs what its slowest slice costs; ties keep the master's order.
        """
        if len(replicas) < 2:
            return list(replicas)
        rank = _RANK
        tr = self._dp.transport_of
        return sorted(replicas, key=lambda r: max(rank.get(tr(s.segment), 2) for s in r))

    def _read(self, res: GetResult, region: Region, off: int) -> None:
        reasons: list[str] = []
        for replica in self._order(res.replicas):
            (err,) = self._dp.run([plan(OpCode.READ, region, off, replica)])
            if err is None:
                self._remember(res, replica)
                return
            reasons.append(err)
        raise unreadable_error(res.key, len(res.replicas), reasons)

    def get_size(self, key: str) -> int:
        """Size in bytes of ``key`` (no lease).

        Raises:
            NotFoundError: no such key.
        """
        return self.stat(key).size

    def stat(self, key: str) -> ObjectInfo:
        """Describe one object: size, state, replicas, lease, pin (no lease granted)."""
        self._check_key(key)
        return self._m.stat(key)

    def is_exist(self, key: str) -> bool:
        """Whether ``key`` is readable (does not renew leases)."""
        self._check_key(key)
        return self._m.exist(key)

    def batch_is_exist(self, keys: Sequence[str]) -> list[bool]:
        """:meth:`is_exist` for each key."""
        for k in keys:
            self._check_key(k)
        return self._m.batch_exist(keys)

    def list_keys(
        self, prefix: str = "", start_after: str = "", limit: int = 1000
    ) -> ListKeysResult:
        """One page of keys in key order (pass ``next_start_after`` back for the next)."""
        utf8_of("prefix", prefix)
        utf8_of("start_after", start_after)
        return self._m.list_keys(prefix, start_after, limit)

    # ---------------------------------------------------------------- removals
    def remove(self, key: str, *, force: bool = False) -> None:
        """Remove ``key`` (refused while a reader holds a lease unless ``force``)."""
        self._check_key(key)
        self._m.remove(key, force=force)

    def remove_by_regex(self, pattern: str, *, force: bool = False) -> RemoveManyResult:
        """Remove every removable key matching ``pattern`` (RE2 ``search``: Python ``re``
        syntax without backreferences or lookaround; checked here before the master)."""
        compile_pattern(pattern)
        return self._m.remove_by_regex(pattern, force=force)

    def remove_by_prefix(self, prefix: str, *, force: bool = False) -> RemoveManyResult:
        """Remove every removable key under ``prefix`` (non-empty)."""
        utf8_of("prefix", prefix)
        return self._m.remove_by_prefix(prefix, force=force)

    def remove_all(self, *, force: bool = False) -> RemoveManyResult:
        """Remove every removable object."""
        return self._m.remove_all(force=force)

    # -------------------------------------------------------------------- pins
    def pin(
        self, target: str, *, prefix: bool = False, hard: bool = False, ttl_s: float | None = None
    ) -> Pin:
        """Pin a key (must exist) or a key prefix (also covers keys written later)."""
        utf8_of("pin target", target)
        return self._m.pin(target, prefix=prefix, hard=hard, ttl_s=ttl_s)

    def unpin(self, target: str, *, prefix: bool = False) -> Pin:
        """Clear the pin on exactly this key or prefix (``PIN_NOT_FOUND`` if none)."""
        utf8_of("pin target", target)
        return self._m.unpin(target, prefix=prefix)

    def list_pins(self) -> list[Pin]:
        """Live pins, keys then prefixes."""
        return self._m.list_pins()

    # ------------------------------------------------------------------ tensors
    def put_tensor(
        self, key: str, tensor: torch.Tensor, config: ReplicateConfig | None = None
    ) -> None:
        """Store a CPU tensor (dtype and shape travel with it; any dtype torch has)."""
        self.put(key, client_tensor.encode(tensor), config)

    def get_tensor(self, key: str) -> torch.Tensor:
        """Read a tensor stored by :meth:`put_tensor`.

        Raises:
            InvalidArgumentError: the object is not a tensor written by put_tensor.
        """
        return client_tensor.decode(key, self.get(key))
