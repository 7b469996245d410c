"""The store master's metadata core (sans-IO): segments, objects, leases, pins, replica
moves, eviction and the SSD tier's bookkeeping.

:class:`MasterState` is the public API; the gRPC service (``..master_service``) and the
tests drive it. The layout, lowest first (each module imports only those below it; the
import-linter contracts in ``pyproject.toml`` keep it so)::

    tables, tier_book   small tables that own their data
    core                MasterCore: config + every table + pending events
    space               release a range now or hold it for readers
    replicas            replica moves            (+ ReplicasApi)
    removal             the one way out: drop    (+ RemovalApi)
    eviction            allocate, evict rounds, evict to SSD
    tier                SSD tier rules           (tier_api: TierApi)
    segments, writes,   mount/unmount/drain, PutStart..PutEnd, rebuild at exact ranges
    restore             (+ SegmentsApi, WritesApi, RestoreApi)
    state               MasterState = MasterCore + the *Api classes + reads, pins, tick
    undo                take back a change the journal refused
"""

from .core import MasterCore
from .restore import RebuildError, RestoredObject
from .segments import MAX_SEGMENT_CAPACITY, MAX_SSD_CAPACITY, MAX_TOTAL_CAPACITY
from .state import MasterState
from .tier_book import PendingStage, StagePending

__all__ = [
    "MAX_SEGMENT_CAPACITY",
    "MAX_SSD_CAPACITY",
    "MAX_TOTAL_CAPACITY",
    "MasterCore",
    "MasterState",
    "PendingStage",
    "RebuildError",
    "RestoredObject",
    "StagePending",
]
