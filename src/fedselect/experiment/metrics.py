"""Per-round metrics (the columns: docs/core.md and docs/comparisons.md): CSV rows flushed every round, atomic summaries.

``metrics.csv`` holds only deterministic values, so two runs with the same config and seed give
byte-identical files; wall-clock seconds go to ``timing.csv`` beside it.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from fedselect.common.files import atomic_write, complete_lines, read_csv_rows, read_text
from fedselect.fl.fairness import PARTICIPATION_COLUMNS

#: the columns every method records, in order
CORE_COLUMNS = [
    "round",
    "selected",
    "accuracy",
    "f1_macro",
    "test_loss",
    "train_loss",
    "round_latency_s",
    "latency_sum_s",
    "e2e_latency_s",
    "upload_bytes",
    "download_bytes",
    "cum_upload_bytes",
    "cum_download_bytes",
    "failed",
    "clock_s",
    "available",
    "waited_s",
]
#: columns every run writes that were added after runs were already being saved (the latency
#: sum, the wait for clients to come online, the participation figures over rounds 1..t,
#: fedselect.fl.fairness): a run directory whose metrics.csv lacks them is still read (report,
#: compare) and resumed with the columns it started with
LATER_CORE_COLUMNS = ("latency_sum_s", "waited_s", *PARTICIPATION_COLUMNS)
TIMING_COLUMNS = ["round", "wall_s", "cum_wall_s"]


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, float):
        return "nan" if math.isnan(v) else repr(float(v))
    if hasattr(v, "item") and not isinstance(v, (list, tuple)):  # numpy scalar
        return _fmt(v.item())
    if isinstance(v, (list, tuple)):
        return ";".join(str(x) for x in v)
    if isinstance(v, bool):
        return str(int(v))
    return str(v)


class CsvLog:
    """Append-only CSV with a fixed header; each row is flushed and fsync'ed at once.

    Re-opening an existing file keeps the rows with ``round <= keep_through`` (resume) and
    drops a trailing partial line, so results already written are never corrupted.
    """

    def __init__(self, path: str | Path, columns: Sequence[str], keep_through: int | None = None):
        self.path, self.columns = Path(path), list(columns)
        if keep_through is not None and self.path.exists():
            rows = read_csv_rows(self.path)
            kept = [r for r in rows if r.get("round") not in (None, "") and int(r["round"]) <= keep_through]
            self._rewrite(kept)
        else:
            self._rewrite([])
        self._fh = open(self.path, "a", newline="")

    def _rewrite(self, rows: list[dict[str, str]]) -> None:
        def write(fh):
            w = csv.writer(fh)
            w.writerow(self.columns)
            for r in rows:
                w.writerow([r.get(c, "") for c in self.columns])

        atomic_write(self.path, write, newline="")

    def append(self, row: dict[str, Any]) -> None:
        unknown = set(row) - set(self.columns)
        if unknown:
            raise ValueError(f"{self.path.name}: unknown columns {sorted(unknown)}")
        csv.writer(self._fh).writerow([_fmt(row.get(c)) for c in self.columns])
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


#: the columns a report reads from every run's metrics.csv
REPORT_COLUMNS = ("round", "accuracy", "f1_macro", "e2e_latency_s", "cum_upload_bytes", "cum_download_bytes")


def read_metrics(path: str | Path) -> list[dict[str, str]]:
    """The rows of a run's ``metrics.csv`` for a report, checked: every column a report needs
    is there and every row's ``round`` is an integer and its other report columns numbers
    (``nan`` and empty allowed: rounds not evaluated). A trailing incomplete line (a run
    killed mid-write) is ignored, as in :func:`fedselect.common.files.read_csv_rows`.

    Raises:
        ValueError: not UTF-8, missing columns, or a malformed row (the message names the
        file, the line and the column).
    """
    p = Path(path)
    lines = complete_lines(read_text(p, "metrics CSV"))
    if not lines:
        return []
    reader = csv.DictReader(lines)
    missing = [c for c in REPORT_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise ValueError(f"{p}: missing column(s) {', '.join(missing)} (a fedselect metrics.csv has {', '.join(CORE_COLUMNS)})")
    rows = []
    for line_no, r in enumerate(reader, start=2):
        if None in r or None in r.values():
            raise ValueError(f"{p}, line {line_no}: {len(reader.fieldnames)} fields expected, the row has another number")
        for c in REPORT_COLUMNS:
            v = r[c].strip()
            ok = v.lstrip("-").isdigit() if c == "round" else (v == "" or not math.isnan(_num(v)) or v.lower() == "nan")
            if not ok:
                raise ValueError(
                    f"{p}, line {line_no}, column {c}: {r[c]!r} is not " + ("an integer round" if c == "round" else "a number")
                )
        rows.append(r)
    return rows


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def first_reaching(values: Sequence[float], target: float) -> int | None:
    """Index of the first value >= target, or None if never reached."""
    for i, v in enumerate(values):
        if not math.isnan(v) and v >= target:
            return i
    return None


def last_k_mean(values: Sequence[float], k: int) -> tuple[float | None, int]:
    """Mean of the last ``k`` evaluated (non-NaN) values, or of all of them if fewer.

    Returns ``(mean, n)`` with ``n`` the number of values averaged; ``(None, 0)`` when no value
    was evaluated. E.g. accuracies 0.05, 0.10, ..., 1.00 over 20 rounds, ``k = 10``: the mean of
    0.55 .. 1.00 = 0.775.

    Raises:
        ValueError: ``k < 1``.
    """
    if k < 1:
        raise ValueError(f"summary window k must be >= 1, got {k}")
    xs = [float(v) for v in values if not math.isnan(float(v))]
    if not xs:
        return None, 0
    tail = xs[-k:]
    return math.fsum(tail) / len(tail), len(tail)


#: summary figures read off the per-round rows (best over the rounds, the last-k mean, the first
#: round reaching the target). A method whose rounds do not score the models its clients end
#: with (:attr:`fedselect.algorithms.base.Algorithm.round_scores`: CEFL, whose members get their
#: model only after the last round) has them blank (None) in its summary and in the tables.
PER_ROUND_KEYS = (
    "best_accuracy",
    "best_f1_macro",
    "last_k_accuracy",
    "last_k_f1_macro",
    "rounds_to_target",
    "latency_to_target_s",
)


def summarize(
    rows: Iterable[dict[str, Any]], target: float | None = None, metric: str = "accuracy", window: int = 10
) -> dict[str, Any]:
    """Summary of per-round rows (round >= 1; a round-0 row of the initial model is skipped).

    Returns final and best accuracy / macro-F1, their mean over the last ``window`` evaluated
    rounds (``last_k_accuracy``, ``last_k_f1_macro``; all evaluated rounds if fewer;
    ``summary_window`` = ``window`` and ``summary_window_rounds`` = the rounds averaged),
    ``rounds_to_target`` and ``latency_to_target`` (first round whose ``metric`` >= ``target``;
    None if never or no target), end-to-end latency (s), ``latency_sum_s`` (the sum of the
    rows' ``latency_sum_s`` from round 0 on, like the end-to-end latency: every participant's
    latency over the run, s; None for a run saved before that column existed, nan when a row
    has nan), total communication in MB (1e6 bytes) up, down and total, and the rounds run.
    """
    rows = list(rows)
    rs = [r for r in rows if int(_num(r["round"])) >= 1]
    acc = [_num(r["accuracy"]) for r in rs]
    f1 = [_num(r["f1_macro"]) for r in rs]
    out: dict[str, Any] = {"rounds": len(rs), "target": target, "target_metric": metric}
    clean = lambda xs, f: f(x for x in xs if not math.isnan(x)) if any(not math.isnan(x) for x in xs) else None  # noqa: E731
    out["final_accuracy"] = acc[-1] if acc else None
    out["best_accuracy"] = clean(acc, max)
    out["final_f1_macro"] = f1[-1] if f1 else None
    out["best_f1_macro"] = clean(f1, max)
    out["last_k_accuracy"], n_acc = last_k_mean(acc, window)
    out["last_k_f1_macro"], n_f1 = last_k_mean(f1, window)
    out["summary_window"], out["summary_window_rounds"] = window, n_f1 if metric == "f1_macro" else n_acc
    out["e2e_latency_s"] = _num(rs[-1]["e2e_latency_s"]) if rs else 0.0
    every = [r for r in rows if int(_num(r["round"])) >= 0]
    has_sum = all("latency_sum_s" in r for r in every)
    out["latency_sum_s"] = math.fsum(_num(r["latency_sum_s"]) for r in every) if has_sum and every else None
    last = rs[-1] if rs else {"cum_upload_bytes": 0, "cum_download_bytes": 0}
    up, down = _num(last["cum_upload_bytes"]), _num(last["cum_download_bytes"])
    out["upload_mb"], out["download_mb"], out["communication_mb"] = up / 1e6, down / 1e6, (up + down) / 1e6
    out["rounds_to_target"] = out["latency_to_target_s"] = None
    if target is not None and rs:
        i = first_reaching([_num(r[metric]) for r in rs], target)
        if i is not None:
            out["rounds_to_target"] = int(_num(rs[i]["round"]))
            out["latency_to_target_s"] = _num(rs[i]["e2e_latency_s"])
    return out
