"""Volunteer divisions of sensor data: one client per subject (FLASH-RL Section IV-A).

``volunteer`` gives client ``i`` every sample of the ``i``-th subject; ``volunteer_label_skew``
keeps only some of each subject's classes. Both need the data set's per-sample subject ids
(``groups``).
"""

from __future__ import annotations

import numpy as np

from fedselect.world.data.partition_schemes.base import Partitioner, register_partitioner

__all__ = ["VolunteerLabelSkewPartitioner", "VolunteerPartitioner"]


def _subjects(groups: np.ndarray | None, scheme: str) -> np.ndarray:
    if groups is None:
        raise ValueError(f"partition scheme {scheme!r} needs per-sample subject ids (dataset 'groups'); this dataset has none")
    return np.unique(np.asarray(groups))


@register_partitioner
class VolunteerPartitioner(Partitioner):
    """Volunteer-based division (FLASH-RL IV-A): client ``i`` holds all samples of the
    ``i``-th subject (subjects in increasing id order).

    Raises:
        ValueError: no ``groups``; ``num_clients`` different from the number of subjects.
    """

    name = "volunteer"

    def split(self, labels, num_clients, rng, groups=None):
        subs = _subjects(groups, self.name)
        if num_clients != len(subs):
            raise ValueError(
                f"volunteer division: num_clients ({num_clients}) must equal the number of subjects in the "
                f"training set ({len(subs)})"
            )
        g = np.asarray(groups)
        return [np.flatnonzero(g == s).astype(np.int64) for s in subs]


@register_partitioner
class VolunteerLabelSkewPartitioner(Partitioner):
    """Label skew k on volunteers (FLASH-RL IV-A, "label skew 8 / 4"): one client per subject
    (as :class:`VolunteerPartitioner`), keeping only ``labels_per_client`` of the classes that
    subject has (a seeded draw; a subject with fewer classes keeps all). Samples of the other
    classes are left unused.

    With the binary fall task the labels cannot express activity skew: use the loader option
    ``activities_per_subject`` with the ``volunteer`` division instead.

    Raises:
        ValueError: ``labels_per_client < 1``; no ``groups``; ``num_clients`` different from the
        number of subjects.
    """

    name = "volunteer_label_skew"

    def __init__(self, labels_per_client: int = 8):
        if int(labels_per_client) < 1:
            raise ValueError(f"labels_per_client must be >= 1, got {labels_per_client}")
        self.k = int(labels_per_client)

    def split(self, labels, num_clients, rng, groups=None):
        parts = VolunteerPartitioner().split(labels, num_clients, rng, groups)
        y = np.asarray(labels)
        out = []
        for idx in parts:
            present = np.unique(y[idx])
            keep = rng.choice(present, size=min(self.k, len(present)), replace=False)
            out.append(idx[np.isin(y[idx], keep)])
        return out
