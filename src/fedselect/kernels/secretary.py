"""Budgeted online selection: the secretary-style rule and its baselines, as pure functions.

Source: Mohammed et al., "Budgeted Online Selection of Candidate IoT Clients to Participate in
Federated Learning": its Algorithm 1 (Section IV) and BO-eq 6-7 (Section V).

Candidates arrive one at a time (positions ``0 .. N-1`` here; the paper numbers them
``C_1 .. C_N``, so paper candidate ``C_i`` is position ``i - 1``). Each arriving candidate gets a
score (its test accuracy after training the fresh global model on its own data) and an
irrevocable accept/reject decision. ``R`` (``budget``) candidates are to be accepted.

* :func:`alpha_star` -- the optimal number of candidates to observe and reject (BO-eq 7).
* :func:`success_probability` -- the probability being maximised (BO-eq 6).
* :func:`secretary_rule` -- the three-stage rule (Algorithm 1, stages 1 and 2).
* :func:`online_random_rule` -- accept each candidate with probability ``R / N`` (baseline).
* :func:`offline_best_rule` -- evaluate all ``N`` and keep the top ``R`` (baseline).

Every rule tail-fills: when the candidates left (including the current one) are no more than the
budget left, all of them are accepted, so exactly ``min(R, N)`` candidates are always accepted.

A non-finite score (NaN, +-inf: a candidate whose evaluation broke) never wins: it ranks below
every finite score (it never beats the threshold, never raises it, and offline best takes it
last), it counts as 0 in the competitive ratio's sums, and it is logged as a warning. Only the
tail-fill can accept such a candidate.

Knows nothing of federated learning; the method modules (``budgeted_online``, ``online_random``,
``offline_best``) feed it scores.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

log = logging.getLogger("fedselect.secretary")

__all__ = [
    "StoppingDecision",
    "alpha_star",
    "competitive_ratio",
    "offline_best_rule",
    "online_random_rule",
    "secretary_rule",
    "success_probability",
]


def _check_ranks(r1: int, r2: int) -> None:
    if int(r1) != r1 or int(r2) != r2:
        raise ValueError(f"r1 and r2 must be integers, got r1={r1!r}, r2={r2!r}")
    if not 1 <= r1 <= r2:
        raise ValueError(f"need 1 <= r1 <= r2, got r1={r1}, r2={r2}")


def _check_n(n: int) -> None:
    if int(n) != n or n < 1:
        raise ValueError(f"number of candidates N must be an integer >= 1, got N={n!r}")


def _check_budget(budget: int, n: int) -> None:
    if int(budget) != budget or budget < 1:
        raise ValueError(f"budget R must be an integer >= 1, got R={budget!r}")
    if budget > n:
        raise ValueError(f"budget R={budget} exceeds the number of candidates N={n}")


def alpha_star(n: int, r1: int = 1, r2: int = 1, budget: int | None = None) -> int:
    """Optimal stopping index alpha* (BO-eq 7).

    ``alpha* = floor(N * exp(-(r2! / (r1 - 1)!) ** (1 / (r2 - r1 + 1))))``; with ``r1 = 1`` this
    is ``floor(N * exp(-(r2!) ** (1 / r2)))``. The factorial ratio is computed in log space
    (``lgamma``) so large ``r2`` does not overflow.

    Examples: ``N = 1000, r1 = 1`` gives 367, 243, 162, 109, 73 for ``r2 = 1 .. 5``;
    ``N = 10, r1 = 1, r2 = 2`` gives 2 (the paper's Figure 1 example).

    Args:
        n: number of candidates ``N`` (>= 1).
        r1, r2: the window of records ``[r1, r2]`` (integers, ``1 <= r1 <= r2``).
        budget: optional budget ``R``; if given, alpha* is clamped to ``[0, N - R]`` so that at
            least ``R`` candidates remain after the observation phase.

    Returns:
        alpha* as an int in ``[0, N]`` (``[0, N - R]`` with a budget).

    Raises:
        ValueError: ``N < 1``, ``r1 < 1``, ``r1 > r2``, non-integers, or ``R`` outside ``[1, N]``.
    """
    _check_n(n)
    _check_ranks(r1, r2)
    log_ratio = math.lgamma(r2 + 1) - math.lgamma(r1)  # ln(r2! / (r1 - 1)!)
    x = math.exp(-math.exp(log_ratio / (r2 - r1 + 1)))
    a = int(math.floor(n * x))
    hi = n
    if budget is not None:
        _check_budget(budget, n)
        hi = n - int(budget)
    return max(0, min(a, hi))


def success_probability(alpha, n: int, r1: int = 1, r2: int = 1):
    """The probability BO-eq 6 maximises, for observation length ``alpha``.

    ``P(alpha) = sum_{j=r1}^{r2} (alpha / N) * (ln(N / alpha)) ** j / j!``

    For large ``N`` this is the probability that the number of *records* (candidates better
    than every earlier one) at positions ``alpha + 1 .. N`` lies in ``[r1, r2]``: position ``i``
    is a record with probability ``1 / i`` independently, so none occur after ``alpha`` with
    probability ``alpha / N`` and the count is close to Poisson with mean ``ln(N / alpha)``.
    ``P(0) = 0`` (the limit).

    Args:
        alpha: observation length(s), scalar or array, each in ``[0, N]`` (real values allowed).
        n: number of candidates ``N`` (>= 1).
        r1, r2: integers with ``1 <= r1 <= r2``.

    Returns:
        float (scalar input) or float64 array of the same shape (array input), in ``[0, 1]``.

    Raises:
        ValueError: bad ``N``/``r1``/``r2`` or an ``alpha`` outside ``[0, N]``.
    """
    _check_n(n)
    _check_ranks(r1, r2)
    a = np.asarray(alpha, dtype=np.float64)
    if np.any(~np.isfinite(a)) or np.any(a < 0) or np.any(a > n):
        raise ValueError(f"alpha must lie in [0, N={n}], got {alpha!r}")
    x = a / n
    out = np.zeros_like(x)
    pos = x > 0
    log_term = np.log(1.0 / x[pos])
    for j in range(int(r1), int(r2) + 1):
        out[pos] += x[pos] * log_term**j / math.factorial(j)
    return float(out) if out.ndim == 0 else out


@dataclass
class StoppingDecision:
    """Outcome of one pass of an online (or offline) rule over ``N`` arrivals.

    Attributes:
        accepted: accepted positions (0-based, in arrival order), length ``min(R, N)``.
        evaluated: number of candidates the server had to contact: the position of the last
            accepted candidate + 1 for the online rules (it stops once ``R`` are accepted),
            ``N`` for offline best.
        threshold: the secretary threshold (best score among the first alpha*), or ``None``.
        alpha: the observation length used (secretary rule), or ``None``.
        tail_filled: accepted positions that were taken only because the candidates left
            equalled the budget left (a subset of ``accepted``).
    """

    accepted: list[int]
    evaluated: int
    threshold: float | None = None
    alpha: int | None = None
    tail_filled: list[int] = field(default_factory=list)


def secretary_rule(scores: Sequence[float], budget: int, alpha: int) -> StoppingDecision:
    """The paper's three-stage heuristic, stages 1-2 (Algorithm 1).

    Stage 1: observe and reject the first ``alpha`` candidates; the threshold is their best
    score (``-inf`` when ``alpha = 0``). Stage 2: accept a candidate iff its score is strictly
    greater than the threshold (which is not updated), until ``R`` are accepted; when the
    candidates left (including the current one) equal the budget left, accept all of them
    (tail-fill). Stage 3 (training on the accepted) is the caller's job.

    ``scores`` is read lazily, in order, and never past the last accepted position, so a lazy
    sequence only evaluates the candidates the server actually contacts.

    Paper example (Figure 1): scores ``0.30, 0.62, 0.23, 0.41, 0.56, 0.85, 0.20, 0.92, ...``,
    ``R = 2``, ``alpha = 2`` -> threshold 0.62, accepts positions 5 and 7 (``C_6``, ``C_8``),
    evaluated = 8.

    Args:
        scores: length-``N`` sequence of candidate scores (test accuracies in [0, 1]) in arrival
            order; supports ``len`` and integer indexing.
        budget: ``R``, the number to accept (``1 <= R <= N``).
        alpha: observation length (usually :func:`alpha_star`), ``0 <= alpha <= N - R``.

    Returns:
        :class:`StoppingDecision` with exactly ``R`` accepted positions.

    Raises:
        ValueError: bad ``R`` or ``alpha``. (A non-finite score ranks below every finite one;
        module docstring.)
    """
    n = len(scores)
    _check_n(n)
    _check_budget(budget, n)
    if int(alpha) != alpha or not 0 <= alpha <= n - budget:
        raise ValueError(f"alpha must be an integer in [0, N - R] = [0, {n - budget}], got {alpha!r}")
    alpha = int(alpha)
    threshold = -math.inf
    for i in range(alpha):
        s = _score(scores, i)
        threshold = max(threshold, s)
    accepted: list[int] = []
    tail: list[int] = []
    i = alpha
    while len(accepted) < budget and i < n:
        if n - i <= budget - len(accepted):  # candidates left == budget left: take them all
            tail.extend(range(i, n))
            accepted.extend(range(i, n))
            for j in range(i, n):  # the server still contacts (trains with) them
                _score(scores, j)
            i = n
            break
        if _score(scores, i) > threshold:
            accepted.append(i)
        i += 1
    return StoppingDecision(
        accepted, evaluated=accepted[-1] + 1, threshold=threshold if alpha else None, alpha=alpha, tail_filled=tail
    )


def online_random_rule(n: int, budget: int, rng: np.random.Generator) -> StoppingDecision:
    """Online random baseline (the paper's): accept each arriving candidate with probability
    ``R / N`` without looking at its score, with the same tail-fill as the secretary rule.

    Args:
        n: number of candidates ``N``.
        budget: ``R`` (``1 <= R <= N``).
        rng: seeded generator (one uniform draw per candidate considered).

    Returns:
        :class:`StoppingDecision` with exactly ``R`` accepted positions.

    Raises:
        ValueError: bad ``N`` or ``R``.
    """
    _check_n(n)
    _check_budget(budget, n)
    p = budget / n
    accepted: list[int] = []
    tail: list[int] = []
    for i in range(n):
        if len(accepted) == budget:
            break
        if n - i <= budget - len(accepted):
            tail.extend(range(i, n))
            accepted.extend(range(i, n))
            break
        if rng.random() < p:
            accepted.append(i)
    return StoppingDecision(accepted, evaluated=accepted[-1] + 1, tail_filled=tail)


def offline_best_rule(scores: Sequence[float], budget: int) -> StoppingDecision:
    """Offline best baseline (the paper's): evaluate all ``N`` candidates, accept the top ``R``.

    Ties are broken by arrival position (earlier first; stable sort); non-finite scores rank
    last. Accepted positions are returned in arrival order.

    Raises:
        ValueError: bad ``R``.
    """
    n = len(scores)
    _check_n(n)
    _check_budget(budget, n)
    s = np.array([_score(scores, i) for i in range(n)], dtype=np.float64)
    top = np.argsort(-s, kind="stable")[:budget]
    return StoppingDecision(sorted(int(i) for i in top), evaluated=n)


def competitive_ratio(scores: Sequence[float], accepted: Sequence[int], budget: int) -> float:
    """Sum of the accepted candidates' scores divided by the offline best's (sum of the top
    ``R`` scores), as the paper reports it. 1.0 means as good as offline best. A non-finite score counts as 0.

    Raises:
        ValueError: bad ``R``, or the offline best's sum is not positive.
    """
    best = offline_best_rule(scores, budget)
    denom = float(sum(_value(scores, i) for i in best.accepted))
    if not denom > 0:
        raise ValueError(f"competitive ratio undefined: offline best's score sum is {denom}")
    return float(sum(_value(scores, i) for i in accepted)) / denom


def _value(scores: Sequence[float], i: int) -> float:
    """Candidate ``i``'s score in a sum: a non-finite score counts as 0."""
    s = _score(scores, i)
    return s if math.isfinite(s) else 0.0


def _score(scores: Sequence[float], i: int) -> float:
    """Candidate ``i``'s score for ranking: a non-finite score becomes ``-inf`` (never wins)."""
    s = float(scores[i])
    if not math.isfinite(s):
        log.warning("candidate at position %d has a non-finite score (%s); it ranks below every finite score", i, s)
        return -math.inf
    return s
