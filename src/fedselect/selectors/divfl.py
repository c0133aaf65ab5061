"""DivFL (Balakrishnan, Li, Zhou, Himayat, Smith, Bilmes, "Diverse Client Selection for
Federated Learning via Submodular Maximization", ICLR 2022): each round the U clients whose
gradients best represent every client's, by greedy facility location
(:mod:`fedselect.kernels.facility`).

Round t:

1. the dissimilarity of two clients is ``d(j, i) = ||g_j - g_i||_2``, ``g_k`` client k's
   representative gradient (:mod:`fedselect.selectors._updates`): its last local update
   ``w_k - w`` (the uploaded parameters after training minus those it started from);
2. S = the greedy minimiser of ``L(S) = sum_{j in all N} min_{i in S} d(j, i)`` over the online
   clients, |S| = U (ties: lowest id); with ``greedy: stochastic`` each step looks only at
   ``ceil((N / U) ln(1 / epsilon))`` random candidates (the stochastic greedy DivFL cites,
   Mirzasoleiman et al. 2015), drawn with the selector's generator;
3. after the round the participants that reported replace their ``g_k`` (the others keep
   theirs): the paper's communication-free variant, which refreshes only the selected clients'
   gradients (the "ideal" DivFL, every client's gradient every round, would cost N trainings a
   round and is not offered).

Before round 1 (``prepare``) every client trains ``warmup_epochs`` epochs from the initial model
and its update becomes its first ``g_k`` (the authors' code collects every client's gradient at
the first round); its cost (the slowest client's download, training and upload; every
client's traffic) is charged in the round-0 row (``count_warmup: false`` charges no latency).
The aggregate is FedAvg's (n_k weights), as in the authors' experiments.

Where the paper is silent, chosen here: the representative is the local update rather than a
separate full-batch gradient (the same direction for one SGD step; no extra computation); the
clients to represent are all N, online or not, the candidates only the online ones.
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fedselect.fl.types import ClientOutcome
from fedselect.kernels.facility import facility_cost, greedy, stochastic_subset_size
from fedselect.selectors import register_selector
from fedselect.selectors._updates import UpdateTracker, warmup_cost
from fedselect.selectors.base import Feedback, Prepared, RoundView, Selection, Selector


class DivFLOptions(BaseModel):
    """DivFL's options (Balakrishnan et al. 2022)."""

    model_config = ConfigDict(extra="forbid")

    greedy: Literal["exact", "stochastic"] = Field(
        "exact", description="exact greedy (the authors' experiments) or the stochastic greedy of Mirzasoleiman et al."
    )
    epsilon: float = Field(
        0.1, gt=0, lt=1, description="stochastic greedy: each step scores ceil((N / U) ln(1 / epsilon)) random candidates"
    )
    warmup_epochs: int = Field(1, ge=1, description="local epochs of every client's warm-up (its first update)")
    count_warmup: bool = Field(True, description="count the warm-up's straggler latency in the end-to-end latency")


@register_selector
class DivFL(Selector):
    """DivFL (module docstring). Options: :class:`DivFLOptions`.

    Extra per-round column: ``facility_cost`` (``L(S)`` of the chosen set, the sum over all
    clients of the distance to the nearest chosen one; in the units of the updates).
    """

    name = "divfl"
    summary = "DivFL: the U clients whose updates best represent all (greedy facility location)"
    Options = DivFLOptions
    wants_weights = True
    wants_global_state = True
    needs_shared_model = True
    flower_app_needs = (
        "a warm-up in which every client trains a fixed number of local epochs from the initial model (the first "
        "gradient of every client)",
    )
    extra_columns = ("facility_cost",)

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self.updates = UpdateTracker(ctx, "L2")
        self.pending: dict[str, Any] = {}

    def prepare(self) -> Prepared:
        """The warm-up of every client (module docstring): the first representatives."""
        init = self.updates.flat(self.ctx.initial_state())
        vecs = np.zeros_like(self.updates.reps.vectors)
        for w in self.ctx.warmup(self.options.warmup_epochs, "divfl-warmup"):
            vecs[w.client_id] = self.updates.flat(w.state) - init
        self.updates.set_all(vecs)
        cost, lat = warmup_cost(self.ctx, self.options.warmup_epochs, self.options.count_warmup)
        return Prepared(cost, {"warmup_epochs": self.options.warmup_epochs, "warmup_latency_s": lat})

    def select(self, view: RoundView) -> Selection:
        s = self.settings
        u, pool = view.how_many(s), view.pool(s.num_clients)
        stochastic = self.options.greedy == "stochastic"
        size = stochastic_subset_size(s.num_clients, max(1, u), self.options.epsilon) if stochastic else None
        dist = self.updates.matrix
        chosen = greedy(dist, u, pool, self.rng if stochastic else None, size)
        self.updates.chosen(chosen, view.global_state)
        self.pending = {"facility_cost": facility_cost(dist, chosen)}
        return Selection(tuple(chosen))

    def observe(self, t: int, outcomes: Sequence[ClientOutcome], feedback: Feedback) -> dict[str, Any]:
        self.updates.learn(outcomes)
        return dict(self.pending)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "updates": self.updates.state_dict(), "pending": dict(self.pending)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.updates.load_state_dict(state["updates"])
        self.pending = dict(state["pending"])
