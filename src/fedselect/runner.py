"""The round loop, the method registry and experiment runs.

One loop serves every method (ARCHITECTURE.md): methods plug in through
:class:`fedselect.methods.base.Method`. A run directory holds ``config.yaml`` (resolved),
``metrics.csv`` (a row per round, flushed every round, bit-reproducible), ``timing.csv``
(wall-clock seconds), ``summary.json`` (written atomically at the end), ``model.pt`` (the final
global model's ``state_dict``), ``run.log`` and ``checkpoint.pt`` / ``checkpoint.prev.pt``
(for ``--resume``).

Reliability (docs/reliability.md):

* checkpoints every ``checkpoint_every`` rounds hold the method's ``state_dict()`` (global
  model, personalised and selector/agent state), the state of every numpy/torch generator
  reachable from the method, the metrics rows so far and the loop's running totals; a run
  killed at any moment and resumed gives byte-identical ``metrics.csv`` and ``model.pt``;
* client faults (:mod:`fedselect.fl.faults`): dropout, injected failures, NaN/inf updates and
  a round deadline; survivors are aggregated, failures recorded in the ``failed`` column, a
  round without survivors leaves the global model bit-identical (``round_failed`` = 1);
* nothing already written is damaged: a run directory holding a run is refused unless
  ``resume`` or ``overwrite``; every input is validated before the first file is written.
"""

from __future__ import annotations

import copy
import csv
import logging
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from fedselect.config import ConfigError, ExperimentConfig, dump_config, parse_config, read_yaml_file
from fedselect.federation import Federation, build_federation
from fedselect.fl.checkpoint import NoCheckpointError, load_checkpoint, remove_stale_temp_files, save_checkpoint
from fedselect.fl.faults import ClientFailure, FaultModel, Injection, corrupt_state, non_finite_entries, survivor_weights
from fedselect.fl.metrics import CORE_COLUMNS, TIMING_COLUMNS, CsvLog, _fmt, atomic_write, read_csv_rows, summarize, write_json_atomic
from fedselect.methods import METHODS, import_methods
from fedselect.methods.base import ClientUpdate, Method
from fedselect.system import RoundDraws, round_latency

log = logging.getLogger("fedselect")

#: columns the loop adds after the core ones: how many updates were averaged, and 1 when
#: clients were selected but none survived (the global model is then unchanged)
RELIABILITY_COLUMNS = ["aggregated", "round_failed"]
#: files a run writes into its directory (``overwrite`` removes exactly these)
RUN_FILES = ("config.yaml", "metrics.csv", "timing.csv", "summary.json", "model.pt", "run.log",
             "checkpoint.pt", "checkpoint.prev.pt", ".checkpoint.new")
#: files whose presence means a directory already holds a run
_RUN_MARKERS = ("config.yaml", "metrics.csv", "summary.json", "checkpoint.pt", "checkpoint.prev.pt")


def make_method(cfg: ExperimentConfig, fed: Federation) -> Method:
    """Instantiate ``cfg.method`` on ``fed``.

    Raises:
        ValueError: unknown method (lists the known ones).
    """
    import_methods()
    if cfg.method not in METHODS:
        raise ValueError(f"unknown method {cfg.method!r}; allowed: {sorted(METHODS)}")
    return METHODS[cfg.method](cfg, fed)


def make_fault_model(cfg: ExperimentConfig, fed: Federation) -> FaultModel:
    """The fault model of ``cfg.faults`` and ``cfg.system.round_deadline_s`` on ``fed``'s fleet.

    Raises:
        ValueError: a ``dropout_by_device`` / ``dropout_by_network`` name no client has (lists
        the profile names of this fleet).
    """
    f = cfg.faults
    injections = [Injection(inj.kind, None if inj.round_set() is None else frozenset(inj.round_set()),
                            None if inj.client_set() is None else frozenset(inj.client_set())) for inj in f.inject]
    fleet = fed.fleet
    return FaultModel.build(cfg.seed, [d.name for d in fleet.devices], [n.name for n in fleet.networks], f.dropout,
                            f.dropout_by_device, f.dropout_by_network, injections, cfg.system.round_deadline_s)


def check_model(cfg: ExperimentConfig, fed: Federation) -> None:
    """Build the model once to catch options the model rejects (wrong types, shapes).

    Raises:
        ConfigError: names the model, its options, the data's input shape and what it accepts.
    """
    import inspect

    from fedselect.models import MODELS

    try:
        fed.new_model()
    except (TypeError, ValueError) as e:
        params = inspect.signature(MODELS[cfg.model.name]).parameters.values()
        accepted = [f"{p.name}={p.default!r}" for p in params if p.default is not p.empty]
        raise ConfigError(
            f"model.options: model {cfg.model.name!r} cannot be built with options {cfg.model.options} for inputs of shape "
            f"{tuple(fed.input_shape)} and {fed.num_classes} classes ({type(e).__name__}: {e}); its options (defaults): "
            f"{', '.join(accepted) or 'none'}"
        ) from None


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


def existing_run_files(run_dir: str | Path) -> list[str]:
    """Names of the files in ``run_dir`` showing that it already holds a run."""
    d = Path(run_dir)
    return [n for n in _RUN_MARKERS if (d / n).exists()]


def check_run_dir(run_dir: str | Path, overwrite: bool = False) -> None:
    """Refuse to start a new run where one exists (before anything is built or written).

    Raises:
        FileExistsError: ``run_dir`` is a file, or holds a run and ``overwrite`` is false (the
        message says to use ``--resume`` or ``--overwrite``).
    """
    d = Path(run_dir)
    if d.exists() and not d.is_dir():
        raise FileExistsError(f"run directory {d} exists and is not a directory; choose another --out")
    found = existing_run_files(d)
    if found and not overwrite:
        raise FileExistsError(
            f"run directory {d} already holds a run ({', '.join(found)}); nothing was changed. "
            f"Continue it with `fedselect run --resume {d}`, replace it with --overwrite, or choose another --out"
        )


def run_experiment(
    cfg: ExperimentConfig, run_dir: str | Path, on_round: Callable[[RoundEvent], None] | None = None,
    resume: bool = False, federation: Federation | None = None, stop_after: int | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Run ``cfg`` into ``run_dir`` and return the summary (also in ``summary.json``).

    Args:
        cfg: a validated experiment config.
        run_dir: output directory (created).
        on_round: called after every round (progress bars).
        resume: continue from the last checkpoint in ``run_dir`` (the round budget counts the
            rounds already done). With no checkpoint file at all (the run stopped before its
            first one) the run starts again from round 0, which gives the same results.
        federation: reuse an already built federation (comparisons share one).
        stop_after: stop after this round without finishing (tests of interruption).
        overwrite: replace the run files of a run already in ``run_dir`` (only with
            ``resume=False``; files that are not run files are left alone).

    Raises:
        FileExistsError: ``run_dir`` already holds a run and neither ``resume`` nor ``overwrite``.
        ValueError / ConfigError / DatasetNotFoundError: bad input (config, data, fault names,
            a resume whose config.yaml no longer matches its checkpoint, ``cfg.rounds`` below the
            rounds already done), raised before anything is written.
        CheckpointError: ``resume`` and checkpoint files exist but none is readable.
    """
    run_dir = Path(run_dir)
    if not resume:
        check_run_dir(run_dir, overwrite)
    elif not run_dir.is_dir():
        raise FileNotFoundError(f"--resume {run_dir}: no such run directory")
    fed = federation or build_federation(cfg)
    check_model(cfg, fed)
    method = make_method(cfg, fed)
    faults = make_fault_model(cfg, fed)
    columns = _columns(method)
    ck = _load_resume_point(run_dir, cfg, columns) if resume else None
    # ---- validation done: from here on files are written
    if ck is None and (overwrite or resume):
        for name in RUN_FILES:
            if not (resume and name == "run.log"):  # a restarted resume appends to its log
                (run_dir / name).unlink(missing_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(run_dir, RUN_FILES)
    handler = _setup_logging(run_dir)
    try:
        return _loop(cfg, fed, method, faults, columns, run_dir, on_round, ck, stop_after)
    finally:
        logging.getLogger("fedselect").removeHandler(handler)
        handler.close()


def _columns(method: Method) -> list[str]:
    base = CORE_COLUMNS + [c for c in RELIABILITY_COLUMNS if c not in CORE_COLUMNS]
    return base + [c for c in method.extra_columns if c not in base]


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def _load_resume_point(run_dir: Path, cfg: ExperimentConfig, columns: list[str]) -> dict[str, Any] | None:
    """The checkpoint to resume from (None: no checkpoint file at all, start again), checked
    against ``cfg`` and the method's columns."""
    try:
        ck = load_checkpoint(run_dir)
    except NoCheckpointError:
        log.warning("%s holds no checkpoint yet (stopped before its first one): starting again from round 0", run_dir)
        return None
    saved = _flatten(ck.get("config") or {})
    now = _flatten(cfg.model_dump(mode="json"))
    diff = [k for k in sorted(set(saved) & set(now)) if k != "rounds" and saved[k] != now[k]]
    if diff:
        shown = ", ".join(f"{k} ({saved[k]!r} in the checkpoint, {now[k]!r} now)" for k in diff[:5])
        raise ValueError(
            f"cannot resume {run_dir}: the config differs from the one the checkpoint was written with at {shown}"
            f"{' ...' if len(diff) > 5 else ''}; only `rounds` may change on resume. Restore config.yaml or start a new run"
        )
    if cfg.rounds < ck["round"]:
        raise ValueError(f"cannot resume {run_dir} with rounds={cfg.rounds}: the checkpoint already holds {ck['round']} rounds; "
                         f"rounds must be >= {ck['round']}")
    if "metrics_rows" not in ck:
        raise ValueError(f"cannot resume {run_dir}: its checkpoint was written by an older fedselect without the metrics rows; "
                         f"start the run again with --overwrite")
    if ck.get("columns") != columns:
        raise ValueError(f"cannot resume {run_dir}: metrics.csv columns {ck.get('columns')} differ from the method's current "
                         f"columns {columns} (the method's code changed); start the run again with --overwrite")
    return ck


# ------------------------------------------------------------------------ RNG coverage
_SKIP_ATTRS = {"fed", "cfg", "options", "train_cfg"}


def find_generators(obj: Any, prefix: str = "", depth: int = 4, _seen: set[int] | None = None) -> dict[str, Any]:
    """Every ``numpy.random.Generator`` and ``torch.Generator`` reachable from ``obj``'s
    attributes (through plain objects, dicts, lists and tuples; not through the federation,
    the config, tensors, arrays or torch modules), by attribute path such as ``agent.rng``."""
    seen = set() if _seen is None else _seen
    out: dict[str, Any] = {}
    if id(obj) in seen or depth < 0:
        return out
    seen.add(id(obj))
    if isinstance(obj, (np.random.Generator, torch.Generator)):
        return {prefix or ".": obj}
    if isinstance(obj, (torch.Tensor, np.ndarray, torch.nn.Module, Federation, str, bytes, int, float)) or obj is None:
        return out
    if isinstance(obj, dict):
        items = [(str(k) if isinstance(k, (str, int)) else f"#{i}", v) for i, (k, v) in enumerate(obj.items())]
    elif isinstance(obj, (list, tuple)):
        items = [(str(i), v) for i, v in enumerate(obj)]
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        items = [(k, v) for k, v in vars(obj).items() if not (prefix == "" and k in _SKIP_ATTRS)]
    else:
        return out
    for k, v in items:
        out.update(find_generators(v, f"{prefix}.{k}" if prefix else k, depth - 1, seen))
    return out


def generator_states(method: Method) -> dict[str, Any]:
    """Snapshot of every generator reachable from ``method`` (see :func:`find_generators`)."""
    out = {}
    for path, g in find_generators(method).items():
        out[path] = ("numpy", copy.deepcopy(g.bit_generator.state)) if isinstance(g, np.random.Generator) else ("torch", g.get_state().clone())
    return out


def restore_generator_states(method: Method, states: dict[str, Any]) -> None:
    """Put the generators of ``method`` back in the states of :func:`generator_states`."""
    current = find_generators(method)
    for path, (kind, st) in states.items():
        g = current.get(path)
        if g is None:
            log.warning("checkpoint holds the state of generator %s, which the method no longer has", path)
        elif kind == "numpy":
            g.bit_generator.state = copy.deepcopy(st)
        else:
            g.set_state(st.clone())


# ------------------------------------------------------------------------ one round's clients
def _failed_costs(method: Method, t: int, k: int, draws: RoundDraws) -> ClientUpdate:
    """What client ``k`` would have cost this round (no training; used for failures)."""
    return method.make_update(t, k, method.start_state(k), math.nan, method.local_epochs(t, k), draws)


def run_clients(method: Method, t: int, chosen: list[int], draws: RoundDraws, faults: FaultModel, count_download: bool) -> list[ClientUpdate]:
    """Local updates of the ``chosen`` clients in round ``t``, with faults applied.

    Every chosen client yields one update, in order; a failed one has ``failed`` set to a code
    of :data:`fedselect.fl.faults.FAILURE_KINDS`, ``state`` None (nothing usable reached the
    server) and ``latency_s`` the failure's latency (module docstring of ``fl.faults``).
    """
    dropped = faults.dropped(t)
    deadline = faults.deadline_s
    out = []
    for k in chosen:
        kind = faults.injected(t, k)
        if kind is None and dropped[k]:
            kind = "drop"
        if kind == "drop":
            lat = deadline if deadline is not None else 0.0
            u = ClientUpdate(k, t, None, method.fed.clients[k].num_samples, math.nan, 0, 0.0, 0.0, 0.0, lat, 0, 0, failed="dropout")
            log.info("round %d: client %d dropped out (%s); failure latency %.4g s", t, k,
                        "injected" if faults.injected(t, k) else f"p={faults.dropout[k]:.3g}", lat)
            out.append(u)
            continue
        try:
            if kind == "raise":
                raise ClientFailure("injected client error")
            u = method.local_update(t, k, draws)
        except ClientFailure as e:
            c = _failed_costs(method, t, k, draws)
            lat = c.compute_s + (c.download_s if count_download else 0.0)
            u = replace(c, state=None, upload_s=0.0, upload_bytes=0, latency_s=lat, failed="error")
            log.warning("round %d: client %d failed during local training (%s); failure latency %.4g s", t, k, e, lat)
            out.append(u)
            continue
        if u.failed is not None:  # the method itself reported a failure
            out.append(u)
            continue
        if kind in ("nan", "inf"):
            u = replace(u, state=corrupt_state(u.state, kind, method.upload_keys()))
        if kind == "timeout" or (deadline is not None and u.latency_s > deadline):
            why = "injected timeout" if kind == "timeout" else f"latency {u.latency_s:.4g} s"
            log.info("round %d: client %d missed the deadline of %.4g s (%s); update discarded", t, k, deadline, why)
            u = replace(u, state=None, upload_bytes=0, latency_s=float(deadline), failed="timeout")
        else:
            bad = non_finite_entries(u.state, method.upload_keys())
            if bad:
                code = "nan" if "nan" in bad.values() else "inf"
                log.warning("round %d: client %d update rejected, not averaged: non-finite values (%s) in %s", t, k, code, sorted(bad))
                u = replace(u, state=None, failed=code)
        out.append(u)
    return out


# ------------------------------------------------------------------------ the loop
def _write_csv(path: Path, columns: list[str], rows: list[dict[str, str]]) -> None:
    def write(fh):
        w = csv.writer(fh)
        w.writerow(columns)
        for r in rows:
            w.writerow([r.get(c, "") for c in columns])

    atomic_write(path, write, newline="")


def _save_model(run_dir: Path, method: Method) -> None:
    state = {k: v.detach().clone() for k, v in method.global_model.state_dict().items()}
    atomic_write(run_dir / "model.pt", lambda fh: torch.save(state, fh), mode="wb")


def _loop(cfg, fed, method: Method, faults: FaultModel, columns, run_dir: Path, on_round, ck, stop_after) -> dict[str, Any]:
    cum = {"up": 0, "down": 0, "e2e": 0.0, "wall": 0.0}
    prep_info: dict[str, Any] = {}
    mrows: list[dict[str, str]] = []  # formatted metrics rows so far (kept in checkpoints)
    trows: list[dict[str, str]] = []
    if ck is not None:
        method.load_state_dict(ck["method"])
        restore_generator_states(method, ck.get("generators", {}))
        start_round, cum, before, prep_info = ck["round"] + 1, dict(ck["cum"]), ck["before"], ck.get("prep_info", {})
        mrows, trows = list(ck["metrics_rows"]), list(ck.get("timing_rows", []))
        threads = ck.get("torch_threads")
        if threads is not None and threads != torch.get_num_threads():
            log.warning("the checkpoint was written with %d torch threads, this process uses %d: float sums may differ in the "
                        "last digits; set OMP_NUM_THREADS=%d for bit-identical results", threads, torch.get_num_threads(), threads)
        (run_dir / "config.yaml").write_text(dump_config(cfg))  # rounds may have been extended
        _write_csv(run_dir / "metrics.csv", columns, mrows)
        _write_csv(run_dir / "timing.csv", TIMING_COLUMNS, trows)
        metrics = CsvLog(run_dir / "metrics.csv", columns, keep_through=ck["round"])
        timing = CsvLog(run_dir / "timing.csv", TIMING_COLUMNS, keep_through=ck["round"])
        log.info("resuming %s at round %d of %d", cfg.name, start_round, cfg.rounds)
    else:
        start_round = 1
        (run_dir / "config.yaml").write_text(dump_config(cfg))
        metrics = CsvLog(run_dir / "metrics.csv", columns)
        timing = CsvLog(run_dir / "timing.csv", TIMING_COLUMNS)
        log.info("run %s: method %s, N=%d, U=%d, T=%d, seed %d", cfg.name, cfg.method, fed.num_clients, cfg.clients_per_round, cfg.rounds, cfg.seed)
        if faults.active:
            log.info("faults: mean dropout %.3g, %d injection(s), round deadline %s s", float(faults.dropout.mean()),
                     len(faults.injections), faults.deadline_s)
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
            "cum_upload_bytes": cum["up"], "cum_download_bytes": cum["down"], "failed": [], "aggregated": 0, "round_failed": 0,
        }
        metrics.append(row0)
        mrows.append({c: _fmt(row0.get(c)) for c in columns})
        cum["wall"] += time.perf_counter() - t0
        trow = {"round": 0, "wall_s": time.perf_counter() - t0, "cum_wall_s": cum["wall"]}
        timing.append(trow)
        trows.append({c: _fmt(trow.get(c)) for c in TIMING_COLUMNS})
    try:
        for t in range(start_round, cfg.rounds + 1):
            t0 = time.perf_counter()
            draws = fed.fleet.draw(t)
            chosen = [int(k) for k in method.select(t, draws)]
            if len(set(chosen)) != len(chosen) or any(not 0 <= k < fed.num_clients for k in chosen):
                raise RuntimeError(f"method {cfg.method!r} selected invalid clients {chosen} in round {t}")
            updates = run_clients(method, t, chosen, draws, faults, cfg.system.count_download)
            ok = [u for u in updates if u.failed is None]
            failed = [u for u in updates if u.failed is not None]
            round_failed = bool(chosen) and not ok
            if ok:
                snapshot = {k: v.detach().clone() for k, v in method.global_model.state_dict().items()}
                method.aggregate(t, ok)
                bad = non_finite_entries(method.global_model.state_dict())
                if bad:  # finite inputs can still overflow: keep the previous model
                    log.error("round %d: the aggregate holds non-finite values in %s; the global model is left unchanged", t, sorted(bad))
                    method.global_model.load_state_dict(snapshot)
                    round_failed = True
            if failed:
                weights = survivor_weights({u.client_id: u.num_samples for u in ok})
                if round_failed:
                    log.warning("round %d failed: no update survived (%s); the global model is unchanged", t,
                                ", ".join(f"{u.client_id}:{u.failed}" for u in failed))
                else:
                    log.info("round %d: %d of %d clients failed (%s); aggregated the survivors with weights n_k/sum n %s", t,
                             len(failed), len(updates), ", ".join(f"{u.client_id}:{u.failed}" for u in failed),
                             {k: round(w, 6) for k, w in weights.items()})
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
                "failed": [f"{u.client_id}:{u.failed}" for u in failed],
                "aggregated": 0 if round_failed else len(ok), "round_failed": int(round_failed),
            }
            row.update({k: v for k, v in extra_row.items() if k in columns and k not in row})
            metrics.append(row)
            mrows.append({c: _fmt(row.get(c)) for c in columns})
            wall = time.perf_counter() - t0
            cum["wall"] += wall
            trow = {"round": t, "wall_s": wall, "cum_wall_s": cum["wall"]}
            timing.append(trow)
            trows.append({c: _fmt(trow.get(c)) for c in TIMING_COLUMNS})
            before = after
            if cfg.checkpoint_every and (t % cfg.checkpoint_every == 0 or t == cfg.rounds):
                save_checkpoint(run_dir, {
                    "round": t, "method": method.state_dict(), "generators": generator_states(method), "cum": dict(cum),
                    "before": before, "prep_info": prep_info, "config": cfg.model_dump(mode="json"), "columns": columns,
                    "metrics_rows": mrows, "timing_rows": trows, "torch_threads": torch.get_num_threads(),
                })
            if on_round:
                on_round(RoundEvent(t, cfg.rounds, row, cum["wall"]))
            if stop_after is not None and t >= stop_after:
                return {"stopped_after": t}
    finally:
        metrics.close()
        timing.close()
    t_finish = time.perf_counter()
    final = method.finish() or {}
    finish_wall = time.perf_counter() - t_finish
    _save_model(run_dir, method)
    if finish_wall > 0.5:
        log.info("finish() took %.1f s (counted in the summary's wall_s)", finish_wall)
    return write_summary(run_dir, cfg, fed, method, final, prep_info, cum["wall"] + finish_wall)


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
        "data_dropped_rows": fed.data_dropped_rows,  # rows dropped at load by drop_invalid (issue 12)
    })
    summary.update(failure_counts(rows))
    if prep_info:
        summary["prepare"] = {k: v for k, v in prep_info.items() if isinstance(v, (int, float, str, bool, list, dict))}
    write_json_atomic(run_dir / "summary.json", summary)
    return summary


def resume_experiment(run_dir: str | Path, on_round=None, rounds: int | None = None) -> dict[str, Any]:
    """Continue the run in ``run_dir`` from its last complete checkpoint, using the config
    saved there (``rounds`` may extend the budget; config.yaml is rewritten only once the new
    value has been validated).

    Raises:
        FileNotFoundError: no such directory, or no config.yaml in it.
        ConfigError: config.yaml unreadable or invalid (with ``rounds`` applied).
        ValueError / CheckpointError: see :func:`run_experiment`.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"--resume {run_dir}: no such run directory")
    cfg_path = run_dir / "config.yaml"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"--resume {run_dir}: no config.yaml there (not a run directory)")
    doc = read_yaml_file(cfg_path)
    if isinstance(doc, dict) and rounds is not None:
        doc["rounds"] = rounds
    cfg = parse_config(doc, str(cfg_path) + (f" (with rounds={rounds})" if rounds is not None else ""))
    return run_experiment(cfg, run_dir, on_round=on_round, resume=True)
