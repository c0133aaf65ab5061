"""Experiments: a resolved config in, a run directory out (``fedselect run``, comparisons, sweeps, the API).

A run is planned from one :class:`~fedselect.experiment.resolve.Resolved` (resolved once, by the caller
or at the entry point) and nothing resolves it again: :func:`plan` refuses a directory that
holds another run (the one output-directory check of a run), :func:`play` asks the run's
engine (:mod:`fedselect.engines`) for a session and the session for the run's transport, builds
(or reuses) the federation and the simulation, plays the rounds (:mod:`fedselect.fl.round`)
into the run files (:mod:`fedselect.experiment.runfiles`), and returns the summary;
:func:`run_experiment` is both. :func:`resume_experiment` continues a killed or finished run
exactly, on the engine it ran on. Engines never call back into this module.

Reliability (docs/reliability.md): checkpoints every ``checkpoint_every`` rounds hold the
server state, the selector's and the algorithm's state, every generator reachable from them,
the metrics rows so far and the running totals, so a run killed at any moment and resumed gives
byte-identical ``metrics.csv`` and ``model.pt``; every input is validated before the first file
is written.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from fedselect.config.load import read_yaml_file
from fedselect.config.schema import ExperimentConfig, parse_config
from fedselect.engines import Session
from fedselect.experiment.checkpoint import FORMAT_VERSION, NoCheckpointError, load_checkpoint, remove_stale_temp_files
from fedselect.experiment.inputs import check_resume, saved_inputs_changed, write_inputs
from fedselect.experiment.metrics import LATER_CORE_COLUMNS
from fedselect.experiment.resolve import Resolved, resolve, resolve_doc
from fedselect.experiment.runfiles import RUN_FILES, RoundEvent, RunFiles
from fedselect.experiment.simulation import Simulation
from fedselect.fl.asynchronous import run_buffered
from fedselect.fl.round import run_rounds
from fedselect.fl.types import Evaluation
from fedselect.world.federation import Federation, build_federation

log = logging.getLogger("fedselect")

__all__ = [
    "RoundEvent",
    "RunPlan",
    "make_simulation",
    "plan",
    "play",
    "run_experiment",
    "resume_experiment",
    "check_run_dir",
    "check_output_dir",
    "existing_run_files",
    "RUN_FILES",
]

#: files whose presence means a directory already holds a run
_RUN_MARKERS = ("config.yaml", "metrics.csv", "summary.json", "checkpoint.pt", "checkpoint.prev.pt")


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


@contextmanager
def single_threaded():
    """Run the block with one torch thread and one BLAS / OpenMP thread in this process (restored
    afterwards): float sums then do not depend on the machine (worker processes use one thread
    each anyway)."""
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            yield
    finally:
        torch.set_num_threads(before)


def _resolved(plan: Resolved | ExperimentConfig) -> Resolved:
    """``plan`` itself, or a config resolved here (once): the entry points accept either, and a
    :class:`Resolved` is never resolved again."""
    if isinstance(plan, Resolved):
        return plan
    if isinstance(plan, ExperimentConfig):
        return resolve(plan, plan.name)
    raise TypeError(
        f"expected a resolved experiment (fedselect.experiment.resolve.Resolved) or an ExperimentConfig, got {type(plan).__name__}"
    )


def make_simulation(
    plan: Resolved | ExperimentConfig, federation: Federation | None = None, workers: int | None = 0
) -> Simulation:
    """The selector, algorithm, faults and trainer of ``plan`` on ``federation`` (built from the
    config when None), without running anything (notebooks, tests).

    Args:
        plan: the resolved experiment (an :class:`ExperimentConfig` is resolved here).
        workers: defaults to 0 here (in-process, no worker processes to close); pass None for
            ``train.workers``. Call ``close()`` on the result when it holds workers.

    Raises:
        ConfigError: invalid config (every problem named). ValueError / DatasetNotFoundError: bad data.
    """
    r = _resolved(plan)
    return Simulation(r, federation or build_federation(r.config), workers=workers)


@dataclass(frozen=True)
class RunPlan:
    """A run checked and placed, nothing built or written yet (:func:`plan`): what
    :func:`play` runs.

    Attributes:
        resolved: the resolved experiment (the one object the run is built from).
        run_dir: its directory. resume: continue the run there. overwrite: replace a run there.
    """

    resolved: Resolved
    run_dir: Path
    resume: bool = False
    overwrite: bool = False

    @property
    def config(self) -> ExperimentConfig:
        """The resolved config (every default written out; what ``config.yaml`` will hold)."""
        return self.resolved.config

    @property
    def method(self) -> str:
        """The display name: the preset, or ``selector+algorithm``."""
        return self.resolved.method


def plan(resolved: Resolved | ExperimentConfig, run_dir: str | Path, *, resume: bool = False, overwrite: bool = False) -> RunPlan:
    """Place the run of ``resolved`` (an :class:`ExperimentConfig` is resolved here, once) in
    ``run_dir``, checked before anything is built or written: the one check of a run's output
    directory, whatever engine runs it.

    Raises:
        FileExistsError: a new run where a run is (neither ``resume`` nor ``overwrite``), a
            comparison or a sweep (:func:`check_run_dir`). FileNotFoundError: ``resume`` and no
            such directory. ValueError: ``resume`` of a ``mode: async`` run (no checkpoints);
            a ``run_dir`` that cannot be one (:func:`check_output_dir`).
    """
    r, run_dir = _resolved(resolved), Path(run_dir)
    if not resume:
        check_run_dir(run_dir, overwrite)
    elif not run_dir.is_dir():
        raise FileNotFoundError(f"--resume {run_dir}: no such run directory")
    elif r.config.mode == "async":
        raise ValueError(
            f"--resume {run_dir}: mode: async runs write no checkpoints (their in-flight jobs and buffer are not "
            f"saved), so they cannot be resumed exactly; run it again with --overwrite"
        )
    return RunPlan(r, run_dir, resume, overwrite)


def play(
    run: RunPlan,
    *,
    on_round: Callable[[RoundEvent], None] | None = None,
    federation: Federation | None = None,
    stop_after: int | None = None,
    workers: int | None = None,
    session: Session | None = None,
    on_simulation: Callable[[Simulation], None] | None = None,
) -> dict[str, Any]:
    """Play a :func:`plan` into its run directory and return the summary (also in ``summary.json``).

    The run's engine (``config.engine``: :class:`fedselect.engines.Engine`) is asked for a
    session, and the session for the run's transport; everything else — the federation, the
    simulation, resume, the rounds (:mod:`fedselect.fl.round`), the run files — is done here, the
    same for every engine. The clients of a round train in ``workers`` worker processes on the
    simulator (default ``train.workers``; :class:`fedselect.fl.local.pool.ClientTrainer`), one torch
    thread each, and this process does its own work (evaluations, selectors' learning) with one
    thread too, so the results are the same for any number of workers, any thread settings of
    the machine and any engine.

    Args:
        run: the planned run.
        on_round: called after every round (progress bars).
        federation: reuse an already built federation (comparisons share one).
        stop_after: stop after this round without finishing (tests of interruption).
        workers: override ``train.workers`` (how the run executes, not what it computes).
        session: play inside this engine session (several runs in one engine start, or a
            Flower grid given from outside: :mod:`fedselect.flower.grid_run`); default: the
            run's engine starts a session for this run alone.
        on_simulation: called with the run's :class:`Simulation` once built (notebooks, tests,
            the Flower strategy keep it to look at the selector afterwards).

    Raises:
        ValueError / ConfigError / DatasetNotFoundError: bad input (data, fault names, a resume
            whose config.yaml no longer matches its checkpoint, ``rounds`` below the rounds
            already done), raised before anything is written.
        CheckpointError: ``resume`` and checkpoint files exist but none is readable.
    """
    r = run.resolved
    kwargs = dict(on_round=on_round, federation=federation, stop_after=stop_after, workers=workers, on_simulation=on_simulation)
    if session is None:
        if federation is None:  # before the engine starts: its processes (Flower's Ray) come after the loading's peak
            with single_threaded():
                kwargs["federation"] = build_federation(r.config)
        return r.engine().session(r, lambda s: play(run, session=s, **kwargs))
    with single_threaded():  # results never depend on this machine's thread settings
        fed = federation or build_federation(r.config)
        sim = Simulation(r, fed, workers=workers, session=session)
        if on_simulation is not None:
            on_simulation(sim)
        try:
            return _run(sim, r, run.run_dir, on_round, run.resume, stop_after, run.overwrite)
        finally:
            sim.close()


def run_experiment(
    plan_or_config: Resolved | ExperimentConfig,
    run_dir: str | Path,
    on_round: Callable[[RoundEvent], None] | None = None,
    resume: bool = False,
    federation: Federation | None = None,
    stop_after: int | None = None,
    overwrite: bool = False,
    workers: int | None = None,
    session: Session | None = None,
    on_simulation: Callable[[Simulation], None] | None = None,
) -> dict[str, Any]:
    """Run an experiment into ``run_dir`` and return the summary (also in ``summary.json``):
    :func:`plan` then :func:`play`.

    Args:
        plan_or_config: the resolved experiment (:func:`fedselect.experiment.resolve.resolve_doc`); an
            :class:`ExperimentConfig` is resolved here, once.
        run_dir: output directory (created).
        resume: continue from the last checkpoint in ``run_dir`` (the round budget counts the
            rounds already done). With no checkpoint file at all (the run stopped before its
            first one) the run starts again from round 0, which gives the same results.
        overwrite: replace the run files of a run already in ``run_dir`` (only with
            ``resume=False``; files that are not run files are left alone).
        on_round, federation, stop_after, workers, session, on_simulation: see :func:`play`.

    Raises:
        FileExistsError: ``run_dir`` already holds a run and neither ``resume`` nor ``overwrite``.
        ValueError / ConfigError / DatasetNotFoundError / CheckpointError: see :func:`plan` and
        :func:`play`.
    """
    planned = plan(plan_or_config, run_dir, resume=resume, overwrite=overwrite)
    return play(
        planned,
        on_round=on_round,
        federation=federation,
        stop_after=stop_after,
        workers=workers,
        session=session,
        on_simulation=on_simulation,
    )


def _run(
    sim: Simulation, r: Resolved, run_dir: Path, on_round, resume: bool, stop_after: int | None, overwrite: bool
) -> dict[str, Any]:
    fed, cfg = sim.fed, r.config
    ck = _load_resume_point(run_dir, r, sim) if resume else None
    # ---- validation done: from here on files are written
    if ck is None and (overwrite or resume):
        for name in RUN_FILES:
            if not (resume and name == "run.log"):  # a restarted resume appends to its log
                (run_dir / name).unlink(missing_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(run_dir, RUN_FILES)
    if ck is None:  # a run (re)starting from round 0 records what its data came from
        write_inputs(run_dir, fed)
    handler = _setup_logging(run_dir)
    files = RunFiles(run_dir, r, sim, on_round, stop_after, ck)
    try:
        if ck is not None:
            log.info("resuming %s at round %d of %d", cfg.name, ck["round"] + 1, cfg.rounds)
            state = sim.restore(ck["snapshot"])
            if "clock" not in ck["snapshot"]:  # a checkpoint from before the fleet clock: it is the e2e latency
                sim.clock.clock_s = float(ck["cum"]["e2e"])
            finished = run_rounds(sim, files, state, Evaluation.from_dict(ck["before"]), ck["round"])
        else:
            log.info(
                "run %s: %s (selector %s, algorithm %s), N=%d, U=%d, T=%d, seed %d",
                cfg.name,
                r.method,
                r.config.selector.name,
                r.config.algorithm.name,
                fed.num_clients,
                cfg.clients_per_round,
                cfg.rounds,
                cfg.seed,
            )
            if sim.faults.active:
                log.info(
                    "faults: mean dropout %.3g, %d injection(s), round deadline %s s",
                    float(sim.faults.dropout.mean()),
                    len(sim.faults.injections),
                    sim.faults.deadline_s,
                )
            finished = (run_buffered if sim.async_settings is not None else run_rounds)(sim, files, start=0)
        if finished is None:
            return {"stopped_after": stop_after}
        return files.finish(finished, {**(sim.selector.finish() or {}), **sim.transport_summary()})
    finally:
        files.close()
        logging.getLogger("fedselect").removeHandler(handler)
        handler.close()


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


_MISSING = object()
#: settings of how a run is executed, not of what it computes: results are identical for any
#: value, so comparisons of saved and current configs leave them out
EXECUTION_KEYS = ("train.workers", "engine", "log.tensorboard")
#: the options that came with the server's validation set, and the values a run saved before
#: them was made with: no validation set, decisions reading the test set. Their defaults change
#: the results, so a saved config (or a saved comparison's / sweep's base) that lacks them is
#: read with these values, never with the defaults
PRE_VALIDATION_VALUES = {"data.validation": 0, "selection_eval": "test"}


def _with_keys(doc: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` with each dotted key of ``values`` it lacks set to its value."""
    import copy

    out = copy.deepcopy(doc)
    for key, value in values.items():
        *parents, leaf = key.split(".")
        node = out
        for k in parents:
            node = node.setdefault(k, {}) if isinstance(node.get(k, {}), dict) else {}
        node.setdefault(leaf, value)
    return out


def with_pre_validation_values(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` (a saved config, or a saved comparison's / sweep's ``base``) with each
    key of :data:`PRE_VALIDATION_VALUES` it lacks set to the value it was made with."""
    return _with_keys(doc, PRE_VALIDATION_VALUES)


def with_validation_keys(base: dict[str, Any]) -> dict[str, Any]:
    """A comparison's / sweep's ``base`` as it is saved (compare.json, sweep.json): the keys of
    :data:`PRE_VALIDATION_VALUES` stated, their default where ``base`` leaves them out, so that
    reading it back (:func:`with_pre_validation_values`) never takes it for one saved before them."""
    from fedselect.config.sections import DataConfig

    defaults = {
        "data.validation": DataConfig.model_fields["validation"].default,
        "selection_eval": ExperimentConfig.model_fields["selection_eval"].default,
    }
    return _with_keys(base, defaults)


def no_effect_keys(cfg: ExperimentConfig, selector: type | None = None) -> tuple[str, ...]:
    """Keys that cannot change the results of ``cfg``'s run, which comparisons of saved and
    current configs leave out: ``selection_eval`` when none of its selector's decisions reads
    model quality (:func:`fedselect.selectors.base.reads_quality`). ``selector``: the run's
    selector class when known (else ``cfg`` is resolved to find it)."""
    from fedselect.selectors.base import reads_quality

    try:
        sel = selector if selector is not None else resolve(cfg).selector
    except (ValueError, TypeError):
        return ()
    return () if reads_quality(sel) else ("selection_eval",)


def with_current_defaults(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved resolved config resolved again by this fedselect: options added since the run was
    made appear with their defaults (by the project's rule a new option's default keeps the
    earlier results), so only real differences remain; the options of the validation set, whose
    defaults do change results, with the values the run was made with
    (:data:`PRE_VALIDATION_VALUES`). A saved config this version cannot read (a removed key, say)
    is returned unchanged, and its differences show."""
    try:
        source = "<saved run>"
        return resolve(parse_config(with_pre_validation_values(saved), source), source).config.model_dump(mode="json")
    except (ValueError, TypeError):  # ConfigError is a ValueError
        return saved


def config_differences(saved: dict[str, Any], now: dict[str, Any], ignore: tuple[str, ...] = ()) -> list[str]:
    """Every dotted key whose value differs between two resolved configs (defaults included;
    a key present on one side only differs too), as ``"key (old in the saved run, new now)"``.
    ``saved`` is first resolved again (:func:`with_current_defaults`): an option the saved run
    lacks counts only when ``now`` sets it to other than its default."""
    a, b = _flatten(with_current_defaults(saved)), _flatten(now)
    out = []
    for k in sorted(set(a) | set(b)):
        if k in ignore:
            continue
        x, y = a.get(k, _MISSING), b.get(k, _MISSING)
        if x != y:
            show = lambda v: "absent" if v is _MISSING else repr(v)  # noqa: E731
            out.append(f"{k} ({show(x)} in the saved run, {show(y)} now)")
    return out


def saved_run_differences(run_dir: str | Path, cfg: ExperimentConfig, finished: bool) -> list[str]:
    """How the resolved config saved in ``run_dir`` differs from ``cfg`` (resolved), every key
    and default included; the round budget counts only for a finished run (an interrupted one
    may still be extended). [] when the directory holds no run."""
    import yaml

    p = Path(run_dir) / "config.yaml"
    if not p.is_file():
        return []
    saved = yaml.safe_load(p.read_text()) or {}
    ignore = (*EXECUTION_KEYS, *no_effect_keys(cfg))
    return config_differences(saved, cfg.model_dump(mode="json"), ignore=ignore if finished else ("rounds", *ignore))


def check_saved_runs(items: list[tuple[Path, ExperimentConfig]], where: str, how: str, inputs: bool = True) -> None:
    """Refuse to reuse results whose config differs from the one that would produce them now,
    or (``inputs``) whose input data files changed since they ran (``inputs.json``:
    :func:`fedselect.experiment.inputs.saved_inputs_changed`).

    Args:
        items: (run directory, the resolved config it should hold) pairs.
        where: what reuses them (for the message). how: what the user can do instead.
        inputs: also check the runs' input files (off for reports, which only read saved metrics).
            Runs made before an option was added are accepted while the option keeps its default
            (:func:`config_differences`).

    Raises:
        ValueError: naming every run directory and every differing key or changed file.
    """
    bad, changed = [], []
    for run_dir, cfg in items:
        diff = saved_run_differences(run_dir, cfg, finished=(Path(run_dir) / "summary.json").exists())
        if diff:
            bad.append(f"{run_dir}: " + "; ".join(diff))
        files = saved_inputs_changed(run_dir) if inputs else []
        if files:
            changed.append(f"{run_dir}: " + "; ".join(files))
    if bad:
        raise ValueError(
            f"{where} holds runs made with another config than the one it would run now, which would mix old and new "
            f"results: " + " | ".join(bad) + f". {how}"
        )
    if changed:
        raise ValueError(
            f"{where} holds runs made on input data that changed since they ran, which would mix results on old and new "
            f"data: " + " | ".join(changed) + ". Restore the data file(s), or run into another --out (nothing was changed)"
        )


def budget_problems(sim: Simulation, old_rounds: int, new_rounds: int, done: int) -> list[str]:
    """Why continuing a run planned for ``old_rounds`` (``done`` of them played) to
    ``new_rounds`` would not equal a fresh ``new_rounds``-round run ([] when it would)."""
    out = []
    every = sim.settings.eval_every
    if done >= old_rounds and old_rounds % every:
        out.append(
            f"round {old_rounds} was evaluated because it was the last, while a {new_rounds}-round run evaluates every "
            f"{every} rounds only (eval_every)"
        )
    out += [f"selector {sim.selector.name!r}: {p}" for p in sim.selector.budget_problems(old_rounds, new_rounds, done)]
    out += [f"algorithm {sim.algorithm.name!r}: {p}" for p in sim.algorithm.budget_problems(old_rounds, new_rounds, done)]
    return out


def earlier_columns(saved: list[str] | None, now: list[str]) -> bool:
    """``saved`` (a checkpoint's metrics.csv header) is ``now`` without some of the core columns
    added since (:data:`~fedselect.experiment.metrics.LATER_CORE_COLUMNS`, e.g. ``latency_sum_s``): a run
    started before them, which resumes with the columns it started with."""
    if not saved:
        return False
    missing = [c for c in now if c not in saved]
    return bool(missing) and set(missing) <= set(LATER_CORE_COLUMNS) and [c for c in now if c in saved] == list(saved)


def _load_resume_point(run_dir: Path, r: Resolved, sim: Simulation) -> dict[str, Any] | None:
    """The checkpoint to resume from (None: no checkpoint file at all, start again), checked
    against the resolved config and the run's columns."""
    try:
        ck = load_checkpoint(run_dir)
    except NoCheckpointError:
        log.warning("%s holds no checkpoint yet (stopped before its first one): starting again from round 0", run_dir)
        return None
    if ck.get("format_version", 1) < FORMAT_VERSION or "snapshot" not in ck:
        raise ValueError(
            f"cannot resume {run_dir}: its checkpoint was written by an older fedselect (checkpoint format "
            f"{ck.get('format_version', 1)}; this one needs {FORMAT_VERSION}); start the run again with --overwrite"
        )
    cfg = r.config
    ignore = ("rounds", *EXECUTION_KEYS, *no_effect_keys(cfg, r.selector))
    diff = config_differences(ck.get("config") or {}, cfg.model_dump(mode="json"), ignore=ignore)
    if diff:
        raise ValueError(
            f"cannot resume {run_dir}: the config differs from the one the checkpoint was written with at "
            f"{'; '.join(diff)}; only `rounds` may change on resume. Restore config.yaml or start a new run"
        )
    check_resume(run_dir, sim.fed)  # the same input files and the same federation as when the run started
    if cfg.rounds < ck["round"]:
        raise ValueError(
            f"cannot resume {run_dir} with rounds={cfg.rounds}: the checkpoint already holds {ck['round']} rounds; "
            f"rounds must be >= {ck['round']}"
        )
    saved_rounds = int((ck.get("config") or {}).get("rounds", cfg.rounds))
    if cfg.rounds != saved_rounds:
        problems = budget_problems(sim, saved_rounds, cfg.rounds, ck["round"])
        if problems:
            raise ValueError(
                f"cannot resume {run_dir} with rounds={cfg.rounds} (it was planned for {saved_rounds}): the result would "
                f"differ from a fresh {cfg.rounds}-round run because "
                + "; ".join(problems)
                + ". Start a new run with the longer budget (docs/reliability.md)"
            )
    if "metrics_rows" not in ck:
        raise ValueError(
            f"cannot resume {run_dir}: its checkpoint was written by an older fedselect without the metrics rows; "
            f"start the run again with --overwrite"
        )
    if ck.get("columns") != sim.columns and not earlier_columns(ck.get("columns"), sim.columns):
        raise ValueError(
            f"cannot resume {run_dir}: metrics.csv columns {ck.get('columns')} differ from the run's current "
            f"columns {sim.columns} (the selector's or algorithm's code changed); start the run again with --overwrite"
        )
    return ck


def resume_experiment(
    run_dir: str | Path, on_round=None, rounds: int | None = None, workers: int | None = None
) -> dict[str, Any]:
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
    source = str(cfg_path) + (f" (with rounds={rounds})" if rounds is not None else "")
    return play(plan(resolve_doc(doc, source), run_dir, resume=True), on_round=on_round, workers=workers)
