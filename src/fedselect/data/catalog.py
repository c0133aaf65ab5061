"""The catalogue of data sets and partition schemes: imports every loader module (each registers
itself in :data:`fedselect.data.datasets.DATASETS`) and looks names up.

Layering: ``datasets`` (the registry and :class:`ArrayDataset`) <- the loaders (``images``,
``imu``, ``iot``) <- this module. Nothing below imports it, so there is no import cycle.
"""

from __future__ import annotations

from typing import Any

import fedselect.data.images  # noqa: F401  (registers mnist-embedded, mnist, fashion-mnist, cifar10)
import fedselect.data.imu  # noqa: F401  (registers imu-watch, mobiact, mobiact-synthetic)
import fedselect.data.iot  # noqa: F401  (registers iot-synthetic, iot-flows, iot-features)
from fedselect.data.datasets import DATASETS, ArrayDataset, Loader
from fedselect.data.partition import PARTITIONERS, Partitioner, make_partitioner

__all__ = [
    "DATASETS",
    "PARTITIONERS",
    "dataset_names",
    "get_loader",
    "load_dataset",
    "make_partitioner",
    "partition_schemes",
    "Partitioner",
]


def dataset_names() -> list[str]:
    """Registered data set names."""
    return sorted(DATASETS)


def partition_schemes() -> list[str]:
    """Registered partition schemes."""
    return sorted(PARTITIONERS)


def get_loader(name: str) -> Loader:
    """The loader registered as ``name``.

    Raises:
        ValueError: unknown name (lists the known ones).
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {dataset_names()}")
    return DATASETS[name]


def load_dataset(name: str, seed: int = 0, **options: Any) -> tuple[ArrayDataset, ArrayDataset]:
    """Load data set ``name`` as ``(train, test)``.

    Raises:
        ValueError: unknown name (lists the known ones), bad options.
        DatasetNotFoundError: the files are missing (names the paths tried and how to get them).
    """
    return get_loader(name)(seed=seed, **options)
