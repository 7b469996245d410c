"""Leader election through an etcd lease, follower catch-up and promotion.

Each master runs one :class:`HaController` beside its (not yet serving) service::

    grant lease (TTL lease_ttl_s) ── keepalive every TTL/3 ──────────────────────────┐
    recovering: tail the etcd log into an image until caught up                       │
    follower:   leader key exists? ── yes: remember it (NOT_LEADER names it), tail ───┤
                                  └─ no:  catch up, create the key on our lease       │
                                          won: catch up again, build the core,        │
                                               serve as leader, journal into etcd     │
    leader:     keepalive fails for a whole TTL, or a fenced write fails: step down ──┘
                (the process exits; a supervisor restarts it as a follower)

The leader key disappears when the leader's lease expires (TTL after it died), so
failover takes about ``lease_ttl_s`` plus one poll plus the final catch-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .durable import no_gc
from .etcd import EtcdClient
from .rebuild import build_state
from .replication import EtcdLog, HaKeys, LogFollower

if TYPE_CHECKING:
    from ..master_service import MasterService

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HaOptions:
    """How a master takes part in the election."""

    endpoint: str
    """etcd client URL, ``http://host:port``."""
    member_id: str
    """This master's name (unique in the cluster)."""
    cluster: str = "default"
    """Cluster name: masters of one cluster share ``/mooncake/<cluster>/master/``."""
    lease_ttl_s: int = 3
    """Leader lease; a dead leader is replaced about this long after it stops."""
    poll_s: float = 0.1
    """How often a follower looks at the leader key and the log."""
    snapshot_every: int = 50_000
    """Leader compacts the etcd log into a snapshot after this many records."""


def parse_ha_url(url: str) -> str:
    """``etcd://host:port`` (or ``http://host:port``) to an etcd client URL.

    Raises:
        ValueError: another scheme, or no host.
    """
    for scheme in ("etcd://", "http://"):
        if url.startswith(scheme):
            rest = url[len(scheme) :].strip("/")
            if rest:
                return f"http://{rest}"
    raise ValueError(f"--ha wants etcd://HOST:PORT, got {url!r}")


class HaController:
    """Runs the election for one master and promotes its service when it wins.

    Args:
        service: the master service (constructed with ``role="recovering"``).
        options: etcd endpoint, ids, timings.
        address: this master's gRPC ``host:port`` (published in the leader key).
        metrics_address: its HTTP ``host:port``.
    """

    def __init__(
        self, service: MasterService, options: HaOptions, address: str, metrics_address: str
    ) -> None:
        self._svc = service
        self.options = options
        self._address = address
        self._metrics = metrics_address
        self._etcd = EtcdClient(options.endpoint, timeout_s=max(1.0, options.lease_ttl_s / 2))
        self._keys = HaKeys(options.cluster)
        self._follower = LogFollower(self._etcd, self._keys)
        self._lease = 0
        self._tasks: list[asyncio.Task[None]] = []
        self.deposed = asyncio.Event()
        """Set when this master must stop (lost leadership); the process should exit."""
        self.became_leader_at: float | None = None
        self._last_sync: float | None = None
        self._leader: dict[str, Any] | None = None
        service.ha_info = self.info

    # ------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Grant the lease and start campaigning (returns at once).

        Raises:
            EtcdError: etcd is unreachable.
        """
        sent = time.monotonic()
        self._lease = await self._etcd.lease_grant(self.options.lease_ttl_s)
        self._svc.lease_until = sent + self.options.lease_ttl_s
        self._tasks = [
            asyncio.create_task(self._keepalive(), name="ha-keepalive"),
            asyncio.create_task(self._run(), name="ha-election"),
        ]

    async def stop(self) -> None:
        """Stop campaigning and give up the lease (a follower takes over at once)."""
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        with contextlib.suppress(Exception):
            await self._etcd.lease_revoke(self._lease)
        await self._etcd.close()

    def info(self) -> dict[str, Any]:
        """Readiness fields for /health and /snapshot."""
        caught_up = self._last_sync is not None and time.monotonic() - self._last_sync < max(
            1.0, 5 * self.options.poll_s
        )
        out: dict[str, Any] = {
            "ha": True,
            "member_id": self.options.member_id,
            "applied_seq": self._follower.image.applied_seq,
            "caught_up": self._svc.role == "leader" or (self._svc.role == "follower" and caught_up),
        }
        if self._leader is not None and self._svc.role != "leader":
            out["leader_id"] = self._leader.get("id")
            out["leader_address"] = self._leader.get("address")
        return out

    # ------------------------------------------------------------------ loop
    async def _keepalive(self) -> None:
        period = self.options.lease_ttl_s / 3
        last_ok = time.monotonic()
        while True:
            await asyncio.sleep(period)
            sent = time.monotonic()
            try:
                ttl = await self._etcd.lease_keepalive(self._lease)
            except Exception as exc:
                log.warning("etcd lease keepalive failed: %s", exc)
                ttl = -1
            now = time.monotonic()
            if ttl > 0:
                # etcd restarted the countdown after it got the request: the lease
                # surely lives until sent + ttl (what the service serves reads under).
                last_ok = sent
                self._svc.lease_until = sent + min(ttl, self.options.lease_ttl_s)
                continue
            expired = ttl == 0 or now - last_ok >= self.options.lease_ttl_s
            if not expired:
                continue
            if self._svc.role == "leader":
                self._depose("the leader lease expired")
                return
            with contextlib.suppress(Exception):  # a follower just needs a new lease
                sent = time.monotonic()
                self._lease = await self._etcd.lease_grant(self.options.lease_ttl_s)
                last_ok = sent
                self._svc.lease_until = sent + self.options.lease_ttl_s

    def _depose(self, reason: str) -> None:
        self._svc.step_down(reason)
        self.deposed.set()

    async def _run(self) -> None:
        me = json.dumps(
            {"id": self.options.member_id, "address": self._address, "metrics": self._metrics}
        ).encode()
        while True:
            try:
                if await self._round(me):
                    return
            except Exception as exc:  # etcd hiccup: stay a follower and retry
                log.warning("HA round failed: %s", exc)
            await asyncio.sleep(self.options.poll_s)

    async def _round(self, me: bytes) -> bool:
        kv = await self._etcd.get(self._keys.leader)
        if kv is not None:
            leader = json.loads(kv.value)
            self._leader = leader
            self._svc.leader_hint = (str(leader.get("id")), str(leader.get("address")))
            await self._sync()
            if self._svc.role == "recovering":
                self._svc.role = "follower"
            return False
        await self._sync()
        rev = await self._etcd.create(self._keys.leader, me, lease=self._lease)
        if rev is None:
            return False
        # Won. The old leader's last fenced writes landed before its key vanished.
        await self._sync()
        image = self._follower.image
        with no_gc():
            state = build_state(image, self._svc.config, self._svc.now(), time.time())
        sink = EtcdLog(
            self._etcd,
            self._keys,
            rev,
            image.applied_seq,
            lambda: self._depose("a replicated write was fenced off"),
        )
        sink.snapshot_every = self.options.snapshot_every
        await self._svc.become_leader(state, sink, image)
        self.became_leader_at = time.monotonic()
        self._leader = None
        log.info(
            "elected leader %s at seq %d (%d objects, %d segments)",
            self.options.member_id,
            image.applied_seq,
            len(image.objects),
            len(image.segments),
        )
        return True

    async def _sync(self) -> None:
        await self._follower.sync()
        self._last_sync = time.monotonic()
