"""The catalogue of data sets and partition schemes: imports every loader module (each registers
itself in :data:`fedselect.registry.DATASETS`, which imports this module on its first lookup)
and looks names up, users' own data sets and schemes included.

Layering: ``datasets`` (:class:`ArrayDataset`, ``register_dataset``) <- the loaders (``images``,
``imu``, ``iot``) <- this module. Nothing below imports it, so there is no import cycle.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import fedselect.world.data.images  # noqa: F401  (registers mnist-embedded, mnist, fashion-mnist, cifar10)
import fedselect.world.data.imu  # noqa: F401  (registers imu-watch, mobiact, mobiact-synthetic)
import fedselect.world.data.iot  # noqa: F401  (registers iot-synthetic, iot-flows, iot-features)
from fedselect.common.memory import release_freed_memory
from fedselect.world.data.datasets import DATASETS, ArrayDataset, Loader
from fedselect.world.data.partition import PARTITIONERS, make_partitioner
from fedselect.world.data.partition_schemes.base import Partitioner, register_partitioner

__all__ = [
    "DATASETS",
    "PARTITIONERS",
    "dataset_names",
    "get_loader",
    "load_dataset",
    "make_partitioner",
    "partition_schemes",
    "Partitioner",
    "register_partitioner",
]


def dataset_names() -> list[str]:
    """Known data set names (built-ins, registered, entry points)."""
    return DATASETS.names()


def partition_schemes() -> list[str]:
    """Known partition schemes (built-ins, registered, entry points)."""
    return PARTITIONERS.names()


def get_loader(name: str) -> Loader:
    """The loader called ``name`` (a registered name, an entry point or ``"package.module:Name"``).

    Raises:
        ValueError: unknown name (lists the known ones), a module path that cannot be imported.
    """
    return DATASETS.get(name)


def load_dataset(name: str, seed: int = 0, **options: Any) -> tuple[ArrayDataset, ArrayDataset]:
    """Load data set ``name`` as ``(train, test)``, checked: two :class:`ArrayDataset` of the
    same input shape and classes, a non-empty training set, finite inputs.

    Raises:
        ValueError: unknown name (lists the known ones), bad options, a loader that returned
            anything else (names the loader and what is wrong).
        DatasetNotFoundError: the files are missing (names the paths tried and how to get them).
    """
    out = get_loader(name)(seed=seed, **options)
    release_freed_memory()  # what parsing freed (about 490 MB for the full MNIST CSV) goes back to the OS
    what = f"dataset {name!r}: the loader must return (train, test), two ArrayDataset"
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(d, ArrayDataset) for d in out)):
        got = f"a {type(out).__name__}" + (f" of {[type(d).__name__ for d in out]}" if isinstance(out, (tuple, list)) else "")
        raise ValueError(f"{what}; got {got}")
    train, test = out
    if len(train) == 0:
        raise ValueError(f"{what}; its training set is empty")
    if train.input_shape != test.input_shape or train.num_classes != test.num_classes:
        raise ValueError(
            f"{what} of one task; got inputs {train.input_shape} / {test.input_shape} and "
            f"{train.num_classes} / {test.num_classes} classes (train / test)"
        )
    for part, d in (("train", train), ("test", test)):
        if not np.isfinite(d.x).all():
            bad = int(np.flatnonzero(~np.isfinite(d.x).reshape(len(d), -1).all(axis=1))[0])
            raise ValueError(f"{what} of finite inputs; {part} sample {bad} (0-based) holds NaN or inf")
    return train, test
