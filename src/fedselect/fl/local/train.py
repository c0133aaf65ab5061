"""Local training of one client (SGD with momentum by default, FLASH-RL Table IV)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import torch
from torch import nn

from fedselect.world.data.datasets import ArrayDataset


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


class ObjectiveHook(Protocol):
    """What local training asks of a job's local objective
    (:class:`fedselect.fl.local.objective.LocalObjective`, which implements it): ``begin(params)``,
    called with the trained ``(name, parameter)`` pairs before the first step, returns the
    function that adds the objective's term to the gradients after every backward pass."""

    def begin(self, params: Sequence[tuple[str, torch.Tensor]]) -> Callable[[], None]: ...


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
    model: nn.Module,
    data: ArrayDataset,
    cfg: TrainConfig,
    generator: torch.Generator,
    epochs: int | None = None,
    trainable: set[str] | None = None,
    stats: dict | None = None,
    max_steps: int | None = None,
    objective: ObjectiveHook | None = None,
) -> float:
    """Train ``model`` in place on ``data`` for ``epochs`` (default ``cfg.epochs``) epochs.

    Args:
        model: the client's model, already loaded with the starting weights.
        data: the client's training set, inputs ``(n, *input_shape)``.
        generator: seeded torch generator for the mini-batch order.
        trainable: optional names of parameters to update (the rest are frozen).
        stats: optional dict that receives ``sum_sq_sample_loss`` (the sum over every sample of
            every mini-batch of its squared cross-entropy, computed from the detached logits so
            training is unchanged: the weights are bit-identical with or without ``stats``) and
            ``num_sample_losses`` (how many there were); Oort's statistical utility (Lai et al.
            2021) is built from them.
        max_steps, objective: see :func:`train_steps`.

    Returns:
        Mean cross-entropy over all mini-batches seen (``nan`` when no batch was run).
    """
    return train_steps(
        model,
        torch.from_numpy(data.x),
        torch.from_numpy(data.y),
        None,
        cfg,
        generator,
        epochs=epochs,
        trainable=trainable,
        stats=stats,
        max_steps=max_steps,
        objective=objective,
    )


def train_steps(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    rows: torch.Tensor | None,
    cfg: TrainConfig,
    generator: torch.Generator,
    epochs: int | None = None,
    trainable: set[str] | frozenset[str] | None = None,
    stats: dict | None = None,
    after_batch: Callable[[int], None] | None = None,
    max_steps: int | None = None,
    objective: ObjectiveHook | None = None,
) -> float:
    """The body of :func:`local_train` on tensors: the client's samples are ``x[rows]``,
    ``y[rows]`` (``rows`` None: all of ``x``, ``y``).

    Mini-batch ``b`` of an epoch is ``x[rows[perm[b]]]`` with ``perm`` drawn from ``generator``
    exactly as :func:`iterate_minibatches` does for a client's own copy of its data, so a
    client trained from rows of a shared array (:mod:`fedselect.fl.local.pool`) sees the very same
    batches, and ends bit-identical, as one trained on its own :class:`ArrayDataset`.

    Args:
        x: inputs ``(M, *input_shape)``; y: int64 labels ``(M,)``; rows: int64 ``(n,)`` or None.
        after_batch: called with the number of mini-batches done after each optimiser step.
        max_steps: stop after this many optimiser steps (None: all ``epochs``); a straggler's
            partial work. The first ``max_steps`` batches are those of the full run.
        objective: the algorithm's term added to the local objective
            (:class:`fedselect.fl.local.objective.LocalObjective`, e.g. FedProx's ``mu/2 ||w - w_0||^2``
            with ``w_0`` the weights training starts from): its :meth:`begin` is called with the
            trained parameters before the first step, and what it returns after every backward
            pass, adding the term's gradient before the optimiser step (before momentum and
            weight decay); the returned loss stays the cross-entropy. None: no term.
        Others: see :func:`local_train`.

    Raises:
        ValueError: the objective does not fit the trained parameters (from its ``begin``).

    Returns:
        Mean cross-entropy over all mini-batches (``nan`` when none was run).
    """
    epochs = cfg.epochs if epochs is None else epochs
    n = len(rows) if rows is not None else len(y)
    if stats is not None:
        stats["sum_sq_sample_loss"], stats["num_sample_losses"] = 0.0, 0
    if epochs <= 0 or n == 0:
        return math.nan
    extra = None
    if objective is not None:
        extra = objective.begin([(n, p) for n, p in model.named_parameters() if trainable is None or n in trainable])
    if trainable is not None:
        for name, p in model.named_parameters():
            p.requires_grad_(name in trainable)
    opt = make_optimizer(model, cfg)
    model.train()
    try:
        total, batches, sq_sum, count = _run_epochs(
            model, opt, x, y, rows, n, cfg, generator, epochs, max_steps, extra, stats is not None, after_batch
        )
    finally:
        if trainable is not None:
            for p in model.parameters():
                p.requires_grad_(True)
    if stats is not None:
        stats["sum_sq_sample_loss"], stats["num_sample_losses"] = sq_sum, count
    return total / batches if batches else math.nan


def _run_epochs(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    rows: torch.Tensor | None,
    n: int,
    cfg: TrainConfig,
    generator: torch.Generator,
    epochs: int,
    max_steps: int | None,
    extra: Callable[[], None] | None,
    want_stats: bool,
    after_batch: Callable[[int], None] | None,
) -> tuple[float, int, float, int]:
    """:func:`train_steps`' optimiser steps: ``epochs`` shuffled passes over the client's ``n``
    samples (every epoch's permutation drawn, even past ``max_steps``, so the generator ends in
    the same state), ``extra`` (the objective's gradient term) after each backward pass.
    Returns (sum of the mini-batch losses, mini-batches, sum of squared per-sample losses, samples
    counted in it; the last two 0 unless ``want_stats``)."""
    loss_fn = nn.CrossEntropyLoss()
    total, batches = 0.0, 0
    sq_sum, count = 0.0, 0
    for _ in range(epochs):
        for idx in iterate_minibatches(n, cfg.batch_size, generator):
            if max_steps is not None and batches >= max_steps:
                break
            if rows is not None:
                idx = rows[idx]
            yb = y[idx]
            opt.zero_grad(set_to_none=True)
            logits = model(x[idx])
            loss = loss_fn(logits, yb)
            loss.backward()
            if extra is not None:
                extra()
            opt.step()
            total += float(loss.detach())
            batches += 1
            if want_stats:
                with torch.no_grad():
                    per = nn.functional.cross_entropy(logits.detach(), yb, reduction="none")
                    sq_sum += float((per.double() ** 2).sum())
                    count += int(per.numel())
            if after_batch is not None:
                after_batch(batches)
    return total, batches, sq_sum, count
