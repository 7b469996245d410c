"""Conductor: block hashing, global prefix index, predictors, policies, admission.

Sans-IO: the live service and the simulator drive the same :class:`Conductor`
(see ``docs/conductor.md``). The audit database lives in :mod:`.audit`.
"""

from mooncake_core.conductor.admission import ADMISSIONS, AdmissionContext, make_admission
from mooncake_core.conductor.decision import (
    AdmissionResult,
    Candidate,
    Decision,
    JoinResult,
    Migration,
    ScheduleRequest,
)
from mooncake_core.conductor.events import BlockRemoved, BlockStored, CacheEvent, Tier
from mooncake_core.conductor.hashing import (
    TRACE_BLOCK_SIZE,
    BlockHasher,
    block_store_key,
    keys_from_trace,
    parse_block_store_key,
)
from mooncake_core.conductor.index import IndexSnapshot, PrefixIndex, PrefixMatch
from mooncake_core.conductor.network import NetworkModel, NetworkSnapshot
from mooncake_core.conductor.options import (
    ConductorOptions,
    default_decode_model,
    default_prefill_model,
)
from mooncake_core.conductor.policies import POLICIES, AdaptiveOptions, Policy, make_policy
from mooncake_core.conductor.predictors import (
    DecodeStepModel,
    FitReport,
    PrefillPoint,
    PrefillTimeModel,
    StepPoint,
)
from mooncake_core.conductor.scheduler import Conductor
from mooncake_core.conductor.snapshot import ConductorSnapshot
from mooncake_core.conductor.state import DecodeInstanceState, PrefillInstanceState

__all__ = [
    "ADMISSIONS",
    "POLICIES",
    "TRACE_BLOCK_SIZE",
    "AdaptiveOptions",
    "AdmissionContext",
    "AdmissionResult",
    "BlockHasher",
    "BlockRemoved",
    "BlockStored",
    "CacheEvent",
    "Candidate",
    "Conductor",
    "ConductorOptions",
    "ConductorSnapshot",
    "Decision",
    "DecodeInstanceState",
    "DecodeStepModel",
    "FitReport",
    "IndexSnapshot",
    "JoinResult",
    "Migration",
    "NetworkModel",
    "NetworkSnapshot",
    "Policy",
    "PrefillInstanceState",
    "PrefillPoint",
    "PrefillTimeModel",
    "PrefixIndex",
    "PrefixMatch",
    "ScheduleRequest",
    "StepPoint",
    "Tier",
    "block_store_key",
    "default_decode_model",
    "default_prefill_model",
    "keys_from_trace",
    "make_admission",
    "make_policy",
    "parse_block_store_key",
]
