"""Partitioning a training set over clients: a scheme made by name, and each client's local hold-out.

* :func:`make_partitioner` looks a partition scheme up in the registry
  (:data:`fedselect.registry.PARTITIONERS`: the built-ins of
  :mod:`fedselect.world.data.partition_schemes`, users' registered schemes, entry points of the
  group ``fedselect.partitioners``, or ``"package.module:ClassName"``) and makes it with its
  parameters;
* :func:`local_holdout` splits one client's indices into training and held-out samples for
  per-client evaluation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedselect.registry import PARTITIONERS
from fedselect.world.data.partition_schemes.base import Partitioner

__all__ = ["PARTITIONERS", "local_holdout", "make_partitioner"]


def make_partitioner(scheme: str, **params: Any) -> Partitioner:
    """Instantiate scheme ``scheme`` (a registered name, an entry point of the group
    ``fedselect.partitioners`` or ``"package.module:ClassName"``) with ``params``.

    Raises:
        ValueError: unknown scheme (lists the known ones) or bad parameters.
    """
    cls = PARTITIONERS.get(scheme)
    try:
        return cls(**params)
    except TypeError as e:
        raise ValueError(f"partition scheme {scheme!r}: {e}") from None


def local_holdout(
    indices: np.ndarray, fraction: float, rng: np.random.Generator, min_train: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Split one client's indices into (train, held-out) for per-client evaluation.

    ``round(fraction * n)`` samples are held out, but never so many that fewer than
    ``min_train`` remain for training. ``fraction`` in [0, 1).

    Raises:
        ValueError: fraction outside [0, 1).
    """
    if not 0 <= fraction < 1:
        raise ValueError(f"holdout fraction must be in [0, 1), got {fraction}")
    idx = rng.permutation(np.asarray(indices, dtype=np.int64))
    n_hold = min(int(round(fraction * len(idx))), max(len(idx) - min_train, 0))
    return np.sort(idx[n_hold:]), np.sort(idx[:n_hold])
