"""Whole experiments on a Flower grid, through the simulator's round: the Flower front ends of
the experiment layer.

:func:`run_on_grid` runs one experiment on a grid given from outside (a deployment's ServerApp,
:mod:`fedselect.flower.server_app`; tests' in-process grids): it calls
:func:`fedselect.experiment.run.run_experiment` with a :class:`~fedselect.flower.engine.GridSession`
on that grid, so the preparation, the rounds, the faults, the checkpoints, ``--resume`` and the
run files are exactly the simulator's; only the jobs travel as messages. :func:`run_many` runs
several experiments of one federation in one start of Flower's simulation engine
(:class:`~fedselect.flower.engine.FlowerEngine`). The engine itself never imports this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flwr.serverapp import Grid

from fedselect.config.schema import ExperimentConfig
from fedselect.experiment.resolve import Resolved, resolve
from fedselect.experiment.run import run_experiment
from fedselect.flower.engine import FlowerEngine, GridSession
from fedselect.flower.nodes import FlowerOptions
from fedselect.world.federation import Federation, build_federation

__all__ = ["run_on_grid", "run_many"]


def run_on_grid(
    grid: Grid,
    plan: Resolved | ExperimentConfig,
    run_dir: str | Path,
    options: FlowerOptions | None = None,
    federation: Federation | None = None,
    stop=None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Run ``plan`` on ``grid``'s nodes into ``run_dir``; returns the summary.

    Args:
        grid: a ServerApp's grid (nodes serving clients 0..N-1 of the same federation).
        plan: the resolved experiment (an :class:`ExperimentConfig` is resolved, once).
        options: how to talk to the nodes (default :class:`FlowerOptions`).
        federation: the server's federation (default: built from the config).
        stop: a ``threading.Event`` ending the run with KeyboardInterrupt once set.
        kwargs: :func:`fedselect.experiment.run.run_experiment`'s (``resume``, ``overwrite``,
            ``on_round``, ``stop_after``, ``on_simulation``).

    Raises:
        what :func:`fedselect.experiment.run.run_experiment` raises; ConfigError / RuntimeError:
        a node of another federation, or one whose query failed; ValueError: ``mode: async``
        with ``latency: measured`` (:meth:`GridSession.connect`).
    """
    session = GridSession(grid, options, stop)
    return run_experiment(plan, run_dir, federation=federation, session=session, **kwargs)


def run_many(
    runs: list[tuple[Resolved | ExperimentConfig, str | Path]], options: FlowerOptions | None = None, **kwargs: Any
) -> list[dict[str, Any]]:
    """Several experiments of one federation (same data, model, system and seed) one after
    another in one start of Flower's simulation engine; returns their summaries.

    Args:
        runs: (resolved experiment or config, run directory) pairs.
        options: how the server talks to the nodes. kwargs: :func:`~fedselect.experiment.run.run_experiment`'s.
    """
    plans = [(p if isinstance(p, Resolved) else resolve(p, p.name), d) for p, d in runs]
    fed = build_federation(plans[0][0].config)
    return FlowerEngine(options).session(
        plans[0][0], lambda s: [run_experiment(p, d, session=s, federation=fed, **kwargs) for p, d in plans]
    )
