"""The output-directory policy: where a run, a comparison or a sweep may write.

A new output (``--out``) gets a directory of its own: not ``.``, not a file, not a directory
holding another kind of output, and a run is not started over a run unless it is resumed or
overwritten (:func:`check_run_dir`). Checked once, before anything is built or written
(:func:`fedselect.experiment.run.plan`, :func:`fedselect.api.output_dir`).
"""

from __future__ import annotations

import os
from pathlib import Path

#: files whose presence means a directory already holds a run
_RUN_MARKERS = ("config.yaml", "metrics.csv", "summary.json", "checkpoint.pt", "checkpoint.prev.pt")


def existing_run_files(run_dir: str | Path) -> list[str]:
    """Names of the files in ``run_dir`` showing that it already holds a run."""
    d = Path(run_dir)
    return [n for n in _RUN_MARKERS if (d / n).exists()]


#: files whose presence marks a directory as a comparison's or a sweep's
_OUTPUT_MARKERS = {"comparison": "compare.json", "sweep": "sweep.json"}


def check_output_dir(path: str | Path, kind: str) -> None:
    """Refuse an output directory (``--out``) that cannot hold a new ``kind`` ("run",
    "comparison" or "sweep") before anything is built or written.

    Refused: an empty path or ``.`` (the files would land in the current directory among
    others), an existing file, a directory holding another kind of output (a run's files in a
    comparison directory, or the reverse: one directory, one kind), and a path that cannot be
    created (a parent that is a file or not writable).

    Raises:
        ValueError: empty path or ``.``. FileExistsError: a file, or another kind's directory.
        PermissionError / NotADirectoryError: the directory cannot be created there.
    """
    text = str(path)
    d = Path(path)
    if text.strip() in ("", ".") or str(d) == ".":
        raise ValueError(
            f"--out {text!r}: give a directory of its own (an empty or '.' --out would write the {kind}'s "
            "files into the current directory among others)"
        )
    if d.exists() and not d.is_dir():
        raise FileExistsError(f"{kind} directory {d} exists and is not a directory; choose another --out")
    if d.is_dir():
        found = {k: m for k, m in _OUTPUT_MARKERS.items() if k != kind and (d / m).exists()}
        if kind != "run" and existing_run_files(d):
            found["run"] = ", ".join(existing_run_files(d))
        if found:
            other, marker = next(iter(found.items()))
            raise FileExistsError(
                f"{d} already holds a {other} ({marker}); a {kind} needs a directory of its own: choose another --out "
                "(nothing was changed)"
            )
        return
    parent = d.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise NotADirectoryError(f"--out {d}: {parent} is not a directory, so {d} cannot be created")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"--out {d}: {parent} is not writable, so {d} cannot be created; choose another --out")


def check_run_dir(run_dir: str | Path, overwrite: bool = False) -> None:
    """Refuse to start a new run where one exists (before anything is built or written).

    Raises:
        FileExistsError: ``run_dir`` is a file, holds a comparison or a sweep, or holds a run
        and ``overwrite`` is false (the message says to use ``--resume`` or ``--overwrite``).
        ValueError, PermissionError, NotADirectoryError: see :func:`check_output_dir`.
    """
    d = Path(run_dir)
    check_output_dir(d, "run")
    found = existing_run_files(d)
    if found and not overwrite:
        raise FileExistsError(
            f"run directory {d} already holds a run ({', '.join(found)}); nothing was changed. "
            f"Continue it with `fedselect run --resume {d}`, replace it with --overwrite, or choose another --out"
        )
