"""A run directory's files, written from the loop's typed results (:mod:`fedselect.fl.round`).

* ``config.yaml`` — the resolved config (every default written out);
* ``metrics.csv`` — a row per round (round 0: the preparation and the initial model), appended
  and fsync'ed every round; only deterministic values, so the same config and seed give a
  byte-identical file;
* ``timing.csv`` — wall-clock seconds per round (kept apart so that metrics.csv can be identical);
* ``checkpoint.pt`` / ``checkpoint.prev.pt`` — everything needed to continue exactly (atomic);
* ``model.pt`` — the final server model's ``state_dict``; ``summary.json`` — written atomically
  at the end; ``run.log``.

Fairness (:mod:`fedselect.fl.fairness`): every round's row has the participation figures over
rounds 1..t (``participation_jain``, ``participation_gini``, ``never_selected_share``, from the
times each client was selected), and the summary has them for the whole run with every client's
count (``participation_counts``), plus, where every client has a held-out split, the final
model's per-client accuracy on it (``client_accuracy_mean``, ``client_accuracy_worst10``,
``client_accuracy_std``, ``final_client_accuracy``: the model each client ends with, the global
one for FedAvg-like algorithms).
"""

from __future__ import annotations

import csv
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from fedselect.algorithms.base import Finished, RunTotals, ServerState
from fedselect.common.files import atomic_write, read_csv_rows, write_json_atomic
from fedselect.config.load import dump_config
from fedselect.experiment.checkpoint import save_checkpoint
from fedselect.experiment.metrics import LATER_CORE_COLUMNS, PER_ROUND_KEYS, TIMING_COLUMNS, CsvLog, _fmt, summarize
from fedselect.experiment.resolve import Resolved
from fedselect.experiment.simulation import Simulation
from fedselect.experiment.tblog import open_tensorboard
from fedselect.fl.fairness import client_accuracy_figures, participation_figures, selection_counts
from fedselect.fl.round import RoundResult
from fedselect.fl.types import Evaluation
from fedselect.selectors.base import Prepared, decides_on_quality

#: files a run writes into its directory (``overwrite`` removes exactly these)
RUN_FILES = (
    "config.yaml",
    "metrics.csv",
    "timing.csv",
    "summary.json",
    "model.pt",
    "run.log",
    "checkpoint.pt",
    "checkpoint.prev.pt",
    ".checkpoint.new",
    "inputs.json",  # fedselect.experiment.inputs: the input files and the federation the run started on
)


@dataclass
class RoundEvent:
    """Passed to progress callbacks after each round (``result``: the round's
    :class:`~fedselect.fl.round.RoundResult`, its outcomes without their weights;
    ``round_scores``: the algorithm's reason why the rounds' scores are not the clients' own
    models, e.g. CEFL's, or None)."""

    round: int
    rounds: int
    row: dict[str, Any]
    wall_s: float
    result: Any = None
    round_scores: str | None = None


def write_csv(path: Path, columns: list[str], rows: list[dict[str, str]]) -> None:
    """Write a whole CSV atomically (header + already formatted rows)."""

    def write(fh):
        w = csv.writer(fh)
        w.writerow(columns)
        for r in rows:
            w.writerow([r.get(c, "") for c in columns])

    atomic_write(path, write, newline="")


class RunFiles:
    """The files of one run (module docstring); the loop's :class:`fedselect.fl.round.Recorder`.

    Args:
        run_dir: the run directory (exists).
        resolved: the resolved experiment. sim: its simulation (columns, snapshots).
        on_round: called after every round with a :class:`RoundEvent` (progress bars).
        stop_after: stop after this round without finishing (tests of interruption).
        resume: a checkpoint to continue from, or None for a new run.
    """

    def __init__(
        self,
        run_dir: Path,
        resolved: Resolved,
        sim: Simulation,
        on_round: Callable | None = None,
        stop_after: int | None = None,
        resume: dict[str, Any] | None = None,
    ):
        self.dir, self.r, self.sim, self.on_round, self.stop_after = Path(run_dir), resolved, sim, on_round, stop_after
        # a run resumes with the columns it started with: one begun before a core column was added
        # (fedselect.experiment.metrics.LATER_CORE_COLUMNS, e.g. latency_sum_s) keeps writing without it
        self.columns = list(resume["columns"]) if resume is not None and resume.get("columns") else sim.columns
        cfg = resolved.config
        (self.dir / "config.yaml").write_text(dump_config(cfg))  # rounds may have been extended on resume
        if resume is not None:
            self.cum = dict(resume["cum"])
            self.prep_info = dict(resume.get("prep_info", {}))
            self.prep_cost = dict(resume.get("prep_cost", {"latency_s": 0.0, "upload_bytes": 0, "download_bytes": 0}))
            self.mrows, self.trows = list(resume["metrics_rows"]), list(resume.get("timing_rows", []))
            write_csv(self.dir / "metrics.csv", self.columns, self.mrows)
            write_csv(self.dir / "timing.csv", TIMING_COLUMNS, self.trows)
            self.metrics = CsvLog(self.dir / "metrics.csv", self.columns, keep_through=resume["round"])
            self.timing = CsvLog(self.dir / "timing.csv", TIMING_COLUMNS, keep_through=resume["round"])
        else:
            self.cum = {"up": 0, "down": 0, "e2e": 0.0, "wall": 0.0}
            self.prep_info, self.prep_cost = {}, {"latency_s": 0.0, "upload_bytes": 0, "download_bytes": 0}
            self.mrows, self.trows = [], []
            self.metrics = CsvLog(self.dir / "metrics.csv", self.columns)
            self.timing = CsvLog(self.dir / "timing.csv", TIMING_COLUMNS)
        # live curves (log.tensorboard): every row also goes to tb/ (fedselect.experiment.tblog)
        at = None if resume is None else resume["round"]
        self.tb = open_tensorboard(self.dir, cfg.log.tensorboard, self.columns, sim.selector.extra_columns, at)
        self.counts = selection_counts(self.mrows, sim.settings.num_clients)  # times each client was selected
        self._t0 = time.perf_counter()

    # ---------------------------------------------------------------- the loop's records
    def _append(self, row: dict[str, Any], t: int) -> None:
        row = {k: v for k, v in row.items() if k in self.columns or k not in LATER_CORE_COLUMNS}
        self.metrics.append(row)
        if self.tb is not None:
            self.tb.write(row, t)
        self.mrows.append({c: _fmt(row.get(c)) for c in self.columns})
        wall = time.perf_counter() - self._t0
        self.cum["wall"] += wall
        trow = {"round": t, "wall_s": wall, "cum_wall_s": self.cum["wall"]}
        self.timing.append(trow)
        self.trows.append({c: _fmt(trow.get(c)) for c in TIMING_COLUMNS})
        self._t0 = time.perf_counter()

    def prepared(self, prepared: Prepared, before: Evaluation) -> None:
        """The round-0 row: the preparation's cost and the initial model's figures."""
        c = prepared.cost
        self.prep_info = dict(prepared.summary)
        self.prep_cost = {
            "latency_s": float(c.latency_s),
            "upload_bytes": int(c.upload_bytes),
            "download_bytes": int(c.download_bytes),
        }
        self.cum["up"] += int(c.upload_bytes)
        self.cum["down"] += int(c.download_bytes)
        self.cum["e2e"] += float(c.latency_s)
        online = self.sim.clock.online(0, 0.0)
        row = {
            "round": 0,
            "clock_s": 0.0,
            "available": self.sim.settings.num_clients if online is None else int(online.sum()),
            "waited_s": 0.0,
            "selected": [],
            "accuracy": before.accuracy,
            "f1_macro": before.f1_macro,
            "test_loss": before.loss,
            "train_loss": math.nan,
            "round_latency_s": float(c.latency_s),
            "latency_sum_s": c.clients_latency_sum_s,
            "e2e_latency_s": self.cum["e2e"],
            "upload_bytes": int(c.upload_bytes),
            "download_bytes": int(c.download_bytes),
            "cum_upload_bytes": self.cum["up"],
            "cum_download_bytes": self.cum["down"],
            "failed": [],
            "aggregated": 0,
            "aggregated_ids": [],
            "round_failed": 0,
            **_validation_cells(before),
        }
        self._append(row, 0)

    def round(self, result: RoundResult, state: ServerState) -> bool:
        """Append round ``result.round``'s row, checkpoint, report progress; True to stop."""
        t, ev = result.round, result.after
        lat, up, down = result.latency_s, result.upload_bytes, result.download_bytes
        self.cum["up"] += up
        self.cum["down"] += down
        self.cum["e2e"] += result.waited_s  # the wait for a client to come online counts in the end-to-end latency
        self.cum["e2e"] += lat
        nan = math.nan
        row = {
            "round": t,
            "clock_s": result.clock_s,
            "available": result.available,
            "waited_s": result.waited_s,
            "selected": list(result.selection.clients),
            "accuracy": ev.accuracy if result.evaluated else nan,
            "f1_macro": ev.f1_macro if result.evaluated else nan,
            "test_loss": ev.loss if result.evaluated else nan,
            "train_loss": result.train_loss,
            "round_latency_s": lat,
            "latency_sum_s": result.latency_sum_s,
            "e2e_latency_s": self.cum["e2e"],
            "upload_bytes": up,
            "download_bytes": down,
            "cum_upload_bytes": self.cum["up"],
            "cum_download_bytes": self.cum["down"],
            "failed": [f"{o.client_id}:{o.failed}" for o in result.outcomes if not o.ok and o.failed != "cancelled"],
            "aggregated": result.aggregated,
            "aggregated_ids": list(result.aggregated_ids),
            "round_failed": int(result.round_failed),
        }
        if self.sim.selector.probes:
            cost = result.selection.cost
            row.update(
                probe_latency_s=cost.latency_s,
                probe_upload_bytes=cost.upload_bytes,
                probe_download_bytes=cost.download_bytes,
                candidates_probed=cost.candidates,
            )
        if result.evaluated:
            row.update(_validation_cells(ev))
        if result.evaluated and ev.per_client is not None:
            row["accuracy_std"] = ev.per_client["accuracy_std"]
            row["client_accuracy"] = [round(a, 6) for a in ev.per_client["client_accuracy"]]
        self.counts[list(result.selection.clients)] += 1
        row.update(participation_figures(self.counts))
        row.update({k: v for k, v in result.columns.items() if k in self.columns and k not in row})
        self._append(row, t)
        every = self.r.config.checkpoint_every
        if every and (t % every == 0 or t == self.sim.rounds):
            self.checkpoint(t, state, ev)
        if self.on_round:
            light = replace(result, outcomes=tuple(replace(o, state=None) for o in result.outcomes))
            self.on_round(RoundEvent(t, self.sim.rounds, row, self.cum["wall"], light, self.sim.algorithm.round_scores))
        self._t0 = time.perf_counter()  # checkpoint and progress time count in no round
        return self.stop_after is not None and t >= self.stop_after

    def totals(self) -> RunTotals:
        """Bytes moved in the rounds (the preparation excluded)."""
        return RunTotals(self.cum["up"] - self.prep_cost["upload_bytes"], self.cum["down"] - self.prep_cost["download_bytes"])

    def checkpoint(self, t: int, state: ServerState, before: Evaluation) -> None:
        save_checkpoint(
            self.dir,
            {
                "round": t,
                "snapshot": self.sim.snapshot(state),
                "cum": dict(self.cum),
                "before": before.as_dict(),
                "prep_info": self.prep_info,
                "prep_cost": self.prep_cost,
                "config": self.r.config.model_dump(mode="json"),
                "columns": self.columns,
                "metrics_rows": self.mrows,
                "timing_rows": self.trows,
                "torch_threads": torch.get_num_threads(),
            },
        )

    def close(self) -> None:
        self.metrics.close()
        self.timing.close()
        if self.tb is not None:
            self.tb.close()

    # ---------------------------------------------------------------- the end
    def finish(self, finished: Finished, selector_summary: dict[str, Any]) -> dict[str, Any]:
        """``model.pt`` and ``summary.json`` (with the fairness figures: module docstring);
        returns the summary."""
        clients_acc = final_client_accuracy(self.sim, finished)
        self.cum["wall"] += time.perf_counter() - self._t0  # the finish counts in the run's wall time
        state = {k: v.detach().clone() for k, v in finished.state.model.items()}
        atomic_write(self.dir / "model.pt", lambda fh: torch.save(state, fh), mode="wb")
        final: dict[str, Any] = {}
        if finished.evaluation is not None:  # the reported figures (the validation ones are in metrics.csv)
            final.update(replace(finished.evaluation, validation=None).as_dict())
        final.update(finished.summary)
        final.update(selector_summary or {})
        final.update(participation_figures(self.counts), participation_counts=[int(c) for c in self.counts])
        if clients_acc is not None:
            final.update(client_accuracy_figures(clients_acc), final_client_accuracy=[round(a, 6) for a in clients_acc])
        phases = {
            "prepare": dict(self.prep_cost),
            "finish": {
                "latency_s": float(finished.cost.latency_s),
                "upload_bytes": int(finished.cost.upload_bytes),
                "download_bytes": int(finished.cost.download_bytes),
            },
        }
        return write_summary(self.dir, self.r, self.sim, final, self.prep_info, self.cum["wall"], phases)


def _validation_cells(ev: Evaluation) -> dict[str, float]:
    """The ``val_*`` cells of a row (:data:`fedselect.experiment.simulation.VALIDATION_COLUMNS`): ``ev``'s
    figures on the server's validation set, {} when it has none."""
    v = ev.validation
    return {} if v is None else {"val_accuracy": v.accuracy, "val_f1_macro": v.f1_macro, "val_loss": v.loss}


def final_client_accuracy(sim: Simulation, finished: Finished) -> list[float] | None:
    """Each client's accuracy on its own held-out split with the model it ends with
    (``Algorithm.eval_state`` of the final state): the final per-client evaluation when the
    algorithm made one (per-client evaluation, CEFL's transfer), else one held-out evaluation
    job per client now. None when some client has no held-out split (``data.holdout_fraction``
    0)."""
    ev = finished.evaluation
    if ev is not None and ev.per_client is not None:
        return [float(a) for a in ev.per_client["client_accuracy"]]
    if any(len(c.holdout_indices) == 0 for c in sim.fed.clients):
        return None
    alg = sim.algorithm
    scored = alg.evaluate_clients(lambda k: alg.eval_state(finished.state, k))
    return [float(a) for a in scored.per_client["client_accuracy"]]


def failure_counts(rows: list[dict[str, str]]) -> dict[str, Any]:
    """Failures in metrics rows: ``{"client_failures": {kind: count}, "failed_rounds": n}``."""
    kinds: dict[str, int] = {}
    failed_rounds = 0
    for r in rows:
        for item in filter(None, (r.get("failed") or "").split(";")):
            kind = item.split(":", 1)[-1]
            kinds[kind] = kinds.get(kind, 0) + 1
        failed_rounds += int(r.get("round_failed") or 0)
    return {"client_failures": dict(sorted(kinds.items())), "failed_rounds": failed_rounds}


def fat_selection(fat_clients: Any, accepted: Any) -> dict[str, Any]:
    """``{"fat_selected": count, "fat_selected_share": fraction}`` of the accepted clients
    (budgeted-online selectors' ``accepted_clients``, the first selection run) that are fat
    clients of a ``fat_thin`` partition; ``{}`` when the partition has no fat clients
    (``fat_clients`` None) or the selector accepts no fixed set. The share is None when
    nobody was accepted."""
    if fat_clients is None or not isinstance(accepted, list):
        return {}
    n = int(np.isin(np.asarray(accepted, dtype=np.int64), np.asarray(fat_clients, dtype=np.int64)).sum())
    return {"fat_selected": n, "fat_selected_share": n / len(accepted) if accepted else None}


def write_summary(
    run_dir: Path,
    r: Resolved,
    sim: Simulation,
    final: dict[str, Any],
    prep_info: dict[str, Any],
    wall: float,
    phases: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """``summary.json`` from the saved metrics rows plus the final figures (atomic).

    The end-to-end latency and the traffic cover every phase the run had: the preparation
    (round 0's row), the rounds, and the work after the last round (``phases.finish``: e.g.
    CEFL's transfer); ``phases`` gives each part (seconds, MB) and they sum to the totals. The
    best accuracy / macro-F1 is taken over every evaluation, the final one included."""
    cfg = r.config
    rows = read_csv_rows(run_dir / "metrics.csv")
    summary = summarize(rows, cfg.metrics.target, cfg.metrics.metric, cfg.metrics.summary_window)
    fin = (phases or {}).get("finish", {"latency_s": 0.0, "upload_bytes": 0, "download_bytes": 0})
    rows_e2e = float(summary["e2e_latency_s"])
    rows_up, rows_down = summary["upload_mb"] * 1e6, summary["download_mb"] * 1e6
    prep = (phases or {}).get("prepare", {"latency_s": 0.0, "upload_bytes": 0, "download_bytes": 0})
    summary["e2e_latency_s"] = rows_e2e + fin["latency_s"]
    summary["upload_mb"] = (rows_up + fin["upload_bytes"]) / 1e6
    summary["download_mb"] = (rows_down + fin["download_bytes"]) / 1e6
    summary["communication_mb"] = summary["upload_mb"] + summary["download_mb"]
    summary["phases"] = {
        "prepare": {
            "latency_s": prep["latency_s"],
            "upload_mb": prep["upload_bytes"] / 1e6,
            "download_mb": prep["download_bytes"] / 1e6,
        },
        "rounds": {
            "latency_s": rows_e2e - prep["latency_s"],
            "upload_mb": (rows_up - prep["upload_bytes"]) / 1e6,
            "download_mb": (rows_down - prep["download_bytes"]) / 1e6,
        },
        "finish": {
            "latency_s": fin["latency_s"],
            "upload_mb": fin["upload_bytes"] / 1e6,
            "download_mb": fin["download_bytes"] / 1e6,
        },
    }
    if final:
        for key in ("accuracy", "f1_macro"):
            if key in final:
                summary[f"final_{key}"] = final[key]
                best = summary.get(f"best_{key}")
                summary[f"best_{key}"] = final[key] if best is None else max(best, final[key])
        summary.update({k: v for k, v in final.items() if k not in ("accuracy", "f1_macro", "loss")})
    note = getattr(sim.algorithm, "round_scores", None)
    if note:  # the rounds did not score the clients' own models: no figure is read off them
        summary.update({k: None for k in PER_ROUND_KEYS}, summary_window_rounds=None, round_scores=note)
    summary.update(
        {
            "name": cfg.name,
            "method": r.method,
            "selector": cfg.selector.name,
            "algorithm": cfg.algorithm.name,
            "seed": cfg.seed,
            "dataset": cfg.data.dataset,
            "num_clients": sim.fed.num_clients,
            "clients_per_round": cfg.clients_per_round,
            "wall_s": wall,
            "complete": True,
            "data_dropped_rows": sim.fed.data_dropped_rows,  # rows dropped at load by a loader's drop_invalid
            # the set the selector's choices read model quality on; None: they read none
            "selection_eval": cfg.selection_eval if decides_on_quality(type(sim.selector)) else None,
        }
    )
    summary.update(failure_counts(rows))
    summary.update(fat_selection(getattr(sim.fed, "fat_clients", None), summary.get("accepted_clients")))
    if prep_info:
        summary["prepare"] = {k: v for k, v in prep_info.items() if isinstance(v, (int, float, str, bool, list, dict))}
    write_json_atomic(run_dir / "summary.json", summary)
    return summary
