"""Defects in users' data files: the error every data-file reader raises, and the ``drop_invalid`` option.

A loader of a user file (MNIST CSV / IDX, CIFAR-10 batches, MobiAct, IoT flows and features,
profile tables) reports a defect as a :class:`DataFileError` (a ``ValueError``) naming the
**file**, the **line** (1-based; a header line is line 1) and the **column**, instead of letting
it reach training as a NaN or a shifted row; :func:`naming_file` turns anything else that goes
wrong while reading (not UTF-8, truncated or corrupted gzip/IDX/pickle file, wrong array shape)
into one naming the file.

A loader's ``drop_invalid: true`` option (read with :func:`flag_option`) drops the defective rows
instead; each file's dropped rows are counted in the data set's ``info["dropped_rows"]``
(``{file: count}``), which the run's ``summary.json`` reports as ``data_dropped_rows``
(:func:`dropped_rows_total`).

The readers: :mod:`fedselect.world.data.checked_csv` (CSV files),
:mod:`fedselect.world.data.safe_pickle` (pickles); which files a run read:
:mod:`fedselect.world.data.provenance`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

import numpy as np

__all__ = ["DataFileError", "dropped_rows_total", "flag_option", "naming_file"]


class DataFileError(ValueError):
    """A user data file cannot be used as it is.

    The message reads ``<file>: line <L>, column <C> (<name>): <reason>`` (line and column
    when known). Attributes ``path``, ``line`` (1-based, header = 1), ``column`` (a
    description such as ``"column 3 (volume)"`` or ``"key 'cores'"``) and ``reason``.
    """

    def __init__(self, path: str | Path, reason: str, line: int | None = None, column: str | None = None):
        self.path, self.reason, self.line, self.column = str(path), reason, line, column
        where = [f"line {line}"] if line is not None else []
        if column:
            where.append(column)
        super().__init__(f"{path}: {', '.join(where) + ': ' if where else ''}{reason}")


@contextlib.contextmanager
def naming_file(path: str | Path, what: str = "") -> Iterator[None]:
    """Re-raise any error escaping the block as a :class:`DataFileError` naming ``path``
    (``what`` says what the file should be). :class:`DataFileError` and ``FileNotFoundError``
    (the data-set-missing errors) pass unchanged; an error whose message already names the
    file keeps its message."""
    try:
        yield
    except (DataFileError, FileNotFoundError, KeyboardInterrupt, MemoryError):
        raise
    except Exception as e:  # encoding, truncation, gzip, pickle, shape ...
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        if str(path) in text:
            raise DataFileError(path, text.replace(f"{path}: ", "", 1)) from e
        kind = f"cannot read {what}" if what else "cannot read"
        raise DataFileError(path, f"{kind} ({type(e).__name__}{': ' + text if text else ''})") from e


def flag_option(dataset: str, name: str, value: Any) -> bool:
    """A loader's true/false option (e.g. ``drop_invalid``), checked: ``bool(value)`` would
    take the string ``"false"`` for true.

    Raises:
        ValueError: not a boolean (names the data set, the option and the value).
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ValueError(f"dataset {dataset!r}: option {name} must be true or false, got {value!r}")


def dropped_rows_total(*datasets: Any) -> tuple[int, dict[str, int]]:
    """Rows dropped by ``drop_invalid`` across data sets: ``(total, {file: count})``.

    Reads each data set's ``info["dropped_rows"]`` (``{file: count}``); train and test sets
    cut from one file carry the same entry, which is counted once.
    """
    per_file: dict[str, int] = {}
    for ds in datasets:
        for f, n in ((getattr(ds, "info", None) or {}).get("dropped_rows") or {}).items():
            per_file[str(f)] = int(n)
    return sum(per_file.values()), dict(sorted(per_file.items()))
