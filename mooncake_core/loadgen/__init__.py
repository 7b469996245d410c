"""Load generator: replay a (scaled) trace or a synthetic workload against the front door.

See ``docs/serving.md`` ("Load generator").
"""

from mooncake_core.loadgen.report import LoadReport, RequestResult, percentile, summarize
from mooncake_core.loadgen.runner import LoadOptions, run_load
from mooncake_core.loadgen.workload import LoadRequest, scale_trace, synthetic_prefix_workload

__all__ = [
    "LoadOptions",
    "LoadReport",
    "LoadRequest",
    "RequestResult",
    "percentile",
    "run_load",
    "scale_trace",
    "summarize",
    "synthetic_prefix_workload",
]
