"""Statistics over seeds: the mean ± std of a quantity, and paired comparisons (mean
difference and a Student-t confidence interval).

:func:`mean_std` is the one mean and sample standard deviation over seeds of the tables
(:mod:`fedselect.report.aggregate` for comparisons, :mod:`fedselect.study.sweep_table` for sweeps); its rule for
missing values is in its docstring.

The methods of a comparison share one federation per seed (:mod:`fedselect.world.federation`), so for a method and the
baseline the runs of one seed form a pair, and the per-seed differences ``d_s = ours_s -
baseline_s`` are what varies. Their mean with a two-sided ``confidence`` interval,

    mean(d) ± t_{(1 + confidence) / 2, n - 1} * sd(d) / sqrt(n)      (sd with n - 1)

(the paired t interval; ``scipy.stats.t`` gives the quantile), says whether a difference is
larger than the seed-to-seed noise: when the interval excludes 0 the difference is marked as
significant at that level. Worked example: differences 1.0, 2.0, 3.0 points have mean 2.0,
sd 1.0, t_{0.975, 2} = 4.303, so the 95% interval is 2.0 ± 4.303 / sqrt(3) = [-0.48, 4.48],
which contains 0 (not significant); 2.0, 2.1, 1.9 give [1.75, 2.25] (significant). One pair
gives no interval (there is no spread to estimate).

**Runs that never reach the target.** Rounds (or latency) to target is a time to an event, and
a run that ends before reaching the target is *censored*: it would have needed more than it
ran. The mean over the runs that reached it leaves exactly the slow ones out and is biased
low. :func:`to_target` therefore gives the mean ± sd only when every run reached the target;
otherwise the Kaplan-Meier median (:func:`fedselect.kernels.censored.km_quantile`; each run
that did not reach it censored at its last round, or its end-to-end latency), with the count
reached of n, and when fewer than half reached it only that the median lies beyond the longest
run (``> T``). Worked example: three seeds reach 0.9 in rounds 20 and 40, the third never
within its 50 rounds: mean of the two 30 (biased), median 40 (``2/3 reached``); reached only
in round 20 of three: median > 50.

**Zero spread.** When every seed gives the same difference (two seeds whose rounds to target
are 2 against 3, i.e. -33.3% twice; two accuracy differences of +5 points), the sample standard
deviation is 0 and the formula would give a zero-width interval "[-33.3, -33.3] *", claiming
certainty from a coincidence of a few seeds. For a quantity that varies by seed that is never
shown: :func:`paired_interval` returns no interval (``spread == "none"``, not significant) and
the cell reads ``-33.3 (2 seeds: no spread to judge)``. Only a quantity the caller knows to be
exactly deterministic (``exact=True``: e.g. the bytes of two methods that move the same number of
models in every seed, with no client failures) keeps its zero-width interval, marked
``(exact)``. "The same" allows float rounding (:data:`ZERO_SPREAD_RTOL`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

#: units of a paired difference: "pts" = 100 x (ours - baseline) for fractions such as
#: accuracy; "%" = 100 x (ours - baseline) / baseline, per seed; "abs" = ours - baseline
UNITS = ("pts", "%", "abs")

#: differences whose sample sd is at most this fraction of max(1, |mean|) count as identical
#: (100 x (0.55 - 0.50) and 100 x (0.60 - 0.55) differ by 1e-14 in floating point)
ZERO_SPREAD_RTOL = 1e-9


def mean_std(values: Iterable[Any]) -> tuple[float | None, float | None, int]:
    """Mean and sample standard deviation (n - 1 degrees of freedom) of one quantity over
    seeds, and ``n``, the number of values they are computed from.

    NaN rule: a missing value is left out and not counted in ``n``. Missing: None, NaN, and
    anything that is not a real number (a string, a boolean). Infinities are values: one makes
    the mean infinite (and the std NaN). No value left (empty or all missing): ``(None, None,
    0)``, which the tables print as ``-`` (an empty CSV cell). One value: std 0.0.

    Example: ``[0.8, nan, 0.9, None]`` -> ``(0.85, 0.0707..., 2)``.
    """
    xs = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)]
    if not xs:
        return None, None, 0
    with np.errstate(invalid="ignore"):  # inf - inf in the std of infinite values: NaN, said above
        return float(np.mean(xs)), (float(np.std(xs, ddof=1)) if len(xs) > 1 else 0.0), len(xs)


@dataclass(frozen=True)
class ToTarget:
    """Rounds or latency to target over runs (:func:`to_target`).

    Attributes:
        value: the mean when every run reached the target; otherwise the Kaplan-Meier median;
            None when there is no run, or when the median lies beyond the data (``beyond``).
        std: the sample std when every run reached it (0.0 for one run); None otherwise.
        reached, runs: runs that reached the target, runs with a value or an end.
        beyond: when censored and fewer than half reached it: the longest run's end (the
            median is larger); else None.
        median: the Kaplan-Meier median in every case (without censoring the sample median,
            the lower of the two middle values); None as ``value``. Two methods compare by it
            when either has censored runs.
    """

    value: float | None
    std: float | None
    reached: int
    runs: int
    beyond: float | None = None
    median: float | None = None

    @property
    def censored(self) -> bool:
        """Some run ended before reaching the target."""
        return self.reached < self.runs


def to_target(values: Iterable[Any], ends: Iterable[Any]) -> ToTarget:
    """Rounds or latency to target over runs (module docstring): ``values[i]`` run i's first
    round (or latency) at the target, None when it never got there; ``ends[i]`` its last round
    (or end-to-end latency), where it is censored then; None: the run has no target (left out).
    """
    from fedselect.kernels.censored import km_quantile

    xs, cut = [], []
    for v, end in zip(values, ends):
        if _finite(v):
            xs.append(float(v))
            cut.append(False)
        elif _finite(end):
            xs.append(float(end))
            cut.append(True)
    reached = cut.count(False)
    if not xs:
        return ToTarget(None, None, 0, 0)
    median = km_quantile(xs, cut, 0.5)
    if reached == len(xs):
        mean, std, _ = mean_std(xs)
        return ToTarget(mean, std, reached, reached, None, median)
    return ToTarget(median, None, reached, len(xs), None if median is not None else max(xs), median)


@dataclass(frozen=True)
class PairedInterval:
    """Mean of ``n`` paired differences and its confidence interval.

    ``low``/``high``/``half_width``/``sd`` are None when ``n < 2`` (no interval possible);
    ``mean`` is None when ``n == 0``. ``spread``: ``"normal"``; ``"none"`` when ``n >= 2``
    differences coincide for a quantity that varies by seed (no interval: ``low``/``high`` None,
    ``sd`` 0); ``"exact"`` when they coincide for a quantity declared exactly deterministic (a
    zero-width interval, ``low == high == mean``).
    """

    n: int
    mean: float | None
    sd: float | None
    half_width: float | None
    low: float | None
    high: float | None
    confidence: float = 0.95
    spread: str = "normal"

    @property
    def has_interval(self) -> bool:
        return self.low is not None

    @property
    def significant(self) -> bool | None:
        """True when the interval excludes 0; None when there is no interval."""
        if not self.has_interval:
            return None
        return self.low > 0 or self.high < 0


def paired_interval(diffs: Iterable[float], confidence: float = 0.95, exact: bool = False) -> PairedInterval:
    """Mean paired difference and its Student-t ``confidence`` interval (module docstring).

    Args:
        diffs: per-seed differences (any unit); NaN/None are not allowed here, leave such
            seeds out before.
        confidence: two-sided level in (0, 1).
        exact: the quantity is exactly deterministic (the same on each side in every seed), so
            identical differences are exact and keep a zero-width interval; otherwise identical
            differences give no interval (``spread == "none"``: no spread to judge).

    Raises:
        ValueError: ``confidence`` outside (0, 1) or a non-finite difference.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    xs = [float(d) for d in diffs]
    bad = [d for d in xs if not math.isfinite(d)]
    if bad:
        raise ValueError(f"paired differences must be finite numbers, got {bad}")
    n = len(xs)
    if n == 0:
        return PairedInterval(0, None, None, None, None, None, confidence)
    mean = math.fsum(xs) / n
    if n == 1:
        return PairedInterval(1, mean, None, None, None, None, confidence)
    from scipy.stats import t

    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    if sd <= ZERO_SPREAD_RTOL * max(1.0, abs(mean)):
        if exact:
            return PairedInterval(n, mean, 0.0, 0.0, mean, mean, confidence, "exact")
        return PairedInterval(n, mean, 0.0, None, None, None, confidence, "none")
    half = float(t.ppf((1 + confidence) / 2, n - 1)) * sd / math.sqrt(n)
    return PairedInterval(n, mean, sd, half, mean - half, mean + half, confidence)


def paired_differences(ours: Mapping[int, float | None], baseline: Mapping[int, float | None], unit: str) -> dict[int, float]:
    """Per-seed differences of ``ours`` against ``baseline`` (seed -> value), in ``unit``.

    Only seeds where both sides have a finite value are paired ("%" also needs a non-zero
    baseline). ``unit``: "pts" -> 100 (ours - base); "%" -> 100 (ours - base) / base;
    "abs" -> ours - base.

    Raises:
        ValueError: unknown ``unit``.
    """
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    out = {}
    for seed in sorted(set(ours) & set(baseline)):
        a, b = ours[seed], baseline[seed]
        if not _finite(a) or not _finite(b):
            continue
        a, b = float(a), float(b)
        if unit == "pts":
            out[seed] = 100.0 * (a - b)
        elif unit == "abs":
            out[seed] = a - b
        elif b != 0:
            out[seed] = 100.0 * (a - b) / b
    return out


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def format_interval(iv: PairedInterval, unit: str, digits: int = 1) -> str:
    """``+2.0 [-0.5, +4.5]`` (``*`` appended when the interval excludes 0); ``+2.0 (1 seed: no
    interval)``; ``-33.3 (2 seeds: no spread to judge)`` (identical differences of a quantity
    that varies by seed); ``-50.0 [-50.0, -50.0] * (exact)`` (an exactly deterministic one);
    ``-`` without pairs. ``unit`` is unused (kept for callers)."""
    if iv.mean is None:
        return "-"
    txt = f"{iv.mean:+.{digits}f}"
    if iv.spread == "none":
        return txt + f" ({iv.n} seeds: no spread to judge)"
    if not iv.has_interval:
        return txt + " (1 seed: no interval)"
    txt += f" [{iv.low:+.{digits}f}, {iv.high:+.{digits}f}]"
    return txt + (" *" if iv.significant else "") + (" (exact)" if iv.spread == "exact" else "")
