"""``engine: flower``: the rounds of a run on Flower, through the round the simulator plays.

:class:`FlowerEngine` is the engine plug-in (:mod:`fedselect.engines`, registered as ``flower``
in :data:`fedselect.registry.ENGINES`): its session starts Flower's simulation engine with one
SuperNode per client (:func:`flwr.simulation.run_simulation`, the Ray backend, one CPU per
node) and, in its ServerApp, gives every run a :class:`GridSession` on that grid, whose
``connect`` learns the nodes and returns a :class:`~fedselect.flower.transport.FlowerTransport`:
the jobs of the simulator's round travel as messages. The run itself (directory, resume,
checkpoints, run files) is the experiment layer's, which calls this module and is never called
back. A grid given from outside (a Flower deployment's ServerApp, tests) takes a
:class:`GridSession` directly (:mod:`fedselect.flower.grid_run`).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import tempfile
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from fedselect.common.memory import release_freed_memory
from fedselect.config.load import dump_config
from fedselect.config.schema import ExperimentConfig
from fedselect.engines import Engine, Session
from fedselect.experiment.resolve import Resolved
from fedselect.world.federation import Federation, federation_key

if TYPE_CHECKING:
    from flwr.serverapp import Grid

    from fedselect.flower.nodes import FlowerOptions
    from fedselect.flower.transport import FlowerTransport

# Flower itself is imported where the engine runs, so that naming or listing this engine
# (``fedselect list``, resolving a saved config) costs nothing; its absence is still told at
# lookup (the registry's ``needs`` message for ``flower``).
if importlib.util.find_spec("flwr") is None:
    raise ModuleNotFoundError("No module named 'flwr'", name="flwr")

log = logging.getLogger("fedselect.flower")

__all__ = ["FlowerEngine", "GridSession", "connect", "node_settings", "simulation_actors"]

T = TypeVar("T")


def node_settings(cfg: ExperimentConfig, path: Path) -> dict[str, Any]:
    """What every node of ``cfg``'s simulation reads: the experiment written to ``path``."""
    from fedselect.flower.settings import CONFIG_FILE_KEY

    path.write_text(dump_config(cfg))
    return {CONFIG_FILE_KEY: str(path), "torch-threads": 1}


def _simulate(cfg: ExperimentConfig, main: Callable[[Grid, threading.Event], Any]) -> Any:
    """Start Flower's simulation engine with one SuperNode per client of ``cfg`` and run
    ``main(grid, stop)`` as its ServerApp; returns what it returned, raises what it raised.
    Ctrl-C sets ``stop``: the ServerApp's waits end at once (nothing more is recorded) and
    KeyboardInterrupt is raised here once it has ended."""
    from flwr.app import Context
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    from fedselect.flower.client_app import make_client_app
    from fedselect.flower.logs import flower_console

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
                    backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": simulation_actors()}},
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


def simulation_actors() -> int:
    """How many Ray actors (nodes training at once) the engine's simulation runs: one CPU each,
    as many as the machine has CPUs."""
    return os.cpu_count() or 1


def connect(grid: Grid, r: Resolved, fed: Federation, options: FlowerOptions, stop=None) -> FlowerTransport:
    """The Flower transport of the resolved experiment ``r`` on ``grid``, its nodes learnt:
    all N waited for, except for a selector whose candidates stream in (``candidate_stream``)
    with ``arrival: nodes``. The server's own jobs (validation- and test-set scores) run in this
    process, their evaluation chunks on one thread per core (the nodes wait meanwhile).

    In Flower's simulation engine (``grid`` is its in-memory grid: the nodes are Ray actors of
    this process's Ray session) ``fed`` is first put into Ray's object store, where the nodes read
    it instead of building their own (:mod:`fedselect.flower.shared`).

    Raises:
        ConfigError / RuntimeError: a node of another federation, or one whose query failed.
    """
    from flwr.superlink.grid import InMemoryGrid

    from fedselect.fl.local.placement import usable_cores
    from fedselect.fl.local.pool import ClientTrainer
    from fedselect.fl.work import LocalTransport
    from fedselect.flower.shared import adopt_shared_data, share_federation
    from fedselect.flower.transport import FlowerTransport

    # Flower's simulation runtime starts Ray beside the ServerApp: wait for it (connect_timeout at most)
    key = federation_key(r.config)
    if share_federation(key, fed, options.connect_timeout if isinstance(grid, InMemoryGrid) else 0.0, stop):
        adopt_shared_data(key, fed)  # the server reads the nodes' copy too: one copy of the data on the machine
    release_freed_memory()  # what building the federation freed, and the server's own copy of the data
    trainer = ClientTrainer.from_federation(fed, r.train_cfg, workers=0, device="cpu", eval_threads=usable_cores())
    server = LocalTransport(fed, trainer, r.train_cfg)
    transport = FlowerTransport(grid, fed, r.train_cfg, options, server, r.config.system.round_deadline_s, stop)
    try:
        transport.connect(wait_for_all=not (r.selector.candidate_stream and options.arrival_mode == "nodes"))
    except BaseException:
        transport.close()
        raise
    return transport


class GridSession:
    """Runs on the nodes of one Flower grid (:class:`fedselect.engines.Session`): each run's
    transport talks to the grid's nodes, which serve clients 0..N-1 of the same federation.

    Args:
        grid: a ServerApp's grid. options: how to talk to the nodes (default :class:`FlowerOptions`).
        stop: a ``threading.Event`` ending a run with KeyboardInterrupt once set.
    """

    def __init__(self, grid: Grid, options: FlowerOptions | None = None, stop: threading.Event | None = None):
        from fedselect.flower.nodes import FlowerOptions

        self.grid, self.options, self.stop = grid, options or FlowerOptions(), stop

    def connect(self, plan: Resolved, fed: Federation, workers: int | None = None) -> FlowerTransport:
        """The run's :class:`~fedselect.flower.transport.FlowerTransport` (:func:`connect`);
        ``workers`` is the simulator's and is not used (each node trains in its own process).

        Raises:
            ValueError: ``mode: async`` with ``latency: measured``. ConfigError / RuntimeError:
            a node of another federation, or one whose query failed (before any file is written).
        """
        if plan.config.mode == "async" and self.options.measured:
            raise ValueError(
                "latency: measured is not available with mode: async (its events follow the simulated fleet clock); "
                "use latency: simulated (docs/async.md)"
            )
        return connect(self.grid, plan, fed, self.options, self.stop)


class FlowerEngine(Engine):
    """``engine: flower``: Flower's simulation engine with one SuperNode per client (module
    docstring); every run of one session shares the engine start (a comparison's runs of one
    federation: :mod:`fedselect.study.backends`).

    Args:
        options: how the server talks to the nodes (default :class:`FlowerOptions`: simulated
            latency, seeded arrival order, and ``in_flight`` = the actors + 1: a round's long
            training jobs go to the actors the costliest first, as the simulator's pool hands
            them out, with one waiting so that no actor idles between two).
    """

    name = "flower"
    summary = "Flower's simulation engine (Ray), one SuperNode per client; needs the extra fedselect[flower]"

    def __init__(self, options: FlowerOptions | None = None):
        from fedselect.flower.nodes import FlowerOptions

        self.options = options or FlowerOptions(in_flight=simulation_actors() + 1)

    def session(self, plan: Resolved, body: Callable[[Session], T]) -> T:
        """Start Flower's simulation engine with ``plan``'s N SuperNodes and return
        ``body(GridSession(grid))``, run in its ServerApp.

        Raises:
            what ``body`` raises; KeyboardInterrupt on Ctrl-C (the runs' waits end at once).
        """
        release_freed_memory()  # the run's federation was just built: before Ray's processes start
        return _simulate(plan.config, lambda grid, stop: body(GridSession(grid, self.options, stop)))
