"""Online calibration of the Conductor's time predictions from measured request timings.

The predictors are fitted once, from a profile (:mod:`.predictors`), and the network
model knows only nominal bandwidths. What a request really costs also holds the RPCs,
the worker's own CPU share, the Store fetch and the waits for its KV writes. This
module learns, one request at a time, three corrections::

    compute(i)  ~ (a_c + b_c * T_prefill) * g(T_prefill) * f_c(i)   compute (+ KV waits)
    transfer(i) ~ (a_x + b_x * T_transfer) * f_x(i)   its prefix fetch (never below the model)
    overhead(i) ~  a_o                     * f_o(i)   TTFT outside the instance: RPCs...

``T_prefill`` and ``T_transfer`` are the uncalibrated predictions (profile fit, network
model); the measured parts are what the worker reports (queue wait, fetch, compute) and
the end-to-end TTFT. The Conductor then predicts, for prefill instance ``i``::

    TTFT = overhead(i) + queue(i) + transfer(i) + compute(i)

where ``queue(i)`` sums the calibrated ``transfer + compute`` of the requests ahead.

The affine parts are shared by all instances, each an :class:`AffineFit`: recursive
least squares with exponential forgetting (``memory`` samples), on equations divided by
``max(predicted, measured)`` so it minimises *relative* error at any time scale (1 ms or
10 s, the same constants), with the normalised residual clipped at ``clip`` times its
running mean (Huber): a wild measurement moves the fit by a bounded amount, and a
measurement far above the prediction weighs little by construction. The slope is kept
in ``[min_slope, max_slope]`` and predictions are never negative.

``g`` is a factor per octave of ``T_prefill`` (:class:`ShapeCurve`): what the affine
map leaves wrong in the model's shape, e.g. a profile extrapolated far past its longest
prompt.

The factors ``f(i)`` are per instance (:class:`InstanceFactor`): the mean log ratio of
the instance's measurements to the shared prediction, shrunk towards 1 by its standard
error, so an instance that is really slower is predicted slower, and one that only
drew noisier samples is not (per-instance fits alone made the policies chase noise:
+4% average TTFT in simulation with 30% noise and identical instances).

The transfer correction is learned but applied only with ``apply_transfer``, and then
only ever raises the network model's prediction: a learned "cheaper than the model"
fetch makes the policies fetch more, which loads the NICs the estimate was measured on
(the feedback loop that broke the adaptive policy, docs/conductor.md).

Sans-IO: samples are pushed in; nothing reads a clock, the simulator and the live
service drive the same objects.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

__all__ = [
    "AffineFit",
    "Calibration",
    "CalibrationOptions",
    "CalibrationSnapshot",
    "FactorSnapshot",
    "FitSnapshot",
    "InstanceCalibration",
    "InstanceCalibrationSnapshot",
    "InstanceFactor",
    "PrefillTimings",
    "ShapeCurve",
    "shrunk_factor",
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
        apply_transfer: predict fetch times with the learned transfer correction. Off by
            default: it is learned and reported, but in simulation it only moved average
            TTFT (+2.3% at 10 Gbps per node and 3x replay, 0.0% without it), because a
            fetch's measured time there is mostly contention that an affine map of the
            network model's prediction does not capture (docs/conductor.md).
    """

    memory: float = 50.0
    clip: float = 3.0
    prior: float = 1.0
    min_slope: float = 0.01
    max_slope: float = 100.0
    apply_transfer: bool = False

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
        top = max(raw, y)
        if top <= _TINY:
            return False
        o = self._opts
        lam = self._lam
        if self._p is None:
            # Prior at the first sample's scale: the intercept may be anything up to the
            # measurement itself, the slope off by ``prior`` either way.
            paa = (o.prior * top) ** 2
            pbb = o.prior**2 if self._slope else 0.0
            self._p0 = (paa, pbb)
            self._p = [paa, 0.0, pbb]
        # Each equation is divided by the prediction, so the fit targets the mean
        # relative error (what a decision minimising expected TTFT needs), or by the
        # measurement times the fit's recent relative error when that is larger: while
        # the fit is far off (error ~1) that is the measurement itself, so a sample far
        # above the prediction carries no more information than the prior and cannot
        # make the fit overconfident; once it fits (error ~ the noise) only outliers
        # are scaled down.
        s = max(raw, y * min(self._error, 1.0))
        if s <= _TINY:
            s = top
        f0 = 1.0 / s
        f1 = x / s if self._slope else 0.0
        r = (y - raw) / s
        # The clip scales with the recent error, floored at 5% (no timing is more exact),
        # so a fit that has been exact for a while still follows a real change quickly.
        limit = o.clip * max(self._error, 0.05)
        c = r if -limit <= r <= limit else math.copysign(limit, r)
        self._error = lam * self._error + (1.0 - lam) * min(abs(r), o.clip)
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
class FactorSnapshot:
    """One instance's deviation from the shared fit.

    Attributes:
        factor: multiplier applied to the shared prediction (1: none).
        mean_log: running mean of ``log(measured / shared prediction)``.
        stderr_log: its standard error.
        samples: samples seen.
    """

    factor: float
    mean_log: float
    stderr_log: float
    samples: int


class InstanceFactor:
    """Running statistics of ``z = log(measured / shared prediction)`` on one instance.

    The forgetting-weighted mean ``m``, variance ``v`` and weight ``w`` (the sample count
    with forgetting); :class:`Calibration` turns them into the factor applied. Each ``z``
    is clipped to ``+-log(max_slope)``, and after two samples to ``m +- clip * sd``.

    Args:
        options: memory, clip and slope bound.
    """

    __slots__ = ("_lam", "_opts", "factor", "m", "samples", "v", "w")

    def __init__(self, options: CalibrationOptions | None = None) -> None:
        self._opts = options or CalibrationOptions()
        self._lam = 1.0 - 1.0 / self._opts.memory
        self.m = 0.0
        self.v = 0.0
        self.w = 0.0
        self.samples = 0
        self.factor = 1.0
        """Multiplier in force (set by :class:`Calibration`)."""

    def update(self, predicted: float, measured: float) -> bool:
        """Learn from one measurement against the shared prediction; returns whether used."""
        if not (predicted > _TINY and measured > _TINY):
            return False
        if not (math.isfinite(predicted) and math.isfinite(measured)):
            return False
        o = self._opts
        bound = math.log(o.max_slope)
        z = min(max(math.log(measured / predicted), -bound), bound)
        if self.samples >= 2:
            sd = max(math.sqrt(self.v), 0.05)
            z = min(max(z, self.m - o.clip * sd), self.m + o.clip * sd)
        self.w = self._lam * self.w + 1.0
        diff = z - self.m
        self.m += diff / self.w
        self.v = (1.0 - 1.0 / self.w) * (self.v + diff * diff / self.w)
        self.samples += 1
        return True

    @property
    def stderr(self) -> float:
        """Standard error of ``m`` (``inf`` before two samples)."""
        return math.sqrt(self.v / self.w) if self.samples >= 2 else math.inf

    def snapshot(self) -> FactorSnapshot:
        """Factor and the statistics behind it."""
        return FactorSnapshot(self.factor, self.m, self.stderr, self.samples)


def shrunk_factor(deviation: float, stderr: float, threshold: float = 2.0) -> float:
    """``exp(d * max(0, 1 - (threshold * se / d)^2))``: a deviation ``d`` of the log ratio
    is used in full when far beyond ``threshold`` standard errors, not at all within them
    (positive-part James-Stein shrinkage with a stricter cut)."""
    d2 = deviation * deviation
    cut = (threshold * stderr) ** 2
    if not d2 > cut:
        return 1.0
    return math.exp(deviation * (1.0 - cut / d2))


@dataclass(frozen=True, slots=True)
class InstanceCalibrationSnapshot:
    """One prefill instance's deviation from the shared fits, per part."""

    instance: str
    compute: FactorSnapshot
    transfer: FactorSnapshot
    overhead: FactorSnapshot


@dataclass(frozen=True, slots=True)
class CalibrationSnapshot:
    """The shared fits and each instance's factors.

    Attributes:
        compute: shared compute fit (measured compute vs ``T_prefill``).
        compute_shape: its per-octave factors, ``(octave start s, factor, samples)``.
        transfer: shared fetch fit (measured fetch vs the network model).
        overhead: shared fit of the TTFT outside the instances.
        instances: per instance factors, by name.
    """

    compute: FitSnapshot
    compute_shape: tuple[tuple[float, float, int], ...]
    transfer: FitSnapshot
    overhead: FitSnapshot
    instances: tuple[InstanceCalibrationSnapshot, ...]


class ShapeCurve:
    """What an affine fit still gets wrong, per size class: a factor per octave of ``x``.

    An affine map of the model's prediction fixes its scale and a fixed cost, not its
    shape: a profile that ends at 512 tokens extrapolates its ``new^2`` term to 4000
    tokens (predicted 4.9 s where 2.5 s were measured). Each octave ``[2^k, 2^(k+1))``
    of ``x`` keeps the running statistics of ``log(measured / affine prediction)`` and
    its factor is their shrunk mean (:func:`shrunk_factor`), with a standard error from
    the larger of its own variance and the variance pooled over all octaves (so one
    sample in an octave is used when it is far outside the noise seen elsewhere: long
    prompts are rare, and a second one may be minutes away). An octave never measured
    takes the factor of the nearest one measured (the misfit of a smooth model changes
    smoothly; 1 when none is).

    Args:
        options: memory, clip and slope bound of each octave's statistics.
    """

    __slots__ = ("_bins", "_keys", "_opts")

    def __init__(self, options: CalibrationOptions | None = None) -> None:
        self._opts = options or CalibrationOptions()
        self._bins: dict[int, InstanceFactor] = {}
        self._keys: list[int] = []  # octaves measured, ascending

    def factor(self, x: float) -> float:
        """Multiplier for an affine prediction at ``x``."""
        if not x > 0.0:
            return 1.0
        key = math.frexp(x)[1]
        b = self._bins.get(key)
        if b is not None:
            return b.factor
        keys = self._keys
        if not keys:
            return 1.0
        i = bisect.bisect_left(keys, key)
        if i == len(keys) or (i > 0 and key - keys[i - 1] <= keys[i] - key):
            i -= 1
        return self._bins[keys[i]].factor

    def update(self, x: float, fitted: float, measured: float) -> bool:
        """Learn from one measurement at ``x`` against the affine prediction ``fitted``."""
        if not (x > 0.0 and math.isfinite(x)):
            return False
        key = math.frexp(x)[1]
        b = self._bins.get(key)
        if b is None:
            b = InstanceFactor(self._opts)
        if not b.update(fitted, measured):
            return False
        if key not in self._bins:
            self._bins[key] = b
            bisect.insort(self._keys, key)
        # Pooled variance of the log ratio over the octaves that have one (1 before any:
        # a single sample is then not trusted).
        seen = [f for f in self._bins.values() if f.samples >= 2]
        total = sum(f.w for f in seen)
        pooled = sum(f.w * f.v for f in seen) / total if total > 0 else 1.0
        for f in self._bins.values():
            v = max(f.v, pooled) if f.samples >= 2 else pooled
            f.factor = shrunk_factor(f.m, math.sqrt(v / f.w))
        return True

    def snapshot(self) -> tuple[tuple[float, float, int], ...]:
        """``(octave start in seconds, factor, samples)`` for each octave seen, ascending."""
        return tuple(
            (math.ldexp(0.5, k), self._bins[k].factor, self._bins[k].samples)
            for k in sorted(self._bins)
        )


class _SharedFits:
    """The fits every instance's samples teach (internal)."""

    __slots__ = ("compute", "compute_shape", "overhead", "transfer")

    def __init__(self, options: CalibrationOptions) -> None:
        self.compute = AffineFit(options)
        self.compute_shape = ShapeCurve(options)
        self.transfer = AffineFit(options)
        self.overhead = AffineFit(options, slope=False)

    def compute_s(self, model_s: float) -> float:
        return self.compute.predict(model_s) * self.compute_shape.factor(model_s)


class InstanceCalibration:
    """Calibrated predictions for one prefill instance: the shared fits times its factors.

    Args:
        name: instance name.
        shared: the fits shared by every instance.
        options: knobs of the factors.
    """

    __slots__ = (
        "_apply_transfer",
        "compute",
        "name",
        "overhead",
        "overhead_factor",
        "shared",
        "transfer",
    )

    def __init__(self, name: str, shared: _SharedFits, options: CalibrationOptions) -> None:
        self.name = name
        self.shared = shared
        self._apply_transfer = options.apply_transfer
        self.compute = InstanceFactor(options)
        self.transfer = InstanceFactor(options)
        self.overhead_factor = InstanceFactor(options)
        self.overhead = shared.overhead.predict(0.0)
        """Predicted TTFT outside the instance, seconds (refreshed after every sample)."""

    def compute_s(self, model_s: float) -> float:
        """Calibrated compute time for an uncalibrated prediction of ``model_s``."""
        return self.shared.compute_s(model_s) * self.compute.factor

    def transfer_s(self, model_s: float) -> float:
        """Calibrated fetch time for a network-model prediction of ``model_s`` (never less;
        ``model_s`` itself unless ``apply_transfer``)."""
        if not self._apply_transfer:
            return model_s
        t = self.shared.transfer.predict(model_s) * self.transfer.factor
        return t if t > model_s else model_s

    def overhead_s(self) -> float:
        """Predicted TTFT spent outside the instance (dispatch, RPCs, reply)."""
        return self.shared.overhead.predict(0.0) * self.overhead_factor.factor

    def observe(
        self,
        ttft_s: float,
        model_compute_s: float,
        model_transfer_s: float,
        fetched: bool,
        timings: PrefillTimings | None,
        predicted_ttft_s: float,
    ) -> None:
        """Learn from one request served here (its factors first, then the shared fits);
        :meth:`Calibration.observe` calls it and then re-derives the factors in force.

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
        sh = self.shared
        # The shared fits learn each measurement divided by the instance's factor in
        # force: they describe the cluster's typical instance, the factors how each
        # one differs from it.
        if timings is None:
            # End to end only: the error is credited to the part outside the instance.
            y = max(self.overhead_s() + ttft_s - predicted_ttft_s, 0.0)
            self.overhead_factor.update(sh.overhead.predict(0.0), y)
            sh.overhead.update(0.0, y / self.overhead_factor.factor)
            return
        y = timings.compute_s
        x = model_compute_s
        self.compute.update(sh.compute_s(x), y)
        y_typ = y / self.compute.factor
        sh.compute_shape.update(x, sh.compute.predict(x), y_typ)
        sh.compute.update(x, y_typ)
        if fetched and timings.transfer_s > 0:
            y = timings.transfer_s
            self.transfer.update(sh.transfer.predict(model_transfer_s), y)
            sh.transfer.update(model_transfer_s, y / self.transfer.factor)
        inside = timings.queue_s + timings.transfer_s + timings.compute_s
        y = max(ttft_s - inside, 0.0)
        self.overhead_factor.update(sh.overhead.predict(0.0), y)
        sh.overhead.update(0.0, y / self.overhead_factor.factor)

    def snapshot(self) -> InstanceCalibrationSnapshot:
        """The instance's three factors."""
        return InstanceCalibrationSnapshot(
            self.name,
            self.compute.snapshot(),
            self.transfer.snapshot(),
            self.overhead_factor.snapshot(),
        )


class Calibration:
    """Shared fits plus a factor per prefill instance.

    Every instance's samples teach the shared fits (so a new instance starts from what
    the cluster measured, not from the profile); each instance's own samples teach its
    factors. Predictions are uncalibrated until the first sample anywhere.

    Args:
        options: knobs of every fit and factor.
    """

    def __init__(self, options: CalibrationOptions | None = None) -> None:
        self.options = options or CalibrationOptions()
        self._shared = _SharedFits(self.options)
        self._by_instance: dict[str, InstanceCalibration] = {}

    def observe(
        self,
        instance: str,
        ttft_s: float,
        model_compute_s: float,
        model_transfer_s: float,
        fetched: bool,
        timings: PrefillTimings | None,
        predicted_ttft_s: float,
    ) -> None:
        """Learn from one request served on ``instance`` (see :meth:`InstanceCalibration.observe`),
        then re-derive every instance's factors.

        A factor is the instance's mean log ratio to the shared prediction minus the
        mean over all instances (the shared fit answers for the level; a factor only
        for how this instance differs from the others), used as far as it exceeds
        twice its standard error (:func:`shrunk_factor`).
        """
        self.instance(instance).observe(
            ttft_s, model_compute_s, model_transfer_s, fetched, timings, predicted_ttft_s
        )
        insts = list(self._by_instance.values())
        for part in ("compute", "transfer", "overhead_factor"):
            stats: list[InstanceFactor] = [getattr(c, part) for c in insts]
            seen = [f for f in stats if f.samples >= 2]
            total = sum(f.w for f in seen)
            mean = sum(f.w * f.m for f in seen) / total if total > 0 else 0.0
            for f in stats:
                f.factor = shrunk_factor(f.m - mean, f.stderr) if f.samples >= 2 else 1.0
        for c in insts:
            c.overhead = c.overhead_s()

    def get(self, instance: str) -> InstanceCalibration | None:
        """The instance's calibrated predictor, ``None`` before any sample (predict uncalibrated)."""
        cal = self._by_instance.get(instance)
        if cal is None and self._shared.compute.samples + self._shared.overhead.samples:
            cal = self.instance(instance)
        return cal

    def instance(self, instance: str) -> InstanceCalibration:
        """The instance's calibrated predictor, created when missing."""
        cal = self._by_instance.get(instance)
        if cal is None:
            cal = self._by_instance[instance] = InstanceCalibration(
                instance, self._shared, self.options
            )
        return cal

    def snapshot(self) -> CalibrationSnapshot:
        """The shared fits and every instance's factors, by name."""
        sh = self._shared
        return CalibrationSnapshot(
            sh.compute.snapshot(),
            sh.compute_shape.snapshot(),
            sh.transfer.snapshot(),
            sh.overhead.snapshot(),
            tuple(self._by_instance[n].snapshot() for n in sorted(self._by_instance)),
        )
