"""The clients' representative gradients and their pairwise dissimilarities, kept up to date
as participants report (clustered sampling's Algorithm 2, DivFL's facility location).

A client's representative is a vector ``(P,)`` standing for its gradient: its last local
update ``w_k - w`` (the model it trained minus the model it started from; clustered sampling's
"representative gradient"), zero until it is known. :class:`Representatives` holds the ``(N,
P)`` vectors and the ``(N, N)`` dissimilarity matrix and recomputes only the rows and columns
of the clients whose vector changed (``U x N x P`` work per round instead of ``N^2 x P``).

Dissimilarities (``metric``):

* ``L2`` — ``||g_i - g_j||_2`` (DivFL's ``||grad f_i - grad f_j||``);
* ``L1`` — ``||g_i - g_j||_1``;
* ``arccos`` — the angle ``arccos(<g_i, g_j> / (||g_i|| ||g_j||))`` in [0, pi]; a zero vector
  is at angle pi/2 from every non-zero one and at 0 from another zero vector.

Computed in float64 from the float32 vectors, in blocks of clients (memory ``block x P``).
Worked example (``tests/selectors/test_divfl.py``): g_0 = (3, 4), g_1 = 0: L2 5, L1 7, arccos pi/2.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["METRICS", "Representatives", "dissimilarities"]

#: the dissimilarities of the module docstring
METRICS = ("L2", "L1", "arccos")
_BLOCK = 128


def dissimilarities(rows: np.ndarray, vectors: np.ndarray, metric: str) -> np.ndarray:
    """``(R, N)`` float64 dissimilarities of the vectors ``rows`` ``(R, P)`` to ``vectors``
    ``(N, P)`` (module docstring).

    Raises:
        ValueError: an unknown metric, or vectors of different lengths.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown dissimilarity {metric!r}; allowed: {', '.join(repr(m) for m in METRICS)}")
    a = np.asarray(rows, dtype=np.float64)
    if a.ndim != 2 or vectors.ndim != 2 or a.shape[1] != vectors.shape[1]:
        raise ValueError(f"vectors of shapes {a.shape} and {vectors.shape}; need (R, P) and (N, P)")
    out = np.empty((a.shape[0], vectors.shape[0]), dtype=np.float64)
    a_sq = np.einsum("ij,ij->i", a, a)
    for s in range(0, vectors.shape[0], _BLOCK):
        b = np.asarray(vectors[s : s + _BLOCK], dtype=np.float64)
        if metric == "L1":  # one row at a time: memory block x P
            for r in range(a.shape[0]):
                out[r, s : s + b.shape[0]] = np.abs(b - a[r]).sum(axis=1)
            continue
        dot = a @ b.T
        b_sq = np.einsum("ij,ij->i", b, b)
        if metric == "L2":
            out[:, s : s + b.shape[0]] = np.sqrt(np.maximum(a_sq[:, None] + b_sq[None, :] - 2.0 * dot, 0.0))
            continue
        norms = np.sqrt(a_sq)[:, None] * np.sqrt(b_sq)[None, :]
        zero_a, zero_b = (a_sq == 0)[:, None], (b_sq == 0)[None, :]
        with np.errstate(invalid="ignore", divide="ignore"):
            cos = np.where(norms > 0, dot / norms, 0.0)
        angle = np.arccos(np.clip(cos, -1.0, 1.0))
        out[:, s : s + b.shape[0]] = np.where(zero_a & zero_b, 0.0, angle)
    return out


class Representatives:
    """``(N, P)`` representative vectors (float32, zero at first) and their ``(N, N)``
    dissimilarity matrix (module docstring).

    Args:
        num_clients: N. dim: P. metric: one of :data:`METRICS`.

    Raises:
        ValueError: an unknown metric.
    """

    def __init__(self, num_clients: int, dim: int, metric: str):
        if metric not in METRICS:
            raise ValueError(f"unknown dissimilarity {metric!r}; allowed: {', '.join(repr(m) for m in METRICS)}")
        self.metric = metric
        self.vectors = np.zeros((int(num_clients), int(dim)), dtype=np.float32)
        self.known = np.zeros(int(num_clients), dtype=bool)
        self.matrix = np.zeros((int(num_clients), int(num_clients)), dtype=np.float64)  # all zero vectors: 0 apart

    def update(self, ids: Sequence[int], vectors: np.ndarray) -> None:
        """Replace the vectors of ``ids`` (``(len(ids), P)``) and recompute their rows and columns
        of the matrix (the diagonal is 0)."""
        ids = np.asarray(list(ids), dtype=np.int64)
        if ids.size == 0:
            return
        self.vectors[ids] = np.asarray(vectors, dtype=np.float32)
        self.known[ids] = True
        for s in range(0, ids.size, _BLOCK):
            part = ids[s : s + _BLOCK]
            rows = dissimilarities(self.vectors[part], self.vectors, self.metric)
            rows[np.arange(part.size), part] = 0.0
            self.matrix[part, :] = rows
            self.matrix[:, part] = rows.T

    def state_dict(self) -> dict[str, Any]:
        return {"vectors": self.vectors.copy(), "known": self.known.copy(), "matrix": self.matrix.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.vectors = np.array(state["vectors"], dtype=np.float32, copy=True)
        self.known = np.array(state["known"], dtype=bool, copy=True)
        self.matrix = np.array(state["matrix"], dtype=np.float64, copy=True)
