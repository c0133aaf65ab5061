"""Write the example's data files: one .npz file per node (a different slice of the embedded
MNIST subset each: other digits, other sizes) and a test file for the server.

    python examples/flower-own-data/make_data.py OUT_DIR

Each node file holds ``x`` (float32, ``(n, 1, 28, 28)`` in [0, 1]), ``y`` (int64 digits) and
``num_classes`` (10), the format of ``fedselect.flower.owndata:load_npz``; the node holds out 20 %
of its rows for evaluation (``test_fraction``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

#: node k holds these digits ...
DIGITS = {0: [0, 1, 2, 3, 4], 1: [3, 4, 5, 6, 7], 2: [6, 7, 8, 9, 0], 3: [1, 3, 5, 7, 9]}
#: ... and this many rows of them
SIZES = {0: 100, 1: 140, 2: 180, 3: 220}


def write_files(out: str | Path, server_test_rows: int = 300) -> tuple[list[Path], Path]:
    """Write ``node-<k>.npz`` (k = 0..3) under ``out/node-<k>/`` and ``out/server/test.npz``;
    returns (node files, server file). Deterministic: the same files every time."""
    from fedselect.world.data.catalog import load_dataset

    train, test = load_dataset("mnist-embedded", seed=0)
    out = Path(out)
    nodes = []
    for k, digits in DIGITS.items():
        rows = np.flatnonzero(np.isin(train.y, digits))
        rows = rows[np.random.default_rng(k).permutation(len(rows))[: SIZES[k]]]
        path = out / f"node-{k}" / f"node-{k}.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, x=train.x[rows], y=train.y[rows], num_classes=np.int64(10))
        nodes.append(path)
    server = out / "server" / "test.npz"
    server.parent.mkdir(parents=True, exist_ok=True)
    np.savez(server, x=test.x[:server_test_rows], y=test.y[:server_test_rows], num_classes=np.int64(10))
    return nodes, server


if __name__ == "__main__":
    nodes, server = write_files(sys.argv[1] if len(sys.argv) > 1 else "flower-own-data")
    print("\n".join(str(p) for p in [*nodes, server]))
