"""The algorithm protocol: WHAT happens to the selected clients' updates (FedJAX's
FederatedAlgorithm, Flower's strategy), kept apart from WHOM to train (``fedselect.selectors``).

The round loop holds the server state and hands it to the algorithm; the algorithm never
mutates it: :meth:`Algorithm.aggregate` returns a new :class:`ServerState`, or None to keep the
old one, and the loop commits only finite results::

    state = algorithm.initial_state()
    state = algorithm.prepare(state, prepared)              # e.g. CEFL's warm-up models
    for t in 1..T:
        start_k = algorithm.start_state(state, k)           # what client k trains from
        new     = algorithm.aggregate(t, state, survivors)  # or None: keep the old state
        state   = new if finite(new) else state
        metrics = algorithm.evaluate(t, state)
    final = algorithm.finish(state, totals, last)           # e.g. CEFL's transfer to members

Evaluation is an option of the algorithm (``evaluation: global | per_client``): ``global``
scores the server model on the test set (and, for decisions, on the server's validation set:
:meth:`Algorithm.validate`); ``per_client`` scores the model each client would use
(:meth:`Algorithm.eval_state`) on that client's own held-out split and reports the mean over
clients (the CEFL paper's metric), plus the spread (``accuracy_std``) and every
client's accuracy (``client_accuracy``) as extra columns.

Adding an algorithm: one file in this package with a subclass of :class:`Algorithm` decorated
by :func:`fedselect.algorithms.register_algorithm` (docs/architecture.md).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fedselect.fl.aggregate import fedavg, state_bytes
from fedselect.fl.local.objective import LocalObjective
from fedselect.fl.local.train import TrainConfig
from fedselect.fl.types import ClientOutcome, Evaluation, PhaseCost, RunSettings, ServerState, State, clone_state
from fedselect.fl.work import EvalJob
from fedselect.selectors.base import Prepared
from fedselect.world.federation import Federation

log = logging.getLogger("fedselect")


def client_evaluation(results: Sequence[dict[str, float]]) -> Evaluation:
    """Per-client evaluation from each client's figures on its held-out split (client order):
    the means over clients, the population std of the accuracies and every client's accuracy
    (the CEFL paper's metric). Shared by the simulator and the Flower strategy (whose nodes evaluate)."""
    acc = np.array([r["accuracy"] for r in results], dtype=np.float64)
    return Evaluation(
        float(acc.mean()),
        float(np.mean([r["f1_macro"] for r in results])),
        float(np.mean([r["loss"] for r in results])),
        {"accuracy_std": float(acc.std()), "client_accuracy": [float(a) for a in acc]},
    )


@dataclass(frozen=True)
class RunTotals:
    """Traffic of the rounds (bytes; preparation excluded), for :meth:`Algorithm.finish`."""

    rounds_upload_bytes: int = 0
    rounds_download_bytes: int = 0
    prepared: Prepared | None = None


@dataclass
class Finished:
    """What :meth:`Algorithm.finish` did after the last round.

    Attributes:
        state: the final server state (``model.pt`` holds its model).
        evaluation: final figures replacing the last round's in the summary, or None.
        summary: plain values for ``summary.json``.
        cost: simulated time and traffic after the last round (e.g. CEFL's transfer).
    """

    state: ServerState
    evaluation: Evaluation | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    cost: PhaseCost = field(default_factory=PhaseCost)


class AlgorithmOptions(BaseModel):
    """Options every algorithm has: ``evaluation`` (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    evaluation: Literal["global", "per_client"] = Field(
        "global", description="global model on the test set, or each client's model on its held-out split"
    )


class PerClientOptions(AlgorithmOptions):
    """Options of algorithms whose clients keep their own models: only per-client evaluation
    means something there (the server model lacks the personalised layers)."""

    evaluation: Literal["per_client"] = Field(
        "per_client", description="each client's model on its held-out split (the only choice here)"
    )


@dataclass(frozen=True)
class AlgorithmContext:
    """What an algorithm gets: the federation's description (clients' sizes, fresh models),
    the local-training settings, the run settings, and the run's ``transport``
    (:class:`fedselect.fl.work.Transport`), which carries out the work on clients' data —
    per-client evaluation, CEFL's fine-tuning — and scores models on the test set, in the
    simulator's worker pool or on Flower nodes alike."""

    fed: Federation
    train_cfg: TrainConfig
    settings: RunSettings
    transport: Any = None

    def run(self, jobs: Sequence[Any]) -> list[Any]:
        """The results of ``jobs`` (:mod:`fedselect.fl.work`), in order."""
        return self.transport.run(jobs)


class Algorithm:
    """Base class: FedAvg aggregation of whole models; subclasses state how they differ.

    Class attributes:
        name: the config name (``algorithm: {name: NAME}``).
        summary: one line for ``fedselect list`` (else the docstring's first sentence).
        Options: pydantic model of the options (unknown keys are errors).
        needs_groups: needs a selector that clusters clients and names leaders (CEFL).
        shares_model: exchanges a model with the server (False: Individual training).
        round_scores: None when each round's evaluation scores the model every client would
            use at that round; otherwise why not (CEFL: members are scored with their leader's
            model until the transfer after the last round). Then the figures read off the
            rounds (best, last-k mean, rounds / latency to target:
            :data:`fedselect.experiment.metrics.PER_ROUND_KEYS`) are blank in the run's summary and in
            the tables, whose notes give this reason; only the final figures are reported.
        takes_selection_weights: the aggregate honours the selection's aggregation weights
            (:attr:`ClientOutcome.weight`); False where the rule weighs its own way (SCAFFOLD's
            uniform server step, CEFL's leaders, Individual's none), and a selector that sets
            weights (``Selector.sets_aggregation_weights``) is refused with it.
        needs_central_data: why the algorithm cannot run where the server holds no client data
            (a fleet whose Flower nodes own their data refuses it before the run with this reason,
            :func:`fedselect.flower.fleet.central_data_problems`); "" (every built-in) when it can.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    Options: ClassVar[type[BaseModel]] = AlgorithmOptions
    needs_groups: ClassVar[bool] = False
    shares_model: ClassVar[bool] = True
    round_scores: ClassVar[str | None] = None
    takes_selection_weights: ClassVar[bool] = True
    needs_central_data: ClassVar[str] = ""

    def __init__(self, ctx: AlgorithmContext, options: BaseModel | None = None):
        self.ctx, self.fed, self.train_cfg, self.settings = ctx, ctx.fed, ctx.train_cfg, ctx.settings
        self.options = options if options is not None else self.Options()
        self.worker = self.fed.new_model()  # the model's structure (layer names, sizes)
        self.per_client = getattr(self.options, "evaluation", "global") == "per_client"
        if self.per_client:
            empty = [c.id for c in self.fed.clients if len(c.holdout_indices) == 0]
            if empty:
                raise ValueError(
                    f"algorithm {self.name!r} evaluates every client on its own held-out split, but clients {empty} have none; "
                    f"set data.holdout_fraction > 0 (now {self.fed.data.holdout_fraction})"
                )

    @classmethod
    def check(cls, options: BaseModel, settings: RunSettings) -> list[str]:
        """Problems found from the config alone (before any data is loaded). Default: none."""
        return []

    def budget_problems(self, old_rounds: int, new_rounds: int, done: int) -> list[str]:
        """Why this algorithm's state, built for ``old_rounds`` rounds with ``done`` played,
        would differ from a fresh ``new_rounds``-round run's. Default: none."""
        return []

    def columns(self) -> list[str]:
        """Per-round columns this algorithm adds to ``metrics.csv``."""
        return ["accuracy_std", "client_accuracy"] if self.per_client else []

    # ---------------------------------------------------------------- state
    def initial_state(self) -> ServerState:
        """The state before anything happened: the seeded initial model."""
        return ServerState(clone_state(self.fed.new_model().state_dict()))

    def prepare(self, state: ServerState, prepared: Prepared) -> ServerState:
        """Take what the selector's preparation produced (default: nothing)."""
        return state

    def upload_keys(self) -> list[str] | None:
        """State entries a participant uploads (None = all)."""
        return None

    def download_keys(self) -> list[str] | None:
        """State entries the server sends a participant (None = all)."""
        return None

    def payload_bytes(self) -> tuple[int, int]:
        """(upload, download) bytes of one participant per round."""
        st = self.fed.new_model().state_dict()
        return state_bytes(st, self.upload_keys()), state_bytes(st, self.download_keys())

    def start_state(self, state: ServerState, k: int) -> State:
        """The weights client ``k`` starts local training from (default: the server model)."""
        return state.model

    def local_objective(self, state: ServerState, k: int) -> LocalObjective | None:
        """How client ``k``'s local objective differs from its mean cross-entropy in a round:
        one :class:`fedselect.fl.local.objective.LocalObjective` (e.g. FedProx's
        :class:`~fedselect.algorithms.fedprox.ProximalTerm`, SCAFFOLD's
        :class:`~fedselect.algorithms.scaffold.DriftCorrection`), made from the server state (what
        a client carries between rounds lives in ``state.aux``, so it is checkpointed). The round
        puts it on the client's :class:`~fedselect.fl.local.clients.TrainJob`; trainer, worker pool,
        stacked path and Flower wire carry it without asking which algorithm it came from
        (docs/architecture.md, "Adding a local objective"). Default: None (plain local training)."""
        return None

    def aggregate(self, t: int, state: ServerState, outcomes: Sequence[ClientOutcome]) -> ServerState | None:
        """FedAvg (McMahan et al. 2017) of the surviving updates: w = sum_k n_k / sum n * w_k, or with the
        selection's aggregation weights a_k in place of n_k when it set them
        (:attr:`ClientOutcome.weight`; clustered sampling).

        Returns the new state, or None to keep ``state`` (never mutates it)."""
        keys = self.upload_keys()
        avg = fedavg([o.state for o in outcomes], [o.weight for o in outcomes], keys=keys)
        if any(o.local_steps is not None for o in outcomes):  # stragglers' partial work (straggler: partial)
            avg.update(self._fednova(state, outcomes, keys))
        return replace(state, model={**state.model, **avg})

    def _fednova(self, state: ServerState, outcomes: Sequence[ClientOutcome], keys) -> dict:
        """FedNova's normalised averaging (Wang et al. 2020, eq. 6 with the momentum form of
        a_k): ``w - tau_eff * sum_k p_k (w - w_k) / a_k`` with ``p_k = n_k / sum n``,
        ``a_k = (tau_k - rho (1 - rho^tau_k) / (1 - rho)) / (1 - rho)`` for SGD momentum rho
        (``a_k = tau_k`` without), ``tau_eff = sum_k p_k a_k``; ``tau_k`` the local steps done
        (``p_k`` from the selection's aggregation weights when it set them). Floating entries only (the others keep FedAvg's average)."""
        import math as _m

        rho = self.train_cfg.momentum if self.train_cfg.optimizer == "sgd" else 0.0
        b = self.train_cfg.batch_size
        taus = [o.local_steps if o.local_steps is not None else o.epochs * _m.ceil(o.num_samples / b) for o in outcomes]
        a = [(t - rho * (1 - rho**t) / (1 - rho)) / (1 - rho) if rho > 0 else float(t) for t in taus]
        total = float(sum(o.weight for o in outcomes))
        p = [o.weight / total for o in outcomes]
        tau_eff = sum(pk * ak for pk, ak in zip(p, a))
        out = {}
        for name in keys if keys is not None else state.model.keys():
            w = state.model[name]
            if not w.is_floating_point():
                continue
            d = sum(pk * (w.double() - o.state[name].double()) / ak for pk, ak, o in zip(p, a, outcomes))
            out[name] = (w.double() - tau_eff * d).to(w.dtype)
        return out

    # ---------------------------------------------------------------- evaluation
    def eval_state(self, state: ServerState, k: int) -> State:
        """The model client ``k`` is scored with under per-client evaluation."""
        return state.model

    def evaluate(self, t: int, state: ServerState) -> Evaluation:
        """Figures after round ``t`` (0 = before round 1): see the module docstring."""
        if not self.per_client:
            return self.ctx.run([EvalJob(None, state.model, "test")])[0].evaluation()
        return self.evaluate_clients(lambda k: self.eval_state(state, k))

    def validate(self, t: int, state: ServerState) -> Evaluation:
        """The figures decisions read after round ``t`` (docs/core.md, "Which set a decision
        reads"): the model(s) :meth:`evaluate` reports, scored on the server's validation set
        instead. ``global``: the server model; ``per_client``: every client's model
        (:meth:`eval_state`) on the validation set, the means over clients (the population's
        data, since a client's own held-out split is what is reported).

        Raises:
            RuntimeError: the validation set could not score a model (it is empty: data.validation is 0)."""
        states = [state.model] if not self.per_client else [self.eval_state(state, k) for k in range(self.fed.num_clients)]
        results = self.ctx.run([EvalJob(None, st, "validation") for st in states])
        bad = next((r for r in results if r.error is not None), None)
        if bad is not None:
            raise RuntimeError(f"round {t}: scoring on the server's validation set failed: {bad.error}")
        if len(results) == 1:
            return results[0].evaluation()
        return Evaluation(*(float(np.mean([getattr(r, k) for r in results])) for k in ("accuracy", "f1_macro", "loss")))

    def evaluate_clients(self, state_of) -> Evaluation:
        """Every client's model ``state_of(k)`` on its held-out split (one job per client);
        mean over clients, population std of the accuracies and the per-client accuracies. A
        client that could not be scored counts as NaN in ``client_accuracy`` and is left out
        of the means (logged)."""
        n = self.fed.num_clients
        results = self.ctx.run([EvalJob(k, state_of(k), "holdout") for k in range(n)])
        ok = [r for r in results if r.error is None]
        if len(ok) == n:
            return client_evaluation([r.as_dict() for r in results])
        missing = [r.client_id for r in results if r.error is not None]
        log.warning(
            "per-client evaluation: clients %s could not be scored (%s); means over the others",
            missing,
            results[missing[0]].error,
        )
        if not ok:
            return Evaluation(math.nan, math.nan, math.nan, {"accuracy_std": math.nan, "client_accuracy": [math.nan] * n})
        part = client_evaluation([r.as_dict() for r in ok])
        acc = [r.accuracy if r.error is None else math.nan for r in results]
        return Evaluation(
            part.accuracy, part.f1_macro, part.loss, {"accuracy_std": part.per_client["accuracy_std"], "client_accuracy": acc}
        )

    def finish(self, state: ServerState, totals: RunTotals, last: Evaluation) -> Finished:
        """Work after the last round; per-client evaluation reports the last figures."""
        return Finished(state, last if self.per_client else None)

    # ---------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict[str, Any]:
        """The algorithm's own state beyond the :class:`ServerState` (plain data)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
