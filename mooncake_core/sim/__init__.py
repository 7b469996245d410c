"""Trace replay and discrete-event simulation of a Mooncake cluster around the real Conductor.

``load_trace`` reads the public trace format; ``simulate`` (or :class:`Simulator`) replays
it through the same :class:`~mooncake_core.conductor.scheduler.Conductor` the live service
uses, with prefill/decode instances, LRU prefix caches and NIC contention played by a
calibrated cost model (``load_profile``). Experiments reproducing the paper live in
:mod:`mooncake_core.sim.experiments`.
"""

from mooncake_core.sim.bound import lower_bound_avg_ttft, lower_bound_ttfts
from mooncake_core.sim.config import SimConfig, set_field
from mooncake_core.sim.costmodel import (
    CostModel,
    available_profiles,
    fit_causal_prefill,
    load_profile,
)
from mooncake_core.sim.engine import Simulator, simulate
from mooncake_core.sim.results import (
    LoadSample,
    RequestResult,
    SimResult,
    Summary,
    worst_decile_mean,
)
from mooncake_core.sim.trace import (
    Sample,
    TraceError,
    TraceRequest,
    load_trace,
    parse_sample,
    parse_trace,
)

__all__ = [
    "CostModel",
    "LoadSample",
    "RequestResult",
    "Sample",
    "SimConfig",
    "SimResult",
    "Simulator",
    "Summary",
    "TraceError",
    "TraceRequest",
    "available_profiles",
    "fit_causal_prefill",
    "load_profile",
    "load_trace",
    "lower_bound_avg_ttft",
    "lower_bound_ttfts",
    "parse_sample",
    "parse_trace",
    "set_field",
    "simulate",
    "worst_decile_mean",
]
