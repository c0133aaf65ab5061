"""Local training of one client (SGD with momentum by default, SPEC 1.4)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedselect.data.datasets import ArrayDataset


@dataclass(frozen=True)
class TrainConfig:
    """Local-training hyper-parameters.

    Attributes:
        epochs: local epochs E (>= 0; 0 means no training).
        batch_size: mini-batch size B.
        lr: learning rate (> 0).
        momentum: SGD momentum in [0, 1).
        optimizer: ``"sgd"`` or ``"adam"``.
        weight_decay: L2 penalty (>= 0).
    """

    epochs: int = 1
    batch_size: int = 32
    lr: float = 0.01
    momentum: float = 0.9
    optimizer: str = "sgd"
    weight_decay: float = 0.0


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    raise ValueError(f"unknown optimizer {cfg.optimizer!r}; allowed: 'sgd', 'adam'")


def iterate_minibatches(n: int, batch_size: int, generator: torch.Generator):
    """Index tensors of one shuffled epoch (the last batch may be smaller)."""
    perm = torch.randperm(n, generator=generator)
    for i in range(0, n, batch_size):
        yield perm[i : i + batch_size]


def local_train(
    model: nn.Module, data: ArrayDataset, cfg: TrainConfig, generator: torch.Generator, epochs: int | None = None,
    trainable: set[str] | None = None,
) -> float:
    """Train ``model`` in place on ``data`` for ``epochs`` (default ``cfg.epochs``) epochs.

    Args:
        model: the client's model, already loaded with the starting weights.
        data: the client's training set, inputs ``(n, *input_shape)``.
        generator: seeded torch generator for the mini-batch order.
        trainable: optional names of parameters to update (the rest are frozen).

    Returns:
        Mean cross-entropy over all mini-batches seen (``nan`` when no batch was run).
    """
    epochs = cfg.epochs if epochs is None else epochs
    n = len(data)
    if epochs <= 0 or n == 0:
        return math.nan
    x, y = torch.from_numpy(data.x), torch.from_numpy(data.y)
    if trainable is not None:
        for name, p in model.named_parameters():
            p.requires_grad_(name in trainable)
    opt = make_optimizer(model, cfg)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    total, batches = 0.0, 0
    for _ in range(epochs):
        for idx in iterate_minibatches(n, cfg.batch_size, generator):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            total += float(loss.detach())
            batches += 1
    if trainable is not None:
        for p in model.parameters():
            p.requires_grad_(True)
    return total / batches if batches else math.nan


def num_features(data: ArrayDataset) -> int:
    """Values per input sample (for |D_k| in bits, SPEC 0.3)."""
    return int(np.prod(data.input_shape)) if data.input_shape else 1
