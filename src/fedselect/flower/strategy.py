"""A Flower ``Strategy`` over fedselect's round (flwr 1.42 Message API).

:class:`FedselectStrategy` runs any fedselect experiment — every method preset, every selector
with every algorithm it composes with, CEFL and Individual included, with the simulated faults
of the config's ``faults`` section, checkpoints and exact ``resume`` — on a Flower grid. It
holds no round logic of its own: Flower's four seams call the phases of
:mod:`fedselect.fl.round` and the jobs travel as the messages of :mod:`fedselect.flower.wire`::

    configure_train     round.begin (the draws, selector.select, the restart, the faults) ->
                        one message per training job
    aggregate_train     the replies -> results (FlowerTransport) -> round.settle (outcomes,
                        aggregate, commit)
    configure_evaluate  none: the evaluation's jobs (per-client evaluation) go out in close
    aggregate_evaluate  round.close (evaluation cadence, selector.observe) and the round's row

:meth:`FedselectStrategy.start` runs the whole experiment with :func:`fedselect.experiment.run.play` on a
:class:`~fedselect.flower.engine.GridSession` of its grid (the preparation, every round, the
algorithm's finish, the run directory of ``fedselect run``).

Latency (``latency``): ``simulated`` (default) charges the cost model's latency and bytes
(FR-eq 3-5 with round t's draws), exactly as the simulator, so a run gives the simulator's
``metrics.csv`` byte for byte; ``measured`` charges the measured round trips, and
``system.round_deadline_s`` is then a wall-clock deadline (a node still silent then:
``timeout``). Failures: :mod:`fedselect.flower.transport`.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Iterable

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from fedselect.config.schema import ExperimentConfig
from fedselect.experiment.resolve import Resolved, resolve
from fedselect.experiment.run import RunPlan, plan, play
from fedselect.experiment.simulation import Simulation
from fedselect.fl import round as rounds
from fedselect.flower.engine import GridSession, connect
from fedselect.flower.messaging import Exchange
from fedselect.flower.nodes import ARRIVAL_MODES, DROPOUT_CODES, LATENCY_MODES, FlowerOptions, NodeDirectory
from fedselect.flower.wire import encode_job
from fedselect.world.federation import Federation, build_federation

log = logging.getLogger("fedselect.flower")

__all__ = ["FedselectStrategy", "FlowerOptions", "NodeDirectory", "LATENCY_MODES", "ARRIVAL_MODES", "DROPOUT_CODES"]


def _num(v: Any, digits: int) -> str:
    return "-" if not isinstance(v, (int, float)) else f"{v:.{digits}f}"


def round_line(ev) -> str:
    """One round in the ServerApp's log: ``round 3/10: accuracy 0.8123, end-to-end latency
    12.3 s, 2 of 3 clients aggregated, failed: 1:dropout`` (the figures of its metrics.csv row;
    no accuracy in a round without evaluation, nor for an algorithm whose rounds do not score the
    clients' own models, e.g. CEFL)."""
    row = ev.row
    parts = [f"round {ev.round}/{ev.rounds}:"]
    acc = row.get("accuracy")
    if not getattr(ev, "round_scores", None) and isinstance(acc, (int, float)) and acc == acc:
        parts.append(f"accuracy {acc:.4f},")
    parts.append(f"end-to-end latency {_num(row.get('e2e_latency_s'), 1)} s")
    selected = list(row.get("selected") or [])
    if selected:
        parts[-1] += ","
        parts.append(f"{row.get('aggregated', len(selected))} of {len(selected)} clients aggregated")
    if row.get("failed"):
        parts[-1] += ","
        parts.append("failed: " + " ".join(row["failed"]))
    return " ".join(parts)


class FedselectStrategy(Strategy):
    """A Flower strategy running a fedselect experiment (module docstring).

    Args:
        cfg: the resolved experiment (an :class:`ExperimentConfig` is resolved here, once).
        run_dir: where the run files go (None: nothing is kept but :attr:`results`).
        latency, reply_timeout, connect_timeout, arrival, poll_s, in_flight: see :class:`FlowerOptions`.
        federation: the server's federation (default: built from ``cfg``).
        overwrite: replace the run files of a run already in ``run_dir``.
        resume: continue the run in ``run_dir`` from its last checkpoint.

    Raises:
        ConfigError: an invalid config. ValueError: bad options. FileExistsError: ``run_dir``
        holds a run and neither ``overwrite`` nor ``resume`` (checked here, once:
        :func:`fedselect.experiment.run.plan`). FileNotFoundError: ``resume`` and no such directory.

    Attributes:
        summary_json: the summary once :meth:`start` ran. run: the run's :class:`Simulation`
        (selector, algorithm, transport) once started; results: its rounds'
        :class:`~fedselect.fl.round.RoundResult` (outcomes without weights).
    """

    def __init__(
        self,
        cfg: Resolved | ExperimentConfig,
        run_dir: str | Path | None = None,
        *,
        latency: str = "simulated",
        reply_timeout: float = 600.0,
        connect_timeout: float = 300.0,
        arrival: str | None = None,
        poll_s: float | None = None,
        in_flight: int | None = None,
        federation: Federation | None = None,
        overwrite: bool = False,
        resume: bool = False,
    ):
        self.options = FlowerOptions(latency, reply_timeout, connect_timeout, arrival, poll_s, in_flight)
        self.resolved = cfg if isinstance(cfg, Resolved) else resolve(cfg, cfg.name)
        self.run_dir = None if run_dir is None else Path(run_dir)
        self.overwrite, self.resume = overwrite, resume
        self._planned: RunPlan | None = None
        if self.run_dir is not None:  # the run directory is checked once, here
            self._planned = plan(self.resolved, self.run_dir, resume=resume, overwrite=overwrite)
        self.fed = federation or build_federation(self.resolved.config)
        self.summary_json: dict[str, Any] = {}
        self.run: Simulation | None = None
        self.results: list[rounds.RoundResult] = []
        self._plan: rounds.RoundPlan | None = None
        self._settled: rounds.Settled | None = None

    # ---------------------------------------------------------------- the whole experiment
    def start(self, grid: Grid, initial_arrays: ArrayRecord | None = None, num_rounds: int | None = None, **_: Any) -> Result:
        """Run the experiment on ``grid`` into ``run_dir`` (module docstring); returns Flower's
        ``Result`` with the final model and every round's figures from ``metrics.csv``.

        Raises:
            ValueError: ``num_rounds`` or ``initial_arrays`` disagreeing with the config (every
            node starts from the config's seeded initial model).
        """
        cfg = self.resolved.config
        if num_rounds is not None and int(num_rounds) != cfg.rounds:
            raise ValueError(f"num_rounds={num_rounds}, but the experiment has rounds={cfg.rounds}; set rounds in the config")
        if initial_arrays is not None:
            raise ValueError("initial_arrays: every node starts from the config's seeded initial model; leave it out")
        if self.run_dir is None:  # results only: the run files go to a temporary directory
            import tempfile

            with tempfile.TemporaryDirectory(prefix="fedselect-flower-") as tmp:
                self.run_dir = Path(tmp) / "run"
                self._planned = plan(self.resolved, self.run_dir)
                try:
                    self.start(grid)
                finally:
                    self.run_dir, self._planned = None, None
            return Result()
        self.results = []

        def keep(sim: Simulation) -> None:
            self.run = sim

        def on_round(ev) -> None:  # the ServerApp's output (`flwr run --stream`) shows each round
            self.results.append(ev.result)
            log.info("%s", round_line(ev))

        session = GridSession(grid, self.options)
        self.summary_json = play(self._planned, session=session, federation=self.fed, on_simulation=keep, on_round=on_round)
        s = self.summary_json
        log.info(
            "done: %s rounds, final accuracy %s, end-to-end latency %s s; run directory %s",
            s.get("rounds"),
            _num(s.get("final_accuracy"), 4),
            _num(s.get("e2e_latency_s"), 1),
            self.run_dir.resolve(),
        )
        import torch

        result = Result()
        model = self.run_dir / "model.pt"
        if model.is_file():
            result.arrays = ArrayRecord(torch.load(model, weights_only=True))
        return result

    @property
    def selector(self):
        """The run's selector (once it started)."""
        return self.run.selector

    @property
    def nodes(self) -> NodeDirectory:
        """Who is who on the grid (once it started)."""
        return self.run.transport.nodes

    # ---------------------------------------------------------------- Flower's own loop
    def _connect(self, grid: Grid) -> None:
        if self.resolved.config.mode == "async":
            raise ValueError(
                "mode: async has no rounds for Flower's round loop (configure_train / aggregate_train); run it with "
                "FedselectStrategy.start(grid), the ServerApp or --engine flower"
            )
        self.run = Simulation(self.resolved, self.fed, transport=connect(grid, self.resolved, self.fed, self.options))
        _, self.state, self.before = rounds.prepare(self.run)

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        """Round ``server_round`` begins (:func:`fedselect.fl.round.begin`): one message per
        training job. The strategy keeps the server state itself (``arrays`` is not read)."""
        if self.run is None:
            self._connect(grid)
        tr = self.run.transport
        self._plan = rounds.begin(self.run, int(server_round), self.state)
        self._sent = time.perf_counter()
        nodes = {j.client_id: tr.nodes.node(j.client_id) for j in self._plan.jobs}
        return [encode_job(j, nodes[j.client_id], tr.train_cfg) for j in self._plan.jobs if nodes[j.client_id] is not None]

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The replies become results, the round settles (:func:`fedselect.fl.round.settle`)."""
        plan, tr = self._require(server_round), self.run.transport
        got = {r.metadata.src_node_id: r for r in replies}
        ex = Exchange(got, [], time.perf_counter() - self._sent, {n: time.perf_counter() - self._sent for n in got})
        results = []
        for j in plan.jobs:
            node = tr.nodes.node(j.client_id)
            results.append(tr.result(j, ex, node) if node is not None else tr.unreachable(j))
        self._settled = rounds.settle(self.run, plan, results)
        self.state = self._settled.state
        metrics = {"aggregated": self._settled.aggregated, "round-failed": int(self._settled.round_failed)}
        return ArrayRecord(self.state.model), MetricRecord(metrics)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        """None: an evaluation's jobs go out when the round closes (per-client evaluation)."""
        self._require(server_round)
        return []

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """The round closes (:func:`fedselect.fl.round.close`); returns its figures when evaluated."""
        plan = self._require(server_round)
        result = rounds.close(self.run, plan, self._settled, self.before)
        self.results.append(result)
        self.before, self._plan = result.after, None
        if not result.evaluated:
            return None
        return MetricRecord({"accuracy": result.after.accuracy, "f1-macro": result.after.f1_macro, "loss": result.after.loss})

    def summary(self) -> None:
        """Log what runs."""
        r = self.resolved
        log.info("fedselect on Flower: %s, latency %s, arrival %s", r.method, self.options.latency, self.options.arrival_mode)

    def _require(self, server_round: int) -> rounds.RoundPlan:
        if self._plan is None or self._plan.round != int(server_round):
            raise RuntimeError(f"round {server_round}: call configure_train for it first")
        return self._plan
