"""The tables of the master's core, in one object the rule modules work on. Sans-IO.

:class:`MasterCore` holds the configuration and every table (segments, objects, replica
moves, held ranges, pins, SSD tier work, counters) plus the events emitted since the
last :meth:`~MasterCore.take_events`. The rule modules (:mod:`.segments`,
:mod:`.writes`, ...) are functions taking a ``MasterCore``; each table is a small object
with its own methods (:mod:`.tables`, :mod:`.tier_book`, :mod:`..segment_table`,
:mod:`..pins`). :class:`~.state.MasterState` adds the public operations on top.
"""

from __future__ import annotations

import random

from mooncake_core.config.models import MasterConfig

from .. import events as ev
from ..eviction import EvictionPolicy, LruEviction
from ..objects import PinLevel
from ..pins import PinTable
from ..segment_table import SegmentTable
from ..strategies import make_strategy
from .tables import GrantTable, HeldRanges, MasterCounters, ObjectTable, ReplicaMoves
from .tier_book import TierBook


class MasterCore:
    """Configuration, tables and pending events of the master.

    Args:
        config: master settings (TTLs, watermark, limits, strategy).
        rng: randomness for the ``random`` strategy; inject a seeded one in tests.
        alignment: allocation alignment inside segments (a power of two).
        eviction: eviction policy (default LRU).
    """

    def __init__(
        self,
        config: MasterConfig | None = None,
        *,
        rng: random.Random | None = None,
        alignment: int = 64,
        eviction: EvictionPolicy | None = None,
    ) -> None:
        self.config = config or MasterConfig()
        self.rng = rng if rng is not None else random.Random(0)
        self.strategy = make_strategy(self.config.allocation_strategy, self.rng)
        self.eviction: EvictionPolicy = eviction or LruEviction()
        self.objects = ObjectTable()
        """Every object, least recently used first."""
        self.moves = ReplicaMoves()
        """Replicas being added, and dropped ones waiting for a lease to end."""
        self.held = HeldRanges()
        """Freed ranges kept for readers (docs/store.md, "Reads never see reclaimed bytes")."""
        hb = self.config.heartbeat_interval_s
        # Suspect after missing one heartbeat by half an interval; a reported node only
        # clears itself with a heartbeat sent after the report.
        self.segments = SegmentTable(alignment, suspect_after_s=1.5 * hb, report_hold_s=hb)
        self.expiry_hold_until = float("-inf")
        """No client is expired before this time of the core's clock (a new HA leader
        gives every client it restored time to find it: ``hold_expiry``)."""
        self.pins = PinTable()
        self.grants = GrantTable()
        """Space handed to writers ahead of their next put (:mod:`.grants`)."""
        self.events: list[ev.Event] = []
        """Emitted since the last :meth:`take_events`, oldest first."""
        self.counters = MasterCounters()
        self.tier = TierBook()
        """SSD tier work in flight (:mod:`.tier_book`)."""
        self.ssd_only: set[str] = set()
        """Complete objects with no DRAM replica, only SSD copies."""

    def take_events(self) -> list[ev.Event]:
        """Return and clear the events emitted since the last call, oldest first."""
        out, self.events = self.events, []
        return out

    def pin_level(self, key: str, now: float) -> PinLevel:
        """Effective pin level of ``key`` (key pin or any covering prefix pin)."""
        return self.pins.level(key, now)[0]
