"""The typed values that cross the seams of the round loop.

* :class:`ClientCost` — what one client costs in one round (seconds and bytes).
* :class:`ClientOutcome` — what one selected client reports after a round (or why it failed).
* :class:`Evaluation` — the figures of one evaluation (global model on the test set, or the
  mean over clients of their own models on their held-out splits), with the same model's
  figures on the server's validation set where a decision reads them.
* :class:`PhaseCost` — simulated time and traffic of work outside the rounds (a warm-up
  before round 1, a transfer after the last round).

They know nothing of any selector or algorithm; selectors (``fedselect.selectors``) and
algorithms (``fedselect.algorithms``) both speak them, and so does the Flower integration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

#: a model state: ``model.state_dict()``, parameter / buffer name -> tensor
State = dict[str, torch.Tensor]

#: failure kinds of :attr:`ClientOutcome.failed` (their meaning: :mod:`fedselect.fl.faults`,
#: docs/reliability.md); ``cancelled`` (over-selection) is not the client's failure and is left
#: out of the ``failed`` column
FAILURE_KINDS = ("dropout", "error", "nan", "inf", "timeout", "cancelled")


@dataclass(frozen=True)
class ClientCost:
    """Simulated cost of one client in one round (FR-eq 3, 4, 5).

    Attributes:
        compute_s: local computation, seconds (FR-eq 4).
        upload_s, download_s: transmission of the upload / of the broadcast, seconds (FR-eq 5).
        latency_s: l_t^k = compute_s + upload_s (+ download_s when ``system.count_download``), s.
        upload_bytes, download_bytes: bytes sent by / to the client.
    """

    compute_s: float
    upload_s: float
    download_s: float
    latency_s: float
    upload_bytes: int
    download_bytes: int


@dataclass(frozen=True)
class ClientOutcome:
    """What one selected client reports after round ``round``.

    Attributes:
        client_id: k.
        round: t (0 for work before round 1).
        state: the client's model after local training (every entry; the algorithm's upload
            keys say which are sent), or None when the client failed or the selector did not
            ask for weights.
        num_samples: n_k, training samples (the FedAvg weight).
        train_loss: mean local cross-entropy over all mini-batches (nan when failed).
        epochs: local epochs run.
        compute_s, upload_s, download_s, latency_s, upload_bytes, download_bytes: see
            :class:`ClientCost`; for a failed client the failure's latency and the bytes that
            actually moved (docs/reliability.md).
        failed: None, or one of :data:`FAILURE_KINDS` (else ValueError).
        sample_loss_sq_sum, sample_loss_count: sum of squared per-sample losses and their
            number over every local mini-batch (only when the selector asked for sample losses,
            e.g. Oort's statistical utility; else 0.0 and 0).
        local_steps: the local optimiser steps of a straggler's partial work
            (``straggler: partial``); None = all E epochs were run.
        planned_latency_s: for a participant cut before its work was done (a ``timeout`` at
            the deadline, ``cancelled`` by over-selection, a straggler's partial work), the
            latency (s) its whole work takes in the cost model (FR-eq 3-5), i.e. what FedScale's
            simulator reports to Oort for a straggler; None for everyone else and where it is
            not known (a timeout a real transport reported, an injected hang). ``latency_s``
            stays what the round charged it (the cut).
        aggregation_weight: the weight the selection gave this client in the aggregate
            (:attr:`Selection.weights`, e.g. clustered sampling's unbiased weights), or None:
            its sample count n_k (:attr:`weight`).
    """

    client_id: int
    round: int
    state: State | None
    num_samples: int
    train_loss: float
    epochs: int
    compute_s: float
    upload_s: float
    download_s: float
    latency_s: float
    upload_bytes: int
    download_bytes: int
    failed: str | None = None
    sample_loss_sq_sum: float = 0.0
    sample_loss_count: int = 0
    local_steps: int | None = None
    planned_latency_s: float | None = None
    aggregation_weight: float | None = None

    def __post_init__(self) -> None:
        if self.failed is not None and self.failed not in FAILURE_KINDS:
            raise ValueError(f"client {self.client_id}: unknown failure kind {self.failed!r}; allowed: {list(FAILURE_KINDS)}")

    @property
    def weight(self) -> float:
        """The client's weight in the aggregate: :attr:`aggregation_weight` when the selection
        set one, else n_k (FedAvg's ``n_k / sum n`` once normalised)."""
        return float(self.num_samples) if self.aggregation_weight is None else float(self.aggregation_weight)

    @property
    def ok(self) -> bool:
        """True when the update reached the server intact."""
        return self.failed is None


@dataclass(frozen=True)
class Measured:
    """What a real transport measured for one job: the round trip from sending it to its
    reply (s), the client's handler time (s), and the bytes that moved each way."""

    round_trip_s: float
    handler_s: float
    upload_bytes: int
    download_bytes: int


@dataclass(frozen=True)
class Evaluation:
    """The figures of one evaluation.

    Attributes:
        accuracy: fraction in [0, 1] (nan on an empty set).
        f1_macro: macro-F1 in [0, 1].
        loss: mean cross-entropy.
        per_client: with per-client evaluation, ``{"accuracy_std": float, "client_accuracy":
            [float, ...]}`` (population std over clients; client order); else None.
        validation: the same model(s) scored on the server's validation set (what decisions
            read with ``selection_eval: validation``; docs/core.md, "Which set a decision
            reads"), or None where nothing reads it.
    """

    accuracy: float
    f1_macro: float
    loss: float
    per_client: dict[str, Any] | None = None
    validation: "Evaluation | None" = None

    def value(self, metric: str) -> float:
        """``accuracy`` or ``f1_macro`` (the config's ``metrics.metric``).

        Raises:
            KeyError: another name.
        """
        if metric not in ("accuracy", "f1_macro", "loss"):
            raise KeyError(f"unknown metric {metric!r}; allowed: 'accuracy', 'f1_macro', 'loss'")
        return float(getattr(self, metric))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Evaluation":
        """From ``{"accuracy", "f1_macro", "loss"[, "accuracy_std", "client_accuracy"][, "validation": {...}]}``."""
        per = None
        if "client_accuracy" in d:
            per = {"accuracy_std": d.get("accuracy_std", math.nan), "client_accuracy": list(d["client_accuracy"])}
        val = cls.from_dict(d["validation"]) if isinstance(d.get("validation"), dict) else None
        return cls(float(d["accuracy"]), float(d["f1_macro"]), float(d["loss"]), per, val)

    def as_dict(self) -> dict[str, Any]:
        """The figures as plain data (``validation`` nested when present): :meth:`from_dict` reads it back."""
        out: dict[str, Any] = {"accuracy": self.accuracy, "f1_macro": self.f1_macro, "loss": self.loss}
        if self.per_client is not None:
            out.update(self.per_client)
        if self.validation is not None:
            out["validation"] = self.validation.as_dict()
        return out


@dataclass(frozen=True)
class PhaseCost:
    """Simulated time (s) and traffic (bytes) of a phase outside the rounds.

    Attributes:
        latency_s: the phase's charged latency (s; e.g. the warm-up's straggler).
        upload_bytes, download_bytes: its traffic.
        latency_sum_s: the sum of the latencies (s) of the clients that worked in the phase, as
            charged (0 when ``latency_s`` is not counted, e.g. ``count_warmup: false``); None when
            the phase does not report it (:attr:`clients_latency_sum_s` then says 0 or nan).
    """

    latency_s: float = 0.0
    upload_bytes: int = 0
    download_bytes: int = 0
    latency_sum_s: float | None = None

    @property
    def clients_latency_sum_s(self) -> float:
        """The round-0 row's ``latency_sum_s`` (s): :attr:`latency_sum_s` when reported, else 0.0
        for a phase that charged no latency and nan for one that did without saying the sum."""
        if self.latency_sum_s is not None:
            return float(self.latency_sum_s)
        return 0.0 if self.latency_s == 0 else math.nan

    def __add__(self, other: "PhaseCost") -> "PhaseCost":
        both_unknown = self.latency_sum_s is None and other.latency_sum_s is None
        return PhaseCost(
            self.latency_s + other.latency_s,
            self.upload_bytes + other.upload_bytes,
            self.download_bytes + other.download_bytes,
            None if both_unknown else self.clients_latency_sum_s + other.clients_latency_sum_s,
        )


@dataclass(frozen=True)
class RunSettings:
    """The few experiment settings that selectors and algorithms may read (never the whole config).

    Attributes:
        seed: the experiment seed (each component derives its own generator from it).
        rounds: T. num_clients: N. clients_per_round: U.
        local_epochs: E. eval_every: evaluation period in rounds.
        metric: ``accuracy`` or ``f1_macro``; target: its target value or None.
        dataset: the data set's registered name.
        count_download: the broadcast counts in a client's latency.
        cycles_per_bit: g of FR-eq 4.
        optimizer: the local optimiser (``train.optimizer``: ``sgd`` or ``adam``).
        selection_eval: the set decisions that read model quality score on: ``validation``
            (the server's validation set) or ``test`` (the papers' protocol).
        round_deadline_s: ``system.round_deadline_s`` (s of simulated latency), or None.
    """

    seed: int
    rounds: int
    num_clients: int
    clients_per_round: int
    local_epochs: int
    eval_every: int = 1
    metric: str = "accuracy"
    target: float | None = None
    dataset: str = ""
    count_download: bool = False
    cycles_per_bit: float = 20.0
    optimizer: str = "sgd"
    selection_eval: str = "validation"
    round_deadline_s: float | None = None


@dataclass(frozen=True)
class WarmClient:
    """One client's part of the shared warm-up: its model after ``epochs`` local epochs from the
    initial model (round 0) and its mean training loss."""

    client_id: int
    state: State
    loss: float


def clone_state(state: State) -> State:
    """A detached deep copy of a state dict."""
    return {k: v.detach().clone() for k, v in state.items()}


@dataclass(frozen=True)
class SelectionCost:
    """What choosing cost before training started (e.g. Power-of-Choice's probing).

    Attributes:
        latency_s: seconds added to the round before its training (candidates in parallel).
        upload_bytes, download_bytes: bytes moved for the probing.
        candidates: clients contacted to decide.
    """

    latency_s: float = 0.0
    upload_bytes: int = 0
    download_bytes: int = 0
    candidates: int = 0


@dataclass(frozen=True)
class Selection:
    """A selector's answer for one round.

    Attributes:
        clients: distinct client ids that train this round (selection order).
        cost: the probing cost charged to the round (recorded in its row).
        restart: ask the algorithm to start again from the initial model before training
            (budgeted online selection re-runs, BO Algorithm 1).
        weights: the aggregation weight of each client of ``clients`` (same order), or None:
            the algorithm weighs by sample count (FedAvg's n_k). Set by selectors whose
            sampling needs its own weights to keep the aggregate unbiased (clustered
            sampling, Fraboni et al., ICML 2021: 1/m for each of the m draws); they reach the
            algorithm as :attr:`ClientOutcome.aggregation_weight`.

    Raises:
        ValueError: ``weights`` of another length than ``clients``, or not finite and >= 0.
    """

    clients: tuple[int, ...]
    cost: SelectionCost = SelectionCost()
    restart: bool = False
    weights: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "clients", tuple(int(k) for k in self.clients))
        if self.weights is not None:
            w = tuple(float(x) for x in self.weights)
            if len(w) != len(self.clients):
                raise ValueError(f"Selection: {len(w)} aggregation weights for {len(self.clients)} clients")
            bad = [x for x in w if not (math.isfinite(x) and x >= 0)]
            if bad:
                raise ValueError(f"Selection: aggregation weights must be finite and >= 0, got {bad}")
            object.__setattr__(self, "weights", w)


@dataclass(frozen=True)
class Feedback:
    """What the server knows at the end of round t, for :meth:`Selector.observe`.

    ``before`` and ``after`` are the figures decisions may read: the server's validation set
    (``selection_eval: validation``) or the test set (``selection_eval: test``), never the
    reported test figures otherwise. They are computed only for a selector that declares
    ``wants_evaluation = True``; reading them without the declaration raises.

    Attributes:
        before: the evaluation before the round (the last one made).
        after: the evaluation after it (equal to ``before`` when not evaluated this round).
        evaluated: whether the model was evaluated this round.
        global_state: the server model after this round's aggregation. Read-only.

    Raises:
        AttributeError: ``before`` / ``after`` read by a selector that did not declare
            ``wants_evaluation`` (names the declaration).
    """

    _before: Evaluation | None
    _after: Evaluation | None
    evaluated: bool
    global_state: State

    @property
    def before(self) -> Evaluation:
        return self._figures(self._before)

    @property
    def after(self) -> Evaluation:
        return self._figures(self._after)

    @staticmethod
    def _figures(e: Evaluation | None) -> Evaluation:
        if e is None:
            raise AttributeError(
                "Feedback.before / after: this selector did not declare wants_evaluation = True, so the model was not scored "
                "for its decisions; declare it on the selector class to receive the validation-set figures"
            )
        return e


@dataclass(frozen=True)
class ServerState:
    """The server's side of an experiment, owned by the round loop.

    Attributes:
        model: the server (global) model's state; for partial-layer algorithms only the shared
            entries are averages, the others keep the initial values.
        clients: per-client model states (personalised algorithms), client order, or None.
        aggregated: the server holds an average of the shared entries (before the first
            aggregation a personalised client starts from its own state alone).
        aux: the algorithm's own tensors, by name (e.g. a server optimiser's moments ``m``,
            ``v``; SCAFFOLD's control variates), checkpointed and committed with the model so
            that a resumed run continues exactly and a rejected aggregate leaves them unchanged.
    """

    model: State
    clients: tuple[State, ...] | None = None
    aggregated: bool = False
    aux: dict[str, State] = field(default_factory=dict)

    def changed_entries(self, old: "ServerState") -> list[tuple[str, State]]:
        """The states that differ (by identity) from ``old``'s: ``("model", s)`` and
        ``("client k", s)`` pairs (what a commit would change)."""
        out = [("model", self.model)] if self.model is not old.model else []
        if self.clients is not None:
            before = old.clients or ()
            out += [(f"client {k}", s) for k, s in enumerate(self.clients) if k >= len(before) or s is not before[k]]
        out += [(f"aux {name}", s) for name, s in self.aux.items() if old.aux.get(name) is not s]
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain data for checkpoints."""
        return {
            "model": self.model,
            "clients": None if self.clients is None else list(self.clients),
            "aggregated": self.aggregated,
            "aux": dict(self.aux),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ServerState":
        clients = d.get("clients")
        return cls(
            clone_state(d["model"]),
            None if clients is None else tuple(clone_state(s) for s in clients),
            bool(d.get("aggregated", False)),
            {name: clone_state(s) for name, s in (d.get("aux") or {}).items()},
        )
