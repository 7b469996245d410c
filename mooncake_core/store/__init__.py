"""Mooncake Store: the master's sans-IO metadata core, its gRPC service and client.

See ``docs/store.md`` for the semantics (leases, pins, eviction, segment states, events).
The service and client modules (``master_service``, ``client/``) import grpc and are
not re-exported here, so importing the core stays light.
"""

from typing import TYPE_CHECKING

from .allocator import OffsetAllocator
from .errors import (
    AuthError,
    CapacityError,
    ConflictError,
    ErrorCode,
    InvalidArgumentError,
    NotFoundError,
    StoreError,
    UnavailableError,
    error_from_code,
)
from .events import (
    ClientExpired,
    Event,
    ObjectPinned,
    ObjectRemoved,
    ObjectStored,
    ObjectUnpinned,
    RemoveReason,
    ReplicaAdded,
    ReplicaDropped,
    SegmentMounted,
    SegmentStateChanged,
    SegmentUnmounted,
    UnmountReason,
)
from .eviction import EVICTION_POLICIES, EvictionPlan, EvictionPolicy, LruEviction
from .master import MasterState
from .objects import ObjectInfo, ObjectState, PinLevel, Replica, Slice
from .pins import Pin
from .results import (
    GetResult,
    KeyEntry,
    ListKeysResult,
    MasterSnapshot,
    RemoveManyResult,
    ReplicateConfig,
)
from .segment import SegmentSnapshot, SegmentState
from .strategies import STRATEGIES, AllocationStrategy, AllocContext, make_strategy

if TYPE_CHECKING:
    from .client import Client
    from .client.options import ClientOptions, SegmentSpec


def __getattr__(name: str) -> object:
    # The store Client imports grpc and the Transfer Engine: load it on first use so
    # importing the core stays light.
    if name in ("Client", "ClientOptions", "SegmentSpec"):
        from .client import client, options

        return getattr(client if name == "Client" else options, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EVICTION_POLICIES",
    "STRATEGIES",
    "AllocContext",
    "AllocationStrategy",
    "AuthError",
    "CapacityError",
    "Client",
    "ClientExpired",
    "ClientOptions",
    "ConflictError",
    "ErrorCode",
    "Event",
    "EvictionPlan",
    "EvictionPolicy",
    "GetResult",
    "InvalidArgumentError",
    "KeyEntry",
    "ListKeysResult",
    "LruEviction",
    "MasterSnapshot",
    "MasterState",
    "NotFoundError",
    "ObjectInfo",
    "ObjectPinned",
    "ObjectRemoved",
    "ObjectState",
    "ObjectStored",
    "ObjectUnpinned",
    "OffsetAllocator",
    "Pin",
    "PinLevel",
    "RemoveManyResult",
    "RemoveReason",
    "Replica",
    "ReplicaAdded",
    "ReplicaDropped",
    "ReplicateConfig",
    "SegmentMounted",
    "SegmentSnapshot",
    "SegmentSpec",
    "SegmentState",
    "SegmentStateChanged",
    "SegmentUnmounted",
    "Slice",
    "StoreError",
    "UnavailableError",
    "UnmountReason",
    "error_from_code",
    "make_strategy",
]
