"""A whole experiment on a Flower grid, through the simulator's round.

:func:`run_on_grid` learns the nodes, then calls :func:`fedselect.experiment.run_experiment`
with a :class:`~fedselect.flower.transport.FlowerTransport`, so the preparation, the rounds,
the faults, the checkpoints, ``--resume`` and the run files are exactly the simulator's; only
the jobs travel as messages. The ServerApp (:mod:`fedselect.flower.server_app`) and Flower's
simulation engine (:mod:`fedselect.flower.engine`) both call it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flwr.serverapp import Grid

from fedselect.config import ExperimentConfig
from fedselect.federation import Federation, build_federation
from fedselect.fl.pool import ClientTrainer
from fedselect.fl.work import LocalTransport
from fedselect.flower.nodes import FlowerOptions
from fedselect.flower.transport import FlowerTransport
from fedselect.resolve import resolve

__all__ = ["run_on_grid", "connect"]


def connect(grid: Grid, r, fed: Federation, options: FlowerOptions, stop=None) -> FlowerTransport:
    """The Flower transport of the resolved experiment ``r`` on ``grid``, its nodes learnt:
    all N waited for, except for a selector whose candidates stream in (``candidate_stream``)
    with ``arrival: nodes``. The server's own jobs (validation- and test-set scores) run in this process.

    Raises:
        ConfigError / RuntimeError: a node of another federation, or one whose query failed.
    """
    server = LocalTransport(fed, ClientTrainer.from_federation(fed, r.train_cfg, workers=0, device="cpu"), r.train_cfg)
    transport = FlowerTransport(grid, fed, r.train_cfg, options, server, r.config.system.round_deadline_s, stop)
    try:
        transport.connect(wait_for_all=not (r.selector.candidate_stream and options.arrival_mode == "nodes"))
    except BaseException:
        transport.close()
        raise
    return transport


def run_on_grid(
    grid: Grid,
    cfg: ExperimentConfig,
    run_dir: str | Path,
    options: FlowerOptions | None = None,
    federation: Federation | None = None,
    stop=None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Run ``cfg`` on ``grid``'s nodes into ``run_dir``; returns the summary.

    Args:
        grid: a ServerApp's grid (nodes serving clients 0..N-1 of the same federation).
        options: how to talk to the nodes (default :class:`FlowerOptions`).
        federation: the server's federation (default: built from ``cfg``).
        stop: a ``threading.Event`` ending the run with KeyboardInterrupt once set.
        kwargs: :func:`fedselect.experiment.run_experiment`'s (``resume``, ``overwrite``,
            ``on_round``, ``stop_after``).

    Raises:
        what :func:`fedselect.experiment.run_experiment` raises; ConfigError / RuntimeError:
        a node of another federation, or one whose query failed; ValueError: ``mode: async``
        with ``latency: measured``.
    """
    from fedselect.experiment import check_run_dir
    from fedselect.experiment import run_experiment as run_here

    options = options or FlowerOptions()
    r = resolve(cfg, cfg.name)
    if r.config.mode == "async" and options.measured:
        raise ValueError(
            "latency: measured is not available with mode: async (its events follow the simulated fleet clock); "
            "use latency: simulated (docs/async.md)"
        )
    if not kwargs.get("resume"):
        check_run_dir(run_dir, kwargs.get("overwrite", False))
    fed = federation or build_federation(r.config)
    transport = connect(grid, r, fed, options, stop)  # nodes of another federation are refused before any file is written
    try:
        return run_here(r.config, run_dir, federation=fed, transport=transport, engine="simulator", **kwargs)
    finally:
        transport.close()
