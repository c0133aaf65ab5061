"""The ``fat_thin`` partition scheme: the budgeted-online paper's fat and thin clients (Phase 5, Table V).

Clients overlap (each draws its own set from the whole training set); with ``thin_classes`` /
``fat_classes`` (or ``preset: authors``) each client draws from its own subset of the classes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedselect.world.data.partition_schemes.base import Partitioner, register_partitioner

__all__ = ["FAT_THIN_PRESETS", "FatThinPartitioner"]


#: the budgeted-online authors' class skew (Federated-IoT-Classification, ``fl.py``): a thin
#: client draws from 3 of the 19 device classes, a fat one from 15 of 19 (as shares, so that
#: they apply to any number of classes: 2 and 8 of MNIST's 10)
FAT_THIN_PRESETS: dict[str, dict[str, float]] = {"authors": {"thin_classes": 3 / 19, "fat_classes": 15 / 19}}


def _class_option(key: str, v: Any) -> int | float | None:
    """``thin_classes`` / ``fat_classes``: None, an int count >= 1 or a float share in (0, 1]."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ValueError(
            f"fat_thin {key} must be a number of classes (an int >= 1), a share of the classes (a float in (0, 1]) "
            f"or null (all classes), got {v!r}"
        )
    if isinstance(v, (int, np.integer)):
        if v < 1:
            raise ValueError(f"fat_thin {key} as a number of classes must be >= 1, got {v}")
        return int(v)
    if not 0 < v <= 1:
        raise ValueError(f"fat_thin {key} as a share of the classes must be a float in (0, 1], got {v}")
    return float(v)


def _class_count(key: str, v: int | float, num_classes: int) -> int:
    """How many of ``num_classes`` classes ``v`` (a count or a share) means.

    Raises:
        ValueError: a count above ``num_classes``.
    """
    if isinstance(v, float):  # a share: rounded half up, at least one class
        return max(1, min(num_classes, int(np.floor(v * num_classes + 0.5))))
    if v > num_classes:
        raise ValueError(f"fat_thin {key} = {v}, but the training set has only {num_classes} classes; allowed 1..{num_classes}")
    return v


@register_partitioner
class FatThinPartitioner(Partitioner):
    """Fat and thin clients of the budgeted-online paper (its Phase 5, Table V).

    ``round(fat_fraction * N)`` clients, chosen at random, are *fat*: each holds about
    ``fat_share`` of the training set; the others are *thin* with about ``thin_share`` each.
    Every client's set is drawn independently from the whole training set, so clients overlap
    (sampling with replacement across clients; within one client the samples are distinct).
    "About": each size is ``round(share * n * u)`` with ``u ~ U(1 - size_jitter, 1 + size_jitter)``,
    at least 1 and at most n (the paper makes the sizes differ).

    Class skew (the authors' code, Federated-IoT-Classification ``fl.py``: thin clients from 3 of
    the 19 device classes, fat ones from 15 of 19; ``preset: authors``): with ``thin_classes``
    (``fat_classes``) every thin (fat) client first draws its own subset of the classes present in
    the training set, uniformly without replacement, then its samples from those classes only.
    A count is that many classes; a share ``s`` is ``max(1, floor(s * C + 0.5))`` of the C classes
    (so ``1`` is one class, ``1.0`` all of them). A client whose classes hold fewer samples than
    its size takes all of them (it is smaller than asked, never padded from other classes).
    With both None (the default) every client draws from all classes, exactly as before the
    option existed (the same draws from ``rng``, so the same indices).

    Args:
        fat_fraction: share of fat clients, in [0, 1] (paper 0.2).
        fat_share: fraction of the training set per fat client, in (0, 1] (paper 0.1).
        thin_share: fraction per thin client, in (0, 1] (paper 0.01).
        size_jitter: relative spread of the sizes, in [0, 1) (default 0.2).
        thin_classes: classes per thin client: an int >= 1 (at most the number of classes),
            a float share in (0, 1], or None = all (default).
        fat_classes: the same for fat clients.
        preset: ``"authors"`` sets ``thin_classes`` 3/19 and ``fat_classes`` 15/19 (shares; the
            other options keep their values, whose defaults are already the paper's).

    Raises:
        ValueError: a parameter outside its range or of the wrong type, an unknown preset, a
        preset together with ``thin_classes`` / ``fat_classes``; in :meth:`split`, a class count
        above the number of classes in the training set.
    """

    name = "fat_thin"

    def __init__(
        self,
        fat_fraction: float = 0.2,
        fat_share: float = 0.1,
        thin_share: float = 0.01,
        size_jitter: float = 0.2,
        thin_classes: int | float | None = None,
        fat_classes: int | float | None = None,
        preset: str | None = None,
    ):
        if not 0 <= fat_fraction <= 1:
            raise ValueError(f"fat_thin fat_fraction must be in [0, 1], got {fat_fraction}")
        for key, v in (("fat_share", fat_share), ("thin_share", thin_share)):
            if not 0 < v <= 1:
                raise ValueError(f"fat_thin {key} must be in (0, 1], got {v}")
        if not 0 <= size_jitter < 1:
            raise ValueError(f"fat_thin size_jitter must be in [0, 1), got {size_jitter}")
        if preset is not None:
            if preset not in FAT_THIN_PRESETS:
                raise ValueError(f"fat_thin preset must be one of {sorted(FAT_THIN_PRESETS)} or null, got {preset!r}")
            if thin_classes is not None or fat_classes is not None:
                raise ValueError(
                    f"fat_thin preset {preset!r} sets thin_classes and fat_classes: give either the preset or those two"
                )
            thin_classes, fat_classes = FAT_THIN_PRESETS[preset]["thin_classes"], FAT_THIN_PRESETS[preset]["fat_classes"]
        self.fat_fraction, self.fat_share = float(fat_fraction), float(fat_share)
        self.thin_share, self.size_jitter = float(thin_share), float(size_jitter)
        self.thin_classes = _class_option("thin_classes", thin_classes)
        self.fat_classes = _class_option("fat_classes", fat_classes)
        self.preset = preset

    def fat_clients(self, num_clients: int, rng: np.random.Generator) -> np.ndarray:
        """Sorted ids of the fat clients (the first draw :meth:`split` makes from ``rng``)."""
        n_fat = int(round(self.fat_fraction * num_clients))
        return np.sort(rng.choice(num_clients, size=n_fat, replace=False)).astype(np.int64)

    def split(self, labels, num_clients, rng, groups=None):
        y = np.asarray(labels)
        n = len(y)
        if num_clients < 1:
            raise ValueError(f"num_clients must be >= 1, got {num_clients}")
        if n < 1:
            raise ValueError("fat_thin: empty training set")
        classes = np.unique(y) if self.thin_classes is not None or self.fat_classes is not None else None
        counts = {}
        if classes is not None:  # checked before any draw
            for key, v in (("thin_classes", self.thin_classes), ("fat_classes", self.fat_classes)):
                if v is not None:
                    counts[key == "fat_classes"] = _class_count(key, v, len(classes))
        fat = np.zeros(num_clients, dtype=bool)
        fat[self.fat_clients(num_clients, rng)] = True
        share = np.where(fat, self.fat_share, self.thin_share)
        u = rng.uniform(1 - self.size_jitter, 1 + self.size_jitter, size=num_clients)
        sizes = np.clip(np.round(share * n * u).astype(np.int64), 1, n)
        out = []
        for k, s in enumerate(sizes):
            c = counts.get(bool(fat[k]))
            if c is None:  # all classes: the draw made before the class options existed
                out.append(np.sort(rng.choice(n, size=int(s), replace=False)).astype(np.int64))
                continue
            pool = np.flatnonzero(np.isin(y, rng.choice(classes, size=c, replace=False)))
            take = min(int(s), len(pool))  # fewer samples in its classes than its size: all of them
            out.append(np.sort(pool[rng.choice(len(pool), size=take, replace=False)]).astype(np.int64))
        return out
