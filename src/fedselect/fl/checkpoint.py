"""Atomic checkpoints (temp file + fsync + rename) with a fallback to the previous one.

Files in a run directory:

* ``checkpoint.pt`` - the latest checkpoint;
* ``checkpoint.prev.pt`` - the one before (kept so that a damaged latest file loses only
  ``checkpoint_every`` rounds);
* ``.checkpoint.new`` - exists only for an instant between the two renames of a save; a
  crash exactly there leaves it complete, and :func:`load_checkpoint` considers it too.

:func:`load_checkpoint` reads every candidate and returns the readable one with the highest
round; a truncated or corrupted file is named in a warning (and in the error when none is
usable). Checkpoints are pickles (``torch.save``): only load run directories you trust.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch

from fedselect.fl.metrics import atomic_write

log = logging.getLogger("fedselect.checkpoint")

LATEST, PREVIOUS, NEW = "checkpoint.pt", "checkpoint.prev.pt", ".checkpoint.new"
#: bumped when the payload layout changes incompatibly
FORMAT_VERSION = 3


class CheckpointError(RuntimeError):
    """No usable checkpoint in a run directory (the message names each file and its problem)."""


class NoCheckpointError(CheckpointError):
    """The run directory holds no checkpoint file at all (the run stopped before its first one)."""


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:  # e.g. platforms without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(run_dir: str | Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` (a dict with at least ``round``) atomically as ``checkpoint.pt``; the
    former latest becomes ``checkpoint.prev.pt``. At every instant at least one complete
    checkpoint file exists once the first save has finished.

    Raises:
        ValueError: ``payload`` is not a dict with an integer ``round``.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("round"), int):
        raise ValueError("a checkpoint payload must be a dict with an integer 'round'")
    d = Path(run_dir)
    latest = d / LATEST
    payload = {**payload, "format_version": FORMAT_VERSION}
    atomic_write(d / NEW, lambda fh: torch.save(payload, fh), mode="wb")
    if latest.exists():
        os.replace(latest, d / PREVIOUS)
    os.replace(d / NEW, latest)
    _fsync_dir(d)
    return latest


def read_checkpoint_file(path: str | Path) -> dict[str, Any]:
    """Load and check one checkpoint file.

    Raises:
        CheckpointError: missing, truncated/corrupted, or not a fedselect checkpoint (the message
        says which, with the underlying error).
    """
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"{p}: missing")
    if p.stat().st_size == 0:
        raise CheckpointError(f"{p}: empty file (0 bytes; truncated)")
    try:
        payload = torch.load(p, map_location="cpu", weights_only=False)
    except Exception as e:  # truncated zip, bad pickle, ...
        raise CheckpointError(f"{p}: unreadable, truncated or corrupted ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("round"), int) or not ("snapshot" in payload or "method" in payload):
        raise CheckpointError(f"{p}: not a fedselect checkpoint (expected a dict with 'round' and 'snapshot')")
    version = payload.get("format_version", 1)
    if version > FORMAT_VERSION:
        raise CheckpointError(f"{p}: written by a newer fedselect (checkpoint format {version}; this one reads <= {FORMAT_VERSION})")
    return payload


def checkpoint_files(run_dir: str | Path) -> list[Path]:
    """The checkpoint files present in ``run_dir`` (latest, in-flight, previous)."""
    d = Path(run_dir)
    return [d / n for n in (LATEST, NEW, PREVIOUS) if (d / n).exists()]


def load_checkpoint(run_dir: str | Path) -> dict[str, Any]:
    """The readable checkpoint of ``run_dir`` with the highest round.

    Unreadable files are logged as warnings (``fedselect.checkpoint``) and skipped; using an
    older file than ``checkpoint.pt`` is logged too.

    Raises:
        NoCheckpointError: no checkpoint file exists.
        CheckpointError: files exist but none is usable (names each file and its problem).
    """
    d = Path(run_dir)
    present = checkpoint_files(d)
    if not present:
        raise NoCheckpointError(f"no checkpoint in {d} (looked for {LATEST} and {PREVIOUS})")
    errors, good = [], []
    for p in present:
        try:
            good.append((p, read_checkpoint_file(p)))
        except CheckpointError as e:
            log.warning("checkpoint %s; falling back to an older checkpoint", e)
            errors.append(str(e))
    if not good:
        raise CheckpointError(f"no usable checkpoint in {d}: " + "; ".join(errors))
    path, payload = max(good, key=lambda pp: pp[1]["round"])
    if path.name != LATEST:
        log.warning("resuming from %s (round %d) instead of %s", path, payload["round"], LATEST)
    return payload


def remove_stale_temp_files(run_dir: str | Path, names: tuple[str, ...] = (LATEST, NEW)) -> list[Path]:
    """Delete the temp files a killed writer of ``names`` left behind (``.<name>.*.tmp``, see
    ``fl.metrics.atomic_write``); returns them. Other files are never touched."""
    d = Path(run_dir)
    stale = sorted(p for n in names for p in d.glob(f".{n}.*.tmp"))
    for p in stale:
        p.unlink(missing_ok=True)
    return stale
