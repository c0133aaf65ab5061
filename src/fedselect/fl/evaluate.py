"""Evaluation of a model on a labelled set: accuracy, macro-F1 and mean cross-entropy.

The set is processed in chunks of ``batch_size`` rows under ``torch.inference_mode``: a chunk's
cross-entropy is summed in float32 and the chunk sums are added in float64, in order. The
parallel evaluation of :class:`fedselect.fl.local.pool.ClientTrainer` uses the same chunking, so both
give the same figures for the same model and memory format.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from fedselect.world.data.datasets import ArrayDataset


def predict(
    model: nn.Module, data: ArrayDataset, batch_size: int = 1000, forward_batch: int | None = None
) -> tuple[np.ndarray, float]:
    """Predicted labels ``(n,)`` and mean cross-entropy of ``model`` on ``data``.

    Args:
        batch_size: rows per chunk whose loss is summed in one float32 sum (> 0).
        forward_batch: inputs per forward pass inside a chunk (default: the whole chunk). The
            papers' CNNs and the GRU give the same logits for any batch size (tested), and
            smaller batches run faster on CPU (docs/performance.md); the MLP's logits change
            in the last bits with the batch size.

    Raises:
        ValueError: a batch size < 1.
    """
    if batch_size < 1 or (forward_batch is not None and forward_batch < 1):
        raise ValueError(f"batch_size and forward_batch must be >= 1, got {batch_size} and {forward_batch}")
    fb = batch_size if forward_batch is None else min(forward_batch, batch_size)
    model.eval()
    x, y = torch.from_numpy(data.x), torch.from_numpy(data.y)
    preds, loss_sum = [], 0.0
    with torch.inference_mode():
        for i in range(0, len(data), batch_size):
            stop = min(i + batch_size, len(data))
            logits = (
                model(x[i:stop]) if fb >= stop - i else torch.cat([model(x[j : min(j + fb, stop)]) for j in range(i, stop, fb)])
            )
            loss_sum += float(nn.functional.cross_entropy(logits, y[i:stop], reduction="sum"))
            preds.append(logits.argmax(dim=1).numpy())
    pred = np.concatenate(preds) if preds else np.zeros(0, dtype=np.int64)
    return pred, loss_sum / max(len(data), 1)


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Macro-F1 of predicted labels ``y_pred`` against ``y_true`` (two ``(n,)`` integer arrays):
    the mean, over the labels present in either, of ``2 TP / (2 TP + FP + FN)``; NaN for n = 0.

    The same float operations as scikit-learn's ``f1_score(y_true, y_pred, average="macro",
    zero_division=0)`` (``2.0 * tp / (true + pred)`` per label, then ``numpy.nanmean``), so the
    same bits (tested against it); computed here because importing scikit-learn costs a second
    of start-up in every process that evaluates (docs/performance.md, "Start-up").
    """
    y_true, y_pred = np.asarray(y_true).ravel(), np.asarray(y_pred).ravel()
    if y_true.shape != y_pred.shape:
        raise ValueError(f"macro_f1: {len(y_true)} true labels but {len(y_pred)} predicted")
    n = len(y_true)
    if n == 0:
        return math.nan
    labels, index = np.unique(np.concatenate([y_true, y_pred]), return_inverse=True)
    k = len(labels)
    t, p = index[:n], index[n:]
    true_sum = np.bincount(t, minlength=k).astype(np.float64)
    pred_sum = np.bincount(p, minlength=k).astype(np.float64)
    tp = np.bincount(t[t == p], minlength=k).astype(np.float64)
    return float(np.nanmean((2.0 * tp) / (1.0 * true_sum + pred_sum)))


def evaluate(model: nn.Module, data: ArrayDataset, batch_size: int = 1000, forward_batch: int | None = None) -> dict[str, float]:
    """``{"accuracy", "f1_macro", "loss"}`` of ``model`` on ``data`` (see :func:`predict`).

    Macro-F1 (:func:`macro_f1`, scikit-learn's definition with ``zero_division=0``) averages
    over the labels present in the true or predicted labels. An empty set gives NaNs.
    """
    if len(data) == 0:
        return {"accuracy": math.nan, "f1_macro": math.nan, "loss": math.nan}
    pred, loss = predict(model, data, batch_size, forward_batch)
    return {
        "accuracy": float((pred == data.y).mean()),
        "f1_macro": macro_f1(data.y, pred),
        "loss": float(loss),
    }
