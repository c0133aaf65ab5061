"""Small MNIST CSV files as the ``mnist`` data set reads them (``mnist_train.csv`` and
``mnist_test.csv``: a label then 784 pixels per row, with or without a header line), for the
tests of users' data files."""

from __future__ import annotations

import numpy as np


def mnist_rows(n: int, seed: int) -> np.ndarray:
    """``n`` rows of label (0..9) then 784 pixels (0..255); the first row's pixels are 0..255
    repeating, so that a first row taken as a header would lose a real image."""
    rng = np.random.default_rng(seed)
    a = np.concatenate([rng.integers(0, 10, (n, 1)), rng.integers(0, 256, (n, 784))], axis=1)
    a[0, 1:] = np.arange(784) % 256
    return a


def write_mnist(d, train: np.ndarray, test: np.ndarray, header: bool = False) -> None:
    d.mkdir(parents=True, exist_ok=True)
    hdr = "label," + ",".join(f"{i}x{j}" for i in range(1, 29) for j in range(1, 29))
    for part, a in (("train", train), ("test", test)):
        np.savetxt(d / f"mnist_{part}.csv", a, fmt="%d", delimiter=",", header=hdr if header else "", comments="")
