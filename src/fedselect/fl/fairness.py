"""Fairness figures of a run: how evenly the clients took part, and how evenly the final model
serves them.

* Participation (the times each client was selected over the rounds so far, ``selected`` of
  ``metrics.csv``): Jain's fairness index (Jain, Chiu, Hawe 1984) ``J = (sum x)^2 / (N sum
  x^2)``, 1 when every client took part equally often, 1/N when one client took every place;
  the Gini coefficient ``G = sum_i sum_j |x_i - x_j| / (2 N^2 mean(x))``, 0 when equal, up to
  ``1 - 1/N``; and the share of the N clients never selected.
* Per-client accuracy of the final model on each client's own held-out split (as in q-FFL, Li
  et al. ICLR 2020, and DivFL, Balakrishnan et al. ICLR 2022): the mean over clients, the mean
  of the worst 10 % of clients (``ceil(0.1 N)`` lowest accuracies) and the population standard
  deviation.

Worked example (``tests/fl/test_fairness.py``): counts [3, 1, 0, 0] give J = 16 / (4 x 10) = 0.4,
G = 20 / (2 x 4^2 x 1) = 0.625 (the ordered pairs differ by 20 in all) and a
never-selected share 0.5.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

__all__ = [
    "PARTICIPATION_COLUMNS",
    "CLIENT_ACCURACY_KEYS",
    "jain_index",
    "gini",
    "never_selected_share",
    "worst_share_mean",
    "participation_figures",
    "client_accuracy_figures",
    "selection_counts",
]

#: the per-round participation columns of ``metrics.csv`` (over rounds 1..t) and summary keys
PARTICIPATION_COLUMNS = ("participation_jain", "participation_gini", "never_selected_share")
#: summary keys of the final model's per-client accuracy on the held-out splits
CLIENT_ACCURACY_KEYS = ("client_accuracy_mean", "client_accuracy_worst10", "client_accuracy_std")


def _counts(x: Sequence[float] | np.ndarray) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).ravel()
    if a.size == 0 or not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError(f"participation counts must be a non-empty sequence of finite values >= 0, got {list(a)[:8]}")
    return a


def jain_index(counts: Sequence[float] | np.ndarray) -> float:
    """Jain's index ``(sum x)^2 / (N sum x^2)`` of ``counts`` ``(N,)`` in [1/N, 1]; nan when every
    count is 0 (nobody was selected yet).

    Raises:
        ValueError: an empty sequence, a negative or non-finite count.
    """
    a = _counts(counts)
    sq = float(np.sum(a * a))
    return math.nan if sq == 0 else float(np.sum(a)) ** 2 / (a.size * sq)


def gini(counts: Sequence[float] | np.ndarray) -> float:
    """The Gini coefficient ``sum_i sum_j |x_i - x_j| / (2 N^2 mean(x))`` of ``counts`` ``(N,)``
    in [0, 1 - 1/N]; nan when every count is 0.

    Raises:
        ValueError: an empty sequence, a negative or non-finite count.
    """
    a = np.sort(_counts(counts))
    total = float(a.sum())
    if total == 0:
        return math.nan
    n = a.size
    # sum_i sum_j |x_i - x_j| = 2 sum_i (2 i - n + 1) x_(i) over the sorted values (i = 0..n-1)
    pair_sum = 2.0 * float(np.sum((2 * np.arange(n) - n + 1) * a))
    return pair_sum / (2.0 * n * total)


def never_selected_share(counts: Sequence[float] | np.ndarray) -> float:
    """Share of the N clients whose count is 0, in [0, 1].

    Raises:
        ValueError: an empty sequence, a negative or non-finite count.
    """
    a = _counts(counts)
    return float(np.count_nonzero(a == 0)) / a.size


def worst_share_mean(values: Sequence[float] | np.ndarray, share: float = 0.1) -> float:
    """Mean of the ``ceil(share x n)`` lowest of the finite ``values`` (NaN entries, clients that
    could not be scored, are left out); nan when none is finite.

    Raises:
        ValueError: ``share`` outside (0, 1].
    """
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share}")
    v = np.asarray(values, dtype=np.float64).ravel()
    v = np.sort(v[np.isfinite(v)])
    if v.size == 0:
        return math.nan
    k = max(1, math.ceil(share * v.size - 1e-9))
    return float(np.mean(v[:k]))


def participation_figures(counts: Sequence[float] | np.ndarray) -> dict[str, float]:
    """``{participation_jain, participation_gini, never_selected_share}`` of ``counts`` ``(N,)``
    (:data:`PARTICIPATION_COLUMNS`)."""
    return {
        "participation_jain": jain_index(counts),
        "participation_gini": gini(counts),
        "never_selected_share": never_selected_share(counts),
    }


def client_accuracy_figures(accuracies: Sequence[float] | np.ndarray) -> dict[str, float]:
    """``{client_accuracy_mean, client_accuracy_worst10, client_accuracy_std}`` of the clients'
    accuracies in [0, 1] (:data:`CLIENT_ACCURACY_KEYS`; NaN entries left out; population std)."""
    v = np.asarray(accuracies, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {k: math.nan for k in CLIENT_ACCURACY_KEYS}
    return {
        "client_accuracy_mean": float(np.mean(v)),
        "client_accuracy_worst10": worst_share_mean(v, 0.1),
        "client_accuracy_std": float(np.std(v)),
    }


def selection_counts(rows: Sequence[dict[str, str]], num_clients: int) -> np.ndarray:
    """``(N,)`` int64 times each client was selected in the rounds (>= 1) of ``rows`` (metrics
    rows as strings; their ``selected`` column, ids separated by ``;``).

    Raises:
        ValueError: an id outside 0..N-1 (the rows belong to another federation).
    """
    counts = np.zeros(int(num_clients), dtype=np.int64)
    for r in rows:
        if int(r.get("round") or 0) >= 1:
            for k in filter(None, (r.get("selected") or "").split(";")):
                if not 0 <= int(k) < num_clients:
                    raise ValueError(f"selected client {k} in round {r.get('round')} is outside 0..{num_clients - 1}")
                counts[int(k)] += 1
    return counts
