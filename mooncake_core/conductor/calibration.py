"""Online calibration of the Conductor's time predictions from measured request timings.

The predictors are fitted once, from a profile (:mod:`.predictors`), and the network
model knows only nominal bandwidths. What a request really costs also holds the RPCs,
the worker's own CPU share, the Store fetch and the waits for its KV writes. This
module learns, per prefill instance and one request at a time, three corrections::

    compute(i)  ~ a_c + b_c * T_prefill      worker's compute (+ KV write waits)
    transfer(i) ~ a_x + b_x * T_transfer     worker's prefix fetch   (never below the model)
    overhead(i) ~ a_o                        TTFT outside the instance: dispatch, RPCs

``T_prefill`` and ``T_transfer`` are the uncalibrated predictions (profile fit, network
model); the measured parts are what the worker reports (queue wait, fetch, compute) and
the end-to-end TTFT. The Conductor then predicts, for instance ``i``::

    TTFT = overhead(i) + queue(i) + transfer(i) + compute(i)

where ``queue(i)`` sums the calibrated ``transfer + compute`` of the requests ahead.

Each correction is an :class:`AffineFit`: recursive least squares with exponential
forgetting (``memory`` samples), on equations divided by ``max(predicted, measured)`` so
it minimises *relative* error at any time scale (1 ms or 10 s, the same constants), with
the normalised residual clipped at ``clip`` times its running mean (Huber): a wild
measurement moves the fit by a bounded amount, and a measurement far above the
prediction weighs little by construction. The slope is kept in ``[min_slope,
max_slope]`` and predictions are never negative. The transfer correction only ever
raises the network model's prediction: a learned "cheaper than the model" fetch
makes the policies fetch more, which loads the NICs the estimate was measured on
(the feedback loop that broke the adaptive policy, docs/conductor.md).

Sans-IO: samples are pushed in; nothing reads a clock, the simulator and the live
service drive the same objects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "AffineFit",
    "Calibration",
    "CalibrationOptions",
    "FitSnapshot",
    "InstanceCalibration",
    "InstanceCalibrationSnapshot",
    "PrefillTimings",
]

_TINY = 1e-12


@dataclass(frozen=True, slots=True)
class CalibrationOptions:
    """Knobs of the online calibration (generic, not fitted to a trace).

    Attributes:
        memory: effective number of recent samples a fit remembers (forgetting factor
            ``1 - 1/memory``): old behaviour fades, so the fit follows drift.
        clip: normalised residuals beyond ``clip`` times their running mean are clipped
            (Huber); 3 leaves Gaussian noise alone and caps outliers.
        prior: prior standard deviation of the intercept (in units of the first
            measurement) and of the slope (around 1): 1 lets the first samples decide.
        min_slope: smallest slope (a prediction never shrinks below this share of the model).
        max_slope: largest slope.
    """

    memory: float = 50.0
    clip: float = 3.0
    prior: float = 1.0
    min_slope: float = 0.01
    max_slope: float = 100.0

    def __post_init__(self) -> None:
        if not (self.memory > 1 and math.isfinite(self.memory)):
            raise ValueError(f"calibration memory must be > 1 sample, got {self.memory}")
        if not self.clip > 0:
            raise ValueError(f"calibration clip must be > 0, got {self.clip}")
        if not (self.prior > 0 and math.isfinite(self.prior)):
            raise ValueError(f"calibration prior must be > 0, got {self.prior}")
        if not 0 < self.min_slope <= 1 <= self.max_slope < math.inf:
            raise ValueError(
                f"need 0 < min_slope <= 1 <= max_slope, got {self.min_slope}, {self.max_slope}"
            )


@dataclass(frozen=True, slots=True)
class FitSnapshot:
    """One fit's state: ``y ~ intercept + slope * x`` after ``samples`` samples.

    Attributes:
        intercept: ``a`` (seconds).
        slope: ``b`` (1 for an offset-only fit).
        samples: samples used.
        error: running mean of the normalised residual ``|y - predicted| / max(...)``.
    """

    intercept: float
    slope: float
    samples: int
    error: float


class AffineFit:
    """``y ~ a + b*x`` learned one sample at a time (weighted RLS with forgetting).

    Starts at ``a = 0, b = 1`` (the uncalibrated prediction). Each sample ``(x, y)`` is
    the equation ``a + b*x = y`` divided by ``s = max(predicted, y)``; the update is the
    recursive least-squares step on that equation with the residual clipped, then the
    covariance is divided by the forgetting factor and its diagonal bounded by the prior
    (so a direction no sample excites does not grow without end).

    Args:
        options: memory, clip, prior and slope bounds.
        slope: learn the slope; ``False`` keeps ``b = 1`` (a pure offset: ``y ~ a + x``).
    """

    __slots__ = ("_error", "_lam", "_opts", "_p", "_p0", "_slope", "a", "b", "samples")

    def __init__(self, options: CalibrationOptions | None = None, *, slope: bool = True) -> None:
        self._opts = options or CalibrationOptions()
        self._lam = 1.0 - 1.0 / self._opts.memory
        self._slope = slope
        self.a = 0.0
        self.b = 1.0
        self.samples = 0
        self._error = 1.0
        # Covariance [[paa, pab], [pab, pbb]] and its prior diagonal, set by the first sample.
        self._p: list[float] | None = None
        self._p0 = (0.0, 0.0)

    def predict(self, x: float) -> float:
        """``max(a + b*x, 0)``."""
        y = self.a + self.b * x
        return y if y > 0.0 else 0.0

    def update(self, x: float, y: float) -> bool:
        """Learn from one measurement ``y`` at input ``x``; returns whether it was used.

        A sample is ignored when ``x`` or ``y`` is negative or not finite, or when both
        the prediction and ``y`` are zero (nothing to scale it by).
        """
        if not (x >= 0.0 and y >= 0.0 and math.isfinite(x) and math.isfinite(y)):
            return False
        raw = self.a + self.b * x
        s = max(raw, y)
        if s <= _TINY:
            return False
        o = self._opts
        lam = self._lam
        if self._p is None:
            # Prior at the first sample's scale: the intercept may be anything up to the
            # measurement itself, the slope off by ``prior`` either way.
            paa = (o.prior * s) ** 2
            pbb = o.prior**2 if self._slope else 0.0
            self._p0 = (paa, pbb)
            self._p = [paa, 0.0, pbb]
        f0 = 1.0 / s
        f1 = x / s if self._slope else 0.0
        r = (y - raw) / s
        # The clip scales with the recent error, floored at 5% (no timing is more exact),
        # so a fit that has been exact for a while still follows a real change quickly.
        limit = o.clip * max(self._error, 0.05)
        c = r if -limit <= r <= limit else math.copysign(limit, r)
        self._error = lam * self._error + (1.0 - lam) * min(abs(r), 1.0)
        paa, pab, pbb = self._p
        pf0 = paa * f0 + pab * f1
        pf1 = pab * f0 + pbb * f1
        denom = lam + f0 * pf0 + f1 * pf1
        g0, g1 = pf0 / denom, pf1 / denom
        self.a += g0 * c
        if self._slope:
            self.b = min(max(self.b + g1 * c, o.min_slope), o.max_slope)
        paa = (paa - g0 * pf0) / lam
        pab = (pab - g0 * pf1) / lam
        pbb = (pbb - g1 * pf1) / lam
        # Bound the diagonal by the prior (a congruence D P D keeps P positive semi-definite).
        d0 = math.sqrt(self._p0[0] / paa) if paa > self._p0[0] else 1.0
        d1 = math.sqrt(self._p0[1] / pbb) if pbb > self._p0[1] > 0 else 1.0
        self._p = [paa * d0 * d0, pab * d0 * d1, pbb * d1 * d1]
        self.samples += 1
        return True

    def snapshot(self) -> FitSnapshot:
        """Coefficients and sample count."""
        return FitSnapshot(self.a, self.b, self.samples, self._error)


@dataclass(frozen=True, slots=True)
class PrefillTimings:
    """Measured parts of one request's TTFT, as the prefill worker reports them.

    Attributes:
        queue_s: waiting at the instance before it started the request.
        transfer_s: fetching the prefix (0 when nothing was fetched).
        compute_s: computing, plus waiting for its KV writes (stream to decode, Store).
        reused_tokens: prefix tokens the instance reused (``None``: as the plan said).
    """

    queue_s: float
    transfer_s: float
    compute_s: float
    reused_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class InstanceCalibrationSnapshot:
    """The three corrections of one prefill instance."""

    instance: str
    compute: FitSnapshot
    transfer: FitSnapshot
    overhead: FitSnapshot


class InstanceCalibration:
    """The compute, transfer and overhead corrections of one prefill instance.

    Args:
        name: instance name.
        options: knobs shared by the three fits.
    """

    __slots__ = ("compute", "name", "overhead", "transfer")

    def __init__(self, name: str, options: CalibrationOptions | None = None) -> None:
        self.name = name
        self.compute = AffineFit(options)
        self.transfer = AffineFit(options)
        self.overhead = AffineFit(options, slope=False)

    def compute_s(self, model_s: float) -> float:
        """Calibrated compute time for an uncalibrated prediction of ``model_s``."""
        return self.compute.predict(model_s)

    def transfer_s(self, model_s: float) -> float:
        """Calibrated fetch time for a network-model prediction of ``model_s`` (never less)."""
        t = self.transfer.predict(model_s)
        return t if t > model_s else model_s

    def overhead_s(self) -> float:
        """Predicted TTFT spent outside the instance (dispatch, RPCs, reply)."""
        return self.overhead.predict(0.0)

    def observe(
        self,
        ttft_s: float,
        model_compute_s: float,
        model_transfer_s: float,
        fetched: bool,
        timings: PrefillTimings | None,
        predicted_ttft_s: float,
    ) -> None:
        """Learn from one request served here.

        Args:
            ttft_s: measured time to first token.
            model_compute_s: uncalibrated compute prediction for what the instance
                really computed (the reused prefix as reported).
            model_transfer_s: uncalibrated transfer prediction of the plan.
            fetched: the plan fetched a prefix (transfer samples only come from those).
            timings: the worker's measured parts; ``None``: only the end-to-end TTFT is
                known, and the whole error goes to the overhead.
            predicted_ttft_s: the calibrated TTFT predicted at decision time.
        """
        if timings is None:
            # End to end only: the error is credited to the part outside the instance.
            self.overhead.update(0.0, max(self.overhead_s() + ttft_s - predicted_ttft_s, 0.0))
            return
        self.compute.update(model_compute_s, timings.compute_s)
        if fetched and timings.transfer_s > 0:
            self.transfer.update(model_transfer_s, timings.transfer_s)
        inside = timings.queue_s + timings.transfer_s + timings.compute_s
        self.overhead.update(0.0, max(ttft_s - inside, 0.0))

    def snapshot(self) -> InstanceCalibrationSnapshot:
        """The three fits."""
        return InstanceCalibrationSnapshot(
            self.name, self.compute.snapshot(), self.transfer.snapshot(), self.overhead.snapshot()
        )


class Calibration:
    """Per prefill instance corrections, created on the first sample of each instance.

    Args:
        options: knobs of every fit.
    """

    def __init__(self, options: CalibrationOptions | None = None) -> None:
        self.options = options or CalibrationOptions()
        self._by_instance: dict[str, InstanceCalibration] = {}

    def get(self, instance: str) -> InstanceCalibration | None:
        """The instance's corrections, ``None`` before its first sample (predict uncalibrated)."""
        return self._by_instance.get(instance)

    def instance(self, instance: str) -> InstanceCalibration:
        """The instance's corrections, created when missing."""
        cal = self._by_instance.get(instance)
        if cal is None:
            cal = self._by_instance[instance] = InstanceCalibration(instance, self.options)
        return cal

    def drop(self, instance: str) -> None:
        """Forget an instance (it left the cluster; a newcomer of that name starts afresh)."""
        self._by_instance.pop(instance, None)

    def snapshot(self) -> tuple[InstanceCalibrationSnapshot, ...]:
        """Every instance's fits, by name."""
        return tuple(self._by_instance[n].snapshot() for n in sorted(self._by_instance))
