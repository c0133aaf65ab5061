"""A Flower ServerApp running a fedselect experiment with :class:`fedselect.flower.strategy.FedselectStrategy`.

In a Flower app's pyproject::

    [tool.flwr.app.components]
    serverapp = "fedselect.flower.server_app:app"
    clientapp = "fedselect.flower.client_app:app"

Settings (the run config: ``[tool.flwr.app.config]`` of the app's pyproject, overridden by
``flwr run --run-config``; with :func:`make_server_app` also defaults below them), read exactly
like the ClientApp's so that the server and the nodes build the same experiment:

* ``fedselect-config``: path of an experiment YAML (as for ``fedselect run``) on the SuperLink's
  machine; any dotted experiment key overrides it, as in our YAML and ``--set``: ``seed``,
  ``method``, ``selector.name``, ``selector.options.pca_components``, ``rounds``,
  ``clients_per_round``, ``data.dataset``, ``data.num_clients``, ``model.options.hidden = "[64]"``
  (a string starting with ``[`` or ``{`` is read as YAML: Flower configs hold no lists),
  ``system.round_deadline_s`` ...
* ``run-dir``: the run directory (default ``fedselect-runs/<name>-flower-<run id>`` under the
  ServerApp process's working directory: give an absolute path in a deployment).
* ``overwrite``: replace the run files of a run already in ``run-dir`` (default false).
* ``resume``: continue the run in ``run-dir`` from its last checkpoint (default false).
* ``latency``: ``simulated`` (default) or ``measured``; ``arrival-order``: ``seeded`` or
  ``nodes`` (default: ``seeded`` with simulated latency, ``nodes`` with measured);
  ``reply-timeout`` (s, default 600), ``connect-timeout`` (s, default 300), ``poll-interval``
  (s between two polls of the SuperLink for replies; default 0.01 in the simulation engine, 0.1
  in a deployment), ``in-flight`` (at most this many training messages of a round waiting for
  their reply, the costliest first; default: all at once; in ``run_simulation`` the actors + 1
  balances the actors as the simulator's pool does)
  (:class:`fedselect.flower.strategy.FlowerOptions`).
* ``node-data``: ``partition`` (default: the faithful simulation, every node serves a partition of
  the federation the server builds too) or ``own`` (a real fleet: the nodes own their data and
  the server knows them from their reports, :mod:`fedselect.flower.fleet`; ``latency`` defaults
  to ``measured`` there). With ``own``: ``test-data`` (the server's test set: a data set name or
  ``package.module:loader``; none = federated evaluation), ``test-data-path`` (its ``path``),
  ``test-data-options`` (a YAML mapping), ``test-data-split`` (``test`` | ``all``).
* ``torch-threads``: torch CPU threads of the ServerApp process (the server aggregates and
  scores the model: use the nodes' value for bit-identical results).

The nodes read the same run config (they ignore the server's keys). The ServerApp writes the
run directory of ``fedselect run`` (docs/flower.md: how the results map to ``metrics.csv``).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Callable

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedselect.config.overrides import apply_overrides
from fedselect.config.schema import ConfigError, ExperimentConfig
from fedselect.experiment.resolve import Resolved, resolve_doc
from fedselect.flower.logs import quiet_flower_logs
from fedselect.flower.nodes import ARRIVAL_MODES, LATENCY_MODES
from fedselect.flower.settings import set_threads, settings_document
from fedselect.flower.strategy import FedselectStrategy

__all__ = ["app", "make_server_app", "server_plan", "server_experiment", "strategy_settings", "SERVER_KEYS"]

log = logging.getLogger("fedselect.flower")
quiet_flower_logs()  # plain Flower lines in `flwr run --stream`, no deprecation notices

#: run-config keys of the ServerApp (beside the experiment's dotted keys) and their types
SERVER_KEYS: dict[str, type | tuple[type, ...]] = {
    "run-dir": str,
    "overwrite": bool,
    "resume": bool,
    "latency": str,
    "arrival-order": str,
    "reply-timeout": (int, float),
    "connect-timeout": (int, float),
    "poll-interval": (int, float),
    "in-flight": int,
    "torch-threads": int,
    "node-data": str,
    "test-data": str,
    "test-data-path": str,
    "test-data-options": str,
    "test-data-split": str,
}
#: ``node-data``: the nodes serve partitions of the server's federation (the faithful
#: simulation), or data of their own (a real fleet: :mod:`fedselect.flower.fleet`)
NODE_DATA_MODES = ("partition", "own")


def server_plan(run_config: dict[str, Any]) -> Resolved:
    """The experiment of the run config (module docstring), validated and resolved (once: the
    strategy runs this :class:`~fedselect.experiment.resolve.Resolved`).

    Raises:
        ConfigError / FileNotFoundError: a bad ``fedselect-config`` file or invalid keys (named).
    """
    doc, overrides, source = settings_document(dict(run_config), "run config")
    return resolve_doc(apply_overrides(doc, overrides), source)


def server_experiment(run_config: dict[str, Any]) -> ExperimentConfig:
    """The resolved config of :func:`server_plan` (every default written out).

    Raises:
        ConfigError / FileNotFoundError: a bad ``fedselect-config`` file or invalid keys (named).
    """
    return server_plan(run_config).config


def strategy_settings(run_config: dict[str, Any]) -> dict[str, Any]:
    """The strategy's keyword arguments from the run config (module docstring).

    Raises:
        ConfigError: a value of the wrong type, or not one of the allowed ones (named).
    """
    rc = dict(run_config)
    for key, kind in SERVER_KEYS.items():
        v = rc.get(key)
        if v is not None and (isinstance(v, bool) and kind is not bool or not isinstance(v, kind)):
            raise ConfigError(f"run config: '{key}' must be of type {kind}, got {v!r}")
    if rc.get("latency", "simulated") not in LATENCY_MODES:
        raise ConfigError(f"run config: 'latency' must be one of {list(LATENCY_MODES)}, got {rc['latency']!r}")
    if rc.get("arrival-order") is not None and rc["arrival-order"] not in ARRIVAL_MODES:
        raise ConfigError(f"run config: 'arrival-order' must be one of {list(ARRIVAL_MODES)}, got {rc['arrival-order']!r}")
    for key in ("reply-timeout", "connect-timeout", "poll-interval"):
        if key in rc and not rc[key] > 0:
            raise ConfigError(f"run config: '{key}' must be > 0 seconds, got {rc[key]!r}")
    if "in-flight" in rc and not rc["in-flight"] >= 1:
        raise ConfigError(f"run config: 'in-flight' must be an integer >= 1 (messages), got {rc['in-flight']!r}")
    if rc.get("node-data", "partition") not in NODE_DATA_MODES:
        raise ConfigError(f"run config: 'node-data' must be one of {list(NODE_DATA_MODES)}, got {rc['node-data']!r}")
    if rc.get("test-data") and rc.get("node-data", "partition") != "own":
        raise ConfigError("run config: 'test-data' is the test set of a real fleet's server; it needs node-data = \"own\"")
    out: dict[str, Any] = {
        "latency": rc.get("latency", "simulated"),
        "arrival": rc.get("arrival-order"),
        "overwrite": bool(rc.get("overwrite", False)),
        "resume": bool(rc.get("resume", False)),
    }
    if "reply-timeout" in rc:
        out["reply_timeout"] = float(rc["reply-timeout"])
    if "connect-timeout" in rc:
        out["connect_timeout"] = float(rc["connect-timeout"])
    if "poll-interval" in rc:
        out["poll_s"] = float(rc["poll-interval"])
    if "in-flight" in rc:
        out["in_flight"] = int(rc["in-flight"])
    return out


def make_server_app(
    settings: dict[str, Any] | None = None,
    run_dir: str | Path | None = None,
    on_strategy: Callable[[FedselectStrategy], None] | None = None,
) -> ServerApp:
    """A ServerApp running the experiment of its run config (module docstring).

    Args:
        settings: defaults below the run config (lowest precedence), e.g. for
            :func:`flwr.simulation.run_simulation`, which passes no run config.
        run_dir: the run directory when the run config names none.
        on_strategy: called with the strategy once built (before it runs): tests and notebooks
            keep it to look at the selector, the server state and the results afterwards.
    """
    base = dict(settings or {})
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        rc = {**base, **dict(context.run_config)}
        set_threads(rc)
        r = server_plan(rc)
        kwargs = strategy_settings(rc)
        out = rc.get("run-dir") or run_dir or Path("fedselect-runs") / f"{r.config.name}-flower-{context.run_id}"
        if rc.get("node-data", "partition") == "own":
            _run_fleet(grid, r, out, rc, kwargs)
            return
        strategy = FedselectStrategy(r, out, **kwargs)
        # progress on the ServerApp's output (what `flwr run --stream` shows); run.log has it all
        root = logging.getLogger("fedselect")
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("fedselect %(levelname)s: %(message)s"))
        handler.setLevel(logging.INFO)
        root.addHandler(handler)
        if root.level == logging.NOTSET or root.level > logging.INFO:
            root.setLevel(logging.INFO)
        try:
            log.info("fedselect ServerApp: run directory %s", Path(out).resolve())
            if on_strategy is not None:
                on_strategy(strategy)
            strategy.start(grid)
        finally:
            root.removeHandler(handler)

    return server


def _run_fleet(grid: Grid, r: Resolved, out: str | Path, rc: dict[str, Any], kwargs: dict[str, Any]) -> None:
    """``node-data = "own"``: a real fleet whose nodes own their data (:func:`fedselect.flower.fleet.run_fleet`)."""
    from fedselect.flower.fleet import run_fleet, server_test_set
    from fedselect.flower.nodes import FlowerOptions
    from fedselect.flower.owndata import config_mapping
    from fedselect.flower.strategy import round_line

    test = None
    if rc.get("test-data"):
        options = config_mapping(rc.get("test-data-options"), "test-data-options")
        test = server_test_set(
            rc["test-data"], rc.get("test-data-path") or None, options, r.config.seed, rc.get("test-data-split", "test")
        )
    flower = {
        k: kwargs[k] for k in ("latency", "reply_timeout", "connect_timeout", "arrival", "poll_s", "in_flight") if k in kwargs
    }
    if "latency" not in rc:  # a real fleet's latency is what the network does
        flower["latency"] = "measured"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("fedselect %(levelname)s: %(message)s"))
    root = logging.getLogger("fedselect")
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > logging.INFO:
        root.setLevel(logging.INFO)
    try:
        log.info("fedselect ServerApp (a real fleet: the nodes own their data): run directory %s", Path(out).resolve())
        s = run_fleet(
            grid,
            r,
            out,
            FlowerOptions(**flower),
            test,
            resume=kwargs["resume"],
            overwrite=kwargs["overwrite"],
            on_round=lambda ev: log.info("%s", round_line(ev)),
        )
        log.info(
            "done: %s rounds, final accuracy %s; run directory %s", s.get("rounds"), s.get("final_accuracy"), Path(out).resolve()
        )
    finally:
        root.removeHandler(handler)


#: the ServerApp of a Flower app's pyproject: ``serverapp = "fedselect.flower.server_app:app"``
app = make_server_app()
