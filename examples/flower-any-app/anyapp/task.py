"""anyapp: the model and the data, in NumPy (the shape of the ``task.py`` of Flower's app
templates, made small and offline: a NumPy model keeps every simulated node's start cheap).

The model is a softmax regression (16 features -> 4 classes: a weight matrix and a bias, the
arrays that travel). Every partition holds a synthetic, seeded share of a 4-class problem
(Gaussian blobs) with its own label skew, so the example needs no download.
"""

from __future__ import annotations

import numpy as np

NUM_CLASSES, NUM_FEATURES = 4, 16


def initial_arrays(seed: int = 0) -> list[np.ndarray]:
    """The initial model: weights ``(16, 4)`` and bias ``(4,)``, float32."""
    rng = np.random.default_rng(seed)
    return [rng.normal(0.0, 0.01, size=(NUM_FEATURES, NUM_CLASSES)).astype(np.float32), np.zeros(NUM_CLASSES, np.float32)]


def _blobs(rng: np.random.Generator, n: int, label_p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    centres = np.random.default_rng(0).normal(0.0, 2.0, size=(NUM_CLASSES, NUM_FEATURES))
    y = rng.choice(NUM_CLASSES, size=n, p=label_p)
    x = centres[y] + rng.normal(0.0, 1.5, size=(n, NUM_FEATURES))
    return x.astype(np.float32), y


def load_data(partition_id: int, num_partitions: int):
    """((x_train, y_train), (x_val, y_val)) of partition ``partition_id``: 40 to 100 samples, 80 % for training."""
    rng = np.random.default_rng(1000 + partition_id)
    n = 40 + 15 * (partition_id % 5)
    x, y = _blobs(rng, n, rng.dirichlet(np.full(NUM_CLASSES, 0.5)))
    cut = int(0.8 * n)
    return (x[:cut], y[:cut]), (x[cut:], y[cut:])


def load_centralized_dataset() -> tuple[np.ndarray, np.ndarray]:
    """The server's test set: 400 samples, balanced classes."""
    return _blobs(np.random.default_rng(7), 400, np.full(NUM_CLASSES, 1 / NUM_CLASSES))


def _loss_grad(arrays: list[np.ndarray], x: np.ndarray, y: np.ndarray):
    w, b = arrays
    z = x @ w + b
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    loss = float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean())
    p[np.arange(len(y)), y] -= 1.0
    p /= len(y)
    return loss, [x.T @ p, p.sum(axis=0)], z


def train(arrays: list[np.ndarray], x: np.ndarray, y: np.ndarray, epochs: int, lr: float, batch_size: int = 16, seed: int = 0):
    """Mini-batch SGD for ``epochs`` epochs; returns (the trained arrays, the mean training loss)."""
    rng = np.random.default_rng(seed)
    arrays = [a.copy() for a in arrays]
    losses = []
    for _ in range(epochs):
        order = rng.permutation(len(y))
        for i in range(0, len(y), batch_size):
            idx = order[i : i + batch_size]
            loss, grads, _ = _loss_grad(arrays, x[idx], y[idx])
            arrays = [(a - lr * g).astype(np.float32) for a, g in zip(arrays, grads)]
            losses.append(loss)
    return arrays, float(np.mean(losses)) if losses else float("nan")


def test(arrays: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(mean loss, accuracy) of the model on (x, y)."""
    loss, _, z = _loss_grad(arrays, x, y)
    return loss, float((z.argmax(axis=1) == y).mean())
