"""Datasets as in-memory arrays, and :func:`register_dataset`, with which loaders add
themselves to the data-set kind of :mod:`fedselect.registry` (:data:`DATASETS`).

A loader returns ``(train, test)`` :class:`ArrayDataset` pairs. Nothing downloads at run time:
every loader reads an embedded package's data or files in a user directory, and a missing
data set raises :class:`DatasetNotFoundError` naming the paths looked at and how to get it.

This module imports no loader: the loaders import it to register themselves, and
:mod:`fedselect.world.data.catalog` (above them) imports them all (on the registry's first lookup)
and looks names up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from fedselect.registry import DATASETS


class DatasetNotFoundError(FileNotFoundError):
    """A data set's files are missing. The message names the paths tried and how to get them."""


@dataclass
class ArrayDataset:
    """A labelled data set held in memory.

    Attributes:
        x: float32 inputs, shape ``(n, *input_shape)`` (images ``(n, C, H, W)`` scaled to [0, 1],
           sequences ``(n, T, channels)``, tabular ``(n, features)``).
        y: int64 labels in ``[0, num_classes)``, shape ``(n,)``.
        num_classes: number of classes of the task (not only those present).
        name: data set name, e.g. ``"mnist-embedded"``; synthetic sets contain ``synthetic``.
        class_names: optional human-readable class names, length ``num_classes``.
        groups: optional int64 natural group of every sample (subject / volunteer / device id),
           shape ``(n,)``; used by group-based client divisions.
        info: free-form provenance (source, units, dropped windows ...).
    """

    x: np.ndarray
    y: np.ndarray
    num_classes: int
    name: str = "dataset"
    class_names: list[str] | None = None
    groups: np.ndarray | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.x = np.ascontiguousarray(self.x, dtype=np.float32)
        self.y = np.ascontiguousarray(self.y, dtype=np.int64)
        if self.x.shape[0] != self.y.shape[0]:
            raise ValueError(f"{self.name}: {self.x.shape[0]} inputs but {self.y.shape[0]} labels")
        if self.y.size and (self.y.min() < 0 or self.y.max() >= self.num_classes):
            raise ValueError(f"{self.name}: labels must lie in [0, {self.num_classes}), got [{self.y.min()}, {self.y.max()}]")
        if self.groups is not None:
            self.groups = np.ascontiguousarray(self.groups, dtype=np.int64)
            if self.groups.shape != self.y.shape:
                raise ValueError(f"{self.name}: groups shape {self.groups.shape} != labels shape {self.y.shape}")
        if self.class_names is not None and len(self.class_names) != self.num_classes:
            raise ValueError(f"{self.name}: {len(self.class_names)} class names for {self.num_classes} classes")

    def __len__(self) -> int:
        return int(self.y.shape[0])

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input (no batch dimension)."""
        return tuple(int(s) for s in self.x.shape[1:])

    @property
    def num_features(self) -> int:
        """Values per input sample (for |D_k| in bits)."""
        return int(np.prod(self.input_shape)) if self.input_shape else 1

    def subset(self, indices: np.ndarray, name: str | None = None) -> "ArrayDataset":
        """The samples at ``indices`` (a copy), keeping classes, names and groups."""
        idx = np.asarray(indices, dtype=np.int64)
        return ArrayDataset(
            self.x[idx],
            self.y[idx],
            self.num_classes,
            name or self.name,
            self.class_names,
            None if self.groups is None else self.groups[idx],
            dict(self.info),
        )


Loader = Callable[..., tuple[ArrayDataset, ArrayDataset]]


def register_dataset(name: str):
    """Decorator registering a data-set loader under ``name`` (``data: {dataset: NAME}``).

    The loader is called as ``loader(seed=seed, **options)`` (``options``: the config's
    ``data.options``, validated before anything loads against the loader's ``Options`` pydantic
    model if it has one, else against its keyword parameters, whose defaults ``config.yaml``
    records) and returns ``(train, test)``, two :class:`ArrayDataset` with the same
    ``input_shape`` and ``num_classes``: ``x`` float32 ``(n, *input_shape)``, ``y`` int64
    ``(n,)`` in ``[0, num_classes)``. The partition scheme (``data.partition``) divides
    ``train`` over the N clients, by its labels (and its ``groups``, for group-based schemes),
    and each client keeps ``data.holdout_fraction`` of its share as its held-out split;
    ``test`` is the server's test set. ``seed`` is the experiment seed, for loaders that draw
    anything (a split that should not change with the seed ignores it).

    Raises:
        ValueError: a name with ``:`` or already taken by another loader.
    """

    def deco(fn: Loader) -> Loader:
        return DATASETS.add(name, fn)

    return deco
