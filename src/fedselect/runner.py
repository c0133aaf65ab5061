"""THE round loop: every selector with every algorithm, like the papers' Algorithm 1.

::

    prepared = selector.prepare()                        # warm-up, PCA, clustering, candidates
    state    = algorithm.prepare(initial_state, prepared)
    for t in 1..T:
        state, result = play_round(sim, t, state, before)
        recorder.round(result, state)                    # the row, the CSVs, the checkpoint
    final = algorithm.finish(state, totals, last)        # e.g. CEFL's transfer to members

:func:`play_round` is one round: select, train, aggregate, evaluate, observe; it returns a typed
:class:`RoundResult` and writes nothing. Writing rows, CSVs, checkpoints and the summary lives
in :mod:`fedselect.runfiles`; building the components from a config in
:mod:`fedselect.experiment`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Protocol

from fedselect.algorithms.base import Finished, RunTotals, ServerState
from fedselect.fl.faults import survivor_weights
from fedselect.fl.types import ClientOutcome, Evaluation
from fedselect.selectors.base import Feedback, Prepared, Selection
from fedselect.simulation import Simulation
from fedselect.system import round_latency

log = logging.getLogger("fedselect")


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
    """

    round: int
    selection: Selection
    outcomes: tuple[ClientOutcome, ...]
    aggregated: int
    round_failed: bool
    evaluated: bool
    after: Evaluation
    columns: dict[str, Any]

    @property
    def latency_s(self) -> float:
        """Round latency (s): the probing, then the slowest participant (SPEC 0.3)."""
        return self.selection.cost.latency_s + round_latency(o.latency_s for o in self.outcomes)

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


def play_round(sim: Simulation, t: int, state: ServerState, before: Evaluation) -> tuple[ServerState, RoundResult]:
    """One round: the selector chooses, the chosen train, the algorithm aggregates the survivors
    (committed only when finite), the model is evaluated, the selector learns."""
    draws = sim.fed.fleet.draw(t)
    selection = sim.selector.select(sim.view(t, draws, state))
    sim.check_selection(t, selection)
    if selection.restart:  # budgeted online re-runs start from a fresh model (BO Algorithm 1)
        state = sim.algorithm.initial_state()
    outcomes = sim.train(t, selection.clients, state, draws)
    survivors = [o for o in outcomes if o.ok]
    new = sim.algorithm.aggregate(t, state, survivors) if survivors else None
    state, committed = sim.commit(t, state, new)
    failed = bool(selection.clients) and (not survivors or (new is not None and not committed))
    _log_failures(t, outcomes, survivors, failed)
    evaluated = t % sim.settings.eval_every == 0 or t == sim.rounds
    after = sim.algorithm.evaluate(t, state) if evaluated else before
    columns = sim.selector.observe(t, sim.for_selector(outcomes), Feedback(before, after, evaluated, state.model)) or {}
    aggregated = len(survivors) if committed else 0
    return state, RoundResult(t, selection, tuple(outcomes), aggregated, failed, evaluated, after, dict(columns))


class Recorder(Protocol):
    """Where a run's results go (:class:`fedselect.runfiles.RunFiles` writes them to disk)."""

    def prepared(self, prepared: Prepared, before: Evaluation) -> None: ...

    def round(self, result: RoundResult, state: ServerState) -> bool:
        """Record round ``result.round``; True asks the loop to stop there (tests of interruption)."""

    def totals(self) -> RunTotals: ...


def run_rounds(
    sim: Simulation, recorder: Recorder, state: ServerState | None = None, before: Evaluation | None = None, start: int = 0
) -> Finished | None:
    """Play rounds ``start + 1 .. T`` (from round 0: prepare first), then finish.

    Returns what the algorithm's ``finish`` did, or None when the recorder stopped the run early.
    """
    if start == 0:
        prepared = sim.selector.prepare()
        state = sim.algorithm.prepare(sim.algorithm.initial_state(), prepared)
        before = sim.algorithm.evaluate(0, state)
        recorder.prepared(prepared, before)
    for t in range(start + 1, sim.rounds + 1):
        state, result = play_round(sim, t, state, before)
        before = result.after
        if recorder.round(result, state):
            return None
    return sim.algorithm.finish(state, recorder.totals(), before)


def _log_failures(t: int, outcomes, survivors, failed: bool) -> None:
    bad = [o for o in outcomes if not o.ok]
    if not bad:
        return
    listed = ", ".join(f"{o.client_id}:{o.failed}" for o in bad)
    if failed and not survivors:
        log.warning("round %d failed: no update survived (%s); the global model is unchanged", t, listed)
    elif survivors:
        weights = survivor_weights({o.client_id: o.num_samples for o in survivors})
        log.info(
            "round %d: %d of %d clients failed (%s); aggregated the survivors with weights n_k/sum n %s",
            t,
            len(bad),
            len(outcomes),
            listed,
            {k: round(w, 6) for k, w in weights.items()},
        )
