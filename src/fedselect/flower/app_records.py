"""The run directory of a :class:`fedselect.flower.selection.SelectionStrategy` run: ``metrics.csv``
(one row per round, written with fedselect's own :class:`~fedselect.experiment.metrics.CsvLog`:
flushed every round), ``clients.csv`` (one row per selected node and round) and
``summary.json`` (written at the end, atomically; strict JSON: null for unknown values). The
columns: docs/flower.md, "Our selectors in your Flower app"."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from fedselect.common.files import atomic_write
from fedselect.experiment.metrics import CORE_COLUMNS, CsvLog
from fedselect.fl.fairness import PARTICIPATION_COLUMNS, participation_figures
from fedselect.fl.types import ClientOutcome, Selection
from fedselect.flower.app_fleet import AppFleet
from fedselect.selectors.base import Selector

__all__ = ["AppRecords", "RoundRecord", "COLUMNS", "PROBE_COLUMNS", "CLIENT_COLUMNS"]

#: the columns of ``metrics.csv`` every run writes (then :data:`PROBE_COLUMNS` for a selector
#: that probes, then the selector's own ``extra_columns``); ``clock_s`` is the measured time at
#: which the round began (the previous rows' ``e2e_latency_s``), ``waited_s`` 0 (the server does
#: not wait for nodes to come online between rounds), ``f1_macro`` the evaluation's
#: ``f1_macro`` / ``f1-macro`` when it reports one
COLUMNS = (
    *CORE_COLUMNS,  # fedselect's own columns, in its order: `fedselect report` reads such a run
    "nodes",
    *(c for c in PARTICIPATION_COLUMNS if c not in CORE_COLUMNS),
)
PROBE_COLUMNS = ("probe_latency_s", "probe_upload_bytes", "probe_download_bytes", "candidates_probed")
CLIENT_COLUMNS = (
    "round",
    "client",
    "node",
    "failed",
    "latency_s",
    "num_examples",
    "train_loss",
    "upload_bytes",
    "download_bytes",
)


@dataclass
class RoundRecord:
    """Round ``round`` from its ``configure_train`` to its row.

    Attributes:
        selection: the selector's answer (its cost: the measured probe, when it probed).
        sent: client -> bytes of its training message. available: nodes connected.
        outcomes: one per selected client, selection order (after ``aggregate_train``).
        columns: the selector's own values (None until it observed the round).
        accuracy, f1_macro, loss: the round's evaluation (nan without one); server_figures: from the
            ServerApp's ``evaluate_fn`` (else the federated evaluation's).
    """

    round: int
    selection: Selection
    sent: dict[int, int]
    available: int
    outcomes: tuple[ClientOutcome, ...] = ()
    columns: dict[str, Any] | None = None
    accuracy: float = math.nan
    f1_macro: float = math.nan
    loss: float = math.nan
    server_figures: bool = False


class AppRecords:
    """The rows of a run, in memory (:attr:`rows`) and, with ``run_dir``, on disk (module docstring).

    Args:
        run_dir: the run directory, or None (nothing written). fleet: the run's :class:`AppFleet`.
        selector: the run's selector. name, options: its name and options. strategy: the
            wrapped Flower strategy's class name.
    """

    def __init__(self, run_dir: Path | None, fleet: AppFleet, selector: Selector, name: str, options: BaseModel, strategy: str):
        self.run_dir, self.fleet, self.selector = run_dir, fleet, selector
        self.name, self.options, self.strategy = name, options, strategy
        self.rows: list[dict[str, Any]] = []
        self.counts = np.zeros(len(fleet.nodes), dtype=np.int64)
        self.cum_up, self.cum_down, self.e2e_s = 0, 0, 0.0
        self._csv = self._clients = None
        if run_dir is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
            cols = [*COLUMNS, *(PROBE_COLUMNS if selector.probes else ()), *selector.extra_columns]
            self._csv = CsvLog(run_dir / "metrics.csv", cols)
            self._clients = CsvLog(run_dir / "clients.csv", CLIENT_COLUMNS)

    def round(self, rnd: RoundRecord) -> dict[str, Any]:
        """Record round ``rnd`` (its row, its clients' rows); returns the row. The round's
        latency is the probe's plus the slowest participant's round trip (s)."""
        fleet, out, cost = self.fleet, rnd.outcomes, rnd.selection.cost
        lat = cost.latency_s + max([o.latency_s for o in out] or [0.0])
        clock = self.e2e_s
        up = sum(o.upload_bytes for o in out) + cost.upload_bytes
        down = sum(o.download_bytes for o in out) + cost.download_bytes
        self.cum_up, self.cum_down, self.e2e_s = self.cum_up + up, self.cum_down + down, self.e2e_s + lat
        for k in rnd.selection.clients:
            self.counts[k] += 1
        losses = [o.train_loss for o in out if o.ok and math.isfinite(o.train_loss)]
        row: dict[str, Any] = {
            "round": rnd.round,
            "selected": list(rnd.selection.clients),
            "nodes": [fleet.nodes[k] for k in rnd.selection.clients],
            "accuracy": rnd.accuracy,
            "f1_macro": rnd.f1_macro,
            "test_loss": rnd.loss,
            "train_loss": float(np.mean(losses)) if losses else math.nan,
            "round_latency_s": lat,
            "latency_sum_s": math.fsum(o.latency_s for o in out),
            "e2e_latency_s": self.e2e_s,
            "upload_bytes": up,
            "download_bytes": down,
            "cum_upload_bytes": self.cum_up,
            "cum_download_bytes": self.cum_down,
            "failed": sum(not o.ok for o in out),
            "clock_s": clock,
            "available": rnd.available,
            "waited_s": 0.0,
            **participation_figures(self.counts),
        }
        if self.selector.probes:
            row.update(
                probe_latency_s=cost.latency_s,
                probe_upload_bytes=cost.upload_bytes,
                probe_download_bytes=cost.download_bytes,
                candidates_probed=cost.candidates,
            )
        row.update({c: (rnd.columns or {}).get(c) for c in self.selector.extra_columns})
        self.rows.append(row)
        if self._csv is not None:
            self._csv.append(row)
            for o in out:
                self._clients.append(
                    {
                        "round": rnd.round,
                        "client": o.client_id,
                        "node": fleet.nodes[o.client_id],
                        "failed": o.failed or "",
                        "latency_s": o.latency_s,
                        "num_examples": o.num_samples,
                        "train_loss": o.train_loss,
                        "upload_bytes": o.upload_bytes,
                        "download_bytes": o.download_bytes,
                    }
                )
        return row

    def finish(self) -> None:
        """Close the CSV files and write ``summary.json`` (with ``run_dir``)."""
        for f in (self._csv, self._clients):
            if f is not None:
                f.close()
        self._csv = self._clients = None
        if self.run_dir is None:
            return
        fleet, last = self.fleet, (self.rows[-1] if self.rows else {})
        summary = {
            "selector": self.name,
            "selector_options": self.options.model_dump(),
            "strategy": self.strategy,
            "rounds": len(self.rows),
            "num_nodes": len(fleet.nodes),
            "clients_per_round": fleet.settings.clients_per_round,
            "final_accuracy": last.get("accuracy", math.nan),
            "e2e_latency_s": self.e2e_s,
            "cum_upload_bytes": self.cum_up,
            "cum_download_bytes": self.cum_down,
            "nodes": {str(k): node for k, node in enumerate(fleet.nodes)},
            "times_selected": self.counts.tolist(),
            "measured": {
                "last_round_trip_s": fleet.trip_s.tolist(),
                "profile_round_trip_s": fleet.profile_s.tolist(),
                "num_examples": fleet.num_samples.tolist(),
            },
            "selector_summary": self.selector.finish(),
        }
        text = json.dumps(_strict(summary), indent=2, allow_nan=False)
        atomic_write(self.run_dir / "summary.json", lambda fh: fh.write(text + "\n"))


def _strict(v: Any) -> Any:
    """Plain JSON values: non-finite floats become None, numpy scalars and arrays plain numbers and lists."""
    if isinstance(v, dict):
        return {str(k): _strict(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_strict(x) for x in v]
    if isinstance(v, np.ndarray):
        return _strict(v.tolist())
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v
