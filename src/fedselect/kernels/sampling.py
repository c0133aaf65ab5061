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


def top_desc(ids: np.ndarray, scores: np.ndarray, m: int | None = None, at_least: float | None = None):
    """The head of :func:`rank_desc` without sorting everything: the first ``m`` of ``ids``
    ranked by decreasing score (ties: lowest id first), or every id whose score is
    ``>= at_least``, with their scores. O(len(ids)) plus a sort of the head, so selecting among
    100,000 clients costs little more than among 1,000; the result equals the same slice of
    the full ranking.

    Returns:
        ``(ids, scores)``: int64 and float64 arrays in ranked order.
    """
    ids = np.asarray(ids, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float64)
    keep = np.ones(ids.size, dtype=bool)
    if at_least is not None:
        keep = scores >= at_least
    elif m is not None and m < ids.size:
        kth = np.partition(scores, ids.size - m)[ids.size - m]  # the m-th largest score
        keep = scores >= kth
    head_ids, head_scores = ids[keep], scores[keep]
    order = np.lexsort((head_ids, -head_scores))
    head_ids, head_scores = head_ids[order], head_scores[order]
    if m is not None and at_least is None:
        head_ids, head_scores = head_ids[:m], head_scores[:m]
    return head_ids, head_scores


def kth_largest(scores: np.ndarray, k: int) -> float:
    """The ``k``-th largest of ``scores`` (k >= 1), counted with multiplicity."""
    scores = np.asarray(scores, dtype=np.float64)
    return float(np.partition(scores, scores.size - k)[scores.size - k])
