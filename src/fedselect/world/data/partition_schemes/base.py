"""What a partition scheme is (:class:`Partitioner`) and how it registers (:func:`register_partitioner`).

The built-in schemes are in the other modules of :mod:`fedselect.world.data.partition_schemes`;
a user's own scheme subclasses :class:`Partitioner` the same way (docs/architecture.md, "Your own
partition scheme").
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from fedselect.registry import PARTITIONERS

__all__ = ["Partitioner", "register_partitioner"]


class Partitioner(ABC):
    """Splits sample indices among ``num_clients`` clients."""

    name: ClassVar[str]

    @abstractmethod
    def split(
        self, labels: np.ndarray, num_clients: int, rng: np.random.Generator, groups: np.ndarray | None = None
    ) -> list[np.ndarray]:
        """Return ``num_clients`` int64 index arrays into ``labels`` (shape ``(n,)``).

        Raises:
            ValueError: the request is impossible for these labels (message gives the numbers).
        """


def register_partitioner(cls: type[Partitioner]) -> type[Partitioner]:
    """Class decorator registering a :class:`Partitioner` subclass under its ``name``
    (``data: {partition: {scheme: NAME, ...its parameters}}``; the partition-scheme kind of
    :mod:`fedselect.registry`). Its ``__init__`` keyword parameters are the scheme's parameters,
    checked against the config before anything loads.

    Raises:
        ValueError: no ``name``, a name with ``:``, or another class already under that name.
    """
    return PARTITIONERS.register(cls)
