"""Atomic checkpoints (temp file + rename) with a fallback to the previous one.

Two files are kept: ``checkpoint.pt`` (latest) and ``checkpoint.prev.pt`` (the one before). A
truncated or unreadable latest file is reported and the previous one is used.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch

from fedselect.fl.metrics import atomic_write

log = logging.getLogger("fedselect.checkpoint")

LATEST, PREVIOUS = "checkpoint.pt", "checkpoint.prev.pt"


class CheckpointError(RuntimeError):
    """No usable checkpoint in a run directory."""


def save_checkpoint(run_dir: str | Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` atomically; the former latest becomes ``checkpoint.prev.pt``."""
    d = Path(run_dir)
    latest = d / LATEST
    atomic_write(d / ".checkpoint.new", lambda fh: torch.save(payload, fh), mode="wb")
    if latest.exists():
        os.replace(latest, d / PREVIOUS)
    os.replace(d / ".checkpoint.new", latest)
    return latest


def load_checkpoint(run_dir: str | Path) -> dict[str, Any]:
    """The newest readable checkpoint of ``run_dir``.

    Raises:
        CheckpointError: none exists or none can be read (names the files and the errors).
    """
    d = Path(run_dir)
    errors = []
    for name in (LATEST, PREVIOUS):
        p = d / name
        if not p.exists():
            errors.append(f"{p}: missing")
            continue
        try:
            payload = torch.load(p, map_location="cpu", weights_only=False)
            if not isinstance(payload, dict) or "round" not in payload:
                raise ValueError("not a fedselect checkpoint")
        except Exception as e:  # truncated / corrupted file
            log.warning("checkpoint %s is unreadable (%s); trying the previous one", p, e)
            errors.append(f"{p}: unreadable ({type(e).__name__}: {e})")
            continue
        if name == PREVIOUS:
            log.warning("using the previous checkpoint %s (round %s)", p, payload["round"])
        return payload
    raise CheckpointError(f"no usable checkpoint in {d}: " + "; ".join(errors))
