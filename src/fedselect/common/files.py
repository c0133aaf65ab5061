"""Files fedselect writes and reads back, whatever their content: atomic writes (temp file,
fsync, rename), strict JSON (non-finite numbers as ``null``) and tolerant readers of JSON and CSV
files that a run killed mid-write may have cut off."""

from __future__ import annotations

import csv
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any


def read_text(path: Path, what: str) -> str:
    """The text of ``path``; ``what`` names the kind of file expected, for the message.

    Raises:
        FileNotFoundError: no such file. ValueError: not a UTF-8 text file (the file named).
    """
    try:
        return path.read_text()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not a UTF-8 text file ({e.reason} at byte {e.start}); is it a {what}?") from None


def complete_lines(text: str) -> list[str]:
    """The lines of ``text`` that end with a newline (a last line cut off mid-write is dropped)."""
    lines = text.splitlines(keepends=True)
    return lines if not lines or lines[-1].endswith("\n") else lines[:-1]


def read_json(path: str | Path) -> Any:
    """The parsed JSON of one of fedselect's output files (``summary.json``, ``compare.json``,
    ``sweep.json``, ``federation-s0.json``).

    Raises:
        FileNotFoundError: no such file. ValueError: not UTF-8 or not valid JSON (the message
        names the file and where the text stops being JSON).
    """
    p = Path(path)
    text = read_text(p, "JSON file")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(
            f"{p}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); was it edited or cut off? "
            "Restore it or rerun what wrote it"
        ) from None


def read_csv_rows(path: str | Path) -> list[dict[str, str]]:
    """Rows of a metrics CSV as dicts of strings; a trailing incomplete line is ignored.

    Raises:
        ValueError: not a UTF-8 text file (the file named).
    """
    reader = csv.DictReader(complete_lines(read_text(Path(path), "CSV file")))
    n = len(reader.fieldnames or [])
    return [r for r in reader if len(r) == n and None not in r.values()]


def current_umask() -> int:
    """The process's file-mode creation mask.

    Read from ``/proc/self/status`` (``Umask:``, Linux >= 4.7) without changing it; elsewhere
    by setting and restoring it (``os.umask``), which is racy only if another thread creates
    files at that instant: our writers run in one thread.
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def atomic_write(path: str | Path, write_fn, mode: str = "w", newline: str | None = None) -> None:
    """Write a file through a temp file in the same directory, fsync, then rename over ``path``.

    The file gets the mode any new file gets (``0o666 & ~umask``: 0644 under umask 022), not
    the private 0600 of the temporary file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, mode, newline=newline) as fh:
            write_fn(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float (Python or NumPy: NaN, +-inf) replaced by ``None``
    (JSON ``null``), recursively through dicts, lists and tuples; NumPy scalars and arrays
    become Python numbers and lists, paths strings. Strict JSON has no NaN or Infinity."""
    import numpy as np

    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, Path):
        return str(obj)
    return obj


def dumps_json(obj: Any, **kwargs: Any) -> str:
    """Strict JSON text of ``obj`` (:func:`json_safe` first; ``allow_nan=False`` so a missed
    non-finite value is an error, never a ``NaN`` token)."""
    kwargs.setdefault("default", _json_default)
    return json.dumps(json_safe(obj), allow_nan=False, **kwargs)


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as strict JSON (non-finite numbers as ``null``), atomically."""
    text = dumps_json(obj, indent=2, sort_keys=True)
    atomic_write(path, lambda fh: fh.write(text))


def _json_default(o: Any):
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o)}")
