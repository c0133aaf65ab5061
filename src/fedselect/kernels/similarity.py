"""CEFL's client-similarity graph, Louvain clustering into K communities, and leaders.

Implements CEFL's Steps 1-3 (the similarity graph, Louvain clustering, the leaders):

* :func:`layer_groups` — the "layers" of a model: every named parameter tensor grouped by the
  module that owns it (weight + bias of one module form one layer).
* :func:`similarity_factors` — CE-eq 3, ``d_ij = sum_l || w_i^l - w_j^l ||_2``.
* :func:`edge_weights` — CE-eq 4, ``S_ij = -d_ij + d_min + d_max``.
* :func:`louvain_k` — networkx Louvain on the complete graph weighted by ``S``, with a search
  over the resolution parameter so that exactly K communities come out (documented
  merge/split fallback otherwise).
* :func:`select_leaders` — CE-eq 5 with the tie-break "larger data set, then lower id".

Knows nothing of training: inputs are state dicts / matrices, outputs are numpy arrays and
lists of client indices ``0..N-1`` (positions in the inputs).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:  # imported where used: networkx is slow to import
    import networkx as nx

__all__ = [
    "layer_groups",
    "similarity_factors",
    "edge_weights",
    "similarity_graph",
    "louvain_k",
    "select_leaders",
    "ClusterCountWarning",
]


class ClusterCountWarning(UserWarning):
    """No Louvain resolution gave exactly K communities; the merge/split fallback was used."""


def layer_groups(names: Sequence[str]) -> dict[str, list[str]]:
    """Group parameter names into layers, in first-seen order.

    A layer is the set of tensors owned by one module: ``"conv1.weight"`` and ``"conv1.bias"``
    form layer ``"conv1"``. Names without a dot form a layer of their own.

    Args:
        names: parameter (or state-dict) names, e.g. ``model.state_dict().keys()``.

    Returns:
        ordered mapping layer name -> list of the names in it.
    """
    groups: dict[str, list[str]] = {}
    for n in names:
        layer = n.rsplit(".", 1)[0] if "." in n else n
        groups.setdefault(layer, []).append(n)
    return groups


def _flat_layers(state: Mapping[str, torch.Tensor], groups: dict[str, list[str]]) -> list[torch.Tensor]:
    out = []
    for layer, names in groups.items():
        missing = [n for n in names if n not in state]
        if missing:
            raise ValueError(f"state dict lacks {missing} (layer {layer!r}); all clients need the same model")
        out.append(torch.cat([state[n].detach().reshape(-1).to(torch.float64) for n in names]))
    return out


def similarity_factors(states: Sequence[Mapping[str, torch.Tensor]], names: Sequence[str] | None = None) -> np.ndarray:
    """Pairwise similarity factors between client models (CE-eq 3).

    ``d_ij = sum over layers l of || w_i^l - w_j^l ||_2``, where a layer is the concatenation of
    the tensors one module owns (weight and bias, see :func:`layer_groups`). Computed in float64.

    Args:
        states: N state dicts (name -> tensor) of models with the same architecture.
        names: the tensor names to use (default: every floating-point tensor of ``states[0]``;
            integer buffers such as BatchNorm counters are skipped).

    Returns:
        ``d``: float64 array of shape ``(N, N)``, symmetric, zero diagonal, ``d_ij >= 0``.

    Raises:
        ValueError: no states, no usable tensors, or a state lacking a tensor or with a
            different shape.
    """
    if len(states) == 0:
        raise ValueError("similarity_factors needs at least one client state, got 0")
    if names is None:
        names = [n for n, t in states[0].items() if torch.is_tensor(t) and t.is_floating_point()]
    if not names:
        raise ValueError("similarity_factors: no floating-point tensors to compare")
    groups = layer_groups(list(names))
    flats = [_flat_layers(s, groups) for s in states]
    for k, f in enumerate(flats):
        for a, b, layer in zip(f, flats[0], groups):
            if a.shape != b.shape:
                raise ValueError(f"client {k}: layer {layer!r} has {a.numel()} values, client 0 has {b.numel()}")
    n = len(states)
    d = np.zeros((n, n), dtype=np.float64)
    for i in range(n):
        for j in range(i + 1, n):
            v = sum(float(torch.linalg.vector_norm(a - b)) for a, b in zip(flats[i], flats[j]))
            d[i, j] = d[j, i] = v
    return d


def edge_weights(d: np.ndarray) -> np.ndarray:
    """Edge weights of the similarity graph (CE-eq 4): ``S_ij = -d_ij + d_min + d_max``.

    ``d_min`` and ``d_max`` are taken over the off-diagonal entries (``i != j``), so the most
    similar pair gets ``S = d_max`` and the least similar pair gets ``S = d_min``; all
    ``S_ij >= 0`` when ``d >= 0``. The diagonal of the result is 0 (the graph has no
    self-loops).

    Args:
        d: ``(N, N)`` symmetric matrix of similarity factors (:func:`similarity_factors`).

    Returns:
        ``S``: float64 array ``(N, N)``, symmetric, zero diagonal. For ``N = 1``: ``[[0.]]``.

    Raises:
        ValueError: ``d`` is not square, not symmetric, or has negative / non-finite entries.
    """
    d = np.asarray(d, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise ValueError(f"d must be a square (N, N) matrix, got shape {d.shape}")
    if not np.all(np.isfinite(d)) or np.any(d < 0):
        bad = sorted({int(i) for i in np.argwhere(~np.isfinite(d) | (d < 0))[:, 0]})
        raise ValueError(
            f"d must be finite and non-negative; clients {bad} have non-finite or negative similarity "
            f"factors (a diverged warm-up model?)"
        )
    if not np.allclose(d, d.T, rtol=1e-12, atol=1e-12):
        raise ValueError("d must be symmetric")
    n = d.shape[0]
    s = np.zeros_like(d)
    if n < 2:
        return s
    off = ~np.eye(n, dtype=bool)
    d_min, d_max = float(d[off].min()), float(d[off].max())
    s[off] = -d[off] + d_min + d_max
    return s


def similarity_graph(s: np.ndarray) -> nx.Graph:
    """Complete undirected graph on nodes ``0..N-1`` (added in sorted order) with edge
    attribute ``weight = S_ij``.

    If every weight is 0 (all models identical, or N = 2 with ``d = 0``), every edge gets
    weight 1 instead, so that Louvain's modularity is defined; documented in docs/cefl.md.
    """
    import networkx as nx

    s = np.asarray(s, dtype=np.float64)
    n = s.shape[0]
    g = nx.Graph()
    g.add_nodes_from(range(n))
    all_zero = n < 2 or not np.any(s[~np.eye(n, dtype=bool)] > 0)
    for i in range(n):
        for j in range(i + 1, n):
            g.add_edge(i, j, weight=1.0 if all_zero else float(s[i, j]))
    return g


def _canonical(parts) -> list[list[int]]:
    comms = [sorted(int(v) for v in c) for c in parts if len(c)]
    return sorted(comms, key=lambda c: c[0])


def _louvain(g: nx.Graph, resolution: float, seed: int) -> list[list[int]]:
    import networkx as nx

    return _canonical(nx.community.louvain_communities(g, weight="weight", resolution=resolution, seed=seed))


def _mean_between(s: np.ndarray, a: list[int], b: list[int]) -> float:
    return float(s[np.ix_(a, b)].mean())


def louvain_k(
    s: np.ndarray,
    k: int,
    rng: np.random.Generator,
    *,
    resolution_bounds: tuple[float, float] = (1e-4, 1e4),
    max_iter: int = 60,
) -> tuple[list[list[int]], dict]:
    """Cluster the similarity graph into exactly ``k`` communities (CEFL Step 2: the number
    of clusters is given; the resolution search that yields it is fedselect's).

    1. Louvain (``networkx.community.louvain_communities``, weight ``S``, one integer seed
       drawn once from ``rng`` and reused for every call, so the search is deterministic) at
       resolution 1. Larger resolution gives more, smaller communities.
    2. If the count is not ``k``: bisection on ``log(resolution)`` between the bounds
       (default 1e-4 and 1e4), at most ``max_iter`` Louvain calls in all, stopping when a
       resolution gives exactly ``k``.
    3. Fallback if no resolution gave ``k``: start from the tried partition whose count is
       closest to ``k`` (ties: fewer communities), then
       - while too many: merge the smallest community (ties: lowest first member) into the
         community with the highest mean similarity ``S`` to it;
       - while too few: split the largest community (ties: lowest first member) with a
         second Louvain pass on its subgraph (resolution search for 2 parts); if that pass
         cannot split it, the member with the lowest summed similarity to the rest is split
         off alone.
       A :class:`ClusterCountWarning` reports the counts achieved by Louvain and after the
       fallback.

    Args:
        s: ``(N, N)`` edge weights (CE-eq 4, :func:`edge_weights`).
        k: number of communities wanted, ``1 <= k <= N``.
        rng: source of the Louvain seed.
        resolution_bounds: search interval for the resolution (both > 0).
        max_iter: most Louvain calls in the search (>= 1).

    Returns:
        ``(communities, info)``: ``communities`` is a list of ``k`` sorted lists of node
        indices, ordered by their smallest member, covering ``0..N-1`` exactly once;
        ``info`` has ``resolution`` (the one that gave the partition, or None after the
        fallback), ``louvain_count`` (count Louvain reached closest to k), ``fallback``
        (bool), ``calls`` (Louvain calls made) and ``seed``.

    Raises:
        ValueError: ``k < 1``, ``k > N``, bad ``s`` or bad bounds.
    """
    s, n, lo, hi = _louvain_k_args(s, k, resolution_bounds, max_iter)
    seed = int(rng.integers(0, 2**31 - 1))
    info: dict = {"seed": seed, "fallback": False, "resolution": None, "calls": 0}
    if k == n:
        info.update(resolution=None, louvain_count=n)
        return [[i] for i in range(n)], info
    if k == 1:
        info.update(resolution=None, louvain_count=1)
        return [list(range(n))], info

    part, tried = _resolution_search(similarity_graph(s), k, lo, hi, max_iter, seed, info)
    if len(part) == k:
        info.update(resolution=tried[-1][0], louvain_count=k)
        return part, info

    comms = _merge_split_fallback(s, k, tried, seed, info)
    msg = (
        f"Louvain gave {info['louvain_count']} communities at best (wanted k={k}, resolution searched "
        f"in [{lo:g}, {hi:g}], {info['calls']} calls); merge/split fallback produced {len(comms)}"
    )
    warnings.warn(msg, ClusterCountWarning, stacklevel=2)  # callers decide where it goes (a run logs it once)
    return comms, info


def _louvain_k_args(
    s: np.ndarray, k: int, resolution_bounds: tuple[float, float], max_iter: int
) -> tuple[np.ndarray, int, float, float]:
    """:func:`louvain_k`'s arguments checked: ``(s as float64, N, low bound, high bound)``.

    Raises:
        ValueError: ``s`` not square, ``k`` not an integer in ``1..N``, bad bounds or ``max_iter``.
    """
    s = np.asarray(s, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] != s.shape[1]:
        raise ValueError(f"s must be a square (N, N) matrix, got shape {s.shape}")
    n = s.shape[0]
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"number of clusters k must be an integer >= 1, got {k!r}")
    if k > n:
        raise ValueError(f"number of clusters k={k} exceeds the number of clients N={n}")
    lo, hi = resolution_bounds
    if not (0 < lo < hi):
        raise ValueError(f"resolution_bounds must satisfy 0 < low < high, got {resolution_bounds}")
    if max_iter < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter}")
    return s, n, lo, hi


def _resolution_search(
    g: nx.Graph, k: int, lo: float, hi: float, max_iter: int, seed: int, info: dict
) -> tuple[list[list[int]], list[tuple[float, list[list[int]]]]]:
    """Steps 1-2 of :func:`louvain_k`: Louvain at resolution 1, then bisection on
    ``log(resolution)`` in ``[lo, hi]`` until a call gives ``k`` communities or ``max_iter``
    calls are made (counted in ``info["calls"]``). Returns the last partition and every
    ``(resolution, partition)`` tried, in order."""
    tried: list[tuple[float, list[list[int]]]] = []

    def run(res: float) -> list[list[int]]:
        part = _louvain(g, res, seed)
        info["calls"] += 1
        tried.append((res, part))
        return part

    part = run(1.0)
    if len(part) != k:
        # Bracket: count(log_lo) <= k <= count(log_hi) is hoped for; bisect in log space.
        a, b = math.log(lo), math.log(hi)
        if len(part) < k:
            a = 0.0
        else:
            b = 0.0
        while info["calls"] < max_iter:
            mid = 0.5 * (a + b)
            part = run(math.exp(mid))
            c = len(part)
            if c == k:
                break
            if c < k:
                a = mid
            else:
                b = mid
            if b - a < 1e-9:
                break
    return part, tried


def _merge_split_fallback(
    s: np.ndarray, k: int, tried: list[tuple[float, list[list[int]]]], seed: int, info: dict
) -> list[list[int]]:
    """Step 3 of :func:`louvain_k`: from the tried partition closest to ``k`` (ties: fewer
    communities, then first tried), merge the smallest community into its most similar one
    while there are too many, split the largest in two while there are too few. Records
    ``louvain_count`` and ``fallback`` in ``info``; returns the ``k`` communities, canonical."""
    # Fallback: the closest partition seen (ties -> fewer communities, then first tried).
    best_res, best = min(tried, key=lambda t: (abs(len(t[1]) - k), len(t[1])))
    info.update(louvain_count=len(best), fallback=True, resolution=None)
    comms = [list(c) for c in best]
    while len(comms) > k:
        small = min(range(len(comms)), key=lambda i: (len(comms[i]), comms[i][0]))
        others = [i for i in range(len(comms)) if i != small]
        target = max(others, key=lambda i: (_mean_between(s, comms[small], comms[i]), -comms[i][0]))
        comms[target] = sorted(comms[target] + comms[small])
        del comms[small]
    while len(comms) < k:
        big = max(range(len(comms)), key=lambda i: (len(comms[i]), -comms[i][0]))
        members = comms[big]
        pieces = _split_two(s, members, seed, info)
        comms[big : big + 1] = pieces
    return _canonical(comms)


def _split_two(s: np.ndarray, members: list[int], seed: int, info: dict) -> list[list[int]]:
    """Split ``members`` (>= 2 nodes) into two parts: Louvain on the subgraph, resolution
    searched for exactly 2 parts (more parts: the largest piece vs the rest); otherwise the
    member least similar to the others goes alone."""
    if len(members) < 2:
        raise ValueError("cannot split a community of one member")  # unreachable when k <= N
    sub = similarity_graph(s[np.ix_(members, members)])
    a, b = math.log(1e-4), math.log(1e4)
    for _ in range(40):
        mid = 0.5 * (a + b)
        parts = _louvain(sub, math.exp(mid), seed)
        info["calls"] += 1
        if len(parts) == 2:
            return [[members[i] for i in p] for p in parts]
        if len(parts) < 2:
            a = mid
        else:
            b = mid
    sums = s[np.ix_(members, members)].sum(axis=1)
    lone = int(np.argmin(sums))  # ties -> lowest position
    return [[members[lone]], [m for i, m in enumerate(members) if i != lone]]


def select_leaders(s: np.ndarray, communities: Sequence[Sequence[int]], sizes: Sequence[int], rtol: float = 1e-12) -> list[int]:
    """One leader per community (CE-eq 5): ``c_k = argmax_{i in C_k} sum_{j in C_k, j != i} S_ij``.

    Ties (sums equal within relative tolerance ``rtol``) go to the client with the larger
    data set (``sizes[i]``, training samples), then to the lower index. A single-member
    community is its own leader. A non-finite sum ranks below every finite one (a client
    with NaN similarities never leads unless every member has one).

    Args:
        s: ``(N, N)`` edge weights (CE-eq 4).
        communities: lists of node indices.
        sizes: training-set size of every node, length N.

    Returns:
        list of leader indices, one per community, in the order of ``communities``.

    Raises:
        ValueError: empty community, index out of range, or ``sizes`` of the wrong length.
    """
    s = np.asarray(s, dtype=np.float64)
    n = s.shape[0]
    if len(sizes) != n:
        raise ValueError(f"sizes has {len(sizes)} entries for {n} clients")
    leaders = []
    for c in communities:
        c = [int(i) for i in c]
        if not c:
            raise ValueError("empty community")
        if min(c) < 0 or max(c) >= n:
            raise ValueError(f"community {c} has an index outside 0..{n - 1}")
        scores = {i: float(sum(s[i, j] for j in c if j != i)) for i in c}
        scores = {i: v if math.isfinite(v) else -math.inf for i, v in scores.items()}  # NaN never leads
        top = max(scores.values())
        tol = rtol * max(abs(top), 1.0) if math.isfinite(top) else 0.0
        tied = [i for i in c if scores[i] >= top - tol]
        leaders.append(min(tied, key=lambda i: (-int(sizes[i]), i)))
    return leaders
