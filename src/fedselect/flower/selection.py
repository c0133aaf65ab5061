"""fedselect's selectors in any Flower app: :class:`SelectionStrategy` wraps one of Flower's own
strategies (``flwr.serverapp.strategy``: FedAvg, FedProx, FedAdam, FedYogi, ...) and chooses the
nodes of each training round with a selector of :data:`fedselect.registry.SELECTORS`; the
wrapped strategy builds the messages, aggregates and evaluates as it always does.

::

    from flwr.serverapp.strategy import FedAvg
    from fedselect.flower import SelectionStrategy

    strategy = SelectionStrategy(FedAvg(fraction_train=0.4), selector="oort", run_dir="runs/oort")
    result = strategy.start(grid=grid, initial_arrays=arrays, num_rounds=10)

It asks nothing of the ClientApp beyond Flower's conventions (see :mod:`fedselect.flower.app_fleet`
for what is read and measured): a train reply's ``ArrayRecord`` and its ``MetricRecord`` with
the wrapped strategy's weight key (``num-examples``) and a train loss (``train_loss``); an
evaluate reply's ``MetricRecord`` with an evaluation loss (``eval_loss``) for the selectors that
probe. Each round:

1. the selector sees the nodes connected now (its clients are the nodes connected when round 1
   began, client k the k-th smallest node id) and picks U of them, U being what the wrapped
   strategy would sample (``max(int(N x fraction_train), min_train_nodes)``, or
   ``clients_per_round``); Power-of-Choice's probe is an evaluate message to its candidates
   (their ``eval_loss`` on the model of the round; a candidate silent after ``probe_timeout``
   seconds has no loss and is not chosen), its cost the measured wall time and bytes;
2. the wrapped strategy's ``configure_train`` builds the messages for exactly those nodes (it
   samples among them with its fraction forced to 1 for that call);
3. the replies are pulled as they come: each node's round trip is measured; a node silent at
   the timeout (``Strategy.start``'s ``timeout``) or gone is a ``dropout``, an error reply an
   ``error``; the outcomes (:class:`~fedselect.fl.types.ClientOutcome`) feed the selector's
   ``observe`` as in fedselect's own rounds, with the measured round trip as latency;
4. the wrapped strategy's ``aggregate_train`` aggregates the replies that came.

Before round 1 (``profile=True``) every node gets one evaluate message with the initial model:
its round trip is the node's expected latency until it has trained (Oort's exploration prefers
fast nodes from round 1 on), its ``num-examples`` its data size until it reports its training
set's. Oort's statistical utility ``|B_k| sqrt(mean squared per-sample loss)`` (Oort Eq. (1))
reads the mean train loss in place of the root mean square, which a Flower reply does not carry.

With ``run_dir`` the run writes ``metrics.csv`` (one row per round: :data:`fedselect.flower.app_records.COLUMNS` and the
selector's own columns), ``clients.csv`` (one row per selected node and round) and
``summary.json`` (docs/flower.md, "Our selectors in your Flower app").

Which selectors work: those whose :meth:`~fedselect.selectors.base.Selector.flower_app_problems`
is empty (random, all, oort, power_of_choice pow-d and rpow-d, afl, fastest with its expected
latency); asking for another raises ValueError before the run, with the reasons it declares.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy
from pydantic import BaseModel, ValidationError

from fedselect.fl.types import Feedback, RunSettings, SelectionCost
from fedselect.flower.app_fleet import (
    EVAL_LOSS_KEYS,
    AppFleet,
    MeasuredGrid,
    NodeGrid,
    metric,
    record_bytes,
    replies_by_client,
    train_outcome,
)
from fedselect.flower.app_records import AppRecords, RoundRecord
from fedselect.registry import SELECTORS
from fedselect.selectors.base import RoundView, Selector

log = logging.getLogger("fedselect.flower")

__all__ = ["SelectionStrategy", "selection_problems"]

#: MetricRecord keys read as accuracy / loss of an evaluation (server-side ``evaluate_fn`` first)
ACCURACY_KEYS = ("accuracy", "acc", "eval_acc", "eval-acc", "test_acc")
LOSS_KEYS = ("loss", "eval_loss", "eval-loss", "test_loss")

#: what the wrapped strategy must have to sample among the nodes the selector chose
_SAMPLING = {"train": ("fraction_train", "min_train_nodes"), "evaluate": ("fraction_evaluate", "min_evaluate_nodes")}


def selection_problems(cls: type[Selector], options: BaseModel) -> list[str]:
    """Why selector class ``cls`` with ``options`` cannot choose the nodes of a Flower app: what it
    declares (:meth:`~fedselect.selectors.base.Selector.flower_app_problems`), or, for a selector
    that declares nothing of the kind, what its other declarations imply."""
    problems = list(cls.flower_app_problems(options))
    if problems or cls.flower_app_needs:
        return problems
    implied = {
        "provides_groups": "clusters and leaders for an algorithm of its own (provides_groups)",
        "sets_aggregation_weights": "its own aggregation weights; the wrapped strategy weighs by num-examples",
        "scores_candidates": "candidate models scored on the server's validation set (scores_candidates)",
        "wants_evaluation": "the global model's figures on the server's validation set every round (wants_evaluation)",
    }
    return [why for attr, why in implied.items() if getattr(cls, attr, False)]


@contextmanager
def _sampling_all(strategy: Strategy, kind: str, n: int) -> Iterator[None]:
    """For one call: the wrapped strategy samples all ``n`` nodes it is shown."""
    frac, least = _SAMPLING[kind]
    saved = {a: getattr(strategy, a) for a in (frac, least, "min_available_nodes")}
    setattr(strategy, frac, 1.0)
    setattr(strategy, least, n)
    strategy.min_available_nodes = n
    try:
        yield
    finally:
        for a, v in saved.items():
            setattr(strategy, a, v)


class SelectionStrategy(Strategy):
    """Flower's ``strategy`` with the nodes of each round chosen by a fedselect selector (module docstring).

    Args:
        strategy: a Flower Message-API strategy that samples with ``fraction_train`` /
            ``min_train_nodes`` (every strategy of ``flwr.serverapp.strategy`` derived from FedAvg).
        selector: a selector name (``fedselect list``), ``"package.module:Class"``, or a
            :class:`~fedselect.selectors.base.Selector` subclass.
        options: the selector's options (its ``Options`` model; unknown keys are errors).
        clients_per_round: U; None = what ``strategy`` samples of the N nodes.
        seed: the selector's seed (its generator stream derives from it).
        local_epochs: E, the local epochs the ClientApp runs (scales latencies for selectors that
            ask for another number of epochs).
        run_dir: where to write metrics.csv, clients.csv and summary.json; None = nothing written.
        profile: before round 1, every node evaluates the initial model once (module docstring).
        probe_timeout: seconds to wait for probed candidates (Power-of-Choice); None = the run's timeout.
        poll_s: seconds between two pulls of replies (the round trip is measured up to this late).

    Raises:
        ValueError: an unknown selector or bad options (naming them); a selector that needs more
            than Flower's messages carry (with its reasons); a strategy that does not sample with
            ``fraction_train`` / ``min_train_nodes``.
    """

    def __init__(
        self,
        strategy: Strategy,
        selector: str | type[Selector] = "random",
        options: dict[str, Any] | None = None,
        *,
        clients_per_round: int | None = None,
        seed: int = 0,
        local_epochs: int = 1,
        run_dir: str | Path | None = None,
        profile: bool = True,
        probe_timeout: float | None = None,
        poll_s: float = 0.1,
    ):
        missing = [a for attrs in _SAMPLING.values() for a in attrs if not hasattr(strategy, a)]
        if missing:
            raise ValueError(
                f"SelectionStrategy wraps a Flower strategy that samples with fraction_train / min_train_nodes "
                f"(FedAvg and the strategies derived from it); {type(strategy).__name__} has no {missing}"
            )
        self.strategy = strategy
        self.selector_cls: type[Selector] = SELECTORS.get(selector) if isinstance(selector, str) else selector
        name = self.selector_cls.name or self.selector_cls.__qualname__
        try:
            self.options = self.selector_cls.Options(**(options or {}))
        except ValidationError as e:
            raise ValueError(f"selector {name!r}: bad options {options}: {e}") from None
        problems = selection_problems(self.selector_cls, self.options)
        if problems:
            raise ValueError(
                f"selector {name!r} cannot choose the nodes of a Flower app: it needs "
                + "; ".join(problems)
                + " (docs/flower.md, 'Our selectors in your Flower app')"
            )
        for what, v in (("clients_per_round", clients_per_round), ("local_epochs", local_epochs)):
            if v is not None and int(v) < 1:
                raise ValueError(f"{what} must be >= 1, got {v}")
        for what, v in (("probe_timeout", probe_timeout), ("poll_s", poll_s)):
            if v is not None and not float(v) > 0:
                raise ValueError(f"{what} must be > 0 seconds, got {v}")
        self.name, self.clients_per_round, self.seed, self.local_epochs = name, clients_per_round, int(seed), int(local_epochs)
        self.run_dir = None if run_dir is None else Path(run_dir)
        self.profile, self.probe_timeout, self.poll_s = profile, probe_timeout, float(poll_s)
        self.fleet: AppFleet | None = None
        self.selector: Selector | None = None
        self._grid: MeasuredGrid | None = None
        self._round: RoundRecord | None = None
        self._rounds, self._timeout = 0, 3600.0
        self._evaluate_config = ConfigRecord()
        self._probe_cost: SelectionCost | None = None
        self.records: AppRecords | None = None

    # ---------------------------------------------------------------- the run
    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Flower's ``Strategy.start`` (the same arguments and result) on a grid whose exchanges are measured."""
        if self.fleet is not None:
            raise RuntimeError("a SelectionStrategy runs once; make a new one for another run")
        self._rounds, self._timeout = int(num_rounds), float(timeout)
        self._evaluate_config = evaluate_config if evaluate_config is not None else ConfigRecord()
        self._grid = MeasuredGrid(grid, self.poll_s)

        def server_eval(t: int, arrays: ArrayRecord) -> MetricRecord | None:
            res = evaluate_fn(t, arrays)
            if res is not None and self._round is not None and self._round.round == t:
                self._figures(res, server=True)
            return res

        try:
            return super().start(
                self._grid,
                initial_arrays,
                num_rounds,
                timeout,
                train_config,
                self._evaluate_config,
                server_eval if evaluate_fn else None,
            )
        finally:
            self._flush()
            if self.records is not None:
                self.records.finish()

    def summary(self) -> None:
        """Log the wrapped strategy's summary and the selector."""
        self.strategy.summary()
        log.info("\t└──> Selection: fedselect selector %r %s", self.name, self.options.model_dump())

    # ---------------------------------------------------------------- the seams
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        """The selector chooses among the connected nodes; the wrapped strategy writes their messages."""
        grid = self._measured(grid)
        t = int(server_round)
        self._flush()
        if self.fleet is None:
            self._connect(grid, arrays)
        fleet, sel = self.fleet, self.selector
        connected = {int(n) for n in grid.get_node_ids()}
        online = np.array([k for k, node in enumerate(fleet.nodes) if node in connected], dtype=np.int64)
        new = sorted(connected - set(fleet.nodes))
        if new:
            log.info("round %d: nodes %s joined after round 1 began; they are not selected (the clients are fixed then)", t, new)
        self._probe_cost = None
        view = RoundView(
            t,
            fleet.draw(t),
            arrays.to_torch_state_dict() if sel.wants_global_state else None,
            (lambda ids, samples=None: self._probe(t, arrays, ids, samples)) if sel.probes else None,
            None if online.size == len(fleet.nodes) else online,
        )
        selection = sel.select(view)
        chosen = list(selection.clients)
        bad = sorted(set(chosen) - set(online.tolist()))
        if bad or len(set(chosen)) != len(chosen):
            raise RuntimeError(f"round {t}: selector {self.name!r} chose {chosen}: clients {bad} are not connected or repeated")
        if self._probe_cost is not None:
            selection = replace(selection, cost=self._probe_cost)
        nodes = [fleet.nodes[k] for k in chosen]
        msgs: list[Message] = []
        if nodes:
            with _sampling_all(self.strategy, "train", len(nodes)):
                msgs = list(self.strategy.configure_train(t, arrays, config, NodeGrid(grid.grid, nodes)))
        got = sorted(int(m.metadata.dst_node_id) for m in msgs)
        if got != sorted(nodes):
            raise RuntimeError(
                f"round {t}: {type(self.strategy).__name__}.configure_train wrote messages for nodes {got}, not for the "
                f"nodes chosen {sorted(nodes)}"
            )
        sent = {fleet.client_of[int(m.metadata.dst_node_id)]: record_bytes(m.content) for m in msgs}
        self._round = RoundRecord(t, selection, sent, int(online.size))
        log.info("round %d: %s chose clients %s (nodes %s) of %d connected", t, self.name, chosen, nodes, online.size)
        return msgs

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The outcomes (measured) feed the selector; the wrapped strategy aggregates the replies."""
        rnd, fleet, sel = self._require(server_round), self.fleet, self.selector
        replies = list(replies)
        ex = self._grid.last if self._grid is not None else None
        got = replies_by_client(fleet, ex) if ex is not None else {}
        waited = ex.seconds if ex is not None else math.nan
        outcomes = []
        for k in rnd.selection.clients:
            reply, trip = got.get(k, (None, waited))
            o = train_outcome(
                k,
                rnd.round,
                reply,
                trip,
                rnd.sent.get(k, 0),
                weighted_by_key=getattr(self.strategy, "weighted_by_key", "num-examples"),
                epochs=self.local_epochs,
                with_state=sel.wants_weights,
                with_sample_losses=sel.wants_sample_losses,
                known_samples=int(fleet.num_samples[k]),
            )
            if not o.ok:
                log.info("round %d: client %d (node %d): %s after %.3g s", rnd.round, k, fleet.nodes[k], o.failed, o.latency_s)
            fleet.trained(o)
            outcomes.append(o)
        arrays, metrics = self.strategy.aggregate_train(rnd.round, replies)
        state = arrays.to_torch_state_dict() if arrays is not None and (sel.wants_global_state or sel.wants_weights) else {}
        rnd.outcomes = tuple(outcomes)
        rnd.columns = dict(sel.observe(rnd.round, list(outcomes), Feedback(None, None, False, state)) or {})
        return arrays, metrics

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        """The wrapped strategy's federated evaluation."""
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """The wrapped strategy's aggregate; its accuracy / loss go to the round's row (unless a
        server-side ``evaluate_fn`` gives them)."""
        res = self.strategy.aggregate_evaluate(server_round, replies)
        if res is not None and self._round is not None and self._round.round == int(server_round):
            self._figures(res, server=False)
        return res

    # ---------------------------------------------------------------- inside
    def _measured(self, grid: Grid) -> MeasuredGrid:
        if isinstance(grid, MeasuredGrid):
            return grid
        raise RuntimeError("SelectionStrategy measures its exchanges: run it with SelectionStrategy.start(grid, ...)")

    def _connect(self, grid: MeasuredGrid, arrays: ArrayRecord) -> None:
        """Round 1 begins: the clients are the nodes connected now (after the wrapped strategy's
        ``min_available_nodes``); the profiling exchange; the selector is made."""
        least = max(1, int(self.strategy.min_available_nodes))
        until = time.monotonic() + self._timeout
        while len(nodes := sorted(int(n) for n in grid.get_node_ids())) < least:
            if time.monotonic() >= until:
                raise RuntimeError(
                    f"only {len(nodes)} nodes connected after {self._timeout:.0f} s; min_available_nodes is {least}"
                )
            time.sleep(min(1.0, self.poll_s * 10))
        n = len(nodes)
        frac, least_train = self.strategy.fraction_train, self.strategy.min_train_nodes
        u = self.clients_per_round or max(int(n * frac), int(least_train))
        settings = RunSettings(self.seed, self._rounds, n, min(int(u), n), self.local_epochs)
        self.fleet = AppFleet(settings, nodes, arrays)
        if self.profile:
            self._profile(grid, arrays)
        self.selector = self.selector_cls(self.fleet, self.options)
        self.selector.prepare()
        self.records = AppRecords(self.run_dir, self.fleet, self.selector, self.name, self.options, type(self.strategy).__name__)
        log.info("fedselect selection: %s over %d nodes, %d per round", self.name, n, settings.clients_per_round)

    def _evaluate_messages(self, t: int, arrays: ArrayRecord, nodes: list[int]) -> list[Message]:
        config = ConfigRecord(dict(self._evaluate_config))
        with _sampling_all(self.strategy, "evaluate", len(nodes)):
            return list(self.strategy.configure_evaluate(t, arrays, config, NodeGrid(self._grid.grid, nodes)))

    def _profile(self, grid: MeasuredGrid, arrays: ArrayRecord) -> None:
        """Every node evaluates the initial model once: round trip and ``num-examples``."""
        fleet = self.fleet
        ex = grid.exchange(self._evaluate_messages(0, arrays, list(fleet.nodes)), self._timeout)
        key = getattr(self.strategy, "weighted_by_key", "num-examples")
        for k, (reply, trip) in replies_by_client(fleet, ex).items():
            if not reply.has_error():
                fleet.profiled(k, trip, metric(reply.content, (key,)))
        log.info(
            "profiling: %d of %d nodes answered; round trips %s s",
            int(np.isfinite(fleet.profile_s).sum()),
            len(fleet.nodes),
            np.round(fleet.profile_s, 3).tolist(),
        )

    def _probe(self, t: int, arrays: ArrayRecord, ids, samples=None) -> list[float]:
        """``RoundView.probe``: the candidates evaluate the round's model (their ``eval_loss``);
        nan for a candidate silent after ``probe_timeout``. Its measured cost becomes the round's
        selection cost."""
        if samples is not None:
            raise RuntimeError("a probe over chosen samples cannot be asked of a Flower app (refused before the run)")
        fleet, ids = self.fleet, [int(k) for k in ids]
        msgs = self._evaluate_messages(t, arrays, [fleet.nodes[k] for k in ids])
        ex = self._grid.exchange(msgs, self.probe_timeout or self._timeout)
        got = replies_by_client(fleet, ex)
        losses, up = [], 0
        for k in ids:
            reply, trip = got.get(k, (None, ex.seconds))
            ok = reply is not None and not reply.has_error()
            losses.append(metric(reply.content, EVAL_LOSS_KEYS) if ok else math.nan)
            up += record_bytes(reply.content) if ok else 0
        answered = sum(math.isfinite(x) for x in losses)
        self._probe_cost = SelectionCost(
            float(ex.seconds), int(up), int(sum(record_bytes(m.content) for m in msgs)), int(answered)
        )
        return losses

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The rows of ``metrics.csv`` so far (also without ``run_dir``)."""
        return [] if self.records is None else self.records.rows

    def _flush(self) -> None:
        """Record the round that ended (once its evaluation figures are in)."""
        rnd, self._round = self._round, None
        if rnd is not None and rnd.columns is not None:
            self.records.round(rnd)

    def _figures(self, res: MetricRecord, server: bool) -> None:
        rnd = self._round
        if rnd.server_figures and not server:
            return
        acc, f1, loss = _first(res, ACCURACY_KEYS), _first(res, ("f1_macro", "f1-macro")), _first(res, LOSS_KEYS)
        if server or math.isfinite(acc) or math.isfinite(loss):
            rnd.accuracy, rnd.f1_macro, rnd.loss, rnd.server_figures = acc, f1, loss, server

    def _require(self, server_round: int) -> RoundRecord:
        if self._round is None or self._round.round != int(server_round) or self.selector is None:
            raise RuntimeError(f"round {server_round}: call configure_train for it first")
        return self._round


def _first(res: MetricRecord, keys) -> float:
    for key in keys:
        if key in res and not isinstance(res[key], list):
            return float(res[key])
    return math.nan
