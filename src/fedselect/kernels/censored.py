"""Estimates from right-censored samples: the Kaplan-Meier product-limit estimator and its
quantiles (Kaplan and Meier, "Nonparametric estimation from incomplete observations", JASA
1958), with the exponential tail completion of Brown, Hollander and Korwar (1974) where the
data end before the quantile.

A sample is *right-censored* when all that is known is that its value exceeds the one recorded:
a participant cut off by a round's deadline took longer than the deadline; a run that ended
before reaching its target accuracy would have needed more rounds than it ran. Leaving such
samples out estimates from the ones that made the cut only, which is biased low (the slow
ones are exactly those missing); counting them at the cut is biased low too, whenever the
quantity sought lies beyond the cut. The Kaplan-Meier curve uses each censored sample for
exactly what it says: it survived past its cut.

* :func:`kaplan_meier` — the survival curve ``S(t)`` at the event times;
* :func:`km_quantile` — the ``q``-quantile of the curve: the smallest event time ``t`` with
  ``1 - S(t) >= q``; None when the curve ends above ``1 - q`` (the data cannot tell);
* :func:`km_quantile_completed` — the same, completed past the last observation ``c`` by the
  exponential tail through the origin and ``(c, S(c))`` (Brown, Hollander and Korwar):
  ``S(t) = S(c)^(t / c)``, i.e. the quantile ``c ln(1 - q) / ln S(c)``; used by the adaptive
  deadline (docs/fleets.md).

Worked example: latencies 1, 2, 3 s reported, 2 participants cut at a 3.5 s deadline, 1 cut at
2.5 s. The risk sets are 6 at 1 s, 5 at 2 s, then 3 at 3 s (the one cut at 2.5 s left the risk
set), so ``S = 5/6, 4/6, 4/6 * 2/3 = 4/9``; the median is 3 s (``1 - 4/9 >= 0.5``), the
90th percentile is past the data (``S(3.5) = 4/9 > 0.1``): None, and completed
``3.5 ln(0.1) / ln(4/9) = 9.94`` s. Without censoring the curve is the empirical distribution,
and :func:`km_quantile` is the inverted-CDF sample quantile (``numpy.quantile(...,
method="inverted_cdf")``).

Nothing here touches a random number generator or an FL object: inputs are arrays and floats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["kaplan_meier", "km_quantile", "km_quantile_completed"]

#: tolerance on ``1 - S(t) >= q`` (products of fractions such as 1 - 5/10 are not exact in floating point)
_EPS = 1e-12


def _check(values: Sequence[float], censored: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    c = np.asarray(censored, dtype=bool).reshape(-1)
    if x.shape != c.shape:
        raise ValueError(f"kaplan_meier: {x.size} values but {c.size} censoring flags")
    if x.size and not (np.all(np.isfinite(x)) and np.all(x >= 0)):
        raise ValueError(f"kaplan_meier: values must be finite and >= 0, got {x[~np.isfinite(x) | (x < 0)].tolist()}")
    return x, c


def kaplan_meier(values: Sequence[float], censored: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    """The Kaplan-Meier survival curve of right-censored samples.

    ``S(t) = prod_{t_i <= t} (1 - d_i / n_i)`` over the distinct event times ``t_i``, ``d_i`` the
    events at ``t_i`` and ``n_i`` the samples still at risk (value >= ``t_i``). A sample censored
    at an event time counts as at risk there (it survived past it: the usual convention).

    Args:
        values: ``(n,)`` observed values (>= 0, e.g. seconds or rounds).
        censored: ``(n,)`` True where the value is only a lower bound.

    Returns:
        ``(times, survival)``: the distinct event times, increasing, and ``S`` just after each;
        both empty without events.

    Raises:
        ValueError: sizes differ, or a value is negative or not finite.
    """
    x, c = _check(values, censored)
    times = np.unique(x[~c])
    surv = np.empty(times.size, dtype=np.float64)
    s = 1.0
    for i, t in enumerate(times):
        at_risk = int(np.count_nonzero(x >= t))
        events = int(np.count_nonzero((x == t) & ~c))
        s *= 1.0 - events / at_risk
        surv[i] = s
    return times, surv


def km_quantile(values: Sequence[float], censored: Sequence[bool], q: float) -> float | None:
    """The ``q``-quantile (``0 < q <= 1``) of the Kaplan-Meier curve: the smallest event time
    ``t`` with ``1 - S(t) >= q``; None when the curve never gets there (every sample censored,
    or too many censored before ``q``: the quantile lies beyond the data).

    Raises:
        ValueError: ``q`` outside (0, 1], or the errors of :func:`kaplan_meier`.
    """
    if not 0 < q <= 1:
        raise ValueError(f"km_quantile: q must be in (0, 1], got {q}")
    times, surv = kaplan_meier(values, censored)
    hit = np.flatnonzero(1.0 - surv >= q - _EPS)
    return float(times[hit[0]]) if hit.size else None


def km_quantile_completed(values: Sequence[float], censored: Sequence[bool], q: float) -> float | None:
    """:func:`km_quantile`, completed past the data by Brown, Hollander and Korwar's exponential
    tail (module docstring): when the curve ends at ``S(c) > 1 - q``, ``c`` the largest value,
    the quantile is ``c ln(1 - q) / ln S(c)`` (> ``c``).

    Returns:
        The quantile; None when it cannot be finite: no sample, no event at all (``S(c) = 1``:
        nothing is known but lower bounds), or ``q = 1`` past the data (an exponential tail
        never reaches 0).

    Raises:
        ValueError: as :func:`km_quantile`.
    """
    got = km_quantile(values, censored, q)
    if got is not None:
        return got
    x, _ = _check(values, censored)
    times, surv = kaplan_meier(values, censored)
    if not times.size or q >= 1.0:
        return None
    end, c = float(surv[-1]), float(x.max())
    if end <= 0.0 or c <= 0.0:  # the curve reached 0 (then the quantile was found) or only zeros were seen
        return None
    return c * math.log(1.0 - q) / math.log(end)
