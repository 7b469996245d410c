"""The Conductor's read model: one immutable value for CLI, TUI, web and metrics."""

from __future__ import annotations

from dataclasses import dataclass

from mooncake_core.conductor.calibration import CalibrationSnapshot
from mooncake_core.conductor.index import IndexSnapshot
from mooncake_core.conductor.network import NetworkSnapshot
from mooncake_core.conductor.state import DecodeInstanceSnapshot, PrefillInstanceSnapshot

__all__ = ["ConductorSnapshot"]


@dataclass(frozen=True, slots=True)
class ConductorSnapshot:
    """State of the Conductor at ``time``.

    Attributes:
        time: the instant described (last ``now`` seen unless given).
        policy: scheduling policy name.
        admission: admission strategy name.
        threshold: kvcache balancing threshold in force (``adaptive`` moves it).
        decisions: requests scheduled.
        admitted: requests admitted before prefill.
        rejected: ``(reason, count)`` pairs, sorted, including rejections at decode join.
        migrations: hotspot migrations issued.
        in_flight: admitted requests not finished yet.
        decode_time_s: current uniform decode-time estimate ``D`` (``None`` before any).
        prefill: per prefill instance load.
        decode: per decode instance load.
        index: prefix index sizes and drift counters.
        network: per-location bandwidth and backlog.
        ttft_mae_s: mean absolute TTFT prediction error over ``on_actual`` reports.
        ttft_bias_s: TTFT bias over those reports: mean of ``actual - predicted``
            (positive: requests took longer than predicted).
        tbt_mae_s: mean absolute TBT prediction error.
        prefill_correction: compute-time correction applied by the policy (1: none).
        transfer_correction: transfer-time correction applied by the policy (1: none).
        calibration: the online calibration's shared fits and per instance factors
            (``None`` when calibration is off).
    """

    time: float
    policy: str
    admission: str
    threshold: float | None
    decisions: int
    admitted: int
    rejected: tuple[tuple[str, int], ...]
    migrations: int
    in_flight: int
    decode_time_s: float | None
    prefill: tuple[PrefillInstanceSnapshot, ...]
    decode: tuple[DecodeInstanceSnapshot, ...]
    index: IndexSnapshot
    network: NetworkSnapshot
    ttft_mae_s: float | None
    ttft_bias_s: float | None
    tbt_mae_s: float | None
    prefill_correction: float
    transfer_correction: float
    calibration: CalibrationSnapshot | None = None

    @property
    def rejected_total(self) -> int:
        """All rejections."""
        return sum(n for _, n in self.rejected)
