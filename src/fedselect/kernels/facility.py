"""Greedy facility location over client dissimilarities (DivFL: Balakrishnan, Li, Zhou,
Himayat, Smith, Bilmes, "Diverse Client Selection for Federated Learning via Submodular
Maximization", ICLR 2022).

DivFL picks the set S of k clients whose gradients best stand for everyone's: it minimises
``L(S) = sum_{j in V} min_{i in S} d(j, i)`` with ``d(j, i) = ||grad f_j - grad f_i||``, i.e.
maximises the submodular facility-location function ``F(S) = sum_j max_{i in S} (C - d(j, i))``
(``C`` a constant above every d). The greedy algorithm adds, k times, the candidate with the
largest marginal gain, i.e. the lowest ``L(S + i)``; it is within ``1 - 1/e`` of the best set.
Its stochastic variant (Mirzasoleiman et al., "Lazier than lazy greedy", AAAI 2015, which DivFL
names for large N) looks, at each step, only at a random subset of ``ceil((N / k) ln(1 /
epsilon))`` of the remaining candidates, within ``1 - 1/e - epsilon`` in expectation.

``V`` is every client (the set to be represented), the candidates those that may be chosen
(online ones). Ties: the lowest id.

Worked example (``tests/selectors/test_divfl.py``): five clients with updates (x, 0) at x = 0, 2, 3, 7, 12,
k = 3: the greedy order 2, 4, 3 with L = 17, 8, 4.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

__all__ = ["facility_cost", "greedy", "stochastic_subset_size"]


def facility_cost(dist: np.ndarray, chosen: Sequence[int]) -> float:
    """``L(S) = sum_j min_{i in S} dist[j, i]`` (nan for an empty S)."""
    chosen = list(chosen)
    if not chosen:
        return math.nan
    return float(np.asarray(dist, dtype=np.float64)[:, chosen].min(axis=1).sum())


def stochastic_subset_size(num_clients: int, k: int, epsilon: float) -> int:
    """``ceil((N / k) ln(1 / epsilon))``, at least 1 (Mirzasoleiman et al. 2015).

    Raises:
        ValueError: epsilon outside (0, 1), or k < 1.
    """
    if not 0 < epsilon < 1 or k < 1:
        raise ValueError(f"need 0 < epsilon < 1 and k >= 1, got epsilon={epsilon}, k={k}")
    return max(1, math.ceil(num_clients / k * math.log(1.0 / epsilon) - 1e-9))


def greedy(
    dist: np.ndarray,
    k: int,
    candidates: Sequence[int] | np.ndarray | None = None,
    rng: np.random.Generator | None = None,
    subset: int | None = None,
) -> list[int]:
    """The greedy minimiser of ``L(S)`` (module docstring): ``k`` candidates in the order they
    were added.

    Args:
        dist: ``(N, N)`` dissimilarities, ``dist[j, i]`` = d(j, i) (the diagonal 0).
        k: how many to pick (capped at the candidates).
        candidates: ids that may be chosen (default: all N).
        rng, subset: the stochastic variant: at each step only ``subset`` candidates drawn
            uniformly without replacement from those left, with ``rng`` (both or neither).

    Raises:
        ValueError: ``dist`` not square, or only one of ``rng`` and ``subset``.
    """
    d = np.asarray(dist, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise ValueError(f"dissimilarities must be a square (N, N) matrix, got shape {d.shape}")
    if (rng is None) != (subset is None):
        raise ValueError("the stochastic greedy needs both a generator and a subset size")
    left = np.arange(d.shape[0]) if candidates is None else np.sort(np.asarray(candidates, dtype=np.int64))
    best = np.full(d.shape[0], np.inf)  # min_{i in S} d(j, i) for every j
    order: list[int] = []
    for _ in range(min(int(k), left.size)):
        look = left
        if subset is not None and subset < left.size:
            look = np.sort(rng.choice(left, size=int(subset), replace=False))
        costs = np.minimum(best[:, None], d[:, look]).sum(axis=0)
        i = int(look[int(np.argmin(costs))])  # argmin: the first (lowest id) of equal costs
        order.append(i)
        best = np.minimum(best, d[:, i])
        left = left[left != i]
    return order
