"""Evaluation of a model on a labelled set: accuracy, macro-F1 and mean cross-entropy."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from fedselect.data.datasets import ArrayDataset


@torch.no_grad()
def predict(model: nn.Module, data: ArrayDataset, batch_size: int = 1000) -> tuple[np.ndarray, float]:
    """Predicted labels ``(n,)`` and mean cross-entropy of ``model`` on ``data``."""
    model.eval()
    x, y = torch.from_numpy(data.x), torch.from_numpy(data.y)
    preds, loss_sum = [], 0.0
    for i in range(0, len(data), batch_size):
        logits = model(x[i : i + batch_size])
        loss_sum += float(nn.functional.cross_entropy(logits, y[i : i + batch_size], reduction="sum"))
        preds.append(logits.argmax(dim=1).numpy())
    pred = np.concatenate(preds) if preds else np.zeros(0, dtype=np.int64)
    return pred, loss_sum / max(len(data), 1)


def evaluate(model: nn.Module, data: ArrayDataset, batch_size: int = 1000) -> dict[str, float]:
    """``{"accuracy", "f1_macro", "loss"}`` of ``model`` on ``data``.

    Macro-F1 (scikit-learn, ``zero_division=0``) averages over the labels present in the true
    or predicted labels. An empty set gives NaNs.
    """
    from sklearn.metrics import f1_score

    if len(data) == 0:
        return {"accuracy": math.nan, "f1_macro": math.nan, "loss": math.nan}
    pred, loss = predict(model, data, batch_size)
    return {
        "accuracy": float((pred == data.y).mean()),
        "f1_macro": float(f1_score(data.y, pred, average="macro", zero_division=0)),
        "loss": float(loss),
    }
