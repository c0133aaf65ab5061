"""A real fleet: the server side of nodes that own their data (docs/flower.md, "A real fleet").

In the faithful simulation every node serves a partition of a federation the server builds
too. Here each node serves data of its own (:mod:`fedselect.flower.owndata`) and the server
never has it: :func:`run_fleet` queries the nodes, builds its view of the fleet from their
reports alone (:func:`fleet_federation`: each client's sample counts, input shape, classes,
device and network from its class or speed), and runs the experiment on that view with the
simulator's round; every job on a client's data is a message to its node, as in the faithful
mode.

Evaluation: on the server's test set when one is given (``test-data``); otherwise
**federated**: every node scores the model on its held-out split and the server weighs the
nodes' figures by their held-out samples (:class:`FleetTransport`). Decisions that read model
quality (the server's validation set in the simulator: FLASH-RL's rewards, budgeted online's
candidate scores) are scored the federated way too, or on the server's test set with
``selection_eval: test``.

What cannot run is refused before the run (:func:`central_data_problems`), from declarations,
never from type tests: a selector or algorithm class that declares ``needs_central_data = "why"``
(a plug-in whose decisions read data the server holds), ``selection_eval: test`` without a
server test set, and decisions or evaluation that need held-out data when the nodes report none.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from flwr.serverapp import Grid

from fedselect.config.schema import ConfigError, ExperimentConfig, SystemConfig
from fedselect.experiment.resolve import Resolved, resolve
from fedselect.experiment.run import run_experiment
from fedselect.fl.local.clientdata import ClientData
from fedselect.fl.local.placement import usable_cores
from fedselect.fl.local.pool import ClientTrainer, ModelSpec
from fedselect.fl.work import EvalJob, EvalResult, Job, LocalTransport, Result
from fedselect.flower.nodes import FlowerOptions, NodeDirectory
from fedselect.flower.owndata import PROFILE_FIELDS, model_digest
from fedselect.flower.transport import FlowerTransport
from fedselect.world.data.catalog import load_dataset
from fedselect.world.data.datasets import ArrayDataset
from fedselect.world.federation import Client, Federation
from fedselect.world.profiles import PROFILE_PRESETS
from fedselect.world.system import LATENCY_MODELS, DeviceProfile, Fleet, NetworkProfile, load_profiles

log = logging.getLogger("fedselect.flower")

__all__ = [
    "NodeClient",
    "FleetFederation",
    "FleetTransport",
    "FleetSession",
    "fleet_federation",
    "fleet_problem",
    "central_data_problems",
    "server_test_set",
    "discover",
    "run_fleet",
]


class NodeClient(Client):
    """A client whose data stays on its node: the server knows only its reported sizes
    (``train_indices`` / ``holdout_indices`` are the node's own row numbers ``0..n_k-1``)."""

    __slots__ = ()

    def __init__(self, id: int, num_samples: int, holdout_samples: int, placeholder: ArrayDataset):
        super().__init__(
            id,
            None,
            None,
            np.arange(int(num_samples), dtype=np.int64),
            np.arange(int(holdout_samples), dtype=np.int64),
            placeholder,
        )

    def _elsewhere(self) -> RuntimeError:
        return RuntimeError(f"client {self.id}'s data stays on its node; send it a job (fedselect.fl.work) instead")

    @property
    def train(self) -> ArrayDataset:
        raise self._elsewhere()

    @property
    def holdout(self) -> ArrayDataset:
        raise self._elsewhere()

    @property
    def labels(self) -> np.ndarray:
        raise self._elsewhere()


class FleetFederation(Federation):
    """The server's view of a real fleet, built from the nodes' reports (:func:`fleet_federation`):
    no training set (an empty one of the task's input shape and classes), the server's test set
    or an empty one, :class:`NodeClient` clients and the fleet of the reported profiles.

    Attributes:
        profiles: client id -> the profile its node reported (:data:`PROFILE_FIELDS`).
        has_test_set: whether the server holds a test set (else evaluation is federated).
    """

    profiles: dict[int, dict[str, Any]]
    has_test_set: bool

    def label_counts(self) -> np.ndarray:
        """``(N, num_classes)`` training-label counts as the nodes reported them.

        Raises:
            ValueError: a node did not share its histogram (``share-label-histogram`` is off by default)."""
        hidden = [k for k in range(self.num_clients) if "label-counts" not in self.profiles[k]]
        if hidden:
            raise ValueError(f"clients {hidden} did not share their label histogram (node config share-label-histogram = true)")
        return np.array([self.profiles[k]["label-counts"] for k in range(self.num_clients)], dtype=np.int64)


def _tables(system: SystemConfig) -> tuple[dict[str, DeviceProfile], dict[str, NetworkProfile]]:
    """The device and network classes a node may name: the ``system.profiles`` preset, each table
    replaced by ``profiles_file`` / ``devices`` / ``networks`` (as the simulator's fleet)."""
    preset = PROFILE_PRESETS[system.profiles]
    devices, networks = list(preset.devices), list(preset.networks)
    if system.profiles_file:
        d, n = load_profiles(system.profiles_file)
        devices, networks = d or devices, n or networks
    if system.devices:
        devices = [DeviceProfile(r.name, r.mean_mhz, r.std_mhz, r.cores) for r in system.devices]
    if system.networks:
        networks = [NetworkProfile(r.name, r.mean_mbps, r.std_mbps) for r in system.networks]
    return {d.name: d for d in devices}, {n.name: n for n in networks}


def _positive(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def fleet_problem(p: dict[str, Any], node: int, cfg: ExperimentConfig, reference: dict[str, Any]) -> str | None:
    """Why node ``node``'s profile ``p`` does not fit this fleet (None: it fits). ``reference``
    holds the task's ``input-shape`` and ``num-classes`` once known (the server's test set or
    the first node that fitted; filled here)."""
    n = cfg.data.num_clients
    if p.get("own-data") is not True:
        return (
            f"node {node} serves a partition of a simulated federation (no data-path in its node config), but this server "
            'runs a real fleet (node-data = "own"): give every SuperNode data-path=... (docs/flower.md, A real fleet)'
        )
    unknown = sorted(set(p) - set(PROFILE_FIELDS))
    if unknown:
        return f"node {node} reports fields {unknown} this server does not know (known: {sorted(PROFILE_FIELDS)})"
    k = p.get("client-id")
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < n:
        return f"node {node} serves client-id {k!r}, but the fleet has clients 0..{n - 1} (data.num_clients = {n})"
    for key in ("num-examples", "holdout-examples"):
        v = p.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < (1 if key == "num-examples" else 0):
            return f"node {node} (client {k}) reports {key} = {v!r}; expected an integer >= {1 if key == 'num-examples' else 0}"
    shape, classes = p.get("input-shape"), p.get("num-classes")
    if not isinstance(shape, list) or not all(isinstance(s, int) and s > 0 for s in shape) or not isinstance(classes, int):
        return f"node {node} (client {k}) reports no valid input-shape / num-classes ({shape!r}, {classes!r})"
    if reference and (list(reference["input-shape"]) != shape or reference["num-classes"] != classes):
        return (
            f"node {node} (client {k}) holds inputs {shape} of {classes} classes, the fleet's task has "
            f"{list(reference['input-shape'])} and {reference['num-classes']}"
        )
    if p.get("model") != model_digest(cfg, shape, classes):
        return f"node {node} (client {k}) builds another model than the server: give the nodes and the ServerApp the same model section"
    devices, networks = _tables(cfg.system)
    if "device" in p and p["device"] not in devices:
        return f"node {node} (client {k}) names device class {p['device']!r}; the server's classes are {sorted(devices)}"
    if "network" in p and p["network"] not in networks:
        return f"node {node} (client {k}) names network class {p['network']!r}; the server's classes are {sorted(networks)}"
    if "device" not in p and not _positive(p.get("compute-speed")):
        return f"node {node} (client {k}) reports neither a device class nor a compute-speed > 0"
    if "network" not in p and not _positive(p.get("bandwidth-mbps")):
        return f"node {node} (client {k}) reports neither a network class nor a bandwidth-mbps > 0"
    counts = p.get("label-counts")
    if counts is not None and (not isinstance(counts, list) or len(counts) != classes):
        return f"node {node} (client {k}) reports label-counts that are not {classes} counts"
    if not reference:
        reference.update({"input-shape": shape, "num-classes": classes})
    return None


def fleet_federation(
    cfg: ExperimentConfig, profiles: dict[int, dict[str, Any]], test_set: ArrayDataset | None = None
) -> FleetFederation:
    """The server's view of the fleet from the nodes' ``profiles`` (client id -> profile; every
    client 0..N-1, each already checked by :func:`fleet_problem`) and its optional test set.

    A device class is the server's table row of that name; a reported ``compute-speed`` s
    (training samples per second) is a one-core device of f = s x bits per sample x g / 1e6 MHz,
    so FR-eq 4 charges E n_k / s seconds (as ``system.capacity: file`` does); a
    ``bandwidth-mbps`` is a network of that mean; both without spread.

    Raises:
        ValueError: a client without a profile.
    """
    n = cfg.data.num_clients
    missing = [k for k in range(n) if k not in profiles]
    if missing:
        raise ValueError(f"clients {missing} have no reported profile")
    first = profiles[0]
    shape, classes = tuple(int(s) for s in first["input-shape"]), int(first["num-classes"])
    empty = ArrayDataset(np.zeros((0, *shape), np.float32), np.zeros(0, np.int64), classes, name="node-data")
    devices, networks = _tables(cfg.system)
    bits = LATENCY_MODELS[cfg.system.latency_model].data_bits(1, int(np.prod(shape)))
    g = cfg.system.cycles_per_bit
    dev, net = [], []
    for k in range(n):
        p = profiles[k]
        if "device" in p:
            dev.append(devices[p["device"]])
        else:
            dev.append(
                DeviceProfile(f"{p.get('speed-source', 'reported')}-speed", float(p["compute-speed"]) * bits * g / 1e6, 0.0, 1)
            )
        net.append(networks[p["network"]] if "network" in p else NetworkProfile("reported", float(p["bandwidth-mbps"]), 0.0))
    clients = [NodeClient(k, profiles[k]["num-examples"], profiles[k]["holdout-examples"], empty) for k in range(n)]
    data = cfg.data.model_copy(update={"dataset": "node-data"})  # the server loads no data set
    fed = FleetFederation(
        data,
        cfg.model,
        cfg.system,
        cfg.seed,
        empty,
        test_set if test_set is not None else empty,
        clients,
        Fleet(dev, net, cfg.seed),
    )
    fed.profiles = {k: dict(profiles[k]) for k in range(n)}
    fed.has_test_set = test_set is not None and len(test_set) > 0
    return fed


def server_test_set(
    loader: str, path: str | None = None, options: dict[str, Any] | None = None, seed: int = 0, split: str = "test"
) -> ArrayDataset:
    """The server's own test set (``test-data``): ``loader`` (a data set name or
    ``package.module:loader``) called with ``path`` and ``options``; ``split``: ``test`` (the
    loader's test part, e.g. MNIST's test set) or ``all`` (its two parts together: a file of
    test rows only).

    Raises:
        ValueError: ``split`` not test/all, an empty test set; what the loader raises.
    """
    if split not in ("test", "all"):
        raise ValueError(f"test-data-split must be 'test' or 'all', got {split!r}")
    kwargs = dict(options or {})
    if path:
        kwargs["path"] = str(Path(path).expanduser())
    train, test = load_dataset(loader, seed=seed, **kwargs)
    if split == "all":
        test = ArrayDataset(
            np.concatenate([train.x, test.x]), np.concatenate([train.y, test.y]), train.num_classes, name=f"{train.name}/all"
        )
    if len(test) == 0:
        raise ValueError(f"test-data {loader!r}: its test part is empty (test-data-split = 'all' reads every row)")
    return test


def central_data_problems(r: Resolved, has_test_set: bool, holdout_samples: int | None = None) -> list[str]:
    """Why ``r`` cannot run on a fleet whose nodes own their data (module docstring); [] when
    it can. ``holdout_samples``: the nodes' held-out samples in all (None: not known yet)."""
    out = []
    for kind, cls in (("selector", r.selector), ("algorithm", r.algorithm)):
        why = cls.needs_central_data
        if why:
            out.append(f"{kind} {cls.name!r} needs data the server holds ({why}); its nodes own their data")
    if r.config.selection_eval == "test" and not has_test_set:
        out.append(
            "selection_eval: test scores decisions on the server's test set and this server has none: give test-data, "
            "or selection_eval: validation (the nodes' held-out splits, federated)"
        )
    if holdout_samples == 0:
        s = r.selector
        reads = [a for a in ("wants_evaluation", "scores_candidates", "needs_every_round_evaluation") if getattr(s, a, False)]
        if reads and r.config.selection_eval != "test":
            out.append(f"selector {s.name!r} reads model quality ({', '.join(reads)}) and the nodes report no held-out samples")
        if getattr(r.algorithm_options, "evaluation", "global") == "per_client":
            out.append(f"algorithm {r.algorithm.name!r} evaluates every client on its held-out split and the nodes report none")
        if not has_test_set:
            out.append("no test set on the server and no held-out samples on the nodes: nothing to evaluate on")
    return out


class FleetTransport(FlowerTransport):
    """:class:`FlowerTransport` of a real fleet: the server's jobs (scores on its validation and
    test sets) run on its test set when it has one and the job asks for it, and otherwise
    **federated**: the model goes to every connected node with held-out samples as an
    ``evaluate`` job (split ``holdout``), and the server weighs the figures by each node's
    ``num-examples``: accuracy, loss and macro-F1 are the sample-weighted means of the nodes'
    (macro-F1 so only approximates the pooled one; nodes send no confusion matrices). Nodes
    that fail or stay silent are left out of the mean (logged); with none left the result
    carries an error."""

    def run_server(self, jobs: Sequence[Job]) -> list[Result]:
        out: list[Result | None] = [None] * len(jobs)
        here = [i for i, j in enumerate(jobs) if isinstance(j, EvalJob) and j.split == "test" and self.fed.has_test_set]
        for i, r in zip(here, self.server.run([jobs[i] for i in here]) if here else []):
            out[i] = r
        away = [i for i in range(len(jobs)) if out[i] is None]
        if away:
            clients = sorted(k for k in self.nodes.node_of if len(self.fed.clients[k].holdout_indices))
            evals = [EvalJob(k, jobs[i].state, "holdout") for i in away for k in clients]
            results = self.run(evals) if evals else []
            for a, i in enumerate(away):
                out[i] = _weighted(results[a * len(clients) : (a + 1) * len(clients)], jobs[i].split)
        return out  # type: ignore[return-value]

    def summary(self) -> dict:
        """The ``flower`` section of ``summary.json`` with the fleet: ``node_data: own``, how
        the model was evaluated, and each client's reported profile."""
        s = super().summary()
        s["flower"]["node_data"] = "own"
        s["flower"]["evaluation"] = "server test set" if self.fed.has_test_set else "federated (nodes' held-out splits)"
        s["flower"]["profiles"] = {str(k): dict(p) for k, p in sorted(self.fed.profiles.items())}
        return s


def _weighted(results: Sequence[Result], split: str) -> EvalResult:
    ok = [r for r in results if r.error is None and r.num_examples > 0]
    failed = [r.client_id for r in results if r.error is not None]
    if failed:
        log.warning("federated evaluation (%s): clients %s did not answer; left out of the mean", split, failed)
    if not ok:
        return EvalResult(
            None, math.nan, math.nan, math.nan, 0, f"federated evaluation ({split}): no node with held-out samples answered"
        )
    w = np.array([r.num_examples for r in ok], dtype=np.float64)

    def mean(vals) -> float:
        return float(np.dot(w, np.asarray(vals, dtype=np.float64)) / w.sum())

    return EvalResult(
        None, mean([r.accuracy for r in ok]), mean([r.f1_macro for r in ok]), mean([r.loss for r in ok]), int(w.sum())
    )


class FleetSession:
    """The session of a real fleet's run (:class:`fedselect.engines.Session`): its transport
    talks to the nodes already learnt by :func:`discover`.

    Args:
        grid: the ServerApp's grid. nodes: the directory :func:`discover` filled.
        options: how to talk to the nodes. stop: a ``threading.Event`` ending the run once set.
    """

    def __init__(self, grid: Grid, nodes: NodeDirectory, options: FlowerOptions, stop=None):
        self.grid, self.nodes, self.options, self.stop = grid, nodes, options, stop

    def connect(self, plan: Resolved, fed: Federation, workers: int | None = None) -> FleetTransport:
        """The run's :class:`FleetTransport` (``fed``: the :class:`FleetFederation`).

        Raises:
            ValueError: ``mode: async`` with ``latency: measured``.
        """
        if plan.config.mode == "async" and self.options.measured:
            raise ValueError("latency: measured is not available with mode: async (docs/async.md)")
        m = fed.model
        spec = ModelSpec(m.name, tuple(fed.input_shape), int(fed.num_classes), dict(m.options))
        no_rows = ClientData.from_arrays(fed.train_set.x, fed.train_set.y, [[] for _ in fed.clients], fed.num_classes)
        sets = {"test": fed.test_set} if fed.has_test_set else {}
        trainer = ClientTrainer(
            spec, no_rows, plan.train_cfg, workers=0, device="cpu", eval_sets=sets, eval_threads=usable_cores()
        )
        server = LocalTransport(fed, trainer, plan.train_cfg)
        return FleetTransport(
            self.grid, fed, plan.train_cfg, self.options, server, plan.config.system.round_deadline_s, self.stop, nodes=self.nodes
        )


def discover(
    grid: Grid, cfg: ExperimentConfig, options: FlowerOptions, test_set: ArrayDataset | None = None, stop=None
) -> tuple[NodeDirectory, FleetFederation]:
    """Query the nodes until every client 0..N-1 (``data.num_clients``) has reported, and build
    the server's view of the fleet from the reports (:func:`fleet_federation`).

    Raises:
        ConfigError: a node whose profile does not fit (:func:`fleet_problem`).
        RuntimeError: a node whose query failed; clients without a node after ``connect_timeout``.
    """
    reference: dict[str, Any] = {}
    if test_set is not None:
        reference.update({"input-shape": list(test_set.input_shape), "num-classes": int(test_set.num_classes)})
    nodes = NodeDirectory(grid, None, options, stop, check=lambda p, node: fleet_problem(p, node, cfg, reference))
    missing = nodes.wait(range(cfg.data.num_clients), options.connect_timeout, strict=True)
    if missing:
        raise RuntimeError(
            f"clients {missing} have no node after {options.connect_timeout:.0f} s (connect-timeout); a real fleet starts "
            f"once every client 0..{cfg.data.num_clients - 1} (data.num_clients) has reported its profile"
        )
    return nodes, fleet_federation(cfg, nodes.profiles, test_set)


def run_fleet(
    grid: Grid,
    plan: Resolved | ExperimentConfig,
    run_dir: str | Path,
    options: FlowerOptions | None = None,
    test_set: ArrayDataset | None = None,
    stop=None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Run ``plan`` on a fleet whose nodes own their data (module docstring); returns the summary.

    Args:
        grid: a ServerApp's grid. plan: the experiment (its ``data`` section gives only
            ``num_clients``, the number of nodes to wait for; the server loads no data set).
        run_dir: the run directory. options: how to talk to the nodes.
        test_set: the server's own test set (:func:`server_test_set`), or None: federated evaluation.
        kwargs: :func:`fedselect.experiment.run.run_experiment`'s (``resume``, ``overwrite``, ``on_round`` ...).

    Raises:
        ConfigError: what cannot run without central data (:func:`central_data_problems`; before
            any node is asked), a node that does not fit. RuntimeError: clients without a node.
    """
    r = plan if isinstance(plan, Resolved) else resolve(plan, plan.name)
    options = options or FlowerOptions()
    has_test = test_set is not None and len(test_set) > 0
    problems = central_data_problems(r, has_test)
    if problems:
        raise ConfigError("this experiment cannot run on a fleet whose nodes own their data: " + "; ".join(problems))
    nodes, fed = discover(grid, r.config, options, test_set, stop)
    holdout = sum(len(c.holdout_indices) for c in fed.clients)
    problems = central_data_problems(r, has_test, holdout)
    if problems:
        raise ConfigError("this experiment cannot run on this fleet: " + "; ".join(problems))
    log.info(
        "real fleet: %d nodes, %d training samples reported, evaluation %s",
        fed.num_clients,
        sum(c.num_samples for c in fed.clients),
        "on the server's test set" if has_test else "federated",
    )
    return run_experiment(r, run_dir, federation=fed, session=FleetSession(grid, nodes, options, stop), **kwargs)
