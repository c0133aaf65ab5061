"""A Flower strategy that drives real Flower federations with fedselect's selectors and algorithms
(flwr 1.42 Message API: ``flwr.serverapp.strategy.Strategy``).

:class:`FedselectStrategy` wraps ANY selector of ``fedselect.selectors`` (the same ``Selector``
objects our simulator uses, resolved from an experiment config by :func:`fedselect.resolve.resolve`)
and an algorithm that is FedAvg or partial-layer (``fedper``: only the shared entries travel;
the personalised layers stay on the nodes, in the ClientApp's kept state). Each round mirrors
``fedselect.runner.play_round`` through Flower's seams::

    configure_train     draws f_{t,k}, b_{t,k} (depend only on (seed, t)); selector.select(view)
                        (Power-of-Choice probes: evaluate messages); one train message per chosen
                        client's node, with the algorithm's download entries
    aggregate_train     one ClientOutcome per chosen client from its reply, or a failure
                        (dropout / timeout / error / nan / inf, never a crash); algorithm.aggregate
                        of the survivors; committed only when finite; a round nobody survives
                        keeps the model
    configure_evaluate  per-client evaluation (fedper): one evaluate message per node on its
                        held-out split; global evaluation: none (the server scores the model)
    aggregate_evaluate  the evaluation; selector.observe(t, outcomes, feedback); the row of
                        metrics.csv (fedselect.runfiles.RunFiles)

:meth:`FedselectStrategy.start` runs the experiment: it learns who is who (a ``query`` message
to every node: its stable client id and device/network profile; Flower's random node ids never
reach the selector), runs the selector's preparation (FLASH-RL's warm-up of every node, the
budgeted-online candidate evaluation), the T rounds and the algorithm's finish, and writes the
same run directory as ``fedselect run`` (``config.yaml``, ``metrics.csv``, ``timing.csv``,
``model.pt``, ``summary.json``, ``run.log``; no checkpoints: a Flower run is not resumed).

The selector's context (:class:`FlowerContext`) is a :class:`fedselect.fl.services.FederationContext`:
the fleet, the draws and the cost model are computed on the server from the same federation as
the nodes' (``build_federation`` of the same config; every node's ``query`` reply is checked
against it), so ``draw(t)``, ``client_cost``, ``expected_latency_s`` and ``latency_bounds`` are
the simulator's own; its client services are messages to the nodes:

=====================================  ==========================================================
``warmup(epochs, tag)``                a train message to every node (round 0, ``train-tag``)
``train(k, start, epochs, tag, t)``    a train message to client k's node
``evaluate_candidate(k, epochs)``      an evaluate message (``train-epochs`` E, ``eval-split``
                                       ``test``, ``train-tag`` ``candidate``), memoised
``client_losses`` (``RoundView.probe``)  evaluate messages on the candidates' training data
                                       (``sample-indices`` for cpow-d)
``arrival_order(seeded)``              ``seeded`` (the simulator's order), or with
                                       ``arrival="nodes"`` the order in which the nodes answered
                                       the query (lazy: candidate i is evaluated once i nodes
                                       have connected)
``evaluate(state)``, ``initial_state``  on the server (test set, seeded initial model)
=====================================  ==========================================================

Latency (``latency``):

* ``simulated`` (default): a participant's latency, compute and bytes are the cost model's
  (FR-eq 3-5 with round t's draws), exactly as in our simulator; ``system.round_deadline_s``
  applies to that simulated latency. With the same config (and ``torch-threads``) a run gives
  the same ``metrics.csv`` as ``fedselect run``, byte for byte.
* ``measured``: a participant's latency is the measured wall time from sending its train
  message to receiving its reply (``compute_s`` is the node's handler time, ``upload_s`` the rest
  of the round trip), bytes are what the reply says moved, and ``system.round_deadline_s`` is a
  wall-clock deadline: the server waits that long for the replies. The preparation's latency is
  its wall time, and Power-of-Choice's probing latency the probe exchange's.

Failures (the kinds of the simulator, docs/reliability.md): a chosen client whose node is not
connected, that stays silent until the reply timeout, or that the SuperLink reports unavailable
(error codes 3, 4, 5) is a ``dropout``; with ``latency="measured"`` and a round deadline a node
still silent at the deadline is a ``timeout``, and with simulated latency a reply whose simulated
latency exceeds the deadline is one; an error reply (the ClientApp raised or crashed, or its reply
is malformed) is an ``error``; an upload holding NaN / infinite values is ``nan`` / ``inf``.
Latency of a failure: as in the simulator (simulated), or the time the server waited (measured).

Not supported (refused before anything runs, with the reason): algorithms other than FedAvg and
partial-layer FedPer (and their subclasses), and the simulated client faults of the config's
``faults`` section (over Flower the failures are the nodes' own).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from fedselect.algorithms.base import ServerState, client_evaluation
from fedselect.algorithms.fedavg import FedAvg
from fedselect.algorithms.fedper import FedPer, Personalised
from fedselect.config import ConfigError, ExperimentConfig
from fedselect.experiment import _setup_logging, check_run_dir
from fedselect.federation import Federation, build_federation
from fedselect.fl.faults import non_finite_entries
from fedselect.fl.round import RoundResult
from fedselect.fl.services import FederationContext, clone
from fedselect.fl.types import ClientOutcome, Evaluation, State, WarmClient
from fedselect.flower.client_app import federation_hash
from fedselect.flower.messaging import Exchange, exchange
from fedselect.resolve import Resolved, resolve
from fedselect.runfiles import RUN_FILES, RunFiles
from fedselect.selectors.base import Feedback, Selection
from fedselect.simulation import Simulation
from fedselect.system import RoundDraws

log = logging.getLogger("fedselect.flower")

__all__ = [
    "FedselectStrategy",
    "FlowerContext",
    "FlowerOptions",
    "FlowerRun",
    "NodeDirectory",
    "check_flower_experiment",
    "LATENCY_MODES",
    "ARRIVAL_MODES",
    "DROPOUT_CODES",
]

#: ``latency`` option: the cost model's latency, or the measured round trip
LATENCY_MODES = ("simulated", "measured")
#: ``arrival`` option: budgeted-online candidates in the simulator's seeded order, or as the nodes connect
ARRIVAL_MODES = ("seeded", "nodes")
#: error codes of replies that mean "nobody answered" (message / reply unavailable, node
#: unavailable: flwr.common.constant.ErrorCode); every other error code is an ``error``
DROPOUT_CODES = (3, 4, 5)


# ============================================================================ options
@dataclass(frozen=True)
class FlowerOptions:
    """How the strategy talks to the nodes.

    Attributes:
        latency: ``simulated`` or ``measured`` (module docstring).
        reply_timeout: seconds to wait for the replies of one exchange (a round's train
            messages, a probe, an evaluation, a query); a node still silent then failed.
        connect_timeout: seconds to wait at the start for the N nodes to connect (clients
            whose node has not connected by then are failures whenever chosen; budgeted-online
            candidates that never connect are scored NaN).
        arrival: ``seeded`` or ``nodes`` (module docstring); None = ``seeded`` with simulated
            latency (reproducible), ``nodes`` with measured latency.
        poll_s: seconds between two polls of the SuperLink for replies and new nodes.
    """

    latency: str = "simulated"
    reply_timeout: float = 600.0
    connect_timeout: float = 300.0
    arrival: str | None = None
    poll_s: float = 0.1

    def __post_init__(self) -> None:
        if self.latency not in LATENCY_MODES:
            raise ValueError(f"latency must be one of {list(LATENCY_MODES)}, got {self.latency!r}")
        if self.arrival is not None and self.arrival not in ARRIVAL_MODES:
            raise ValueError(f"arrival must be one of {list(ARRIVAL_MODES)} (or None), got {self.arrival!r}")
        for name in ("reply_timeout", "connect_timeout", "poll_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a number of seconds > 0, got {v!r}")

    @property
    def measured(self) -> bool:
        return self.latency == "measured"

    @property
    def arrival_mode(self) -> str:
        return self.arrival or ("nodes" if self.measured else "seeded")


def check_flower_experiment(r: Resolved) -> None:
    """Refuse what the strategy cannot run (before any node is contacted).

    Raises:
        ConfigError: an algorithm other than FedAvg / FedPer (or subclasses), or simulated
            client faults (``faults.dropout``, ``faults.dropout_by_*``, ``faults.inject``).
    """
    problems = []
    if not issubclass(r.algorithm, (FedAvg, FedPer)):
        problems.append(
            f"algorithm {r.config.algorithm.name!r}: the Flower strategy runs FedAvg ('fedavg') and partial-layer FedPer "
            f"('fedper'); run {r.config.algorithm.name!r} with `fedselect run`"
        )
    f = r.config.faults
    if f.dropout or f.dropout_by_device or f.dropout_by_network or f.inject:
        problems.append(
            "faults: dropout / dropout_by_device / dropout_by_network / inject simulate client failures in fedselect's "
            "simulator; over Flower the failures are the nodes' own (remove the faults section; "
            "system.round_deadline_s still applies)"
        )
    if problems:
        raise ConfigError("\n".join(["cannot run this experiment on Flower:"] + [f"  {p}" for p in problems]))


# ============================================================================ nodes
def _metrics(reply: Message | None, *keys: str) -> list[float] | None:
    """``keys`` of a reply's ``metrics`` record as floats, or None when the reply is missing, an
    error, or lacks them (a malformed reply is a failure, never a crash)."""
    if reply is None or reply.has_error():
        return None
    try:
        m = reply.content["metrics"]
        return [float(m[k]) for k in keys]
    except (KeyError, TypeError, ValueError):
        return None


def _subset(state: State, keys: Sequence[str] | None) -> dict[str, torch.Tensor]:
    return dict(state) if keys is None else {n: state[n] for n in keys}


class NodeDirectory:
    """Who is who: Flower node id <-> fedselect client id, learnt from ``query`` replies.

    Nodes are queried when first seen (:meth:`poll`); a node that vanishes from the SuperLink's
    list loses its client; a client whose node is replaced (a SuperNode restarted) is mapped to
    the new node. Every profile is checked against the server's federation.

    Attributes:
        arrivals: client ids in the order their nodes first answered the query.
        profiles: client id -> its last ``profile`` record (dict).
    """

    def __init__(self, grid: Grid, fed: Federation, options: FlowerOptions):
        self.grid, self.fed, self.options = grid, fed, options
        self.expected = federation_hash(fed)
        self.node_of: dict[int, int] = {}
        self.client_of: dict[int, int] = {}
        self.profiles: dict[int, dict[str, Any]] = {}
        self.arrivals: list[int] = []
        self._asked: set[int] = set()
        self._rejected: set[int] = set()
        self.query_s = 0.0

    def node(self, k: int) -> int | None:
        """The node serving client ``k`` now, or None."""
        return self.node_of.get(int(k))

    def _check(self, node: int, p: dict[str, Any]) -> str | None:
        """Why node ``node``'s profile does not fit the server's federation (None: it fits)."""
        n = self.fed.num_clients
        k = p.get("client-id")
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < n:
            return (
                f"node {node} serves client-id {k!r}, but the server's federation has clients 0..{n - 1} "
                f"(data.num_clients = {n}); give each SuperNode partition-id=K num-partitions={n}"
            )
        if p.get("federation") != self.expected:
            diffs = []
            if p.get("num-partitions") != n:
                diffs.append(f"num-partitions {p.get('num-partitions')} vs data.num_clients {n}")
            if p.get("num-examples") != self.fed.clients[k].num_samples:
                diffs.append(
                    f"client {k} has {p.get('num-examples')} training samples there, {self.fed.clients[k].num_samples} here"
                )
            desc = self.fed.fleet.describe(k)
            if (p.get("device"), p.get("network")) != (desc["device"], desc["network"]):
                diffs.append(f"profiles {p.get('device')}/{p.get('network')} there, {desc['device']}/{desc['network']} here")
            return (
                f"node {node} (client {k}) built its federation from other settings than the server "
                f"({'; '.join(diffs) or 'data/model/system/seed differ'}); give the SuperNodes and the ServerApp the same "
                f"experiment (run config / fedselect-config: data, model, system, seed)"
            )
        return None

    def poll(self, strict: bool = False) -> list[int]:
        """Query the nodes not seen yet, drop the vanished ones. Returns the clients mapped now.

        Args:
            strict: a node that does not fit the federation, or whose query fails, is an error
                (at the start); otherwise it is logged and left out.

        Raises:
            ConfigError: with ``strict``, a node of another federation. RuntimeError: with
                ``strict``, a node whose ClientApp failed to answer the query.
        """
        ids = {int(i) for i in self.grid.get_node_ids()}
        for node in [nd for nd in self.client_of if nd not in ids]:
            k = self.client_of.pop(node)
            if self.node_of.get(k) == node:
                del self.node_of[k]
                log.warning("client %d: its node %d left the federation", k, node)
        new = sorted(i for i in ids if i not in self._asked and i not in self._rejected)
        if not new:
            return []
        self._asked |= set(new)
        msgs = [Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=i, message_type=MessageType.QUERY) for i in new]
        ex = exchange(self.grid, msgs, self.options.reply_timeout, self.options.poll_s)
        self.query_s += ex.seconds
        mapped = []
        for node in sorted(ex.replies, key=lambda nd: ex.arrival[nd]):
            reply = ex.replies[node]
            if reply.has_error():
                why = f"node {node} could not answer the query (error code {reply.error.code}): {reply.error.reason}"
                if strict and reply.error.code not in DROPOUT_CODES:
                    raise RuntimeError(why)
                log.warning("%s; asking again later", why)
                self._asked.discard(node)
                continue
            profile = dict(reply.content["profile"]) if "profile" in reply.content else {}
            problem = self._check(node, profile)
            if problem is not None:
                if strict:
                    raise ConfigError(problem)
                log.error("%s: left out", problem)
                self._rejected.add(node)
                continue
            k = int(profile["client-id"])
            old = self.node_of.get(k)
            if old is not None and old != node:
                log.warning("client %d: node %d replaces node %d", k, node, old)
                self.client_of.pop(old, None)
            self.node_of[k], self.client_of[node] = node, k
            self.profiles[k] = profile
            if k not in self.arrivals:
                self.arrivals.append(k)
            mapped.append(k)
        for node in ex.silent:  # not ready yet: ask again at the next poll
            self._asked.discard(node)
        return mapped

    def wait(self, clients: Iterable[int], timeout: float, strict: bool = True) -> list[int]:
        """Poll until every client of ``clients`` has a node, or ``timeout`` seconds passed.
        Returns the clients still without a node."""
        want = {int(k) for k in clients}
        deadline = time.monotonic() + timeout
        while True:
            self.poll(strict)
            missing = sorted(k for k in want if k not in self.node_of)
            if not missing or time.monotonic() >= deadline:
                return missing
            time.sleep(min(self.options.poll_s * 5, max(0.0, deadline - time.monotonic())))


class _Arrivals(Sequence):
    """Budgeted-online candidates in the order their nodes connected (lazy: item i waits until
    i + 1 of the candidates have connected; candidates still missing at the connect timeout
    come last, in the seeded order, and are scored NaN)."""

    def __init__(self, ctx: "FlowerContext", seeded: list[int]):
        self.ctx, self.pool = ctx, list(seeded)
        self.order: list[int] = []
        self._deadline: float | None = None

    def __len__(self) -> int:
        return len(self.pool)

    def _fill(self, i: int) -> None:
        nodes, pool = self.ctx.nodes, set(self.pool)
        if self._deadline is None:
            self._deadline = time.monotonic() + self.ctx.options.connect_timeout
        while len(self.order) <= i:
            self.order += [k for k in nodes.arrivals if k in pool and k not in self.order]
            if len(self.order) > i:
                return
            if time.monotonic() >= self._deadline:
                rest = [k for k in self.pool if k not in self.order]
                log.warning(
                    "budgeted online: candidates %s did not connect within %.0f s; they come last and score NaN",
                    rest,
                    self.ctx.options.connect_timeout,
                )
                self.order += rest
                return
            if not nodes.poll():
                time.sleep(self.ctx.options.poll_s)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            idx = range(*i.indices(len(self)))
            if len(idx):
                self._fill(max(idx))
            return [self.order[j] for j in idx]
        j = i + len(self) if i < 0 else i
        if not 0 <= j < len(self):
            raise IndexError(i)
        self._fill(j)
        return self.order[j]


class FlowerContext(FederationContext):
    """The selector context over Flower nodes (module docstring). The cost model, draws,
    initial model and test-set evaluation are the :class:`FederationContext`'s; the client
    services are messages through :attr:`nodes` (set by :meth:`FedselectStrategy.connect`).

    Args: those of :class:`FederationContext`, plus ``options`` (:class:`FlowerOptions`) and
    ``personalised`` (the algorithm keeps personalised entries on the nodes).
    """

    def __init__(
        self,
        fed,
        settings,
        train_cfg,
        upload_keys,
        download_keys,
        payload_bytes,
        options: FlowerOptions,
        personalised: bool = False,
        engine=None,
    ):
        super().__init__(fed, settings, train_cfg, upload_keys, download_keys, payload_bytes, engine)
        self.options, self.personalised = options, personalised
        self.nodes: NodeDirectory | None = None
        self.messages = 0  # messages sent for the selector's services
        self.last_probe_s: float | None = None
        self._failed: dict[tuple, tuple[float, float, float]] = {}

    # ---------------------------------------------------------------- plumbing
    def _directory(self) -> NodeDirectory:
        if self.nodes is None:
            raise RuntimeError("FlowerContext: not connected to a Flower grid (FedselectStrategy.start / connect first)")
        return self.nodes

    def _exchange(self, messages: list[Message]) -> Exchange:
        if not messages:
            return Exchange()
        self.messages += len(messages)
        return exchange(self._directory().grid, messages, self.options.reply_timeout, self.options.poll_s)

    def _message(self, node: int, kind: str, arrays: dict[str, torch.Tensor], config: dict[str, Any]) -> Message:
        return Message(
            RecordDict({"arrays": ArrayRecord(arrays), "config": ConfigRecord(config)}), dst_node_id=node, message_type=kind
        )

    @staticmethod
    def _failure(k: int, what: str, reply: Message | None) -> str:
        if reply is None:
            why = "no reply"
        elif reply.has_error():
            why = f"error code {reply.error.code}: {reply.error.reason}"
        else:
            why = "its reply lacks the expected records"
        return f"client {k}: {what} failed ({why})"

    # ---------------------------------------------------------------- client services
    def _train_many(
        self, ids: Sequence[int], start: State, epochs: int, tag: str, t: int
    ) -> dict[int, tuple[State, float] | None]:
        nodes = self._directory()
        down, up = self.download_keys, self.upload_keys
        conf: dict[str, Any] = {"server-round": int(t), "local-epochs": int(epochs), "train-tag": tag}
        if up is not None:
            conf["upload-keys"] = list(up)
        msgs, node_client = [], {}
        for k in ids:
            node = nodes.node(k)
            if node is not None:
                msgs.append(self._message(node, MessageType.TRAIN, _subset(start, down), conf))
                node_client[node] = k
        ex = self._exchange(msgs)
        out: dict[int, tuple[State, float] | None] = {k: None for k in ids}
        for node, reply in ex.replies.items():
            k = node_client[node]
            loss = _metrics(reply, "train-loss")
            if loss is None or not isinstance(reply.content.get("arrays"), ArrayRecord):
                log.warning(self._failure(k, f"training ({tag}, round {t})", reply))
                continue
            state = {**clone(start), **reply.content["arrays"].to_torch_state_dict()}
            out[k] = (state, loss[0])
        for k in ids:
            if out[k] is None and nodes.node(k) is None:
                log.warning("client %d: training (%s, round %d) impossible, its node is not connected", k, tag, t)
        return out

    def warmup(self, epochs: int, tag: str) -> Iterator[WarmClient]:
        """Every node trains ``epochs`` epochs from the initial model (round 0, stream
        ``<tag>/0/<k>``), all at once; yields in client order. Entries a participant does not
        upload (personalised layers) keep their initial values here. A client that failed
        (logged) yields the initial model and a NaN loss: the server knows nothing better."""
        init = self.initial_state()
        n = len(self.num_samples)
        res = self._train_many(range(n), init, epochs, tag, 0)
        for k in range(n):
            r = res[k]
            yield WarmClient(k, r[0], r[1]) if r is not None else WarmClient(k, clone(init), math.nan)

    def train(self, k: int, start: State, epochs: int, tag: str, t: int = 0) -> tuple[State, float]:
        """Client ``k``'s node trains ``epochs`` epochs from ``start`` (stream ``<tag>/<t>/<k>``).

        Raises:
            RuntimeError: the node is not connected, did not answer or failed.
        """
        r = self._train_many([k], start, epochs, tag, t)[k]
        if r is None:
            raise RuntimeError(f"client {k}: training ({tag}, round {t}) failed or its node did not answer (see the log)")
        return r

    def evaluate_candidate(self, k: int, epochs: int) -> tuple[float, float, float]:
        """Budgeted-online candidate evaluation by client ``k``'s node: the initial model trained
        ``epochs`` epochs on its data (stream ``candidate/0/<k>``), scored on the test set (an
        evaluate message; the simulator's :meth:`SimulatedContext.evaluate_candidate`). Memoised
        per federation; a failed evaluation scores NaN (never accepted by the rules, logged)."""
        cache = self.shared_cache(f"candidates/{int(epochs)}/{self.train_cfg!r}")
        key = (int(k), int(epochs))
        if k in cache:
            return cache[k]
        if key in self._failed:
            return self._failed[key]
        node = self._directory().node(k)
        reply = None
        if node is not None:
            msg = self._message(
                node,
                MessageType.EVALUATE,
                self.initial_state(),
                {"server-round": 0, "train-epochs": int(epochs), "train-tag": "candidate", "eval-split": "test"},
            )
            reply = self._exchange([msg]).replies.get(node)
        got = _metrics(reply, "accuracy", "loss", "train-loss")
        if got is None:
            log.warning(self._failure(k, "candidate evaluation", reply))
            self._failed[key] = (math.nan, math.nan, math.nan)
            return self._failed[key]
        cache[k] = tuple(got)
        return cache[k]

    def client_losses(
        self, states: Sequence[State], ids: Sequence[int], samples: Sequence[Sequence[int]] | None = None
    ) -> list[float]:
        """Power-of-Choice's probe: the mean cross-entropy of ``states[i]`` on client ``ids[i]``'s
        training data (only the samples ``samples[i]``), computed by the nodes (evaluate
        messages, all at once). Only the download entries are sent; the rest come from the
        node's kept state (what the client would train from). NaN for a client that fails.

        Raises:
            ValueError: ``samples`` not one index array per id.
        """
        if samples is not None and len(samples) != len(ids):
            raise ValueError(f"client_losses: {len(samples)} sample index arrays for {len(ids)} clients")
        nodes = self._directory()
        msgs, node_client, out = [], {}, [math.nan] * len(ids)
        for i, (st, k) in enumerate(zip(states, ids)):
            node = nodes.node(k)
            conf: dict[str, Any] = {"server-round": 0, "eval-split": "train"}
            if samples is not None:
                idx = [int(j) for j in np.asarray(samples[i]).ravel()]
                if not idx:
                    continue  # nothing to score: nan, as in the simulator
                conf["sample-indices"] = idx
            if node is None:
                log.warning("client %d: probe impossible, its node is not connected", k)
                continue
            msgs.append(self._message(node, MessageType.EVALUATE, _subset(st, self.download_keys), conf))
            node_client[node] = i
        ex = self._exchange(msgs)
        self.last_probe_s = ex.seconds
        for node, i in node_client.items():
            reply = ex.replies.get(node)
            got = _metrics(reply, "loss")
            if got is None:
                log.warning(self._failure(int(ids[i]), "probe", reply))
                continue
            out[i] = got[0]
        return out

    def arrival_order(self, seeded: list[int]) -> Sequence[int]:
        """``seeded`` (the simulator's order), or with ``arrival="nodes"`` the order in which the
        candidates' nodes answered the query (lazy, see :class:`_Arrivals`)."""
        if self.options.arrival_mode == "seeded" or not seeded:
            return seeded
        return _Arrivals(self, seeded)

    def shared_cache(self, namespace: str) -> dict[Any, Any]:
        """As the simulator's, in a namespace of its own (``flower/...``): values computed by the
        nodes are never mixed with values the simulator computed on the same federation."""
        return super().shared_cache(f"flower/{namespace}")


class FlowerRun(Simulation):
    """The components of one experiment over Flower: the simulator's :class:`Simulation`
    (selector, algorithm, columns, commit, the probing view, snapshots) with a
    :class:`FlowerContext` as the selector's context. Training goes through the strategy."""

    def __init__(self, resolved: Resolved, fed: Federation, options: FlowerOptions):
        self.flower = options  # read by make_context, called by Simulation.__init__
        # the server trains nobody: its engine (test-set evaluations, as in the simulator) runs in this process
        super().__init__(resolved, fed, workers=0)

    def make_context(self) -> FlowerContext:
        return FlowerContext(
            self.fed,
            self.settings,
            self.resolved.train_cfg,
            self.upload_keys,
            self.algorithm.download_keys(),
            self.algorithm.payload_bytes(),
            self.flower,
            isinstance(self.algorithm, Personalised),
            engine=self.trainer,
        )

    def train(self, t, clients, state, draws):  # noqa: D102 - see the class docstring
        raise NotImplementedError("over Flower, clients train by messages: FedselectStrategy.configure_train / aggregate_train")


class _FlowerRunFiles(RunFiles):
    """The simulator's run files without checkpoints (a Flower run is not resumed)."""

    def checkpoint(self, t, state, before) -> None:
        return None


@dataclass
class _Round:
    """Round ``t`` in progress, from configure_train to aggregate_evaluate."""

    t: int
    selection: Selection
    draws: RoundDraws
    state: ServerState  # the state the chosen clients start from
    nodes: dict[int, int]  # chosen client -> node (connected ones)
    starts: dict[int, State]  # chosen client -> full start state
    sent_at: float = field(default_factory=time.perf_counter)
    exchange: Exchange | None = None
    outcomes: list[ClientOutcome] = field(default_factory=list)
    aggregated: int = 0
    failed: bool = False
    evaluated: bool = False


# ============================================================================ the strategy
class FedselectStrategy(Strategy):
    """A Flower strategy running a fedselect experiment (module docstring).

    Args:
        cfg: the experiment (validated; resolved here). Its selector chooses, its algorithm
            (FedAvg or FedPer) aggregates, its ``rounds`` is the number of rounds.
        run_dir: where the run files go (None: nothing is written; results in :attr:`results`).
        latency, reply_timeout, connect_timeout, arrival, poll_s: see :class:`FlowerOptions`.
        federation: the federation built from ``cfg`` (default: built here; the server needs
            the test set and the profiles, never trains on client data).
        overwrite: replace the run files of a run already in ``run_dir``.

    Raises:
        ConfigError: an invalid config, or one the strategy cannot run (:func:`check_flower_experiment`).
        ValueError: bad options. FileExistsError: ``run_dir`` holds a run and not ``overwrite``.

    Attributes:
        run: the :class:`FlowerRun` (``run.selector``, ``run.algorithm``, ``run.ctx``).
        state: the server state (global model; per-client shared entries for FedPer).
        results: every round's :class:`fedselect.runner.RoundResult`.
        trained: round -> client ids whose train reply arrived (and fit), in selection order.
    """

    def __init__(
        self,
        cfg: ExperimentConfig,
        run_dir: str | Path | None = None,
        *,
        latency: str = "simulated",
        reply_timeout: float = 600.0,
        connect_timeout: float = 300.0,
        arrival: str | None = None,
        poll_s: float = 0.1,
        federation: Federation | None = None,
        overwrite: bool = False,
    ):
        self.options = FlowerOptions(latency, reply_timeout, connect_timeout, arrival, poll_s)
        self.resolved = resolve(cfg, cfg.name)
        check_flower_experiment(self.resolved)
        self.run_dir = None if run_dir is None else Path(run_dir)
        self.overwrite = overwrite
        if self.run_dir is not None:
            check_run_dir(self.run_dir, overwrite)
        self.fed = federation or build_federation(self.resolved.config)
        self.run = FlowerRun(self.resolved, self.fed, self.options)
        self.state: ServerState = self.run.algorithm.initial_state()
        self.before: Evaluation | None = None
        self.results: list[RoundResult] = []
        self.trained: dict[int, list[int]] = {}
        self.timings: dict[str, Any] = {}
        self.grid: Grid | None = None
        self.files: RunFiles | None = None
        self._round: _Round | None = None
        self._prepared = False
        self.summary_json: dict[str, Any] = {}

    # ---------------------------------------------------------------- shortcuts
    @property
    def selector(self):
        return self.run.selector

    @property
    def algorithm(self):
        return self.run.algorithm

    @property
    def ctx(self) -> FlowerContext:
        return self.run.ctx

    @property
    def nodes(self) -> NodeDirectory:
        return self.ctx._directory()

    def summary(self) -> None:
        """Log what runs: selector, algorithm, N, U, T, latency mode."""
        s, r = self.run.settings, self.resolved
        log.info(
            "fedselect on Flower: %s (selector %s, algorithm %s), N=%d, U=%d, T=%d, seed %d, latency %s, arrival %s",
            r.method,
            r.config.selector.name,
            r.config.algorithm.name,
            s.num_clients,
            s.clients_per_round,
            s.rounds,
            s.seed,
            self.options.latency,
            self.options.arrival_mode,
        )

    # ---------------------------------------------------------------- who is who
    def connect(self, grid: Grid) -> list[int]:
        """Learn the nodes (``query``): wait up to ``connect_timeout`` for all N, except for a
        budgeted-online selector with ``arrival="nodes"``, whose candidates are evaluated as
        they connect. Returns the clients still without a node (logged).

        Raises:
            ConfigError / RuntimeError: a node of another federation, or one whose query failed.
        """
        from fedselect.selectors._online import OnlineSelection

        t0 = time.perf_counter()
        self.ctx.nodes = NodeDirectory(grid, self.fed, self.options)
        n = self.run.settings.num_clients
        if isinstance(self.selector, OnlineSelection) and self.options.arrival_mode == "nodes":
            self.nodes.poll(strict=True)
            missing = sorted(set(range(n)) - set(self.nodes.node_of))
        else:
            missing = self.nodes.wait(range(n), self.options.connect_timeout, strict=True)
            if missing:
                log.warning(
                    "clients %s have no node after %.0f s: they fail whenever chosen", missing, self.options.connect_timeout
                )
        self.grid = grid
        self.timings.update(clients_without_node=missing, connect_s=time.perf_counter() - t0)
        return missing

    def prepare(self, grid: Grid) -> None:
        """Before round 1: :meth:`connect` (unless done), the selector's preparation (warm-up, candidate
        evaluation ...; with measured latency its wall time is the preparation's latency), the
        algorithm's, and the round-0 evaluation (the round-0 row of metrics.csv). Called by
        :meth:`start`, or by the first :meth:`configure_train` when Flower's own loop drives."""
        if self.grid is None:
            self.connect(grid)
        t0 = time.perf_counter()
        sent = self.ctx.messages
        prepared = self.selector.prepare()
        self.timings["prepare_s"] = time.perf_counter() - t0
        if self.options.measured and self.ctx.messages > sent:
            prepared.cost = replace(prepared.cost, latency_s=float(self.timings["prepare_s"]))
        self.state = self.algorithm.prepare(self.algorithm.initial_state(), prepared)
        self.before = self._evaluate(0, self.state)
        if self.files is not None:
            self.files.prepared(prepared, self.before)
        self._prepared = True

    # ---------------------------------------------------------------- evaluation
    def _evaluate(self, t: int, state: ServerState, replies: Iterable[Message] | None = None) -> Evaluation:
        """Global: on the server's test set (the algorithm's own evaluation). Per-client: the
        nodes' evaluate replies on their held-out splits (NaN for a client without reply; the
        means over those that answered)."""
        if not self.algorithm.per_client:
            return self.algorithm.evaluate(t, state)
        if replies is None:
            replies = self._exchange(list(self._client_eval_messages(t, state))).replies.values()
        by_client: dict[int, dict[str, float]] = {}
        for r in replies:
            k = self.nodes.client_of.get(r.metadata.src_node_id)
            got = _metrics(r, "accuracy", "f1-macro", "loss")
            if k is None or got is None:
                if k is not None:
                    log.warning(FlowerContext._failure(k, f"evaluation after round {t}", r))
                continue
            by_client[k] = {"accuracy": got[0], "f1_macro": got[1], "loss": got[2]}
        n = self.run.settings.num_clients
        if len(by_client) == n:
            return client_evaluation([by_client[k] for k in range(n)])
        if not by_client:
            log.warning("evaluation after round %d: no node answered", t)
            return Evaluation(math.nan, math.nan, math.nan, {"accuracy_std": math.nan, "client_accuracy": [math.nan] * n})
        log.warning(
            "evaluation after round %d: clients %s did not answer; means over the %d others",
            t,
            sorted(set(range(n)) - set(by_client)),
            len(by_client),
        )
        part = client_evaluation([by_client[k] for k in sorted(by_client)])
        acc = [by_client[k]["accuracy"] if k in by_client else math.nan for k in range(n)]
        return Evaluation(
            part.accuracy, part.f1_macro, part.loss, {"accuracy_std": part.per_client["accuracy_std"], "client_accuracy": acc}
        )

    def _client_eval_messages(self, t: int, state: ServerState) -> Iterator[Message]:
        down = self.algorithm.download_keys()
        for k in range(self.run.settings.num_clients):
            node = self.nodes.node(k)
            if node is None:
                continue
            arrays = _subset(self.algorithm.eval_state(state, k), down)
            yield self.ctx._message(node, MessageType.EVALUATE, arrays, {"server-round": int(t), "eval-split": "holdout"})

    def _exchange(self, messages: list[Message], timeout: float | None = None) -> Exchange:
        if not messages:
            return Exchange()
        return exchange(self.grid, messages, timeout or self.options.reply_timeout, self.options.poll_s)

    # ---------------------------------------------------------------- Flower's seams
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        """Round ``server_round``: the selector chooses (after the draws; probing by evaluate
        messages), the algorithm's restart is applied, and one train message goes to each chosen
        client's node with the algorithm's download entries of the state it starts from.
        ``arrays`` is accepted for the interface: the strategy keeps the server state itself
        (:attr:`state`: with FedPer, the clients' shared entries too). ``config`` entries are
        added to every train message."""
        t = int(server_round)
        if not self._prepared:
            self.prepare(grid)
        else:
            self.nodes.poll()
        run, sel_obj = self.run, self.selector
        draws = run.ctx.draw(t)
        self.ctx.last_probe_s = None
        selection = sel_obj.select(run.view(t, draws, self.state))
        run.check_selection(t, selection)
        if self.options.measured and sel_obj.probes and self.ctx.last_probe_s is not None:
            selection = replace(selection, cost=replace(selection.cost, latency_s=float(self.ctx.last_probe_s)))
        state = self.algorithm.initial_state() if selection.restart else self.state  # BO Algorithm 1 re-runs
        self.state = state
        down, up = self.algorithm.download_keys(), self.algorithm.upload_keys()
        conf: dict[str, Any] = {
            **dict(config or {}),
            "server-round": t,
            "local-epochs": int(run.settings.local_epochs),
            "train-tag": "train",
        }
        if up is not None:
            conf["upload-keys"] = list(up)
        if isinstance(self.algorithm, Personalised):
            conf["keep-state"] = True
        if sel_obj.wants_sample_losses:
            conf["sample-losses"] = True
        rnd = _Round(t, selection, draws, state, {}, {})
        msgs = []
        for k in selection.clients:
            start = self.algorithm.start_state(state, k)
            rnd.starts[k] = start
            node = self.nodes.node(k)
            if node is None:
                continue
            rnd.nodes[k] = node
            msgs.append(self.ctx._message(node, MessageType.TRAIN, _subset(start, down), conf))
        self._round = rnd
        rnd.sent_at = time.perf_counter()
        return msgs

    def _train_wait(self) -> float:
        deadline = self.run.faults.deadline_s
        if self.options.measured and deadline is not None:
            return min(self.options.reply_timeout, float(deadline))
        return self.options.reply_timeout

    def _outcome(self, rnd: _Round, k: int, reply: Message | None, waited: float, arrival: float | None) -> ClientOutcome:
        """Client ``k``'s outcome in round ``rnd.t`` from its reply (module docstring: kinds and latencies)."""
        t, s = rnd.t, self.run.settings
        n_k, epochs = self.fed.clients[k].num_samples, s.local_epochs
        deadline = self.run.faults.deadline_s
        measured = self.options.measured
        cost = self.ctx.client_cost(k, epochs, rnd.draws)
        if reply is None or (reply.has_error() and reply.error.code in DROPOUT_CODES):
            silent = reply is None and k in rnd.nodes
            kind = "timeout" if measured and silent and deadline is not None else "dropout"
            if measured and kind == "timeout":
                lat = float(deadline)  # the server gave up at the deadline (docs/flower.md); polling overhead not charged
            elif measured:
                lat = arrival if arrival is not None else (waited if k in rnd.nodes else 0.0)
            else:
                lat = deadline if deadline is not None else 0.0
            why = (
                "its node is not connected"
                if k not in rnd.nodes
                else ("no reply" if reply is None else f"node unavailable: {reply.error.reason}")
            )
            log.info(
                "round %d: client %d %s (%s); failure latency %.4g s",
                t,
                k,
                "missed the deadline" if kind == "timeout" else "dropped out",
                why,
                lat,
            )
            return ClientOutcome(k, t, None, n_k, math.nan, 0, 0.0, 0.0, 0.0, float(lat), 0, 0, failed=kind)
        problem = None
        if reply.has_error():
            problem = f"error code {reply.error.code}: {reply.error.reason}"
        else:
            problem = self._check_reply(k, reply)
        if problem is not None:
            lat = arrival if measured and arrival is not None else cost.compute_s + (cost.download_s if s.count_download else 0.0)
            log.warning("round %d: client %d failed during local training (%s); failure latency %.4g s", t, k, problem, lat)
            return ClientOutcome(
                k,
                t,
                None,
                n_k,
                math.nan,
                epochs,
                cost.compute_s,
                0.0,
                cost.download_s,
                float(lat),
                0,
                cost.download_bytes,
                failed="error",
            )
        m = reply.content["metrics"]
        uploaded = reply.content["arrays"].to_torch_state_dict()
        state = {**rnd.starts[k], **uploaded}
        if measured:
            lat = float(arrival if arrival is not None else waited)
            comp = float(m["wall-s"])
            o = ClientOutcome(
                k,
                t,
                state,
                n_k,
                float(m["train-loss"]),
                epochs,
                comp,
                max(0.0, lat - comp),
                0.0,
                lat,
                int(m["upload-bytes"]),
                int(m["download-bytes"]),
                None,
                float(m.get("sum-sq-sample-loss", 0.0)),
                int(m.get("num-sample-losses", 0)),
            )
        else:
            o = ClientOutcome(
                k,
                t,
                state,
                n_k,
                float(m["train-loss"]),
                epochs,
                cost.compute_s,
                cost.upload_s,
                cost.download_s,
                cost.latency_s,
                cost.upload_bytes,
                cost.download_bytes,
                None,
                float(m.get("sum-sq-sample-loss", 0.0)),
                int(m.get("num-sample-losses", 0)),
            )
        if deadline is not None and o.latency_s > deadline:
            log.info(
                "round %d: client %d missed the deadline of %.4g s (latency %.4g s); update discarded",
                t,
                k,
                deadline,
                o.latency_s,
            )
            return replace(o, state=None, upload_bytes=0, latency_s=float(deadline), failed="timeout")
        bad = non_finite_entries(o.state, self.algorithm.upload_keys())
        if bad:
            code = "nan" if "nan" in bad.values() else "inf"
            log.warning(
                "round %d: client %d update rejected, not averaged: non-finite values (%s) in %s", t, k, code, sorted(bad)
            )
            return replace(o, state=None, failed=code)
        return o

    def _check_reply(self, k: int, reply: Message) -> str | None:
        """Why a train reply cannot be used (None: it can)."""
        c = reply.content
        if "arrays" not in c or "metrics" not in c:
            return f"the reply holds no 'arrays'/'metrics' records (records: {sorted(c)})"
        m = c["metrics"]
        if m.get("client-id") != k:
            return f"the reply comes from client {m.get('client-id')!r}, not {k}"
        missing = [n for n in ("train-loss", "wall-s", "upload-bytes", "download-bytes") if n not in m]
        if missing:
            return f"the reply's metrics lack {missing}"
        up = self.algorithm.upload_keys() or list(self.state.model)
        got = c["arrays"]
        absent = [n for n in up if n not in got]
        if absent:
            return f"the reply lacks the entries {absent}"
        for n in up:
            shape = tuple(got[n].shape)
            if shape != tuple(self.state.model[n].shape):
                return f"entry {n!r} has shape {shape}, the model's is {tuple(self.state.model[n].shape)}"
        return None

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """One outcome per chosen client (failures included, selection order), the algorithm's
        aggregate of the survivors, committed only when finite (a round nobody survives keeps
        the model). Returns the global model and the round's training figures."""
        rnd = self._round
        if rnd is None or rnd.t != int(server_round):
            raise RuntimeError(f"aggregate_train({server_round}) without configure_train for that round")
        t = rnd.t
        ex = rnd.exchange
        by_node = {r.metadata.src_node_id: r for r in replies}
        waited = ex.seconds if ex is not None else time.perf_counter() - rnd.sent_at
        outcomes = []
        for k in rnd.selection.clients:
            node = rnd.nodes.get(k)
            reply = by_node.get(node) if node is not None else None
            arrival = (
                ex.arrival.get(node)
                if ex is not None and node is not None and reply is not None
                else (waited if reply is not None else None)
            )
            outcomes.append(self._outcome(rnd, k, reply, waited, arrival))
        survivors = [o for o in outcomes if o.ok]
        # the clients whose node trained and answered (whether or not the update was then used)
        self.trained[t] = [
            k for k in rnd.selection.clients if rnd.nodes.get(k) in by_node and not by_node[rnd.nodes[k]].has_error()
        ]
        new = self.algorithm.aggregate(t, rnd.state, survivors) if survivors else None
        state, committed = self.run.commit(t, rnd.state, new)
        rnd.failed = bool(rnd.selection.clients) and (not survivors or (new is not None and not committed))
        if rnd.failed and not survivors:
            log.warning(
                "round %d failed: no update survived (%s); the global model is unchanged",
                t,
                ", ".join(f"{o.client_id}:{o.failed}" for o in outcomes),
            )
        rnd.outcomes, rnd.aggregated = outcomes, (len(survivors) if committed else 0)
        self.state = state
        lat = rnd.selection.cost.latency_s + max((o.latency_s for o in outcomes), default=0.0)
        losses = [o.train_loss for o in survivors if not math.isnan(o.train_loss)]
        metrics = MetricRecord(
            {
                "aggregated": rnd.aggregated,
                "round-failed": int(rnd.failed),
                "round-latency-s": float(lat),
                "train-loss": float(np.mean(losses)) if losses else math.nan,
                "selected": [int(k) for k in rnd.selection.clients],
                "failed-clients": [o.client_id for o in outcomes if not o.ok],
            }
        )
        return ArrayRecord(state.model), metrics

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        """With per-client evaluation (FedPer) in an evaluated round: one evaluate message per
        node (its held-out split; the model it would use: its kept personalised entries under
        the shared ones sent). Otherwise none (the server evaluates on its test set)."""
        rnd = self._round
        t = int(server_round)
        if rnd is None or rnd.t != t:
            raise RuntimeError(f"configure_evaluate({server_round}) without configure_train for that round")
        rnd.evaluated = t % self.run.settings.eval_every == 0 or t == self.run.rounds
        if not rnd.evaluated or not self.algorithm.per_client:
            return []
        return list(self._client_eval_messages(t, self.state))

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """The round's evaluation; the selector learns from the round (the same
        :class:`fedselect.selectors.base.Feedback` as in the simulator); the round's row is
        recorded. Returns the evaluation's figures (None when the round was not evaluated)."""
        rnd = self._round
        t = int(server_round)
        if rnd is None or rnd.t != t:
            raise RuntimeError(f"aggregate_evaluate({server_round}) without configure_train for that round")
        before = self.before
        after = self._evaluate(t, self.state, replies) if rnd.evaluated else before
        columns = (
            self.selector.observe(
                t, self.run.for_selector(rnd.outcomes), Feedback(before, after, rnd.evaluated, self.state.model)
            )
            or {}
        )
        result = RoundResult(
            t, rnd.selection, tuple(rnd.outcomes), rnd.aggregated, rnd.failed, rnd.evaluated, after, dict(columns)
        )
        self.results.append(result)
        self.before = after
        if self.files is not None:
            self.files.round(result, self.state)
        self._round = None
        if not rnd.evaluated:
            return None
        return MetricRecord({"accuracy": after.accuracy, "f1-macro": after.f1_macro, "test-loss": after.loss})

    # ---------------------------------------------------------------- the experiment
    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord | None = None,
        num_rounds: int | None = None,
        timeout: float | None = None,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn=None,
    ) -> Result:
        """Run the experiment on ``grid``: connect, prepare, T rounds, finish (module docstring).

        Args:
            grid: the ServerApp's grid.
            initial_arrays: None, or the config's seeded initial model (anything else is refused:
                the nodes start from that model too).
            num_rounds: None, or the config's ``rounds``.
            timeout: overrides ``reply_timeout``.
            train_config: extra entries of every train message's config.
            evaluate_config: unused (evaluation settings come from the config).
            evaluate_fn: called as ``evaluate_fn(t, arrays)`` after every round (and before the
                first), its MetricRecord kept in ``Result.evaluate_metrics_serverapp`` beside ours.

        Returns:
            Flower's ``Result``: the final model, per-round training figures and evaluations.

        Raises:
            ValueError: ``num_rounds`` / ``initial_arrays`` disagreeing with the config.
            ConfigError / RuntimeError: nodes of another federation, or failing their query.
        """
        settings = self.run.settings
        if num_rounds is not None and int(num_rounds) != settings.rounds:
            raise ValueError(
                f"num_rounds={num_rounds}, but the experiment has rounds={settings.rounds} (its selector plans for it); "
                f"set rounds in the config"
            )
        if initial_arrays is not None:
            given = initial_arrays.to_torch_state_dict()
            init = self.algorithm.initial_state().model
            if set(given) != set(init) or any(not torch.equal(given[n], init[n]) for n in init):
                raise ValueError(
                    "initial_arrays differ from the config's seeded initial model, which every node starts from; "
                    "leave initial_arrays out"
                )
        if timeout is not None:
            self.options = replace(self.options, reply_timeout=float(timeout))
            self.run.flower = self.options
            self.ctx.options = self.options
        self.summary()
        result = Result()
        t_start = time.perf_counter()
        handler = None
        try:
            self.connect(grid)  # nodes of another federation are refused before any file is written
            if self.run_dir is not None:
                if self.overwrite:
                    for name in RUN_FILES:
                        (self.run_dir / name).unlink(missing_ok=True)
                self.run_dir.mkdir(parents=True, exist_ok=True)
                handler = _setup_logging(self.run_dir)
                self.files = _FlowerRunFiles(self.run_dir, self.resolved, self.run)
            self.prepare(grid)
            if evaluate_fn is not None:
                res = evaluate_fn(0, ArrayRecord(self.state.model))
                if res is not None:
                    result.evaluate_metrics_serverapp[0] = res
            result.evaluate_metrics_serverapp.setdefault(
                0,
                MetricRecord({"accuracy": self.before.accuracy, "f1-macro": self.before.f1_macro, "test-loss": self.before.loss}),
            )
            rounds_s = []
            for t in range(1, settings.rounds + 1):
                t0 = time.perf_counter()
                msgs = list(self.configure_train(t, ArrayRecord(self.state.model), train_config or ConfigRecord(), grid))
                self._round.exchange = self._exchange(msgs, self._train_wait()) if msgs else Exchange()
                arrays, train_metrics = self.aggregate_train(t, self._round.exchange.replies.values())
                result.arrays = arrays
                result.train_metrics_clientapp[t] = train_metrics
                emsgs = list(self.configure_evaluate(t, arrays, evaluate_config or ConfigRecord(), grid))
                ereplies = self._exchange(emsgs).replies.values()
                ev = self.aggregate_evaluate(t, ereplies)
                if ev is not None:
                    result.evaluate_metrics_serverapp[t] = ev
                if evaluate_fn is not None:
                    res = evaluate_fn(t, arrays)
                    if res is not None:
                        result.evaluate_metrics_serverapp[t] = res
                rounds_s.append(time.perf_counter() - t0)
            self.timings["rounds_s"] = rounds_s
            finished = self.algorithm.finish(
                self.state, self.files.totals() if self.files is not None else _totals(self.results), self.before
            )
            self.state = finished.state
            result.arrays = ArrayRecord(finished.state.model)
            self.timings["total_s"] = time.perf_counter() - t_start
            flower = {
                "engine": "flower",
                "latency": self.options.latency,
                "arrival": self.options.arrival_mode,
                "nodes": {str(k): int(v) for k, v in sorted(self.nodes.node_of.items())},
                "clients_without_node": self.timings["clients_without_node"],
                "connect_s": self.timings["connect_s"],
                "prepare_s": self.timings["prepare_s"],
                "mean_round_s": float(np.mean(rounds_s)) if rounds_s else 0.0,
            }
            if self.files is not None:
                self.summary_json = self.files.finish(finished, {**(self.selector.finish() or {}), "flower": flower})
            else:
                self.summary_json = {**(self.selector.finish() or {}), "flower": flower}
            log.info("fedselect on Flower: finished %d rounds in %.1f s", settings.rounds, self.timings["total_s"])
            return result
        finally:
            if self.files is not None:
                self.files.close()
            if handler is not None:
                logging.getLogger("fedselect").removeHandler(handler)
                handler.close()


def _totals(results: Sequence[RoundResult]):
    from fedselect.algorithms.base import RunTotals

    return RunTotals(sum(r.upload_bytes for r in results), sum(r.download_bytes for r in results))
