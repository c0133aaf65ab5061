"""8x8 handwritten digits from a CSV file, named in a config as
``data: {dataset: "mydigits.data:load_digits_csv", options: {path: data/digits.csv}}``.

The file: a header line ``label,p0,...,p63``, then one digit per row: its label (0-9) and its
64 pixel intensities (0-16, row by row). :func:`write_digits_csv` writes the UCI
handwritten-digits set that scikit-learn ships (1,797 digits, no download) in that format.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedselect import ArrayDataset
from fedselect.world.data import DatasetNotFoundError
from fedselect.world.data.checked_csv import Col, read_csv_checked
from fedselect.world.data.file_errors import flag_option

PIXELS = [f"p{i}" for i in range(64)]
COLUMNS = [Col("label", "int", lo=0, hi=9, is_label=True), *(Col(p, "float", lo=0, hi=16) for p in PIXELS)]


def load_digits_csv(
    seed: int = 0, path: str | None = None, test_fraction: float = 0.2, drop_invalid: bool = False
) -> tuple[ArrayDataset, ArrayDataset]:
    """Digits from the CSV file ``path`` as ``(train, test)``: inputs ``(1, 8, 8)`` float32 in
    [0, 1] (intensity / 16), labels int64 0-9; ``test_fraction`` of every class is the server's
    test set, drawn with a fixed generator (the same test set whatever the experiment seed).

    Every cell is checked (fedselect's CSV reader): a bad one is refused naming the file, line
    and column, or, with ``drop_invalid: true``, its row is dropped and counted; the file is
    recorded with its SHA-256, so a resume refuses a changed file.

    Raises:
        DatasetNotFoundError: no ``path``, or no file there.
        DataFileError: a defective row (file, line, column).
        ValueError: ``test_fraction`` outside (0, 1), a class too small to split.
    """
    if path is None or not Path(path).is_file():
        raise DatasetNotFoundError(
            f"dataset 'mydigits.data:load_digits_csv': {'no data.options.path given' if path is None else f'{path}: no such file'}; "
            "`python examples/own-model-data/make_csv.py` writes data/digits.csv"
        )
    if not 0 < test_fraction < 1:
        raise ValueError(f"dataset 'mydigits.data:load_digits_csv': test_fraction must lie in (0, 1), got {test_fraction!r}")
    drop = flag_option("mydigits.data:load_digits_csv", "drop_invalid", drop_invalid)
    table = read_csv_checked(path, COLUMNS, header=True, drop_invalid=drop, what="digits CSV (label, p0 .. p63)")
    x = (table.frame[PIXELS].to_numpy(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = table.frame["label"].to_numpy(np.int64)
    rng = np.random.default_rng(0)
    test = []
    for c in np.unique(y):
        rows = np.flatnonzero(y == c)
        k = int(round(test_fraction * len(rows)))
        if not 0 < k < len(rows):
            raise ValueError(f"{path}: class {c} has {len(rows)} rows, too few for test_fraction {test_fraction}")
        test.append(rng.choice(rows, k, replace=False))
    te = np.sort(np.concatenate(test))
    tr = np.setdiff1d(np.arange(len(y)), te)
    info = {"source": str(path), "dropped_rows": table.report_dropped()}
    names = [str(d) for d in range(10)]
    return (
        ArrayDataset(x[tr], y[tr], 10, "digits-csv", names, info=info),
        ArrayDataset(x[te], y[te], 10, "digits-csv", names, info=info),
    )


def write_digits_csv(path: str | Path) -> Path:
    """Write scikit-learn's copy of the UCI handwritten digits (1,797 rows) to ``path`` in the
    format :func:`load_digits_csv` reads."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    rows = np.column_stack([digits.target, digits.data]).astype(np.int64)
    np.savetxt(p, rows, fmt="%d", delimiter=",", header=",".join(["label", *PIXELS]), comments="")
    return p
