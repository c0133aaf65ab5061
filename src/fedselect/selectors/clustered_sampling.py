"""Clustered sampling (Fraboni, Vidal, Kameni, Lorenzi, "Clustered Sampling: Low-Variance and
Improved Representativity for Clients Selection in Federated Learning", ICML 2021). Kernels in
:mod:`fedselect.kernels.clustered`.

Each round m clients are drawn, one from each of m distributions over the online clients, and
each draw weighs ``1/m`` in the aggregate (``Selection.weights``; a client drawn twice trains
once with weight 2/m). Every client's probabilities over the m distributions sum to ``m p_i``,
``p_i = n_i / sum n`` its share of the online clients' data, so its expected aggregation weight
is ``p_i``: the aggregate is unbiased like multinomial (MD) sampling, with less variance.

* ``clustering: sample_size`` — Algorithm 1: the clients, largest first, fill the m
  distributions in turn (a client spills over into the next when one is full). It needs nothing
  but the sizes.
* ``clustering: similarity`` (default) — Algorithm 2: the clients' representative gradients
  (their last local updates ``w_k - w``, zero until a client has reported;
  :mod:`fedselect.selectors._updates`) are compared with the ``similarity`` measure (``arccos``,
  ``L2`` or ``L1``; the paper's experiments use all three), clustered hierarchically with Ward's
  linkage (scipy), and the tree is cut into the largest groups whose data share is at most 1/m;
  the m largest groups get a distribution each and the other clients fill them as in
  Algorithm 1. Recomputed every round from the updates known so far (the authors' code does the
  same); at first every client's vector is zero and they form one group, so round 1 is
  Algorithm 2 over equal clients.

m is the number of clients the round asks for (U; with ``overselect``, ceil(overselect x U)).
With an availability model the distributions are built over the online clients and their data
shares (unbiased for the online population). Where the paper is silent, chosen here: a client
that fails is left out and the survivors' weights are renormalised (FedAvg's rule for
failures); clients inside a group fill the distributions in id order (the authors' code
shuffles them); an over-selected client cancelled at the round's end is left out like a failure.

The aggregation weights reach the algorithm through ``Selection.weights`` (declared by
``sets_aggregation_weights``): FedAvg, FedProx, FedAdam, FedYogi, FedAdagrad and FedPer use them
in place of n_k; SCAFFOLD (uniform server step), CEFL and Individual are refused, and so is
``mode: async`` (its buffered rule weighs by n_k and staleness).
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fedselect.fl.types import ClientOutcome
from fedselect.kernels.clustered import aggregation_weights, cluster_distributions, cut_clusters, draw, size_distributions
from fedselect.selectors import register_selector
from fedselect.selectors._updates import UpdateTracker
from fedselect.selectors.base import Feedback, RoundView, Selection, Selector


class ClusteredSamplingOptions(BaseModel):
    """Clustered sampling's options (Fraboni et al. 2021, Algorithms 1 and 2)."""

    model_config = ConfigDict(extra="forbid")

    clustering: Literal["sample_size", "similarity"] = Field(
        "similarity", description="Algorithm 1 (clients' sample sizes) or Algorithm 2 (similarity of their updates)"
    )
    similarity: Literal["arccos", "L2", "L1"] = Field(
        "arccos", description="Algorithm 2: the measure between two clients' representative gradients"
    )


@register_selector
class ClusteredSampling(Selector):
    """Clustered sampling (module docstring). Options: :class:`ClusteredSamplingOptions`.

    Extra per-round columns: ``aggregation_weights`` (the weight of each selected client, in the
    order of ``selected``; they sum to 1) and ``groups`` (Algorithm 2: the groups of the tree's
    cut; Algorithm 1: the number of clients with a non-zero probability).
    """

    name = "clustered_sampling"
    summary = "clustered sampling: one client from each of m distributions built from clusters, unbiased 1/m weights"
    Options = ClusteredSamplingOptions
    sets_aggregation_weights = True
    flower_app_needs = (
        "its own aggregation weights (1/m per draw, unbiased sampling); the wrapped Flower strategy weighs by num-examples",
    )
    wants_weights = True
    wants_global_state = True
    needs_shared_model = True
    extra_columns = ("aggregation_weights", "groups")

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self.num_samples = np.asarray(ctx.num_samples, dtype=np.int64)
        if self.num_samples.sum() <= 0:
            raise ValueError("clustered_sampling: the clients hold no training samples (p_i = n_i / sum n is undefined)")
        self.similar = self.options.clustering == "similarity"
        self.updates = UpdateTracker(ctx, self.options.similarity) if self.similar else None
        self.pending: dict[str, Any] = {}

    def distributions(self, pool: np.ndarray, m: int) -> tuple[np.ndarray, int]:
        """``(m, len(pool))`` units of the m distributions over ``pool`` (module docstring) and
        the number of groups."""
        from scipy.cluster.hierarchy import linkage  # scipy only when a run uses it
        from scipy.spatial.distance import squareform

        sizes = self.num_samples[pool]
        if not self.similar:
            return size_distributions(sizes, m), int(np.count_nonzero(sizes))
        clusters = [[0]]
        if pool.size > 1:
            tree = linkage(squareform(self.updates.matrix[np.ix_(pool, pool)], checks=False), method="ward")
            clusters = cut_clusters(tree, m * sizes, int(sizes.sum()))
        return cluster_distributions(clusters, sizes, m), len(clusters)

    def select(self, view: RoundView) -> Selection:
        s = self.settings
        pool = view.pool(s.num_clients)
        pool = pool[self.num_samples[pool] > 0]  # a client without data has p_i = 0: never drawn
        m = min(view.how_many(s), pool.size)
        if m <= 0:
            self.pending = {"aggregation_weights": [], "groups": 0}
            return Selection(())
        table, groups = self.distributions(pool, m)
        ids, weights = aggregation_weights([int(pool[i]) for i in draw(self.rng, table)], m)
        if self.similar:
            self.updates.chosen(ids, view.global_state)
        self.pending = {"aggregation_weights": [round(w, 6) for w in weights], "groups": groups}
        return Selection(tuple(ids), weights=tuple(weights))

    def observe(self, t: int, outcomes: Sequence[ClientOutcome], feedback: Feedback) -> dict[str, Any]:
        if self.similar:
            self.updates.learn(outcomes)
        return dict(self.pending)

    def state_dict(self) -> dict[str, Any]:
        st = {**super().state_dict(), "pending": dict(self.pending)}
        if self.similar:
            st["updates"] = self.updates.state_dict()
        return st

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.pending = dict(state["pending"])
        if self.similar:
            self.updates.load_state_dict(state["updates"])
