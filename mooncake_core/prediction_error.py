"""The error of the Conductor's latency predictions: one definition for every surface.

The audit database (``mooncake audit stats``, ``audit explain``), the Conductor's
snapshot (``/telemetry``, Prometheus), the telemetry read-model (``mooncake top``, the
dashboard) all compute it here (docs/audit.md, "Prediction error"):

* error = ``actual - predicted``: positive when the request took longer than predicted
  (the Conductor under-predicted), negative when it was faster;
* bias = the mean error, with the same sign;
* MAE (mean absolute error) = the mean of ``|error|``;
* relative error = ``|error| / actual`` (undefined when ``actual <= 0``), and its mean.

A module of its own, importing nothing of the project, so the conductor, its audit
database and the telemetry package use it without importing one another.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement

__all__ = ["ErrorSummary", "ErrorTally", "relative_error", "signed_error", "summarize"]


@overload
def signed_error(predicted: float, actual: float) -> float: ...


@overload
def signed_error(
    predicted: ColumnElement[Any], actual: ColumnElement[Any]
) -> ColumnElement[Any]: ...


def signed_error(predicted: Any, actual: Any) -> Any:
    """``actual - predicted``; positive: it took longer than predicted.

    Plain arithmetic, so SQL columns give the same expression in SQL: the audit queries
    aggregate it in the database with this very function.
    """
    return actual - predicted


def relative_error(predicted: float, actual: float) -> float | None:
    """``|actual - predicted| / actual``; ``None`` when ``actual <= 0``."""
    if not actual > 0:
        return None
    return abs(signed_error(predicted, actual)) / actual


@dataclass(frozen=True, slots=True)
class ErrorSummary:
    """The error over a set of (predicted, actual) pairs.

    Attributes:
        count: Pairs with both numbers.
        mae_s: Mean absolute error (``None`` without pairs).
        mre: Mean relative error over the pairs with ``actual > 0`` (``None``: none).
        bias_s: Mean of ``actual - predicted`` (``None`` without pairs); positive:
            requests took longer than predicted.
    """

    count: int
    mae_s: float | None
    mre: float | None
    bias_s: float | None


class ErrorTally:
    """Running sums for :class:`ErrorSummary`, one pair at a time (constant memory)."""

    __slots__ = ("_abs", "_rel", "_rel_count", "_signed", "count")

    def __init__(self) -> None:
        self.count = 0
        self._abs = 0.0
        self._signed = 0.0
        self._rel = 0.0
        self._rel_count = 0

    def add(self, predicted: float, actual: float) -> None:
        """Count one measured request against its prediction."""
        err = signed_error(predicted, actual)
        self.count += 1
        self._signed += err
        self._abs += abs(err)
        rel = relative_error(predicted, actual)
        if rel is not None:
            self._rel += rel
            self._rel_count += 1

    def summary(self) -> ErrorSummary:
        """The means so far."""
        n = self.count
        return ErrorSummary(
            count=n,
            mae_s=self._abs / n if n else None,
            mre=self._rel / self._rel_count if self._rel_count else None,
            bias_s=self._signed / n if n else None,
        )


def summarize(pairs: Iterable[tuple[float | None, float | None]]) -> ErrorSummary:
    """The error over ``(predicted, actual)`` pairs; pairs missing either are skipped."""
    tally = ErrorTally()
    for predicted, actual in pairs:
        if predicted is not None and actual is not None:
            tally.add(predicted, actual)
    return tally.summary()
