"""Transfer-time prediction from the *current* bandwidth and load of the NICs on a path.

Every location (a prefill instance or a store node) has NICs with a measured bandwidth
(bytes/s, updated by whoever measures it: the Transfer Engine's per-NIC counters in the
live service, the simulator's link model otherwise). A location's usable bandwidth is the
sum of its NICs' (the Transfer Engine spreads slices over all of them).

Load is a fluid backlog per location: bytes committed to its NICs that have not gone out
yet. It grows when a transfer is committed or measured and drains at the location's
bandwidth as time passes, so it stays sane even when completion reports are late or lost.
A new transfer of ``b`` bytes from ``s`` to ``d`` is predicted to take::

    latency + max((backlog_s + b) / bw_s, (backlog_d + b) / bw_d, b / bw_tier)

i.e. it waits behind what both ends already carry (the FIFO bound of a shared link) and
never beats the source tier's read rate (SSD is slower than DRAM).

Where a location's bandwidth comes from (``bandwidth_source``): ``configured`` when
someone set its NICs (the simulator's link model, a topology), else ``measured`` once a
finished transfer of at least ``min_measured_bytes`` touched it (``observe_transfer``:
the live Conductor feeds it every fetch the prefill workers time), else ``default``.
A measurement is a rate on a path that may have been shared, so the estimate is a
decaying maximum: a faster sample raises it at once; toward slower samples it falls by
half every ``measured_half_life_s`` (a NIC that really slowed is believed within a few
half-lives; one transfer slowed by contention, which the backlog already prices, is not
taken for the NIC's speed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from mooncake_core.conductor.events import Tier

__all__ = ["LinkSnapshot", "NetworkModel", "NetworkSnapshot"]


@dataclass(frozen=True, slots=True)
class LinkSnapshot:
    """One location's NIC view: bandwidth in bytes/s and backlog in bytes at ``now``;
    ``source`` says where the bandwidth came from (``configured``, ``measured`` or
    ``default``)."""

    location: str
    bandwidth_bps: float
    backlog_bytes: float
    source: str = "configured"


@dataclass(frozen=True, slots=True)
class NetworkSnapshot:
    """All locations' NIC views at one instant."""

    now: float
    links: tuple[LinkSnapshot, ...]


def _positive(value: float, what: str) -> float:
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{what} must be a positive finite number, got {value!r}")
    return v


class NetworkModel:
    """Per-location NIC bandwidth and backlog; predicts transfer times.

    Args:
        default_bandwidth_bps: bandwidth of a location nobody measured yet (bytes/s).
        latency_s: fixed per-transfer setup cost.
        tier_read_bps: read rate of a source tier, where slower than the network.
        min_measured_bytes: transfers smaller than this teach nothing (their time is
            mostly fixed costs, not bandwidth).
        measured_half_life_s: how fast a measured estimate follows slower samples.

    Raises:
        ValueError: a non-positive bandwidth or a negative latency.
    """

    def __init__(
        self,
        default_bandwidth_bps: float = 12.5e9,
        latency_s: float = 0.0,
        tier_read_bps: Mapping[Tier, float] | None = None,
        min_measured_bytes: float = 1 << 20,
        measured_half_life_s: float = 60.0,
    ) -> None:
        self.default_bandwidth_bps = _positive(default_bandwidth_bps, "default_bandwidth_bps")
        if not math.isfinite(latency_s) or latency_s < 0:
            raise ValueError(f"latency_s must be >= 0, got {latency_s!r}")
        self.latency_s = float(latency_s)
        self._tier_bw = {
            Tier(t): _positive(v, f"tier_read_bps[{t}]") for t, v in (tier_read_bps or {}).items()
        }
        self.min_measured_bytes = float(min_measured_bytes)
        self.measured_half_life_s = _positive(measured_half_life_s, "measured_half_life_s")
        self._nics: dict[str, dict[str, float]] = {}
        # Configured (sum of NICs) or measured bandwidth, one dict for the hot lookups.
        self._bw: dict[str, float] = {}
        self._measured: dict[str, tuple[float, float, int]] = {}  # loc -> (bps, at, samples)
        self._backlog: dict[str, tuple[float, float]] = {}

    def set_bandwidth(self, location: str, nic: str, bytes_per_s: float) -> None:
        """Record the measured bandwidth of one NIC of ``location``.

        Raises:
            ValueError: a non-positive or non-finite bandwidth (nothing is changed).
        """
        bw = _positive(bytes_per_s, f"bandwidth of {location}/{nic}")
        self._nics.setdefault(location, {})[nic] = bw
        self._bw[location] = sum(self._nics[location].values())

    def remove_nic(self, location: str, nic: str) -> None:
        """Forget a NIC (it went down); the location falls back to its other NICs."""
        nics = self._nics.get(location)
        if nics and nic in nics:
            del nics[nic]
            if nics:
                self._bw[location] = sum(nics.values())
            else:
                del self._nics[location]
                del self._bw[location]
                m = self._measured.get(location)
                if m is not None:
                    self._bw[location] = m[0]

    def bandwidth(self, location: str) -> float:
        """Usable bandwidth of ``location`` in bytes/s."""
        return self._bw.get(location, self.default_bandwidth_bps)

    def bandwidth_source(self, location: str) -> str:
        """``configured``, ``measured`` or ``default``: where :meth:`bandwidth` comes from."""
        if location in self._nics:
            return "configured"
        return "measured" if location in self._measured else "default"

    def measured_samples(self, location: str) -> int:
        """How many transfers taught ``location``'s measured bandwidth (0: none)."""
        m = self._measured.get(location)
        return m[2] if m is not None else 0

    def observe_transfer(
        self, source: str, target: str, nbytes: float, seconds: float, now: float
    ) -> float | None:
        """Learn from a finished transfer: its rate teaches both ends' bandwidth.

        Only ends without configured NICs learn (a configured bandwidth is the truth
        the operator or the simulator gave). Returns the sample's rate in bytes/s, or
        ``None`` when it taught nothing (too small, same location, or a time that is
        not a positive finite number).
        """
        if (
            source == target
            or not math.isfinite(nbytes)
            or nbytes < self.min_measured_bytes
            or not math.isfinite(seconds)
            or seconds <= 0
        ):
            return None
        # The fixed per-transfer cost is not bandwidth (kept when it would leave little).
        busy = seconds - self.latency_s if seconds > 2 * self.latency_s else seconds
        rate = nbytes / busy
        for loc in (source, target):
            if loc in self._nics:
                continue
            prev = self._measured.get(loc)
            if prev is None:
                est, n = rate, 1
            else:
                bps, at, n = prev
                decayed = bps * 0.5 ** (max(now - at, 0.0) / self.measured_half_life_s)
                est, n = (rate if rate > decayed else decayed), n + 1
            self._measured[loc] = (est, now, n)
            self._bw[loc] = est
        return rate

    def backlog(self, location: str, now: float) -> float:
        """Bytes still queued on ``location``'s NICs at ``now``."""
        entry = self._backlog.get(location)
        if entry is None:
            return 0.0
        nbytes, at = entry
        elapsed = now - at if now > at else 0.0
        left = nbytes - self._bw.get(location, self.default_bandwidth_bps) * elapsed
        return left if left > 0.0 else 0.0

    def observe_backlog(self, location: str, nbytes: float, now: float) -> None:
        """Replace ``location``'s backlog with a measured in-flight byte count.

        Raises:
            ValueError: a negative or non-finite byte count.
        """
        if not math.isfinite(nbytes) or nbytes < 0:
            raise ValueError(f"in-flight bytes must be >= 0, got {nbytes!r}")
        self._backlog[location] = (float(nbytes), now)

    def add_transfer(self, source: str, target: str, nbytes: float, now: float) -> None:
        """Commit a transfer: both ends carry ``nbytes`` more.

        Raises:
            ValueError: a negative or non-finite byte count.
        """
        if not math.isfinite(nbytes) or nbytes < 0:
            raise ValueError(f"transfer size must be >= 0 bytes, got {nbytes!r}")
        for loc in {source, target}:
            self._backlog[loc] = (self.backlog(loc, now) + nbytes, now)

    def cancel_transfer(self, source: str, target: str, nbytes: float, now: float) -> None:
        """Take back a committed transfer that will not run (its request was dropped)."""
        if not math.isfinite(nbytes) or nbytes <= 0:
            return
        for loc in {source, target}:
            if loc in self._backlog:
                self._backlog[loc] = (max(self.backlog(loc, now) - nbytes, 0.0), now)

    def source_time(
        self, source: str, nbytes: float, now: float, tier: Tier | None = None
    ) -> float:
        """Seconds the source side needs for ``nbytes``: its NIC backlog, or its tier's read rate."""
        t = (self.backlog(source, now) + nbytes) / self._bw.get(source, self.default_bandwidth_bps)
        if tier is not None:
            bw_tier = self._tier_bw.get(tier)
            if bw_tier is not None and nbytes / bw_tier > t:
                t = nbytes / bw_tier
        return t

    def sink_time(self, target: str, nbytes: float, now: float) -> float:
        """Seconds the target side needs to take in ``nbytes`` behind its NIC backlog."""
        bw = self._bw.get(target, self.default_bandwidth_bps)
        entry = self._backlog.get(target)
        if entry is not None:
            # backlog(), inlined: this runs once per candidate instance per decision.
            queued, at = entry
            queued -= bw * (now - at if now > at else 0.0)
            if queued > 0.0:
                nbytes += queued
        return nbytes / bw

    def transfer_time(
        self, source: str, target: str, nbytes: float, now: float, tier: Tier | None = None
    ) -> float:
        """Predicted seconds to move ``nbytes`` from ``source`` to ``target`` starting at ``now``.

        Equals ``latency + max(source_time, sink_time)`` between distinct locations.

        Args:
            source: holder location.
            target: fetching location.
            nbytes: bytes to move; 0 costs nothing.
            now: current time.
            tier: source tier, whose read rate bounds the transfer.
        """
        if nbytes <= 0:
            return 0.0
        if source == target:
            # Local tier promotion (e.g. SSD -> HBM on the same host): no NIC on the path.
            bw_tier = self._tier_bw.get(tier) if tier is not None else None
            return nbytes / bw_tier if bw_tier else 0.0
        t_src = self.source_time(source, nbytes, now, tier)
        t_dst = self.sink_time(target, nbytes, now)
        return self.latency_s + (t_src if t_src > t_dst else t_dst)

    def snapshot(self, now: float) -> NetworkSnapshot:
        """Bandwidth and backlog of every known location at ``now``."""
        locs = sorted(set(self._bw) | set(self._backlog))
        return NetworkSnapshot(
            now,
            tuple(
                LinkSnapshot(
                    loc, self.bandwidth(loc), self.backlog(loc, now), self.bandwidth_source(loc)
                )
                for loc in locs
            ),
        )
