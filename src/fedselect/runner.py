"""The round loop, the method registry and experiment runs.

One loop serves every method (ARCHITECTURE.md): methods plug in through
:class:`fedselect.methods.base.Method`. A run directory holds ``config.yaml`` (resolved),
``metrics.csv`` (a row per round, flushed every round, bit-reproducible), ``timing.csv``
(wall-clock seconds), ``summary.json`` (written atomically at the end), ``run.log`` and
``checkpoint.pt`` (for ``--resume``).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from fedselect.config import ExperimentConfig, dump_config, parse_config
from fedselect.federation import Federation, build_federation
from fedselect.fl.checkpoint import load_checkpoint, save_checkpoint
from fedselect.fl.metrics import CORE_COLUMNS, TIMING_COLUMNS, CsvLog, read_csv_rows, summarize, write_json_atomic
from fedselect.methods import METHODS, import_methods
from fedselect.methods.base import Method
from fedselect.system import round_latency

log = logging.getLogger("fedselect")


def make_method(cfg: ExperimentConfig, fed: Federation) -> Method:
    """Instantiate ``cfg.method`` on ``fed``.

    Raises:
        ValueError: unknown method (lists the known ones).
    """
    import_methods()
    if cfg.method not in METHODS:
        raise ValueError(f"unknown method {cfg.method!r}; allowed: {sorted(METHODS)}")
    return METHODS[cfg.method](cfg, fed)


@dataclass
class RoundEvent:
    """Passed to progress callbacks after each round."""

    round: int
    rounds: int
    row: dict[str, Any]
    wall_s: float


def _setup_logging(run_dir: Path) -> logging.Handler:
    handler = logging.FileHandler(run_dir / "run.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("fedselect").addHandler(handler)
    logging.getLogger("fedselect").setLevel(logging.INFO)
    return handler


def run_experiment(
    cfg: ExperimentConfig, run_dir: str | Path, on_round: Callable[[RoundEvent], None] | None = None,
    resume: bool = False, federation: Federation | None = None, stop_after: int | None = None,
) -> dict[str, Any]:
    """Run ``cfg`` into ``run_dir`` and return the summary (also in ``summary.json``).

    Args:
        cfg: a validated experiment config.
        run_dir: output directory (created).
        on_round: called after every round (progress bars).
        resume: continue from the last checkpoint in ``run_dir`` (the round budget counts the
            rounds already done).
        federation: reuse an already built federation (comparisons share one).
        stop_after: stop after this round without finishing (tests of interruption).

    Raises:
        ValueError / ConfigError / DatasetNotFoundError: bad input, before anything is written
        to an existing run's files.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    fed = federation or build_federation(cfg)
    method = make_method(cfg, fed)
    handler = _setup_logging(run_dir)
    try:
        return _loop(cfg, fed, method, run_dir, on_round, resume, stop_after)
    finally:
        logging.getLogger("fedselect").removeHandler(handler)
        handler.close()


def _loop(cfg, fed, method, run_dir: Path, on_round, resume: bool, stop_after) -> dict[str, Any]:
    extra = list(method.extra_columns)
    columns = CORE_COLUMNS + [c for c in extra if c not in CORE_COLUMNS]
    start_round, cum = 1, {"up": 0, "down": 0, "e2e": 0.0, "wall": 0.0}
    prep_info: dict[str, Any] = {}
    if resume:
        ck = load_checkpoint(run_dir)
        method.load_state_dict(ck["method"])
        start_round, cum, before, prep_info = ck["round"] + 1, ck["cum"], ck["before"], ck.get("prep_info", {})
        metrics = CsvLog(run_dir / "metrics.csv", columns, keep_through=ck["round"])
        timing = CsvLog(run_dir / "timing.csv", TIMING_COLUMNS, keep_through=ck["round"])
        log.info("resuming %s at round %d", cfg.name, start_round)
    else:
        (run_dir / "config.yaml").write_text(dump_config(cfg))
        metrics = CsvLog(run_dir / "metrics.csv", columns)
        timing = CsvLog(run_dir / "timing.csv", TIMING_COLUMNS)
        log.info("run %s: method %s, N=%d, U=%d, T=%d, seed %d", cfg.name, cfg.method, fed.num_clients, cfg.clients_per_round, cfg.rounds, cfg.seed)
        t0 = time.perf_counter()
        prep_info = method.prepare() or {}
        before = method.evaluate(0)
        cum["up"] += int(prep_info.get("upload_bytes", 0))
        cum["down"] += int(prep_info.get("download_bytes", 0))
        cum["e2e"] += float(prep_info.get("latency_s", 0.0))
        row0 = {
            "round": 0, "selected": [], "accuracy": before["accuracy"], "f1_macro": before["f1_macro"], "test_loss": before["loss"],
            "train_loss": math.nan, "round_latency_s": float(prep_info.get("latency_s", 0.0)), "e2e_latency_s": cum["e2e"],
            "upload_bytes": int(prep_info.get("upload_bytes", 0)), "download_bytes": int(prep_info.get("download_bytes", 0)),
            "cum_upload_bytes": cum["up"], "cum_download_bytes": cum["down"], "failed": [],
        }
        metrics.append(row0)
        cum["wall"] += time.perf_counter() - t0
        timing.append({"round": 0, "wall_s": time.perf_counter() - t0, "cum_wall_s": cum["wall"]})
    try:
        for t in range(start_round, cfg.rounds + 1):
            t0 = time.perf_counter()
            draws = fed.fleet.draw(t)
            chosen = [int(k) for k in method.select(t, draws)]
            if len(set(chosen)) != len(chosen) or any(not 0 <= k < fed.num_clients for k in chosen):
                raise RuntimeError(f"method {cfg.method!r} selected invalid clients {chosen} in round {t}")
            updates = [method.local_update(t, k, draws) for k in chosen]
            ok = [u for u in updates if u.failed is None]
            method.aggregate(t, ok)
            evaluate_now = t % cfg.eval_every == 0 or t == cfg.rounds
            after = method.evaluate(t) if evaluate_now else dict(before)
            extra_row = method.observe(t, updates, before, after) or {}
            r_lat = round_latency(u.latency_s for u in updates)
            up, down = sum(u.upload_bytes for u in updates), sum(u.download_bytes for u in updates)
            cum["up"] += up
            cum["down"] += down
            cum["e2e"] += r_lat
            losses = [u.train_loss for u in ok if not math.isnan(u.train_loss)]
            row = {
                "round": t, "selected": chosen,
                "accuracy": after["accuracy"] if evaluate_now else math.nan,
                "f1_macro": after["f1_macro"] if evaluate_now else math.nan,
                "test_loss": after["loss"] if evaluate_now else math.nan,
                "train_loss": sum(losses) / len(losses) if losses else math.nan,
                "round_latency_s": r_lat, "e2e_latency_s": cum["e2e"], "upload_bytes": up, "download_bytes": down,
                "cum_upload_bytes": cum["up"], "cum_download_bytes": cum["down"],
                "failed": [f"{u.client_id}:{u.failed}" for u in updates if u.failed is not None],
            }
            row.update({k: v for k, v in extra_row.items() if k in columns})
            metrics.append(row)
            wall = time.perf_counter() - t0
            cum["wall"] += wall
            timing.append({"round": t, "wall_s": wall, "cum_wall_s": cum["wall"]})
            before = after
            if cfg.checkpoint_every and (t % cfg.checkpoint_every == 0 or t == cfg.rounds):
                save_checkpoint(run_dir, {"round": t, "method": method.state_dict(), "cum": cum, "before": before, "prep_info": prep_info, "config": cfg.model_dump(mode="json")})
            if on_round:
                on_round(RoundEvent(t, cfg.rounds, row, cum["wall"]))
            if stop_after is not None and t >= stop_after:
                return {"stopped_after": t}
    finally:
        metrics.close()
        timing.close()
    final = method.finish() or {}
    return write_summary(run_dir, cfg, fed, method, final, prep_info, cum["wall"])


def write_summary(run_dir: Path, cfg: ExperimentConfig, fed: Federation, method: Method, final: dict[str, Any], prep_info: dict[str, Any], wall: float) -> dict[str, Any]:
    rows = read_csv_rows(run_dir / "metrics.csv")
    summary = summarize(rows, cfg.metrics.target, cfg.metrics.metric)
    if final:
        for key in ("accuracy", "f1_macro"):
            if key in final:
                summary[f"final_{key}"] = final[key]
        summary.update({k: v for k, v in final.items() if k not in ("accuracy", "f1_macro", "loss")})
    summary.update({
        "name": cfg.name, "method": cfg.method, "seed": cfg.seed, "dataset": cfg.data.dataset,
        "num_clients": fed.num_clients, "clients_per_round": cfg.clients_per_round,
        "wall_s": wall, "complete": True,
    })
    if prep_info:
        summary["prepare"] = {k: v for k, v in prep_info.items() if isinstance(v, (int, float, str, bool, list, dict))}
    write_json_atomic(run_dir / "summary.json", summary)
    return summary


def resume_experiment(run_dir: str | Path, on_round=None, rounds: int | None = None) -> dict[str, Any]:
    """Continue the run in ``run_dir`` from its last complete checkpoint, using the config
    saved there (``rounds`` may extend the budget)."""
    run_dir = Path(run_dir)
    doc = yaml.safe_load((run_dir / "config.yaml").read_text())
    if rounds is not None:
        doc["rounds"] = rounds
        (run_dir / "config.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    cfg = parse_config(doc, str(run_dir / "config.yaml"))
    return run_experiment(cfg, run_dir, on_round=on_round, resume=True)
