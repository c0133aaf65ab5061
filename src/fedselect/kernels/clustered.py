"""Clustered sampling (Fraboni, Vidal, Kameni, Lorenzi, "Clustered Sampling: Low-Variance and
Improved Representativity for Clients Selection in Federated Learning", ICML 2021).

A round samples m clients, one from each of m distributions ``W_1 .. W_m`` over the clients,
with ``r_{k,i}`` the probability of client i in ``W_k``, such that every ``W_k`` sums to 1 and
every client's probabilities sum to ``m p_i`` (``p_i = n_i / sum n``, its data share). Each draw
weighs ``1/m`` in the aggregate, so a client's aggregation weight is ``omega_i = (draws of i) /
m`` and ``E[omega_i] = (1/m) sum_k r_{k,i} = p_i``: the aggregate is unbiased, as with
multinomial (MD) sampling, with a lower variance when the distributions are built from
clusters.

Here probabilities are kept exact as integer units: client i holds ``m n_i`` units, every
distribution ``M = sum n`` units, ``r_{k,i} = units_{k,i} / M``.

* :func:`size_distributions` — Algorithm 1 (clusters by sample size): the clients, largest
  first (ties: lowest id), pour their units into ``W_1``, then ``W_2`` ..., a client spilling
  over into the next distribution when the current one is full.
* :func:`cut_clusters` and :func:`cluster_distributions` — Algorithm 2 (clusters by the
  similarity of the clients' representative gradients): the hierarchical-clustering tree (Ward
  linkage) is cut into the largest subtrees whose units do not exceed ``M`` (a weight of at most
  ``1/m``); the m largest such clusters seed one distribution each, and the clients of the
  other clusters (smallest cluster first, clients by id; a client with more than ``M`` units
  first) fill the free room as in Algorithm 1.
* :func:`draw` and :func:`aggregation_weights` — one client from each distribution with the
  caller's generator; the distinct clients with their weights ``count / m``.

Worked example (``tests/selectors/test_clustered_sampling.py``): sizes [50, 30, 20], m = 2 (M = 100): the
units are [100, 60, 40]; ``W_1 = {0: 1}``, ``W_2 = {1: 0.6, 2: 0.4}``; client 0 is drawn every
round with weight 1/2 = p_0.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["size_distributions", "cut_clusters", "cluster_distributions", "draw", "aggregation_weights"]


def _sizes(sizes: Sequence[int] | np.ndarray, m: int) -> np.ndarray:
    n = np.asarray(sizes, dtype=np.int64).ravel()
    if n.size == 0 or np.any(n < 0) or int(n.sum()) <= 0:
        raise ValueError(f"clustered sampling needs client sizes >= 0 with a positive sum, got {list(n)[:8]}")
    if not 1 <= int(m) <= n.size:
        raise ValueError(f"clustered sampling draws m = {m} clients; need 1 <= m <= {n.size} (the clients)")
    return n


def _pour(table: np.ndarray, order: Sequence[int], units: np.ndarray, capacity: int) -> None:
    """Pour ``units[i]`` of every client of ``order`` into the rows of ``table`` that still have
    room (row k holds at most ``capacity`` units), first row first, spilling over."""
    k = 0
    loads = table.sum(axis=1)
    for i in order:
        left = int(units[i])
        while left > 0:
            while loads[k] >= capacity:
                k += 1
            put = min(left, capacity - int(loads[k]))
            table[k, i] += put
            loads[k] += put
            left -= put


def size_distributions(sizes: Sequence[int] | np.ndarray, m: int) -> np.ndarray:
    """Algorithm 1 of Fraboni et al.: ``(m, N)`` int64 units, ``r_{k,i} = units[k, i] / sum(sizes)``
    (module docstring). Row sums are ``sum(sizes)``, column sums ``m * sizes``.

    Raises:
        ValueError: negative sizes, a zero total, or m outside 1..N.
    """
    n = _sizes(sizes, m)
    units = int(m) * n
    table = np.zeros((int(m), n.size), dtype=np.int64)
    order = np.lexsort((np.arange(n.size), -n))  # largest first, ties: lowest id
    _pour(table, order, units, int(n.sum()))
    return table


def cut_clusters(linkage: np.ndarray, units: np.ndarray, capacity: int) -> list[list[int]]:
    """The tree of ``linkage`` (scipy's ``(N - 1, 4)`` matrix over N leaves) cut into its largest
    subtrees holding at most ``capacity`` units (``units[i]`` per leaf), each a sorted list of
    leaves, in the order of their smallest leaf. A leaf above ``capacity`` is a cluster of its
    own. Since a node holds the units of its two children, merging bottom-up while the merged
    node fits gives exactly the maximal subtrees."""
    n = len(units)
    members: dict[int, list[int]] = {i: [i] for i in range(n)}
    mass = {i: int(units[i]) for i in range(n)}
    intact = {i: True for i in range(n)}  # the node is one cluster (all its subtree fits)
    for row, (a, b, *_rest) in enumerate(np.asarray(linkage)):
        a, b, node = int(a), int(b), n + row
        mass[node] = mass[a] + mass[b]
        intact[node] = intact[a] and intact[b] and mass[node] <= capacity
        if intact[node]:
            members[node] = members.pop(a) + members.pop(b)
    return sorted((sorted(c) for c in members.values()), key=lambda c: c[0])


def cluster_distributions(clusters: Sequence[Sequence[int]], sizes: Sequence[int] | np.ndarray, m: int) -> np.ndarray:
    """Algorithm 2 of Fraboni et al. given the cut of the clustering tree (:func:`cut_clusters`
    with ``units = m * sizes`` and ``capacity = sum(sizes)``; every client in one cluster):
    ``(m, N)`` int64 units (module docstring). Row sums ``sum(sizes)``, column sums ``m * sizes``.

    Raises:
        ValueError: see :func:`size_distributions`; clusters that do not hold every client once.
    """
    n = _sizes(sizes, m)
    m, capacity = int(m), int(n.sum())
    clusters = [sorted(int(i) for i in c) for c in clusters]
    if sorted(i for c in clusters for i in c) != list(range(n.size)):
        raise ValueError(f"the clusters must hold each of the {n.size} clients once, got {clusters}")
    units = m * n
    mass = [int(units[c].sum()) for c in clusters]
    fits = [j for j in range(len(clusters)) if mass[j] <= capacity]
    seeds = sorted(fits, key=lambda j: (-mass[j], clusters[j][0]))[:m]  # the m largest clusters
    table = np.zeros((m, n.size), dtype=np.int64)
    for k, j in enumerate(seeds):
        table[k, clusters[j]] = units[clusters[j]]
    seeded = set(seeds)
    rest = [j for j in range(len(clusters)) if j not in seeded]
    rest.sort(key=lambda j: (mass[j] <= capacity, mass[j], clusters[j][0]))  # oversized clients first, then smallest
    _pour(table, [i for j in rest for i in clusters[j]], units, capacity)
    return table


def draw(rng: np.random.Generator, table: np.ndarray) -> list[int]:
    """One client from each distribution (row) of ``table`` (units), row order, with ``rng``."""
    t = np.asarray(table, dtype=np.float64)
    ids = np.arange(t.shape[1])
    return [int(rng.choice(ids, p=row / row.sum())) for row in t]


def aggregation_weights(draws: Sequence[int], m: int | None = None) -> tuple[list[int], list[float]]:
    """The distinct clients of ``draws`` (order of first draw) and their weights ``count / m``
    (m = ``len(draws)`` by default); the weights sum to 1."""
    m = len(draws) if m is None else int(m)
    ids: list[int] = []
    count: dict[int, int] = {}
    for k in draws:
        if k not in count:
            ids.append(int(k))
            count[k] = 0
        count[k] += 1
    return ids, [count[k] / m for k in ids]
