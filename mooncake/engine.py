"""``mooncake.engine.TransferEngine``: upstream's Transfer Engine surface over ours.

P2P connectors (SGLang PD, vLLM's ``MooncakeConnector``) name a peer by its session id
(``host:port``) and address its memory by raw virtual address. Here every region
registered through this class is exposed by address on ``mooncake_core.transfer``'s data
plane (segment ``host:port//by-address``): the initiator sends the peer's address as
the offset and the **peer's** data plane checks that the whole range lies inside one
of its registered regions before touching memory; anything else is refused
(``request outside the target segment's bounds``) and counted in ``bounds_errors``.

Return conventions are upstream's: ``0`` or ``-1`` for calls, ``0`` for a failed
submit or allocation, batch ids from 1. Why a call failed is logged (one line, logger
``mooncake.engine``), as upstream's glog does.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import json
import logging
import mmap
import os
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from mooncake._engine_addr import HTTP, P2P, AddressMap, host_memory_ok, parse_metadata
from mooncake._engine_addr import split_hostname as _split_hostname
from mooncake_core.config.models import TransferConfig
from mooncake_core.transfer import (
    OpCode,
    TransferError,
    TransferRequest,
    TransferState,
    handshake,
)
from mooncake_core.transfer import TransferEngine as CoreEngine
from mooncake_core.transfer.batch import Batch
from mooncake_core.transfer.directory import RemoteSegment
from mooncake_core.transfer.engine import BY_ADDRESS
from mooncake_core.transfer.region import Region

__all__ = ["TransferEngine", "TransferNotify", "TransferOpcode"]

log = logging.getLogger("mooncake.engine")

SUPPORT_CUDA = False
SUPPORT_EFA = False
SUPPORT_HIP = False
SUPPORT_MNNVL = False
SUPPORT_MUSA = False
SUPPORT_INTRA_NVLINK = False

_PROTOCOLS = ("tcp", "rdma")
_METADATA_KEY = "mooncake-py/engine/"
"""Key prefix under which an engine publishes its endpoint on an HTTP metadata server."""


class TransferOpcode(enum.IntEnum):
    """Upstream's ``TransferOpcode`` (``Read``, ``Write``)."""

    Read = 0
    Write = 1


class TransferNotify:
    """Upstream's notify record (``name``, ``msg``); notifications are not sent here."""

    def __init__(self, name: str = "", msg: str = "") -> None:
        self.name = name
        self.msg = msg


class _Failed(Exception):
    """A call failed; the message is logged and the caller returns upstream's code."""


def _secret() -> bytes | None:
    path = os.environ.get("MOONCAKE_SECRET_FILE")
    if not path:
        return None
    from pathlib import Path

    from mooncake_core.store.auth import read_secret

    return read_secret(Path(path).expanduser())


def _read_maps() -> str:
    try:
        with open("/proc/self/maps") as f:
            return f.read()
    except OSError:
        return ""


class TransferEngine:
    """Upstream's ``mooncake.engine.TransferEngine`` (see the module docstring)."""

    def __init__(self) -> None:
        self._core: CoreEngine | None = None
        self._name = ""
        self._kind = P2P
        self._metadata_url = ""
        self._secret: bytes | None = None
        self._lock = threading.Lock()
        self._local: AddressMap[Region] = AddressMap()
        self._order: list[int] = []  # region starts, registration order
        self._managed: dict[int, mmap.mmap] = {}
        self._peers: dict[str, RemoteSegment] = {}
        self._batches: dict[int, Batch] = {}
        self._batch_ids = itertools.count(1)

    # ------------------------------------------------------------------ lifecycle

    def initialize(
        self, local_hostname: str, metadata_server: str, protocol: str, device_name: str
    ) -> int:
        """Start the engine. 0, or -1 (logged) when it cannot."""
        return self.initialize_ext(local_hostname, metadata_server, protocol, device_name, "")

    def initialize_ext(
        self,
        local_hostname: str,
        metadata_server: str,
        protocol: str,
        device_name: str,
        metadata_type: str,
    ) -> int:
        """``initialize`` with the metadata type given apart (``"http"``, ``"p2p"``)."""
        try:
            self._initialize(local_hostname, metadata_server, protocol, metadata_type)
        except (_Failed, ValueError, TransferError, OSError) as exc:
            log.error("initialize(%r): %s", local_hostname, exc)
            return -1
        return 0

    def _initialize(
        self, local_hostname: str, metadata_server: str, protocol: str, metadata_type: str
    ) -> None:
        if self._core is not None:
            raise _Failed("already initialized")
        kind, url = parse_metadata(metadata_server, metadata_type or None)
        proto = (protocol or "tcp").lower()
        if proto not in _PROTOCOLS:
            raise _Failed(f"protocol {protocol!r} is not served here (use tcp or rdma)")
        if proto == "rdma":
            log.warning("protocol rdma: served by our tcp transport here")
        host, port = _split_hostname(local_hostname)
        nic = "127.0.0.1" if host == "localhost" else socket.gethostbyname(host)
        bind_port = port if port and os.environ.get("MC_LEGACY_RPC_PORT_BINDING") else 0
        self._secret = _secret()
        core = CoreEngine(
            TransferConfig(protocol="tcp"), nics=(nic,), port=bind_port, secret=self._secret
        )
        core.start()
        self._core = core
        self._kind, self._metadata_url = kind, url
        self._name = f"{host}:{self.get_rpc_port()}" if kind == P2P else local_hostname
        if kind == HTTP:
            try:
                self._http("PUT", self._name, json.dumps({"endpoint": core.segment_name}).encode())
            except _Failed:
                core.close()
                self._core = None
                raise

    def close(self) -> None:
        """Ours: stop the engine and withdraw its metadata entry (upstream: destructor)."""
        core, self._core = self._core, None
        if core is None:
            return
        if self._kind == HTTP:
            with contextlib.suppress(_Failed):
                self._http("DELETE", self._name)
        core.close()
        for buf in self._managed.values():
            with contextlib.suppress(BufferError):
                buf.close()
        self._managed.clear()

    def get_rpc_port(self) -> int:
        """Port of this engine's data server (peers use ``host:port``); -1 if not started."""
        if self._core is None:
            return -1
        return int(self._core.segment_name.rpartition(":")[2])

    def get_engine(self) -> CoreEngine | None:
        """Ours: the ``mooncake_core`` engine underneath (upstream: its C++ engine)."""
        return self._core

    def get_local_topology(self, device_name: str | None = None) -> str:
        """Upstream's topology JSON; no RDMA devices here, so ``"{}"``."""
        return "{}"

    def get_notifies(self) -> list[TransferNotify]:
        """Notifications are not sent here: always empty."""
        return []

    def warmup_efa_segment(self, segment_name: str) -> int:
        """No EFA here: nothing to warm up (0, as upstream without EFA)."""
        return 0

    # ------------------------------------------------------------------ memory

    def _need(self) -> CoreEngine:
        if self._core is None:
            raise _Failed("engine not initialized (call initialize first)")
        return self._core

    def register_memory(self, buffer_addr: int, capacity: int, location: str = "*") -> int:
        """Register ``[buffer_addr, +capacity)`` for transfers and expose it by address."""
        try:
            self._register(buffer_addr, capacity, location)
        except (_Failed, TransferError, ValueError) as exc:
            log.error("register_memory(%#x, %d): %s", buffer_addr, capacity, exc)
            return -1
        return 0

    def _register(self, addr: int, n: int, location: str, obj: Any = None) -> Region:
        core = self._need()
        if location.startswith(("cuda", "musa", "npu")):
            raise _Failed(f"location {location!r}: GPU memory needs a CUDA transport (none here)")
        if obj is None and not host_memory_ok(addr, n, _read_maps()):
            raise _Failed(
                "not readable and writable host memory of this process "
                "(a GPU pointer? no CUDA transport here)"
            )
        with self._lock:
            if obj is None and self._local.find(addr, 0) is not None:
                raise _Failed("already registered (inside a registered region)")
            region = core.register_memory(
                obj if obj is not None else addr, n if obj is None else None, by_address=True
            )
            try:
                self._local.add(region.address, region.length, region)
            except ValueError:
                core.unregister_memory(region)
                raise
            self._order.append(region.address)
        return region

    def unregister_memory(self, buffer_addr: int) -> int:
        """Unregister the region starting at ``buffer_addr``; peers can no longer reach it."""
        try:
            self._unregister(buffer_addr)
        except (_Failed, TransferError) as exc:
            log.error("unregister_memory(%#x): %s", buffer_addr, exc)
            return -1
        return 0

    def _unregister(self, addr: int) -> None:
        core = self._need()
        with self._lock:
            region = self._local.get(addr)
            if region is None:
                raise _Failed("no registered region starts here")
            core.unregister_memory(region)  # refused while transfers on it are in flight
            self._local.remove(addr)
            self._order.remove(addr)

    def batch_register_memory(
        self, buffer_addresses: Sequence[int], capacities: Sequence[int], location: str = "*"
    ) -> int:
        """Register each range; -1 (nothing left registered by this call) on any failure."""
        if len(buffer_addresses) != len(capacities):
            log.error(
                "batch_register_memory: %d addresses, %d capacities",
                len(buffer_addresses),
                len(capacities),
            )
            return -1
        done: list[int] = []
        for addr, n in zip(buffer_addresses, capacities, strict=True):
            if self.register_memory(addr, n, location) != 0:
                for a in done:
                    self.unregister_memory(a)
                return -1
            done.append(addr)
        return 0

    def batch_unregister_memory(self, buffer_addresses: Sequence[int]) -> int:
        """Unregister each; -1 if any failed (the others are still unregistered)."""
        rc = 0
        for addr in buffer_addresses:
            rc = self.unregister_memory(addr) or rc
        return rc

    def allocate_managed_buffer(self, length: int) -> int:
        """A zero-filled registered buffer of ``length`` bytes; its address, or 0."""
        try:
            if length <= 0:
                raise _Failed("length must be > 0")
            buf = mmap.mmap(-1, length)
            try:
                region = self._register(0, length, "cpu", obj=buf)
            except BaseException:
                buf.close()
                raise
        except (_Failed, TransferError, ValueError, OSError) as exc:
            log.error("allocate_managed_buffer(%d): %s", length, exc)
            return 0
        with self._lock:
            self._managed[region.address] = buf
        return region.address

    def free_managed_buffer(self, buffer_addr: int, length: int) -> int:
        """Free a buffer from ``allocate_managed_buffer``; 0, or -1."""
        with self._lock:
            buf = self._managed.get(buffer_addr)
        if buf is None:
            log.error("free_managed_buffer(%#x): not a managed buffer", buffer_addr)
            return -1
        if self.unregister_memory(buffer_addr) != 0:
            return -1
        with self._lock:
            self._managed.pop(buffer_addr, None)
        with contextlib.suppress(BufferError):
            buf.close()
        return 0

    def _local_view(self, addr: int, n: int) -> memoryview:
        with self._lock:
            hit = self._local.find(addr, n)
        if hit is None:
            raise _Failed(f"{addr:#x}+{n} is not inside memory registered with this engine")
        start, region = hit
        return region.view()[addr - start : addr - start + n]

    def write_bytes_to_buffer(self, dest_address: int, src: bytes, length: int) -> int:
        """Copy ``length`` bytes of ``src`` to registered memory; 0, or -1."""
        try:
            if length < 0 or length > len(src):
                raise _Failed(f"length {length} outside the {len(src)} bytes given")
            self._local_view(dest_address, length)[:] = memoryview(src)[:length]
        except _Failed as exc:
            log.error("write_bytes_to_buffer(%#x): %s", dest_address, exc)
            return -1
        return 0

    def read_bytes_from_buffer(self, source_address: int, length: int) -> bytes:
        """``length`` bytes of registered memory (``b""`` when outside it, logged)."""
        try:
            return bytes(self._local_view(source_address, length))
        except _Failed as exc:
            log.error("read_bytes_from_buffer(%#x): %s", source_address, exc)
            return b""

    # ------------------------------------------------------------------ peers

    def _http(self, method: str, name: str, body: bytes | None = None) -> bytes:
        q = urllib.parse.urlencode({"key": _METADATA_KEY + name})
        url = f"{self._metadata_url}{'&' if '?' in self._metadata_url else '?'}{q}"
        req = urllib.request.Request(url, data=body, method=method)
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return bytes(resp.read())
        except urllib.error.HTTPError as exc:
            raise _Failed(f"metadata server {method} {name!r}: HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise _Failed(f"metadata server {self._metadata_url} unreachable: {exc}") from None

    def _endpoint(self, target: str) -> str:
        """``host:port`` of the data server of the peer named ``target``."""
        core = self._need()
        if target == self._name:
            return str(core.segment_name)
        if self._kind == HTTP:
            try:
                return str(json.loads(self._http("GET", target))["endpoint"])
            except (ValueError, KeyError, TypeError) as exc:
                raise _Failed(f"bad metadata entry for {target!r}: {exc}") from None
        _host, port = _split_hostname(target)
        if port is None:
            raise _Failed(f"peer {target!r} is not host:port")
        return target

    def _peer(self, target: str) -> RemoteSegment:
        with self._lock:
            seg = self._peers.get(target)
        if seg is not None:
            return seg
        seg = self._need().open_segment(f"{self._endpoint(target)}/{BY_ADDRESS}")
        with self._lock:
            self._peers[target] = seg
        return seg

    def _peer_lookup(self, target: str) -> dict[str, Any]:
        host, port = _split_hostname(self._endpoint(target))
        if port is None:
            raise _Failed(f"bad endpoint for {target!r}")
        timeout = self._need().config.connect_timeout_s
        try:
            sock = handshake.connect(
                host, port, local_ip=None, secret=self._secret, timeout=timeout
            )
        except (OSError, ValueError) as exc:
            raise _Failed(f"cannot reach {target!r}: {exc}") from None
        try:
            return dict(handshake.lookup(sock, BY_ADDRESS))
        except (OSError, ValueError) as exc:
            raise _Failed(f"lookup at {target!r} failed: {exc}") from None
        finally:
            sock.close()

    def get_first_buffer_address(self, segment_name: str) -> int:
        """Address of the first region the peer (or this engine) registered; 0 if none."""
        try:
            self._need()
            if segment_name == self._name:
                with self._lock:
                    return self._order[0] if self._order else 0
            regions = self._peer_lookup(segment_name).get("regions") or []
            return int(regions[0][0]) if regions else 0
        except (_Failed, TransferError, ValueError, TypeError, IndexError) as exc:
            log.error("get_first_buffer_address(%r): %s", segment_name, exc)
            return 0

    def send_probe(self, peer_server_name: str) -> int:
        """0 if the peer answers a handshake and lookup; -1 otherwise."""
        try:
            self._peer_lookup(peer_server_name)
        except (_Failed, TransferError) as exc:
            log.error("send_probe(%r): %s", peer_server_name, exc)
            return -1
        return 0

    # ------------------------------------------------------------------ transfers

    def _submit(
        self,
        target: str,
        buffers: Sequence[int],
        peer_addresses: Sequence[int],
        lengths: Sequence[int],
        opcode: TransferOpcode | int,
    ) -> Batch:
        core = self._need()
        if not len(buffers) == len(peer_addresses) == len(lengths):
            raise _Failed(
                f"buffers, peer_buffer_addresses and lengths differ in size "
                f"({len(buffers)}, {len(peer_addresses)}, {len(lengths)})"
            )
        op = OpCode.WRITE if int(opcode) == int(TransferOpcode.Write) else OpCode.READ
        seg = self._peer(target)
        reqs = []
        with self._lock:
            for addr, peer, n in zip(buffers, peer_addresses, lengths, strict=True):
                hit = self._local.find(addr, n)
                if hit is None:
                    raise _Failed(f"local {addr:#x}+{n} is not inside registered memory")
                start, region = hit
                if peer < 0 or peer + n >= 1 << 64:
                    raise _Failed(f"peer address {peer:#x}+{n} out of range")
                reqs.append(TransferRequest(op, region, addr - start, seg, peer, n))
        batch = core.allocate_batch(max(1, len(reqs)))
        try:
            core.submit(batch, reqs)
        except TransferError:
            core.free_batch(batch)
            raise
        return batch

    def _finish(self, target: str, batch: Batch) -> None:
        """Wait for ``batch``, free it; raise _Failed with the first failure's reason."""
        core = self._need()
        statuses = core.wait(batch)
        with contextlib.suppress(TransferError):
            core.free_batch(batch)
        bad = [s for s in statuses if s.state is not TransferState.COMPLETED]
        if bad:
            reason = bad[0].reason or bad[0].state.name
            if "bounds" not in reason:
                with self._lock:
                    self._peers.pop(target, None)  # reconnect (and re-resolve) next time
            raise _Failed(f"{len(bad)} of {len(statuses)} transfers failed: {reason}")

    def _sync(
        self,
        name: str,
        target: str,
        buffers: Sequence[int],
        peers: Sequence[int],
        lengths: Sequence[int],
        opcode: TransferOpcode | int,
    ) -> int:
        try:
            self._finish(target, self._submit(target, buffers, peers, lengths, opcode))
        except (_Failed, TransferError) as exc:
            log.error("%s(%r): %s", name, target, exc)
            return -1
        return 0

    def transfer_sync_write(
        self,
        target_hostname: str,
        buffer: int,
        peer_buffer_address: int,
        length: int,
        transport_hint: str = "",
    ) -> int:
        """Write ``length`` local bytes at ``buffer`` to the peer's address; 0 or -1."""
        return self._sync(
            "transfer_sync_write",
            target_hostname,
            [buffer],
            [peer_buffer_address],
            [length],
            TransferOpcode.Write,
        )

    def transfer_sync_read(
        self,
        target_hostname: str,
        buffer: int,
        peer_buffer_address: int,
        length: int,
        transport_hint: str = "",
    ) -> int:
        """Read ``length`` bytes at the peer's address into ``buffer``; 0 or -1."""
        return self._sync(
            "transfer_sync_read",
            target_hostname,
            [buffer],
            [peer_buffer_address],
            [length],
            TransferOpcode.Read,
        )

    def transfer_sync(
        self,
        target_hostname: str,
        buffer: int,
        peer_buffer_address: int,
        length: int,
        opcode: TransferOpcode | int,
        notify: TransferNotify | None = None,
        transport_hint: str = "",
    ) -> int:
        """One transfer in direction ``opcode``; notifications are refused (-1)."""
        if notify is not None:
            log.error("transfer_sync: notifications are not supported here")
            return -1
        return self._sync(
            "transfer_sync", target_hostname, [buffer], [peer_buffer_address], [length], opcode
        )

    def batch_transfer_sync_write(
        self,
        target_hostname: str,
        buffers: Sequence[int],
        peer_buffer_addresses: Sequence[int],
        lengths: Sequence[int],
        transport_hint: str = "",
    ) -> int:
        """Write every range to the peer (one batch); 0 if all completed, else -1."""
        return self._sync(
            "batch_transfer_sync_write",
            target_hostname,
            buffers,
            peer_buffer_addresses,
            lengths,
            TransferOpcode.Write,
        )

    def batch_transfer_sync_read(
        self,
        target_hostname: str,
        buffers: Sequence[int],
        peer_buffer_addresses: Sequence[int],
        lengths: Sequence[int],
        transport_hint: str = "",
    ) -> int:
        """Read every range from the peer (one batch); 0 if all completed, else -1."""
        return self._sync(
            "batch_transfer_sync_read",
            target_hostname,
            buffers,
            peer_buffer_addresses,
            lengths,
            TransferOpcode.Read,
        )

    def batch_transfer_sync(
        self,
        target_hostname: str,
        buffers: Sequence[int],
        peer_buffer_addresses: Sequence[int],
        lengths: Sequence[int],
        opcode: TransferOpcode | int,
        notify: TransferNotify | None = None,
        transport_hint: str = "",
    ) -> int:
        """A batch in direction ``opcode``; notifications are refused (-1)."""
        if notify is not None:
            log.error("batch_transfer_sync: notifications are not supported here")
            return -1
        return self._sync(
            "batch_transfer_sync", target_hostname, buffers, peer_buffer_addresses, lengths, opcode
        )

    def batch_transfer_async(
        self,
        target_hostname: str,
        buffers: Sequence[int],
        peer_buffer_addresses: Sequence[int],
        lengths: Sequence[int],
        opcode: TransferOpcode | int,
        transport_hint: str = "",
    ) -> int:
        """Submit a batch; its id (> 0), or 0 when it could not be submitted."""
        try:
            batch = self._submit(target_hostname, buffers, peer_buffer_addresses, lengths, opcode)
        except (_Failed, TransferError) as exc:
            log.error("batch_transfer_async(%r): %s", target_hostname, exc)
            return 0
        with self._lock:
            bid = next(self._batch_ids)
            self._batches[bid] = batch
        return bid

    def batch_transfer_async_write(
        self,
        target_hostname: str,
        buffers: Sequence[int],
        peer_buffer_addresses: Sequence[int],
        lengths: Sequence[int],
        transport_hint: str = "",
    ) -> int:
        """``batch_transfer_async`` writing."""
        return self.batch_transfer_async(
            target_hostname, buffers, peer_buffer_addresses, lengths, TransferOpcode.Write
        )

    def batch_transfer_async_read(
        self,
        target_hostname: str,
        buffers: Sequence[int],
        peer_buffer_addresses: Sequence[int],
        lengths: Sequence[int],
        transport_hint: str = "",
    ) -> int:
        """``batch_transfer_async`` reading."""
        return self.batch_transfer_async(
            target_hostname, buffers, peer_buffer_addresses, lengths, TransferOpcode.Read
        )

    def transfer_submit_write(
        self,
        target_hostname: str,
        buffer: int,
        peer_buffer_address: int,
        length: int,
        transport_hint: str = "",
    ) -> int:
        """Submit one write; its batch id, or 0."""
        return self.batch_transfer_async(
            target_hostname, [buffer], [peer_buffer_address], [length], TransferOpcode.Write
        )

    def get_batch_transfer_status(self, batch_ids: Sequence[int]) -> int:
        """Wait for every batch: 0 if all completed, -1 if any failed or is unknown."""
        rc = 0
        for bid in batch_ids:
            with self._lock:
                batch = self._batches.pop(bid, None)
            if batch is None:
                log.error("get_batch_transfer_status: unknown batch id %d", bid)
                rc = -1
                continue
            try:
                self._finish("", batch)
            except (_Failed, TransferError) as exc:
                log.error("batch %d: %s", bid, exc)
                rc = -1
        return rc

    def transfer_check_status(self, batch_id: int) -> int:
        """1 completed, 0 pending, -1 failed or unknown (a finished batch is freed)."""
        core = self._need()
        with self._lock:
            batch = self._batches.get(batch_id)
        if batch is None:
            return -1
        states = [s.state for s in core.batch_status(batch)]
        if TransferState.WAITING in states:
            return 0
        with self._lock:
            self._batches.pop(batch_id, None)
        with contextlib.suppress(TransferError):
            core.free_batch(batch)
        return 1 if all(s is TransferState.COMPLETED for s in states) else -1

    # ------------------------------------------------------------------ CUDA

    def _no_cuda(self, name: str) -> None:
        raise RuntimeError(f"{name}: no CUDA transport here (CPU memory only)")

    def transfer_write_on_cuda(self, *args: Any, **kw: Any) -> None:
        """Refused: no CUDA transport here."""
        self._no_cuda("transfer_write_on_cuda")

    def transfer_read_on_cuda(self, *args: Any, **kw: Any) -> None:
        """Refused: no CUDA transport here."""
        self._no_cuda("transfer_read_on_cuda")

    def batch_transfer_write_on_cuda(self, *args: Any, **kw: Any) -> None:
        """Refused: no CUDA transport here."""
        self._no_cuda("batch_transfer_write_on_cuda")

    def batch_transfer_read_on_cuda(self, *args: Any, **kw: Any) -> None:
        """Refused: no CUDA transport here."""
        self._no_cuda("batch_transfer_read_on_cuda")
