"""Sampling helpers shared by selectors (Oort, Power-of-Choice): draws without replacement with
a caller-owned ``numpy.random.Generator`` (never a global RNG)."""

from __future__ import annotations

import numpy as np


def weighted_sample(rng: np.random.Generator, ids: np.ndarray, weights: np.ndarray, k: int) -> list[int]:
    """``k`` distinct ids drawn one after another with probability proportional to ``weights``
    (renormalised after each draw). Non-positive or non-finite weights are drawn only when the
    positive ones are fewer than ``k`` (then uniformly among themselves).

    Raises:
        ValueError: ``k`` larger than ``len(ids)``.
    """
    ids = np.asarray(ids, dtype=np.int64)
    k = int(k)
    if k > ids.size:
        raise ValueError(f"cannot draw {k} distinct ids from {ids.size}")
    if k <= 0:
        return []
    w = np.asarray(weights, dtype=np.float64)
    w = np.where(np.isfinite(w) & (w > 0), w, 0.0)
    positive = int((w > 0).sum())
    if positive == 0:
        w = np.ones_like(w)
    elif positive < k:
        w = np.where(w > 0, w, w[w > 0].min() * 1e-9)
    return [int(x) for x in rng.choice(ids, size=k, replace=False, p=w / w.sum())]
