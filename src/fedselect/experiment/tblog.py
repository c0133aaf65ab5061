"""Live curves in TensorBoard: a run's metrics rows as event files, written every round.

With ``log.tensorboard: true`` (or ``log: tensorboard``; on the command line ``--set
log.tensorboard=true``) every row :mod:`fedselect.experiment.runfiles` appends to ``metrics.csv`` is also
written to ``<run dir>/tb/`` with ``torch.utils.tensorboard.SummaryWriter`` and flushed at once,
so ``tensorboard --logdir <run dir>`` follows the run as it goes. A comparison's runs each write
their own ``runs/<label>-s<seed>/tb``, so ``tensorboard --logdir <comparison dir>`` overlays them
with the run name ``runs/<label>-s<seed>/tb`` (the method label and the seed).

Scalars (step = the round; round 0 is the preparation and the initial model), each the value
written to ``metrics.csv`` in that round (TensorBoard stores them as float32):

* ``eval/accuracy``, ``eval/f1_macro``, ``eval/test_loss`` (rounds that were not evaluated are
  left out, not written as NaN), ``train/train_loss``;
* ``latency/round_latency_s``, ``latency/latency_sum_s``, ``latency/e2e_latency_s``,
  ``latency/waited_s`` (simulated seconds);
* ``bytes/upload_bytes``, ``bytes/download_bytes``, ``bytes/cum_upload_bytes``,
  ``bytes/cum_download_bytes``;
* ``train/aggregated`` (updates averaged), ``train/round_failed`` (0/1), ``train/failed_clients``
  (the number of entries in the ``failed`` column);
* ``fairness/participation_jain``, ``fairness/participation_gini``,
  ``fairness/never_selected_share`` (participation over rounds 1..t; round 0 has none);
* ``probe/<column>`` for selectors that probe (Power-of-Choice: ``probe_latency_s`` ...);
* ``selector/<column>``: every numeric extra column of the selector (FLASH-RL / FAVOR:
  ``epsilon``, ``mean_reward``, ``td_loss``; Oort: ``epsilon``, ``exploited``, ``explored``,
  ``preferred_duration_s``, ``round_threshold``, ``mean_utility``; ...); text and list columns
  (``selected_devices``) are not curves and are left out;
* ``algorithm/<column>``: the algorithm's numeric columns (per-client evaluation:
  ``accuracy_std``).

A resumed run continues the same event files: it starts a new file with TensorBoard's
``purge_step`` set to the first round it recomputes, so rows written after the checkpoint by
the killed process are dropped by TensorBoard's readers and each step appears once. A run
started again from round 0 (``--overwrite``, or killed before its first checkpoint) empties
``tb/`` first. The event files are outputs only: results never depend on them, and
``log.tensorboard`` may differ on resume (it is not compared).
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from fedselect.config.sections import TENSORBOARD_INSTALL

#: the run directory's sub-folder of event files
TB_DIR = "tb"

#: group of each core metrics.csv column (tag = group/column)
CORE_GROUPS = {
    "accuracy": "eval",
    "f1_macro": "eval",
    "test_loss": "eval",
    "train_loss": "train",
    "round_latency_s": "latency",
    "latency_sum_s": "latency",
    "e2e_latency_s": "latency",
    "waited_s": "latency",
    "upload_bytes": "bytes",
    "download_bytes": "bytes",
    "cum_upload_bytes": "bytes",
    "cum_download_bytes": "bytes",
    "aggregated": "train",
    "round_failed": "train",
    "participation_jain": "fairness",
    "participation_gini": "fairness",
    "never_selected_share": "fairness",
}
PROBE_COLUMNS = ("probe_latency_s", "probe_upload_bytes", "probe_download_bytes", "candidates_probed")


def tag_map(columns: Iterable[str], selector_columns: Iterable[str]) -> dict[str, str]:
    """metrics.csv column -> TensorBoard tag, for the columns that can be curves."""
    sel = set(selector_columns)
    out = {}
    for c in columns:
        if c in ("round", "selected", "failed"):
            continue
        if c in CORE_GROUPS:
            out[c] = f"{CORE_GROUPS[c]}/{c}"
        elif c in PROBE_COLUMNS:
            out[c] = f"probe/{c}"
        elif c in sel:
            out[c] = f"selector/{c}"
        else:
            out[c] = f"algorithm/{c}"
    return out


def _number(v: Any) -> float | None:
    """``v`` as a finite float, or None (text, lists, booleans, NaN and inf are no curve points)."""
    if isinstance(v, np.generic) and np.issubdtype(type(v), np.number):
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    x = float(v)
    return x if math.isfinite(x) else None


class TensorBoardLog:
    """The event files of one run (module docstring).

    Args:
        run_dir: the run directory; events go to ``run_dir/tb``.
        columns: the run's metrics.csv columns. selector_columns: the selector's extra columns.
        resume_round: the checkpoint's round when the run continues (events of later rounds are
            purged); None for a run starting at round 0 (``tb/`` is emptied).

    Raises:
        ImportError: the tensorboard package is missing (the message says how to install it).
    """

    def __init__(self, run_dir: Path, columns: list[str], selector_columns: Iterable[str], resume_round: int | None = None):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise ImportError(f"log.tensorboard needs the tensorboard package ({e}): {TENSORBOARD_INSTALL}") from None
        self.dir = Path(run_dir) / TB_DIR
        if resume_round is None and self.dir.exists():
            shutil.rmtree(self.dir)  # a run starting at round 0: no curves of an earlier attempt
        self.tags = tag_map(columns, selector_columns)
        purge = None if resume_round is None else int(resume_round) + 1
        self.writer = SummaryWriter(log_dir=str(self.dir), purge_step=purge, flush_secs=3600)

    def write(self, row: dict[str, Any], step: int) -> None:
        """One metrics row as scalars at ``step`` (the round), flushed to disk."""
        for col, tag in self.tags.items():
            x = _number(row.get(col))
            if x is not None:
                self.writer.add_scalar(tag, x, global_step=int(step))
        failed = row.get("failed")
        if isinstance(failed, (list, tuple)):
            self.writer.add_scalar("train/failed_clients", float(len(failed)), global_step=int(step))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def open_tensorboard(run_dir: Path, enabled: bool, columns: list[str], selector_columns, resume_round: int | None):
    """A :class:`TensorBoardLog` when ``enabled`` (``log.tensorboard``), else None. A run starting
    at round 0 removes the ``tb/`` of an earlier attempt either way (its curves are not this run's)."""
    if resume_round is None and (Path(run_dir) / TB_DIR).is_dir():
        shutil.rmtree(Path(run_dir) / TB_DIR)
    return TensorBoardLog(run_dir, columns, selector_columns, resume_round) if enabled else None
