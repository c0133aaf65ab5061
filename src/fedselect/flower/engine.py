"""``engine: flower``: an experiment played on Flower, through the round the simulator plays.

:func:`fedselect.flower.grid_run.run_on_grid` runs a whole experiment on a Flower grid with
the simulator's round; :func:`run_experiment` (what
``fedselect run --engine flower`` calls) starts Flower's simulation engine with one SuperNode
per client (:func:`flwr.simulation.run_simulation`, the Ray backend, one CPU per node) and runs
:func:`~fedselect.flower.grid_run.run_on_grid` in its ServerApp; :func:`run_many` runs several experiments of one
federation in one simulation (comparisons, the contract test).
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any, Callable

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedselect.config import ExperimentConfig, dump_config
from fedselect.federation import build_federation
from fedselect.flower.client_app import make_client_app
from fedselect.flower.grid_run import run_on_grid
from fedselect.flower.logs import flower_console
from fedselect.flower.nodes import FlowerOptions
from fedselect.flower.settings import CONFIG_FILE_KEY
from fedselect.resolve import resolve

log = logging.getLogger("fedselect.flower")

__all__ = ["run_experiment", "run_many", "session", "node_settings"]


def node_settings(cfg: ExperimentConfig, path: Path) -> dict[str, Any]:
    """What every node of ``cfg``'s simulation reads: the experiment written to ``path``."""
    path.write_text(dump_config(cfg))
    return {CONFIG_FILE_KEY: str(path), "torch-threads": 1}


def _simulate(cfg: ExperimentConfig, main: Callable[[Grid, threading.Event], Any]) -> Any:
    """Start Flower's simulation engine with one SuperNode per client of ``cfg`` and run
    ``main(grid, stop)`` as its ServerApp; returns what it returned, raises what it raised.
    Ctrl-C sets ``stop``: the ServerApp's waits end at once (nothing more is recorded) and
    KeyboardInterrupt is raised here once it has ended."""
    from flwr.simulation import run_simulation

    out: dict[str, Any] = {}
    stop, done = threading.Event(), threading.Event()
    server = ServerApp()

    @server.main()
    def _main(grid: Grid, context: Context) -> None:
        try:
            out["value"] = main(grid, stop)
        except BaseException as e:  # the engine would only log it
            out["error"] = e
        finally:
            done.set()

    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
    with tempfile.TemporaryDirectory(prefix="fedselect-flower-") as tmp:
        settings = node_settings(cfg, Path(tmp) / "experiment.yaml")
        log.info("fedselect on Flower: simulation engine, %d SuperNodes", cfg.data.num_clients)
        try:
            with warnings.catch_warnings(), flower_console():
                warnings.simplefilter("ignore")
                run_simulation(
                    server_app=server,
                    client_app=make_client_app(settings),
                    num_supernodes=cfg.data.num_clients,
                    backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": os.cpu_count() or 1}},
                )
        except KeyboardInterrupt:
            stop.set()
            done.wait(30)  # the ServerApp's waits poll every poll-interval
            raise
        if stop.is_set() or isinstance(out.get("error"), KeyboardInterrupt):
            raise KeyboardInterrupt("the Flower run was interrupted")
    if "error" in out:
        raise out["error"]
    if "value" not in out:
        raise RuntimeError("Flower's simulation engine ended without running the experiment (see its log above)")
    return out["value"]


def run_experiment(cfg: ExperimentConfig, run_dir: str | Path, workers: int | None = None, **kwargs: Any) -> dict[str, Any]:
    """``fedselect run --engine flower``: ``cfg`` on Flower's simulation engine (module
    docstring), the same run directory as the simulator's. ``workers`` is the simulator's and
    is not used (each node trains in its own process)."""
    from fedselect.experiment import check_run_dir

    if not kwargs.get("resume"):
        check_run_dir(run_dir, kwargs.get("overwrite", False))  # before the engine starts
    return _simulate(cfg, lambda grid, stop: run_on_grid(grid, cfg, run_dir, stop=stop, **kwargs))


def session(cfg: ExperimentConfig, body: Callable[[Callable[..., dict[str, Any]]], Any]) -> Any:
    """One simulation engine start for several experiments of ``cfg``'s federation:
    ``body(run)`` runs in the ServerApp, ``run(cfg, run_dir, **kwargs)`` plays one experiment
    on its grid (:func:`~fedselect.flower.grid_run.run_on_grid`; comparisons use it)."""

    def main(grid: Grid, stop: threading.Event) -> Any:
        return body(lambda c, d, **kw: run_on_grid(grid, c, d, stop=stop, **kw))

    return _simulate(cfg, main)


def run_many(
    runs: list[tuple[ExperimentConfig, str | Path]], options: FlowerOptions | None = None, **kwargs: Any
) -> list[dict[str, Any]]:
    """Several experiments of one federation (same data, model, system and seed) one after
    another in one simulation (one engine start); returns their summaries."""
    fed_cfg = runs[0][0]
    fed = build_federation(resolve(fed_cfg, fed_cfg.name).config)
    return session(fed_cfg, lambda run: [run(c, d, options=options, federation=fed, **kwargs) for c, d in runs])
