"""Time predictors fitted from profiles: prefill time and decode step time.

Both are linear least-squares fits over a few physically motivated features, so they
extrapolate sanely and fit in microseconds:

* prefill, for ``n = input_len - prefix_len`` new tokens over ``p = prefix_len`` cached
  ones: ``T = c0 + c1*n + c2*n*p + c3*n^2`` (linear layers cost ~n, attention of the new
  tokens against the cached prefix ~n*p and against each other ~n^2);
* decode step, for ``b`` requests holding ``c`` context tokens in total:
  ``T = d0 + d1*b + d2*c`` (per-request work ~b, attention reads the whole KV ~c).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "DecodeStepModel",
    "FitReport",
    "PrefillPoint",
    "PrefillTimeModel",
    "StepPoint",
]


@dataclass(frozen=True, slots=True)
class PrefillPoint:
    """One profiled prefill: ``seconds`` to prefill ``input_len`` tokens with ``prefix_len`` cached."""

    input_len: int
    prefix_len: int
    seconds: float


@dataclass(frozen=True, slots=True)
class StepPoint:
    """One profiled decode step: ``seconds`` for ``batch`` requests with ``context`` tokens in total."""

    batch: int
    context: int
    seconds: float


@dataclass(frozen=True, slots=True)
class FitReport:
    """Quality of a fit on its own profile points.

    Attributes:
        points: profile points used.
        r2: coefficient of determination (1 is perfect).
        mape: mean absolute percentage error, as a fraction (0.05 = 5%).
        max_abs_error_s: worst absolute error in seconds.
    """

    points: int
    r2: float
    mape: float
    max_abs_error_s: float


def _fit(x: np.ndarray, y: np.ndarray, names: Sequence[str]) -> tuple[np.ndarray, FitReport]:
    if len(y) < x.shape[1]:
        raise ValueError(
            f"need at least {x.shape[1]} profile points to fit {list(names)}, got {len(y)}"
        )
    if not np.all(np.isfinite(y)) or np.any(y < 0):
        raise ValueError("profile times must be finite and non-negative")
    # Scale columns so n^2 (~1e10) and 1 do not make the system ill-conditioned.
    scale = np.maximum(np.abs(x).max(axis=0), 1e-12)
    coef_scaled, *_ = np.linalg.lstsq(x / scale, y, rcond=None)
    coef = coef_scaled / scale
    pred = x @ coef
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    nz = y > 0
    mape = float(np.mean(np.abs((y[nz] - pred[nz]) / y[nz]))) if nz.any() else 0.0
    return coef, FitReport(len(y), r2, mape, float(np.max(np.abs(y - pred))))


def _fit_constrained(
    x: np.ndarray, y: np.ndarray, names: Sequence[str]
) -> tuple[np.ndarray, FitReport]:
    """Least squares of relative error with every coefficient >= 0.

    Exact: each subset of the features is fitted alone and the best fit whose
    coefficients are all non-negative wins (16 subsets for 4 features). Rows are divided
    by the measured time, so a 2 ms prompt weighs as much as a 200 ms one.
    """
    if len(y) < x.shape[1]:
        raise ValueError(
            f"need at least {x.shape[1]} profile points to fit {list(names)}, got {len(y)}"
        )
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("profile times must be finite and positive for a relative fit")
    xw = x / y[:, None]
    ones = np.ones_like(y)
    scale = np.maximum(np.abs(xw).max(axis=0), 1e-12)
    best: tuple[float, np.ndarray] | None = None
    k = x.shape[1]
    for size in range(1, k + 1):
        for cols in itertools.combinations(range(k), size):
            sub = list(cols)
            sol, *_ = np.linalg.lstsq(xw[:, sub] / scale[sub], ones, rcond=None)
            coef = np.zeros(k)
            coef[sub] = sol / scale[sub]
            if np.any(coef < 0):
                continue
            sse = float(np.sum((xw @ coef - 1.0) ** 2))
            if best is None or sse < best[0]:
                best = (sse, coef)
    assert best is not None  # the constant alone is always feasible (y > 0)
    coef = best[1]
    pred = x @ coef
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    mape = float(np.mean(np.abs((y - pred) / y)))
    return coef, FitReport(len(y), r2, mape, float(np.max(np.abs(y - pred))))


def _check_coefficients(coef: Sequence[float], n: int, what: str) -> tuple[float, ...]:
    out = tuple(float(c) for c in coef)
    if len(out) != n or not all(np.isfinite(out)):
        raise ValueError(f"{what} needs {n} finite coefficients, got {list(coef)!r}")
    return out


class PrefillTimeModel:
    """``T_prefill(input_len, prefix_len)`` as a fitted polynomial.

    Args:
        coefficients: ``(c0, c1, c2, c3)`` for ``1, n, n*p, n^2`` (see module docstring).
        report: fit quality, when the coefficients came from :meth:`fit`.

    Raises:
        ValueError: not four finite coefficients.
    """

    FEATURES = ("1", "new", "new*prefix", "new^2")

    def __init__(self, coefficients: Sequence[float], report: FitReport | None = None) -> None:
        self.coefficients = _check_coefficients(coefficients, 4, "PrefillTimeModel")
        self.report = report

    @classmethod
    def fit(cls, points: Sequence[PrefillPoint], *, physical: bool = False) -> PrefillTimeModel:
        """Least-squares fit over profile points.

        Args:
            points: profiled prefills.
            physical: minimise the *relative* error with every coefficient >= 0, so the
                model never decreases with more tokens and extrapolates sanely beyond the
                profiled lengths (a noisy profile fitted freely can put a negative
                ``new^2`` term that predicts 30 ms for a prompt twice the longest profiled,
                where 250 ms were measured). Times must then be positive.

        Raises:
            ValueError: fewer than four points, a prefix longer than its input, or bad times.
        """
        rows = []
        for p in points:
            if not 0 <= p.prefix_len <= p.input_len:
                raise ValueError(f"profile point {p}: need 0 <= prefix_len <= input_len")
            n = p.input_len - p.prefix_len
            rows.append((1.0, n, n * p.prefix_len, n * n))
        x = np.array(rows, dtype=float).reshape(-1, 4)
        y = np.array([p.seconds for p in points], dtype=float)
        fit = _fit_constrained if physical else _fit
        coef, report = fit(x, y, cls.FEATURES)
        return cls(coef.tolist(), report)

    def predict(self, input_len: int, prefix_len: int) -> float:
        """Predicted seconds to prefill ``input_len`` tokens of which ``prefix_len`` are cached.

        A prefix longer than the input is clamped (the last token is always computed, so
        a full hit still costs the constant term). Never negative.
        """
        c0, c1, c2, c3 = self.coefficients
        p = prefix_len if prefix_len < input_len else input_len
        n = input_len - p
        t = c0 + n * (c1 + c2 * p + c3 * n)
        return t if t > 0.0 else 0.0

    def to_json(self) -> str:
        """Serialise coefficients and fit report."""
        return json.dumps(
            {
                "kind": "prefill",
                "features": list(self.FEATURES),
                "coefficients": list(self.coefficients),
                "report": None if self.report is None else _report_dict(self.report),
            },
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> PrefillTimeModel:
        """Inverse of :meth:`to_json`.

        Raises:
            ValueError: not a prefill model document.
        """
        doc = _load_doc(text, "prefill")
        return cls(doc["coefficients"], _report_from(doc.get("report")))

    def save(self, path: Path) -> None:
        """Write :meth:`to_json` to ``path``."""
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> PrefillTimeModel:
        """Read a model written by :meth:`save`."""
        return cls.from_json(Path(path).read_text(encoding="utf-8"))


class DecodeStepModel:
    """Decode step time ``T_step(batch, total_context)`` and the TBT it implies.

    Args:
        coefficients: ``(d0, d1, d2)`` for ``1, batch, context``.
        report: fit quality, when fitted.

    Raises:
        ValueError: not three finite coefficients.
    """

    FEATURES = ("1", "batch", "context")

    def __init__(self, coefficients: Sequence[float], report: FitReport | None = None) -> None:
        self.coefficients = _check_coefficients(coefficients, 3, "DecodeStepModel")
        self.report = report

    @classmethod
    def fit(cls, points: Sequence[StepPoint]) -> DecodeStepModel:
        """Least-squares fit over profiled steps.

        Raises:
            ValueError: fewer than three points or bad values.
        """
        for p in points:
            if p.batch < 0 or p.context < 0:
                raise ValueError(f"profile point {p}: batch and context must be >= 0")
        x = np.array([(1.0, p.batch, p.context) for p in points], dtype=float).reshape(-1, 3)
        y = np.array([p.seconds for p in points], dtype=float)
        coef, report = _fit(x, y, cls.FEATURES)
        return cls(coef.tolist(), report)

    def step_time(self, batch: int, context: int) -> float:
        """Predicted seconds of one decode step; never negative."""
        d0, d1, d2 = self.coefficients
        t = d0 + d1 * batch + d2 * context
        return t if t > 0.0 else 0.0

    def tbt_if_joined(self, batch: int, context: int, new_context: int) -> float:
        """Predicted time between tokens on an instance if one more request joins.

        Args:
            batch: requests decoding there now.
            context: their total context tokens.
            new_context: the joining request's context (its prompt length).
        """
        return self.step_time(batch + 1, context + new_context)

    def to_json(self) -> str:
        """Serialise coefficients and fit report."""
        return json.dumps(
            {
                "kind": "decode",
                "features": list(self.FEATURES),
                "coefficients": list(self.coefficients),
                "report": None if self.report is None else _report_dict(self.report),
            },
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> DecodeStepModel:
        """Inverse of :meth:`to_json`.

        Raises:
            ValueError: not a decode model document.
        """
        doc = _load_doc(text, "decode")
        return cls(doc["coefficients"], _report_from(doc.get("report")))

    def save(self, path: Path) -> None:
        """Write :meth:`to_json` to ``path``."""
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> DecodeStepModel:
        """Read a model written by :meth:`save`."""
        return cls.from_json(Path(path).read_text(encoding="utf-8"))


def _report_dict(r: FitReport) -> dict[str, float]:
    return {"points": r.points, "r2": r.r2, "mape": r.mape, "max_abs_error_s": r.max_abs_error_s}


def _report_from(d: object) -> FitReport | None:
    if not isinstance(d, dict):
        return None
    return FitReport(
        int(d["points"]), float(d["r2"]), float(d["mape"]), float(d["max_abs_error_s"])
    )


def _load_doc(text: str, kind: str) -> dict:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not a {kind} model: invalid JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("kind") != kind or "coefficients" not in doc:
        raise ValueError(f"not a {kind} model document: {text[:80]!r}")
    return doc
