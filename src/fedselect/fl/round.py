"""THE round, in three phases that every engine drives (the papers' Algorithm 1)::

    plan    = begin(run, t, state)              # draws, selector.select, restart, faults, the jobs
    results = run.transport.run(plan.jobs)      # the simulator's pool, or messages to Flower nodes
    settled = settle(run, plan, results)        # outcomes (failures, deadline, cost), aggregate, commit
    result  = close(run, plan, settled, before) # evaluation cadence, selector.observe, the RoundResult

and the experiment around it::

    prepared = selector.prepare()                       # warm-up, PCA, clustering, candidates
    state    = algorithm.prepare(initial_state, prepared)
    for t in 1..T:
        state, result = play_round(run, t, state, before)
        recorder.round(result, state)                   # the row, the CSVs, the checkpoint
    final = algorithm.finish(state, totals, last)       # e.g. CEFL's transfer to members

Every rule of a round exists once: here the wait for a client to come online (simulated time
never stands still: docs/fleets.md), the restart (budgeted online re-runs), the failed round,
the evaluation cadence; in :mod:`fedselect.fl.round_rules` the rules applied to what came back:
the failure kinds and their latencies (docs/reliability.md), the deadline, over-selection's
cancellations, the commit of finite aggregates only. ``run`` is a :class:`fedselect.experiment.simulation.Simulation`
(selector, algorithm, fault model, context with the cost model, transport); an engine only
carries ``plan.jobs`` out and the results back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, Sequence

from fedselect.fl.cost import CostModel
from fedselect.fl.round_rules import cancel_late, commit, log_failures, outcome_of
from fedselect.fl.types import ClientOutcome, Evaluation, Feedback, Selection, ServerState
from fedselect.fl.work import TrainJob, TrainResult
from fedselect.world.system import RoundDraws

__all__ = [
    "RoundPlan",
    "Settled",
    "RoundResult",
    "Recorder",
    "begin",
    "settle",
    "close",
    "learn",
    "play_round",
    "run_rounds",
    "updates",
]


@dataclass(frozen=True)
class RoundPlan:
    """Round ``round`` once the selector has chosen: what the engines carry out.

    Attributes:
        draws: the round's CPU frequencies (MHz) and bandwidths (Mb/s).
        selection: the selector's answer.
        state: the server state the chosen clients start from (fresh after a restart).
        faults: chosen client -> the simulated fault drawn for it this round (``drop``,
            ``raise``, ``nan``, ``inf``, ``timeout``) or None.
        jobs: the training jobs to carry out (clients not dropped and not failing at once).
        clock_s: the simulated time the round starts (s): the previous row's ``e2e_latency_s``
            plus ``waited_s``.
        available: clients online when the round started (N without an availability model).
        deadline_s: the round's deadline (s of simulated latency; fixed or adaptive) or None.
        offline_s: participant -> seconds after its work began at which its online period
            ended before it could report (it fails as ``dropout`` then; docs/fleets.md).
        partial_steps: participant -> the local steps it finishes by the deadline, for the
            stragglers that upload partial work (``straggler: partial``).
        waited_s: how long the server waited, after the previous round, for a client it could
            select to come online (s; :meth:`fedselect.fl.clock.FleetClock.wait_for`).
    """

    round: int
    draws: RoundDraws
    selection: Selection
    state: ServerState
    faults: dict[int, str | None]
    jobs: tuple[TrainJob, ...]
    clock_s: float = 0.0
    available: int = 0
    deadline_s: float | None = None
    offline_s: dict[int, float] = field(default_factory=dict)
    partial_steps: dict[int, int] = field(default_factory=dict)
    waited_s: float = 0.0


@dataclass(frozen=True)
class Settled:
    """What came back, turned into outcomes, and the state kept after aggregation."""

    outcomes: tuple[ClientOutcome, ...]
    state: ServerState
    aggregated: int
    round_failed: bool
    aggregated_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class RoundResult:
    """What happened in round ``round``.

    Attributes:
        selection: the selector's answer (ids, probing cost).
        outcomes: one per selected client, selection order, failures included.
        aggregated: updates averaged into the committed state (0 when none was committed).
        round_failed: clients were selected but no aggregate was committed.
        evaluated: the model was evaluated this round; ``after`` is then its figures, else the
            last evaluation's.
        columns: the selector's extra per-round values (``Selector.extra_columns``).
        clock_s: the simulated time the round started (s). available: clients online then.
        aggregated_ids: the clients whose updates were averaged (selection order).
        waited_s: the server's wait for a client to come online before the round (s); the
            end-to-end latency counts it, ``latency_s`` does not.
    """

    round: int
    selection: Selection
    outcomes: tuple[ClientOutcome, ...]
    aggregated: int
    round_failed: bool
    evaluated: bool
    after: Evaluation
    columns: dict[str, Any]
    clock_s: float = 0.0
    available: int = 0
    aggregated_ids: tuple[int, ...] = ()
    waited_s: float = 0.0

    @property
    def latency_s(self) -> float:
        """Round latency (s): the probing, then the slowest participant."""
        return CostModel.round_latency_s(self.selection.cost.latency_s, [o.latency_s for o in self.outcomes])

    @property
    def latency_sum_s(self) -> float:
        """Sum of the participants' latencies (s; the FLASH-RL authors' ``Timesum``): every
        outcome of the round, i.e. the clients that ``latency_s`` takes its maximum over, each at
        the latency the round charges it: a delivered update its latency, a failure its failure
        latency (docs/reliability.md: dropout the deadline or 0, timeout the deadline, error its
        compute), a cancelled one (over-selection) the moment the round ended. The probing cost
        is left out (``probe_latency_s``). 0.0 when nobody was chosen. In async mode (an
        :class:`~fedselect.fl.asynchronous.AsyncResult`) the outcomes are the work that ended
        in the interval, so it is the sum of those pieces' latencies."""
        return math.fsum(o.latency_s for o in self.outcomes)

    @property
    def upload_bytes(self) -> int:
        return sum(o.upload_bytes for o in self.outcomes) + self.selection.cost.upload_bytes

    @property
    def download_bytes(self) -> int:
        return sum(o.download_bytes for o in self.outcomes) + self.selection.cost.download_bytes

    @property
    def train_loss(self) -> float:
        """Mean local loss of the surviving participants (nan without any)."""
        losses = [o.train_loss for o in self.outcomes if o.ok and not math.isnan(o.train_loss)]
        return sum(losses) / len(losses) if losses else math.nan


# ============================================================================ the phases
def begin(run, t: int, state: ServerState) -> RoundPlan:
    """The server waits, if it must, for a client it could select to come online; the selector
    chooses (after the round's draws), a restart is applied, the simulated faults are drawn, and
    the chosen clients' training jobs are planned.

    Raises:
        FleetGone: nobody the selector could choose is online and nobody ever comes back.
    """
    draws = run.ctx.draw(t)
    waited = wait_for_clients(run, t)
    clock = run.clock.clock_s
    online = run.clock.online(t, clock)
    selection = run.selector.select(run.view(t, draws, state, online))
    run.check_selection(t, selection, online)
    if selection.restart:  # budgeted online re-runs start from a fresh model (BO Algorithm 1)
        state = run.algorithm.initial_state()
    return _plan(run, t, draws, selection, state, clock, online, waited)


def wait_for_clients(run, t: int) -> float:
    """Simulated time never stands still (docs/fleets.md): before round ``t`` the server waits
    until a client it could select is online: any client, or for a selector with a fixed set
    (:meth:`~fedselect.selectors.base.Selector.fixed_clients`: CEFL's leaders, budgeted
    online's accepted clients) one of that set. Returns the wait (s; the clock has moved)."""
    wanted = run.selector.fixed_clients(t)
    if wanted is not None and not len(wanted):
        return 0.0  # the method itself has nobody in this round: nothing to wait for
    return run.clock.wait_for(t, wanted)


def _plan(
    run,
    t: int,
    draws: RoundDraws,
    selection: Selection,
    state: ServerState,
    clock_s: float = 0.0,
    online=None,
    waited_s: float = 0.0,
) -> RoundPlan:
    faults = run.faults.round_faults(t, selection.clients)
    epochs, wants = run.settings.local_epochs, run.selector.wants_sample_losses
    deadline = run.clock.deadline_s(run.faults.deadline_s)
    offline, partial = run.clock.plan_work(run, t, draws, selection, faults, deadline, clock_s)
    alg = run.algorithm
    jobs = tuple(
        TrainJob(
            k,
            alg.start_state(state, k),
            epochs,
            run.fed.seed,
            f"train/{t}/{k}",
            wants,
            max_steps=partial.get(k),
            objective=alg.local_objective(state, k),
        )
        for k in selection.clients
        if faults[k] not in ("drop", "raise") and k not in offline
    )
    available = run.settings.num_clients if online is None else int(online.sum())
    return RoundPlan(t, draws, selection, state, faults, jobs, clock_s, available, deadline, offline, partial, waited_s)


def outcomes_of(run, plan: RoundPlan, results: Sequence[TrainResult]) -> tuple[ClientOutcome, ...]:
    """One outcome per chosen client, selection order, from the jobs' results; each carries the
    aggregation weight the selection gave it (``Selection.weights``), when it gave one."""
    got = {r.client_id: r for r in results}
    out = tuple(outcome_of(run, plan, k, got.get(k)) for k in plan.selection.clients)
    weights = plan.selection.weights
    return out if weights is None else tuple(replace(o, aggregation_weight=w) for o, w in zip(out, weights))


def updates(run, t: int, clients: Sequence[int], state: ServerState) -> tuple[ClientOutcome, ...]:
    """The local updates of ``clients`` in round ``t`` from ``state`` with the round's faults
    applied, without aggregating them (tests, notebooks)."""
    plan = _plan(run, t, run.ctx.draw(t), Selection(tuple(clients)), state)
    return outcomes_of(run, plan, run.transport.run(plan.jobs) if plan.jobs else [])


def settle(run, plan: RoundPlan, results: Sequence[TrainResult]) -> Settled:
    """One outcome per chosen client (selection order) from what came back, the algorithm's
    aggregate of the survivors, committed only when finite."""
    outcomes = outcomes_of(run, plan, results)
    if run.clock.overselect > 1.0 and run.selector.uses_count:
        outcomes = cancel_late(plan.round, outcomes, run.settings.clients_per_round)
    survivors = [o for o in outcomes if o.ok]
    new = run.algorithm.aggregate(plan.round, plan.state, survivors) if survivors else None
    state, committed = commit(plan.round, plan.state, new)
    failed = bool(plan.selection.clients) and (not survivors or (new is not None and not committed))
    log_failures(plan.round, outcomes, survivors, failed)
    ids = tuple(o.client_id for o in survivors) if committed else ()
    return Settled(outcomes, state, len(survivors) if committed else 0, failed, ids)


def close(run, plan: RoundPlan, settled: Settled, before: Evaluation) -> RoundResult:
    """Evaluate on the cadence (every ``eval_every`` rounds and the last), let the selector
    learn from the round, and return its :class:`RoundResult`."""
    t, state = plan.round, settled.state
    evaluated, after, columns = learn(run, t, state, settled.outcomes, before)
    result = RoundResult(
        t,
        plan.selection,
        settled.outcomes,
        settled.aggregated,
        settled.round_failed,
        evaluated,
        after,
        dict(columns),
        plan.clock_s,
        plan.available,
        settled.aggregated_ids,
        plan.waited_s,
    )
    if result.latency_s <= 0.0 and not any(o.ok for o in settled.outcomes):  # no time passed: say why, or fail
        sel = run.selector
        run.clock.standstill(
            t, plan.clock_s, plan.available, sel.name, sel.fixed_clients(t), [o.failed for o in settled.outcomes]
        )
    run.clock.advance(result.latency_s, settled.outcomes)
    return result


def learn(run, t: int, state: ServerState, outcomes: Sequence[ClientOutcome], before: Evaluation):
    """After the aggregation of round (or server version) ``t``: evaluate on the cadence (every
    ``eval_every`` and the last), then let the selector learn from ``outcomes`` (their weights
    only when it asks for them) and from the figures its decisions may read: the validation
    set's, never the reported test figures (``selection_eval: test`` excepted; docs/core.md,
    "Which set a decision reads"). Returns (evaluated, the figures after, the selector's columns)."""
    evaluated = t % run.settings.eval_every == 0 or t == run.settings.rounds
    after = run.evaluate(t, state) if evaluated else before
    seen = outcomes if run.selector.wants_weights else [replace(o, state=None) for o in outcomes]
    feedback = Feedback(run.decision_figures(before), run.decision_figures(after), evaluated, state.model)
    columns = run.selector.observe(t, list(seen), feedback) or {}
    return evaluated, after, dict(columns)


def play_round(run, t: int, state: ServerState, before: Evaluation) -> tuple[ServerState, RoundResult]:
    """One round through the run's transport: begin, carry the jobs out, settle, close."""
    plan = begin(run, t, state)
    settled = settle(run, plan, run.transport.run(plan.jobs) if plan.jobs else [])
    return settled.state, close(run, plan, settled, before)


# ============================================================================ the experiment
class Recorder(Protocol):
    """Where a run's results go (:class:`fedselect.experiment.runfiles.RunFiles` writes them to disk)."""

    def prepared(self, prepared, before: Evaluation) -> None: ...

    def round(self, result: RoundResult, state: ServerState) -> bool:
        """Record round ``result.round``; True asks the loop to stop there (tests of interruption)."""

    def totals(self): ...


def prepare(run) -> tuple[Any, ServerState, Evaluation]:
    """Before round 1: the selector's preparation, the algorithm's, the round-0 evaluation."""
    prepared = run.selector.prepare()
    state = run.algorithm.prepare(run.algorithm.initial_state(), prepared)
    run.clock.start(float(prepared.cost.latency_s))
    return prepared, state, run.evaluate(0, state)


def run_rounds(run, recorder: Recorder, state: ServerState | None = None, before: Evaluation | None = None, start: int = 0):
    """Play rounds ``start + 1 .. T`` (from round 0: prepare first), then finish.

    Returns what the algorithm's ``finish`` did, or None when the recorder stopped the run early.
    """
    if start == 0:
        prepared, state, before = prepare(run)
        recorder.prepared(prepared, before)
    for t in range(start + 1, run.settings.rounds + 1):
        state, result = play_round(run, t, state, before)
        before = result.after
        if recorder.round(result, state):
            return None
    return run.algorithm.finish(state, recorder.totals(), before)
