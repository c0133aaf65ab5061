"""Every client's training samples as one data array plus per-client row indices.

What :class:`fedselect.fl.local.pool.ClientTrainer` shares with its worker processes (one copy of the
data in shared memory, however many clients) and what the stacked path of
:mod:`fedselect.fl.local.batched` gathers its mini-batches from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from fedselect.world.data.datasets import ArrayDataset


@dataclass
class ClientData:
    """Every client's training samples as one data array plus per-client row indices.

    Client ``k``'s samples are ``x[rows[offsets[k]:offsets[k + 1]]]`` (same for ``y``), in
    the order of its own :class:`ArrayDataset`. Memory is one copy of ``x`` however many
    clients there are (the rows are int64: 8 bytes per client sample).

    Attributes:
        x: float32 ``(M, *input_shape)``; y: int64 ``(M,)``; rows: int64 ``(R,)``;
        offsets: int64 ``(N + 1,)``, non-decreasing, ``offsets[0] = 0``, ``offsets[N] = R``.
        num_classes: number of classes of the task.
    """

    x: torch.Tensor
    y: torch.Tensor
    rows: torch.Tensor
    offsets: torch.Tensor
    num_classes: int

    @classmethod
    def from_arrays(cls, x: np.ndarray, y: np.ndarray, client_rows: Sequence[np.ndarray], num_classes: int) -> "ClientData":
        """Clients as row indices into one data set (``x``, ``y``), e.g. a federation's
        training set and each client's ``train_indices``.

        Raises:
            ValueError: mismatched lengths, or a row outside ``[0, len(x))``.
        """
        x = np.asarray(x)
        y = np.asarray(y)
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"ClientData: {x.shape[0]} inputs but {y.shape[0]} labels")
        parts = [np.asarray(r, dtype=np.int64).reshape(-1) for r in client_rows]
        for k, r in enumerate(parts):
            if r.size and (r.min() < 0 or r.max() >= x.shape[0]):
                raise ValueError(f"ClientData: client {k} has rows outside [0, {x.shape[0]})")
        sizes = np.array([len(r) for r in parts], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        rows = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return cls(
            torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)),
            torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64)),
            torch.from_numpy(rows),
            torch.from_numpy(offsets),
            int(num_classes),
        )

    @classmethod
    def from_datasets(cls, datasets: Sequence[ArrayDataset]) -> "ClientData":
        """Clients given as separate data sets (concatenated: one copy in all).

        Raises:
            ValueError: no data sets, or data sets with different input shapes.
        """
        if not datasets:
            raise ValueError("ClientData.from_datasets: no client data sets given")
        shapes = {d.input_shape for d in datasets}
        if len(shapes) != 1:
            raise ValueError(f"ClientData.from_datasets: client data sets have different input shapes {sorted(shapes)}")
        x = np.concatenate([d.x for d in datasets])
        y = np.concatenate([d.y for d in datasets])
        sizes = [len(d) for d in datasets]
        starts = np.concatenate([[0], np.cumsum(sizes)])
        rows = [np.arange(starts[i], starts[i + 1], dtype=np.int64) for i in range(len(datasets))]
        return cls.from_arrays(x, y, rows, max(d.num_classes for d in datasets))

    @property
    def num_clients(self) -> int:
        return int(self.offsets.numel()) - 1

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.x.shape[1:])

    def num_samples(self, k: int) -> int:
        return int(self.offsets[k + 1] - self.offsets[k])

    def client_rows(self, k: int) -> torch.Tensor:
        """Row indices of client ``k`` (a view). Raises IndexError for a bad ``k``."""
        if not 0 <= k < self.num_clients:
            raise IndexError(f"client {k} out of range: the data holds {self.num_clients} clients")
        return self.rows[int(self.offsets[k]) : int(self.offsets[k + 1])]

    def client_dataset(self, k: int) -> ArrayDataset:
        """Client ``k``'s samples as their own :class:`ArrayDataset` (a copy)."""
        r = self.client_rows(k)
        return ArrayDataset(self.x[r].numpy(), self.y[r].numpy(), self.num_classes, f"client{k}")

    def shared(self) -> "ClientData":
        """A copy whose tensors live in shared memory (what the workers map)."""
        return ClientData(
            _shared_copy(self.x), _shared_copy(self.y), _shared_copy(self.rows), _shared_copy(self.offsets), self.num_classes
        )

    def to(self, device: torch.device) -> "ClientData":
        return ClientData(self.x.to(device), self.y.to(device), self.rows.to(device), self.offsets, self.num_classes)


def _shared_copy(t: torch.Tensor) -> torch.Tensor:
    if t.is_shared():
        return t
    out = torch.empty(t.shape, dtype=t.dtype)
    out.share_memory_()
    out.copy_(t)
    return out
