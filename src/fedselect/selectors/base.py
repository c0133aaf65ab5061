"""The selector protocol: WHOM to train in each round (FedJAX's ClientSampler, Flower's client
manager), kept apart from WHAT happens to their updates (``fedselect.algorithms``).

A selector sees a read-only view of the round and returns a :class:`Selection`; it learns from
per-client outcomes in :meth:`Selector.observe`; it owns its generator and its ``state_dict``;
it never touches the global model. The round loop (``fedselect.fl.round``) calls::

    prepared  = selector.prepare()                          # once: warm-up, PCA, clustering ...
    for t in 1..T:
        selection = selector.select(RoundView(t, draws, ...))   # ids + any probing cost
        ...train, aggregate, evaluate...
        columns   = selector.observe(t, outcomes, feedback)  # rewards, utilities, reputations
    summary   = selector.finish()

Everything a selector may ask of the system goes through its :class:`SelectorContext`: the
fleet's profiles and per-round draws, the cost model, and a few services (train a client, score
a model on the server's decision set — its validation set, or the test set under
``selection_eval: test`` —, the shared warm-up). One implementation serves every engine
(:class:`fedselect.fl.services.FederationContext`): its services are jobs handed to the run's
transport, the simulator's worker pool or messages to Flower nodes, so the same selector object
drives either engine. A selector declares what it needs (class attributes below); the engines
read the declarations.

Adding a selector: one file in this package with a subclass of :class:`Selector` decorated by
:func:`fedselect.selectors.register_selector` (docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterator, Protocol, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from fedselect.common.seeding import np_rng
from fedselect.fl.types import (  # noqa: F401 - the values a selector speaks, re-exported
    ClientCost,
    ClientOutcome,
    Evaluation,
    Feedback,
    PhaseCost,
    RunSettings,
    Selection,
    SelectionCost,
    State,
    WarmClient,
)
from fedselect.world.system import Fleet, RoundDraws


class NoOptions(BaseModel):
    """A component without options (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class ClientGroups:
    """Clusters of clients with one leader each (CEFL CE-eq 5): ``leaders[i]`` is in
    ``clusters[i]``; together the clusters hold every client once."""

    clusters: list[list[int]]
    leaders: list[int]

    def leader_of(self) -> dict[int, int]:
        """client id -> the leader of its cluster."""
        return {m: lead for c, lead in zip(self.clusters, self.leaders) for m in c}


@dataclass
class Prepared:
    """What a selector's :meth:`Selector.prepare` did before round 1.

    Attributes:
        cost: simulated latency (s) and bytes of the preparation (charged in the round-0 row).
        summary: plain values for ``summary.json`` (``prepare`` section).
        groups: clusters and leaders, for algorithms that need them (CEFL).
        warm_states: each client's model after the warm-up, client order (CEFL's leaders
            start from theirs), or None.
    """

    cost: PhaseCost = field(default_factory=PhaseCost)
    summary: dict[str, Any] = field(default_factory=dict)
    groups: ClientGroups | None = None
    warm_states: list[State] | None = None


@dataclass(frozen=True)
class RoundView:
    """A read-only view of round ``round`` for :meth:`Selector.select`.

    Attributes:
        round: t, 1-based.
        draws: this round's CPU frequencies (MHz) and bandwidths (Mb/s), arrays ``(N,)``.
        global_state: the server model at the start of the round (only for selectors with
            ``wants_global_state``; else None). Read it, never change it.
        probe: ``probe(ids, samples=None) -> [loss, ...]``: the mean cross-entropy of the model
            each client would train from, on that client's training data (only for selectors
            with ``probes``; else None). ``samples``, when given, holds one index array per id:
            the training samples to score (e.g. a mini-batch drawn with the selector's own
            generator, Power-of-Choice's cpow-d); None scores every sample. Its cost is the
            selector's to charge.
        available: sorted ids of the clients online when the round starts (``availability``;
            docs/fleets.md), or None when every client is; a selector picks only among them.
        count: how many clients to pick: ``ceil(overselect x U)`` (None: U).
    """

    round: int
    draws: RoundDraws
    global_state: State | None = None
    probe: Callable[..., list[float]] | None = None
    available: np.ndarray | None = None
    count: int | None = None

    def pool(self, num_clients: int) -> np.ndarray:
        """The ids a selector may pick from: ``available``, or ``0..N-1`` when all are online."""
        return np.arange(num_clients) if self.available is None else np.asarray(self.available, dtype=np.int64)

    def how_many(self, settings) -> int:
        """Clients to pick: ``count`` (default U), at most the number available."""
        want = settings.clients_per_round if self.count is None else int(self.count)
        return min(want, settings.num_clients if self.available is None else len(self.available))

    def online(self, ids) -> list[int]:
        """``ids`` (in their order) that are online this round."""
        if self.available is None:
            return [int(k) for k in ids]
        on = set(np.asarray(self.available).tolist())
        return [int(k) for k in ids if int(k) in on]


class SelectorContext(Protocol):
    """What a selector may ask of the system it runs in (the simulator or a Flower federation).

    Attributes:
        settings: seed, T, N, U, E, metric ... (:class:`fedselect.fl.types.RunSettings`).
        num_samples: ``(N,)`` training samples per client.
        fleet: the clients' device/network profiles (read-only).
        upload_keys: state entries a participant uploads (None = all).
        parameter_names: the model's trainable parameters, in order.
    """

    settings: RunSettings
    num_samples: np.ndarray
    fleet: Fleet
    upload_keys: list[str] | None
    parameter_names: list[str]

    def draw(self, t: int) -> RoundDraws:
        """Round ``t``'s draws (depend only on the seed and t)."""

    def client_cost(self, k: int, epochs: float, draws: RoundDraws) -> ClientCost:
        """Client ``k``'s cost for ``epochs`` local epochs with the algorithm's payload."""

    def transmit_s(self, num_bytes: int, k: int, draws: RoundDraws) -> float:
        """Seconds for client ``k`` to send ``num_bytes`` at this round's bandwidth (FR-eq 5)."""

    def expected_latency_s(self, epochs: float | None = None) -> np.ndarray:
        """``(N,)`` latency (s) of each client at its profiles' mean frequency and bandwidth."""

    def latency_bounds(self) -> tuple[float, float]:
        """(L_min, L_max) of the latency min-max normalisation (FR-eq 10)."""

    def initial_state(self) -> State:
        """A copy of the freshly initialised global model."""

    def warmup(self, epochs: int, tag: str, clients: Sequence[int] | None = None) -> Iterator[WarmClient]:
        """Every client (or those of ``clients``, in that order) trains ``epochs`` epochs from the
        initial model (round 0), in client order; ``tag`` names the mini-batch streams."""

    def train(self, k: int, start: State, epochs: int, tag: str, t: int = 0) -> tuple[State, float]:
        """Client ``k`` trains ``epochs`` epochs from ``start``; returns (state, mean loss)."""

    def evaluate(self, state: State) -> Evaluation:
        """``state`` on the set decisions read (``RunSettings.selection_eval``: the server's
        validation set, or the test set)."""

    def evaluate_candidate(self, k: int, epochs: int) -> tuple[float, float, float]:
        """Budgeted-online candidate evaluation: (accuracy, loss, training loss) of the initial
        model trained ``epochs`` epochs on client ``k``'s data, scored on the set decisions read
        (memoised)."""

    def shared_cache(self, namespace: str) -> dict:
        """A dict shared by every run on the same federation (memoised candidate scores)."""

    def arrival_order(self, seeded: list[int]) -> Sequence[int]:
        """The order in which budgeted-online candidates arrive: the simulator returns the seeded
        random order ``seeded``; the Flower strategy may return the order in which the
        candidates' nodes connect (a lazy sequence: item i is known once i candidates arrived)."""


class Selector:
    """Base class of selectors (module docstring). A subclass states only how it differs.

    Class attributes:
        name: the config name (``selector: {name: NAME}``).
        summary: one line for ``fedselect list`` (else the docstring's first sentence).
        Options: pydantic model of the selector's options (unknown keys are errors).
        extra_columns: per-round columns this selector adds to ``metrics.csv`` (from ``observe``).
        rng_stream: name of the selector's generator stream (default ``selector/<name>``).
        wants_weights: outcomes passed to ``observe`` carry the uploaded weights.
        wants_sample_losses: outcomes carry the sum of squared per-sample losses.
        wants_global_state: ``RoundView.global_state`` is filled.
        probes: the selector probes candidates (``RoundView.probe``); its rows gain the
            columns ``probe_latency_s``, ``probe_upload_bytes``, ``probe_download_bytes``,
            ``candidates_probed``.
        provides_groups: ``prepare`` returns clusters and leaders (CEFL).
        needs_shared_model: meaningless with an algorithm that exchanges no model (Individual).
        needs_every_round_evaluation: rewards need the global metric every round (eval_every 1).
        wants_evaluation: ``observe`` reads model quality (``Feedback.before`` / ``after``, or
            ``ctx.evaluate``): the round then scores the model on the set decisions read (the
            server's validation set; the test set under ``selection_eval: test``) and hands those
            figures over, never the reported test figures.
        scores_candidates: ``prepare`` scores candidate models (``ctx.evaluate_candidate``:
            budgeted online selection) on the set decisions read.
        choice_ignores_scores: its choice does not depend on the candidate scores it computes
            (online random: they only feed its reported competitive ratio).
        candidate_stream: candidates arrive one by one (budgeted online selection): an engine
            with real nodes may let them arrive as the nodes connect instead of waiting for all.
        uses_count: picks ``RoundView.count`` clients (U, or more with ``overselect``); False
            for selectors with a fixed set (all clients, CEFL's leaders, budgeted online's
            accepted ones), which over-selection leaves alone.
        sets_aggregation_weights: its selections carry aggregation weights
            (:attr:`Selection.weights`, clustered sampling's unbiased 1/m per draw): refused
            with an algorithm that weighs its own way (``Algorithm.takes_selection_weights``)
            and with ``mode: async`` (FedBuff weighs the buffered updates by n_k and staleness).
        flower_app_needs: what the selector needs beyond what the standard messages of any
            Flower app carry (a node's ``num-examples`` and train loss, its measured round trip
            and message sizes, who answered, who is connected), one reason per need; empty when
            it can choose the nodes of any Flower app
            (:class:`fedselect.flower.selection.SelectionStrategy` refuses it otherwise, with
            these reasons; :meth:`flower_app_problems` adds the needs of particular options).
        needs_central_data: why the selector cannot run where the server holds no client data
            (a fleet whose Flower nodes own their data refuses it before the run with this reason,
            :func:`fedselect.flower.fleet.central_data_problems`); "" (every built-in) when it can.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    Options: ClassVar[type[BaseModel]] = NoOptions
    extra_columns: ClassVar[tuple[str, ...]] = ()
    rng_stream: ClassVar[str | None] = None
    wants_weights: ClassVar[bool] = False
    wants_sample_losses: ClassVar[bool] = False
    wants_global_state: ClassVar[bool] = False
    probes: ClassVar[bool] = False
    provides_groups: ClassVar[bool] = False
    needs_shared_model: ClassVar[bool] = False
    needs_every_round_evaluation: ClassVar[bool] = False
    wants_evaluation: ClassVar[bool] = False
    scores_candidates: ClassVar[bool] = False
    choice_ignores_scores: ClassVar[bool] = False
    candidate_stream: ClassVar[bool] = False
    uses_count: ClassVar[bool] = True
    sets_aggregation_weights: ClassVar[bool] = False
    flower_app_needs: ClassVar[tuple[str, ...]] = ()
    needs_central_data: ClassVar[str] = ""

    def __init__(self, ctx: SelectorContext, options: BaseModel | None = None):
        self.ctx = ctx
        self.settings: RunSettings = ctx.settings
        self.options = options if options is not None else self.Options()
        self.rng: np.random.Generator = np_rng(
            self.settings.seed, self.rng_stream or f"selector/{self.name or type(self).__qualname__}"
        )

    @classmethod
    def check(cls, options: BaseModel, settings: RunSettings) -> list[str]:
        """Problems found from the config alone (before any data is loaded): one message per
        problem, naming the setting. Default: none."""
        return []

    @classmethod
    def flower_app_problems(cls, options: BaseModel) -> list[str]:
        """Why this selector, with ``options``, cannot choose the nodes of a Flower app from
        Flower's standard messages alone (:attr:`flower_app_needs`, and what particular options
        need); [] when it can. Read by :class:`fedselect.flower.selection.SelectionStrategy`."""
        return list(cls.flower_app_needs)

    def budget_problems(self, old_rounds: int, new_rounds: int, done: int) -> list[str]:
        """Why this selector's state, built for ``old_rounds`` rounds with ``done`` played, would
        differ from a fresh ``new_rounds``-round run's (resuming with a new budget is then
        refused). Default: none (nothing depends on T)."""
        return []

    # ---------------------------------------------------------------- hooks
    def prepare(self) -> Prepared:
        """Work before round 1 (warm-up, PCA, clustering, candidate evaluation)."""
        return Prepared()

    def select(self, view: RoundView) -> Selection:
        """Whom to train in round ``view.round``."""
        raise NotImplementedError

    def fixed_clients(self, t: int) -> list[int] | None:
        """The set a fixed-set selector trains in round ``t`` of whoever is online (CEFL's
        leaders, budgeted online's accepted clients; [] when it has nobody this round), or None
        (default) when it picks among any online clients. A round that finds none of these
        online waits for one of them to come online (docs/fleets.md)."""
        return None

    def observe(self, t: int, outcomes: Sequence[ClientOutcome], feedback: Feedback) -> dict[str, Any]:
        """Learn from round ``t``: ``outcomes`` holds every selected client in selection order,
        failed ones included (``failed`` set, ``state`` None): charge a failed client its
        failure latency and give it no utility. Returns values for :attr:`extra_columns`."""
        return {}

    def finish(self) -> dict[str, Any]:
        """Plain values for ``summary.json`` after the last round."""
        return {}

    # ---------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly (plain data, tensors and arrays)."""
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]


def top_u(scores: Sequence[float] | np.ndarray, u: int, among: Sequence[int] | None = None) -> list[int]:
    """The ``u`` ids with the highest scores (ties: lowest id first); non-finite scores never
    win over finite ones (NaN and +inf rank last, like -inf).

    Args:
        scores: one score per client (indexed by id), shape ``(N,)``.
        u: how many to take (capped at the candidates available).
        among: candidate ids (default: every id).
    """
    s = np.asarray(scores, dtype=np.float64)
    ids = np.arange(len(s)) if among is None else np.asarray(list(among), dtype=np.int64)
    key = np.where(np.isfinite(s[ids]), s[ids], -np.inf)
    order = np.lexsort((ids, -key))
    return [int(ids[i]) for i in order[: max(0, min(int(u), len(ids)))]]


def reads_quality(selector: type) -> bool:
    """Whether a selector scores models on the set decisions read (it declares
    ``wants_evaluation`` or ``scores_candidates``): only then does ``selection_eval`` change its
    results, and ``selection_eval: validation`` needs a validation set."""
    return bool(getattr(selector, "wants_evaluation", False) or getattr(selector, "scores_candidates", False))


def decides_on_quality(selector: type) -> bool:
    """Whether a selector's choices depend on those scores (:func:`reads_quality`, less a
    selector whose choice ignores its candidates' scores): with ``selection_eval: test`` its
    choices then depend on the test set, which the tables' caution line says."""
    return bool(
        getattr(selector, "wants_evaluation", False)
        or (getattr(selector, "scores_candidates", False) and not getattr(selector, "choice_ignores_scores", False))
    )
