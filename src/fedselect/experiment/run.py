"""Experiments: a resolved config in, a run directory out (``fedselect run``, comparisons, sweeps, the API).

A run is planned from one :class:`~fedselect.experiment.resolve.Resolved` (resolved once, by the
caller or at the entry point) and nothing resolves it again: :func:`plan` refuses a directory
that holds another run (the one output-directory check of a run:
:mod:`fedselect.experiment.output_dir`), :func:`play` asks the run's engine
(:mod:`fedselect.engines`) for a session and the session for the run's transport, builds (or
reuses) the federation and the simulation, plays the rounds (:mod:`fedselect.fl.round`) into the
run files (:mod:`fedselect.experiment.runfiles`), and returns the summary; :func:`run_experiment`
is both. :func:`resume_experiment` continues a killed or finished run exactly, on the engine it
ran on (when it may: :mod:`fedselect.experiment.resume`). Engines never call back into this module.

Reliability (docs/reliability.md): checkpoints every ``checkpoint_every`` rounds hold the
server state, the selector's and the algorithm's state, every generator reachable from them,
the metrics rows so far and the running totals, so a run killed at any moment and resumed gives
byte-identical ``metrics.csv`` and ``model.pt``; every input is validated before the first file
is written.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from fedselect.config.load import read_yaml_file
from fedselect.config.schema import ExperimentConfig
from fedselect.engines import Session
from fedselect.experiment.checkpoint import remove_stale_temp_files
from fedselect.experiment.inputs import write_inputs
from fedselect.experiment.output_dir import check_run_dir
from fedselect.experiment.resolve import Resolved, resolve, resolve_doc
from fedselect.experiment.resume import load_resume_point
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
]


def _setup_logging(run_dir: Path) -> logging.Handler:
    handler = logging.FileHandler(run_dir / "run.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("fedselect").addHandler(handler)
    logging.getLogger("fedselect").setLevel(logging.INFO)
    return handler


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
            comparison or a sweep (:func:`~fedselect.experiment.output_dir.check_run_dir`).
            FileNotFoundError: ``resume`` and no such directory. ValueError: ``resume`` of a
            ``mode: async`` run (no checkpoints); a ``run_dir`` that cannot be one
            (:func:`~fedselect.experiment.output_dir.check_output_dir`).
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
    ck = load_resume_point(run_dir, r, sim) if resume else None
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
