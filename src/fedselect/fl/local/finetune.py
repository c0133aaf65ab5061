"""CEFL's transfer step: fine-tune a model with early stopping on a validation split (CEFL: a
member trains "for at most eta episodes or until convergence")."""

from __future__ import annotations

import math
from typing import Any

import torch

from fedselect.fl.evaluate import evaluate
from fedselect.fl.local.train import TrainConfig, iterate_minibatches, make_optimizer
from fedselect.world.data.datasets import ArrayDataset


def fine_tune(
    model: torch.nn.Module,
    train: ArrayDataset,
    val: ArrayDataset,
    cfg: TrainConfig,
    max_epochs: int,
    patience: int,
    generator: torch.Generator,
    holdout: ArrayDataset | None = None,
) -> dict[str, Any]:
    """Train ``model`` in place for at most ``max_epochs`` epochs with early stopping on the
    validation loss, then load the best state (CEFL transfer step).

    One optimizer (``cfg``) for all epochs. The validation loss is measured before training
    (epoch 0) and after every epoch; training stops after ``patience`` epochs in a row
    without a strictly lower loss; the state with the lowest loss is kept (the earliest on
    ties). With an empty ``val`` every epoch runs and the last state is kept.

    Args:
        holdout: optional set scored after every epoch for the convergence curve only (it
            never influences training or the choice of state).

    Returns:
        ``{"epochs": epochs run, "best_epoch": e, "val_loss": best loss (nan without val),
        "curve": holdout accuracy after epochs 0..epochs (empty without holdout)}``.

    Raises:
        ValueError: ``max_epochs < 0`` or ``patience < 1``.
    """
    if max_epochs < 0 or patience < 1:
        raise ValueError(f"need max_epochs >= 0 and patience >= 1, got {max_epochs}, {patience}")
    curve = [evaluate(model, holdout)["accuracy"]] if holdout is not None and len(holdout) else []
    use_val = len(val) > 0
    best_loss = evaluate(model, val)["loss"] if use_val else math.nan
    best_state, best_epoch, bad, epochs = {k: v.detach().clone() for k, v in model.state_dict().items()}, 0, 0, 0
    if len(train) == 0 or max_epochs == 0:
        return {"epochs": 0, "best_epoch": 0, "val_loss": best_loss, "curve": curve}
    x, y = torch.from_numpy(train.x), torch.from_numpy(train.y)
    opt = make_optimizer(model, cfg)
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(1, max_epochs + 1):
        model.train()
        for idx in iterate_minibatches(len(train), cfg.batch_size, generator):
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x[idx]), y[idx]).backward()
            opt.step()
        epochs = epoch
        if curve:
            curve.append(evaluate(model, holdout)["accuracy"])
        if not use_val:
            continue
        v = evaluate(model, val)["loss"]
        if v < best_loss:
            best_loss, best_state, best_epoch, bad = v, {k: v.detach().clone() for k, v in model.state_dict().items()}, epoch, 0
        else:
            bad += 1
            if bad >= patience:
                break
    if use_val:
        model.load_state_dict(best_state)
    else:
        best_epoch = epochs
    return {"epochs": epochs, "best_epoch": best_epoch, "val_loss": best_loss, "curve": curve}
