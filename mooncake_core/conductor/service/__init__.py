"""Live conductor: the sans-IO Conductor driven by real workers and an HTTP front door.

See ``docs/serving.md``. The HTTP adapter is in ``mooncake_web/frontdoor`` (this package
must not import FastAPI).
"""

from mooncake_core.conductor.service.frontdoor import (
    CompletionChunk,
    CompletionRequest,
    CompletionStream,
    FrontDoor,
    FrontDoorStats,
    Rejected,
    ServingError,
    tbt_of,
)
from mooncake_core.conductor.service.links import LoadReport, WorkerLink
from mooncake_core.conductor.service.service import (
    ConductorService,
    ConductorServiceOptions,
    kv_bytes_per_token,
)

__all__ = [
    "CompletionChunk",
    "CompletionRequest",
    "CompletionStream",
    "ConductorService",
    "ConductorServiceOptions",
    "FrontDoor",
    "FrontDoorStats",
    "LoadReport",
    "Rejected",
    "ServingError",
    "WorkerLink",
    "kv_bytes_per_token",
    "tbt_of",
]
