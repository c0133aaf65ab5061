"""Budgeted online client selection: candidate arrival and evaluation shared by the ``secretary``,
``online_random`` and ``offline_best`` selectors (BO-eq 6, 7).

Mohammed et al., "Budgeted Online Selection of Candidate IoT Clients to Participate in Federated
Learning", Algorithm 1:

1. Candidates arrive one at a time in a seeded random order (shared by every method compared
   on the same federation and seed). Each arriving candidate is *evaluated*: the freshly
   initialised global model is trained for E epochs on the candidate's data (one round, no
   averaging) and its accuracy is measured on the server's validation set (the paper measures
   it on the test set, BO Section IV-A: ``selection_eval: test``)
   (:meth:`SelectorContext.evaluate_candidate`, memoised per federation).
2. The rule decides irrevocably: here the secretary rule (reject the first alpha* = BO-eq 7,
   threshold = their best, accept above it, tail-fill; :func:`fedselect.kernels.secretary.secretary_rule`);
   the baselines ``online_random`` and ``offline_best`` subclass :class:`OnlineSelection` and
   only change :meth:`OnlineSelection.choose`.
3. The normal round loop then trains the R accepted clients with the algorithm (FedAvg in the
   paper; ``select`` returns them); ``R = clients_per_round`` and ``K = rounds`` (or ``rerun_every``).

Options:

* ``r1``, ``r2``: the record window of BO-eq 6/7 (default 1, 2); ignored by the baselines.
* ``eval_epochs``: E for the candidate evaluation (default ``train.local_epochs``).
* ``rerun_every`` (delta, in rounds; 0 = one selection before round 1): the whole heuristic is
  repeated every delta rounds over a *stream*: client ``k`` is available during
  ``[arrive_k, leave_k)`` (time in rounds; round ``t`` happens at time ``t - 1``). A fraction
  ``initial_available`` of the clients is there at time 0, the others arrive uniformly over
  ``(0, rounds)``; each stays an exponential time with mean ``mean_stay`` rounds (``None`` = it
  never leaves). Every re-run considers the clients available at its start, in a fresh seeded
  random order, with ``R = min(clients_per_round, available)``, and the accepted clients train
  while they remain available. As in Algorithm 1 each run starts from a freshly initialised
  global model (the selection asks the algorithm to restart) unless ``keep_global: true``
  (then training continues from the current one).
  A candidate's evaluation depends only on its data and the fresh initial model, so it is
  computed once and reused across re-runs.
* ``arrival_rate`` (candidates per second): optional arrival times inside one run
  (exponential gaps). The summary then reports ``selection_time_s``, when the last contacted
  candidate arrived plus its evaluation latency (offline best must wait for everyone).

Reported (summary fields from :meth:`OnlineSelection.finish`; the round-0 row carries the
evaluation traffic): ``candidates_evaluated`` (candidates the server had to contact: up to the
R-th acceptance for the online rules, all N for offline best), ``competitive_ratio`` (sum of the
accepted candidates' accuracies / offline best's; the mean over runs with re-runs),
``accepted_clients``, ``accepted_scores``, ``alpha``, ``threshold``, ``tail_filled`` and
``selection_runs`` (the same per run). For the ratio every available candidate's accuracy is
computed by the simulation, whatever the selector's own cost; those evaluations are memoised per
federation and shared by the three selectors when a comparison reuses one federation.

Evaluation traffic (download + upload of the whole model per contacted candidate) and latency
(the contacted candidates one after another, FLASH-RL's latency model with the round-0 draws, or the run's start
draws) are charged before round 1, for every run.
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fedselect.common.seeding import np_rng
from fedselect.fl.types import PhaseCost
from fedselect.kernels.secretary import StoppingDecision, competitive_ratio
from fedselect.selectors.base import Prepared, RoundView, Selection, Selector


class OnlineOptions(BaseModel):
    """Options shared by the three budgeted-online selectors (see the module docstring).
    ``r1``/``r2`` only matter to ``secretary``; the baselines accept and ignore them so that
    one config can be compared across the three."""

    model_config = ConfigDict(extra="forbid")
    r1: int = Field(1, ge=1, description="lower end of the record window (BO-eq 6, 7)")
    r2: int = Field(2, ge=1, description="upper end of the record window (BO-eq 6, 7)")
    eval_epochs: int | None = Field(None, ge=1, description="E for candidate evaluation (default train.local_epochs)")
    rerun_every: int = Field(0, ge=0, description="delta in rounds between re-runs over the stream; 0 = one run")
    keep_global: bool = Field(False, description="re-runs continue the current global model instead of a fresh one")
    initial_available: float = Field(1.0, gt=0, le=1, description="share of clients available at time 0")
    mean_stay: float | None = Field(None, gt=0, description="mean availability in rounds (exponential); None = forever")
    arrival_rate: float | None = Field(None, gt=0, description="candidates per second inside a run (arrival times)")

    @model_validator(mode="after")
    def _order(self) -> "OnlineOptions":
        if self.r1 > self.r2:
            raise ValueError(f"need r1 <= r2, got r1={self.r1}, r2={self.r2}")
        return self


class _LazyScores(Sequence):
    """Scores of ``ids`` in arrival order, evaluated on first access."""

    def __init__(self, selector: "OnlineSelection", ids: Sequence[int]):
        # kept as given: over Flower the arrival order is itself lazy (the i-th id is known once
        # the i-th candidate has connected), so nothing is read before the rule asks for it
        self.selector, self.ids = selector, ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i):  # type: ignore[override]
        return self.selector.candidate_accuracy(self.ids[i])


class OnlineSelection(Selector):
    """Candidate arrival, evaluation and the per-run bookkeeping shared by ``secretary``,
    ``online_random`` and ``offline_best``; subclasses implement :meth:`choose` only."""

    uses_count = False  # the accepted clients train every round (over-selection leaves them alone)
    Options: ClassVar[type[BaseModel]] = OnlineOptions
    extra_columns: ClassVar[tuple[str, ...]] = ("selection_run", "competitive_ratio")
    candidate_stream = True
    scores_candidates = True
    flower_app_needs = ("the score of each candidate's model trained from the initial model, on the server's validation set",)

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self.runs: list[dict[str, Any]] = []
        n = self.settings.num_clients
        self.arrive = np.zeros(n)
        self.leave = np.full(n, np.inf)
        self._scores: dict[int, tuple[float, float, float]] = {}

    def budget_problems(self, old_rounds: int, new_rounds: int, done: int) -> list[str]:
        """Re-runs start every ``rerun_every`` rounds up to T, and the stream's arrival times are
        spread over T: both are fixed before round 1."""
        o = self.options
        if o.rerun_every > 0 or o.initial_available < 1 or o.mean_stay is not None:
            return [
                f"the selection runs and the clients' availability over time were drawn before round 1 for T = {old_rounds} "
                f"(rerun_every / initial_available / mean_stay)"
            ]
        return []

    # ------------------------------------------------------------------ the rule
    def choose(self, scores: Sequence[float], budget: int) -> StoppingDecision:
        """Accepted positions among ``scores`` (arrival order, read lazily), ``budget`` of them."""
        raise NotImplementedError

    # ------------------------------------------------------------------ evaluation
    @property
    def eval_epochs(self) -> int:
        e = self.options.eval_epochs
        return self.settings.local_epochs if e is None else int(e)

    def candidate_accuracy(self, k: int) -> float:
        """Accuracy of candidate ``k``: the fresh global model trained E epochs on ``k``'s data,
        scored on the set decisions read (the server's validation set; the test set under
        ``selection_eval: test``), memoised per federation."""
        score = self.ctx.evaluate_candidate(k, self.eval_epochs)
        self._scores[k] = score
        return score[0]

    # ------------------------------------------------------------------ hooks
    def _availability(self) -> None:
        o, n, T = self.options, self.settings.num_clients, self.settings.rounds
        rng = np_rng(self.settings.seed, "availability")
        late = rng.random(n) >= o.initial_available
        self.arrive = np.where(late, rng.uniform(0, T, size=n), 0.0)
        stay = rng.exponential(o.mean_stay, size=n) if o.mean_stay else np.full(n, np.inf)
        self.leave = self.arrive + stay

    def prepare(self) -> Prepared:
        o, T = self.options, self.settings.rounds
        delta = o.rerun_every or T
        starts = list(range(1, T + 1, delta))
        stream = o.rerun_every > 0 or o.initial_available < 1 or o.mean_stay is not None
        if stream:
            self._availability()
        order_rng = np_rng(self.settings.seed, "arrivals")
        up = down = 0
        latency = 0.0
        self.runs = []
        for p, start in enumerate(starts):
            now = start - 1
            pool = [k for k in range(self.settings.num_clients) if self.arrive[k] <= now < self.leave[k]]
            # the seeded random order; an engine with real clients may give the order in which they
            # connect instead (SelectorContext.arrival_order; the simulator keeps the seeded one)
            order = self.ctx.arrival_order([pool[i] for i in order_rng.permutation(len(pool))])
            gaps = order_rng.exponential(1.0 / o.arrival_rate, size=len(order)) if o.arrival_rate else None
            run: dict[str, Any] = {"run": p, "start_round": start, "available": len(order), "arrival_order": order}
            if not order:
                run.update(accepted_clients=[], candidates_evaluated=0, competitive_ratio=None)
                self.runs.append(run)
                continue
            budget = min(self.settings.clients_per_round, len(order))
            scores = _LazyScores(self, order)
            sel = self.choose(scores, budget)
            contacted = order[: sel.evaluated]
            all_scores = [self.candidate_accuracy(k) for k in order]  # for the competitive ratio
            order = list(order)
            run["arrival_order"] = order
            draws = self.ctx.draw(now)
            for k in contacted:
                c = self.ctx.client_cost(k, self.eval_epochs, draws)
                up, down, latency = up + c.upload_bytes, down + c.download_bytes, latency + c.latency_s
            accepted = [order[i] for i in sel.accepted]
            run.update(
                accepted_clients=accepted,  # arrival order, aligned with accepted_scores
                accepted_scores=[all_scores[i] for i in sel.accepted],
                candidates_evaluated=int(sel.evaluated),
                competitive_ratio=competitive_ratio(all_scores, sel.accepted, budget),
                alpha=sel.alpha,
                threshold=sel.threshold,
                budget=budget,
                tail_filled=[order[i] for i in sel.tail_filled],
                mean_candidate_accuracy=float(np.mean(all_scores)),
            )
            if gaps is not None:
                t_arr = np.cumsum(gaps)
                last = sel.evaluated - 1
                lat = self.ctx.client_cost(order[last], self.eval_epochs, draws).latency_s
                run["selection_time_s"] = float(t_arr[last] + lat)
            self.runs.append(run)
        evaluated = int(sum(r["candidates_evaluated"] for r in self.runs))
        return Prepared(
            PhaseCost(latency, up, down, latency),  # the candidates are evaluated one after another: the sum
            {"upload_bytes": up, "download_bytes": down, "latency_s": latency, "candidates_evaluated": evaluated},
        )

    def _run_at(self, t: int) -> dict[str, Any] | None:
        current = None
        for r in self.runs:
            if r["start_round"] <= t:
                current = r
        return current

    def select(self, view: RoundView) -> Selection:
        t = view.round
        run = self._run_at(t)
        if run is None:
            return Selection(())
        restart = t == run["start_round"] and run["run"] > 0 and not self.options.keep_global  # Algorithm 1 re-initialises
        return Selection(view.online(self.fixed_clients(t)), restart=restart)  # an accepted client offline this round sits it out

    def fixed_clients(self, t: int) -> list[int] | None:
        """The current run's accepted clients still in the stream at round ``t`` ([] before the
        first run holds anyone, or once they all left)."""
        run = self._run_at(t)
        return [] if run is None else [k for k in sorted(run["accepted_clients"]) if self.leave[k] > t - 1]

    def observe(self, t, outcomes, feedback):
        run = self._run_at(t)
        return {"selection_run": run["run"], "competitive_ratio": run["competitive_ratio"]} if run else {}

    def _totals(self) -> dict[str, Any]:
        done = [r for r in self.runs if r.get("competitive_ratio") is not None]
        first = done[0] if done else {}
        out: dict[str, Any] = {
            "candidates_evaluated": int(sum(r["candidates_evaluated"] for r in self.runs)),
            "competitive_ratio": float(np.mean([r["competitive_ratio"] for r in done])) if done else None,
            "accepted_clients": first.get("accepted_clients", []),
            "accepted_scores": first.get("accepted_scores", []),
            "alpha": first.get("alpha"),
            "threshold": first.get("threshold"),
            "tail_filled": first.get("tail_filled", []),
            "selection_runs_count": len(self.runs),
        }
        if any("selection_time_s" in r for r in self.runs):
            out["selection_time_s"] = float(sum(r.get("selection_time_s", 0.0) for r in self.runs))
        return out

    def finish(self) -> dict[str, Any]:
        out = self._totals()
        out["selection_runs"] = [{k: v for k, v in r.items() if k != "arrival_order"} for r in self.runs]
        out["candidate_accuracy"] = {str(k): v[0] for k, v in sorted(self._scores.items())}
        return out

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self):
        s = super().state_dict()
        s.update(
            runs=self.runs,
            arrive=self.arrive.tolist(),
            leave=self.leave.tolist(),
            scores={int(k): list(v) for k, v in self._scores.items()},
        )
        return s

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.runs = state["runs"]
        self.arrive, self.leave = np.asarray(state["arrive"], float), np.asarray(state["leave"], float)
        self._scores = {int(k): tuple(v) for k, v in state["scores"].items()}
