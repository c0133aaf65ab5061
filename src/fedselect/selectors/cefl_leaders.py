"""CEFL's selector: cluster the clients by the similarity of their warm-up models and train one
leader per cluster (Chu, Jaafar, Yanikomeroglu; CE-eq 3, 4, 5).

``prepare``: warm-up — every client trains ``warmup_epochs`` (2) local epochs from the common
initialisation and uploads its whole model (communication part 1: N whole models, no
download charged, as in the paper's accounting); similarity factors d_ij (CE-eq 3) and edge
weights S_ij (CE-eq 4) (:mod:`fedselect.kernels.similarity`); Louvain into exactly K
communities (:func:`~fedselect.kernels.similarity.louvain_k`, with this selector's generator);
one leader per community (CE-eq 5). The clusters, the leaders and the warm-up models are handed
to the algorithm (CEFL's ``cefl`` algorithm needs them).

``select``: the K leaders, every round (``clients_per_round`` is ignored).
"""

from __future__ import annotations

import logging
import math
import warnings
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fedselect.fl.aggregate import state_bytes
from fedselect.fl.types import PhaseCost
from fedselect.kernels.similarity import ClusterCountWarning, edge_weights, louvain_k, select_leaders, similarity_factors
from fedselect.selectors import register_selector
from fedselect.selectors.base import ClientGroups, Prepared, RoundView, Selection, Selector

log = logging.getLogger("fedselect.selectors.cefl_leaders")


class CeflLeadersOptions(BaseModel):
    """Options of the clustering (K = 2 as in the paper; the warm-up length is fedselect's: the
    paper trains "for a small number of episodes")."""

    model_config = ConfigDict(extra="forbid")
    clusters: int = Field(2, ge=1, description="K, the number of clusters (= leaders); must be <= N")
    warmup_epochs: int = Field(2, ge=1, description="local epochs of every client's warm-up")
    count_warmup: bool = Field(True, description="count the warm-up's straggler latency in the end-to-end latency")


@register_selector
class CeflLeaders(Selector):
    """The K cluster leaders (module docstring). Generator stream ``selector/cefl``.

    Raises:
        ValueError: ``clusters`` > N (found from the config alone).
    """

    name = "cefl_leaders"
    uses_count = False
    summary = "CEFL: cluster clients by warm-up model similarity (Louvain), pick one leader per cluster"
    Options = CeflLeadersOptions
    rng_stream = "selector/cefl"
    provides_groups = True
    flower_app_needs = (
        "a warm-up in which every client trains a fixed number of local epochs from the initial model (the clustering "
        "of CEFL reads those models)",
        "an algorithm that trains the clusters' members from their leaders (CEFL), not the wrapped Flower strategy's",
    )

    @classmethod
    def check(cls, options, settings):
        if options.clusters > settings.num_clients:
            return [f"clusters (K = {options.clusters}) exceeds the number of clients N = {settings.num_clients}"]
        return []

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self.groups: ClientGroups | None = None

    def prepare(self) -> Prepared:
        """Warm-up (part 1), similarity (CE-eq 3, 4), Louvain into K, leaders (CE-eq 5)."""
        ctx, o = self.ctx, self.options
        init = ctx.initial_state()
        full_bytes = state_bytes(init)
        draws = ctx.draw(0)
        states, lat = [], []
        for w in ctx.warmup(o.warmup_epochs, "cefl-warmup"):
            states.append(w.state)
            lat.append(
                ctx.client_cost(w.client_id, o.warmup_epochs, draws).compute_s + ctx.transmit_s(full_bytes, w.client_id, draws)
            )
        d = similarity_factors(states, ctx.parameter_names)
        s = edge_weights(d)
        with warnings.catch_warnings(record=True) as caught:  # the fallback is reported once, in the run's log
            warnings.simplefilter("always", ClusterCountWarning)
            clusters, info = louvain_k(s, o.clusters, self.rng)
        for w in caught:
            if issubclass(w.category, ClusterCountWarning):
                log.warning("%s", w.message)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        leaders = select_leaders(s, clusters, [int(n) for n in ctx.num_samples])
        self.groups = ClientGroups(clusters, leaders)
        n = self.settings.num_clients
        log.info(
            "cefl: %d clusters %s, leaders %s (Louvain resolution %s, %d calls%s)",
            len(clusters),
            clusters,
            leaders,
            info["resolution"],
            info["calls"],
            ", merge/split fallback" if info["fallback"] else "",
        )
        charged = max(lat) if o.count_warmup else 0.0
        summary = {
            "upload_bytes": n * full_bytes,
            "download_bytes": 0,
            "latency_s": charged,
            "warmup_latency_s": max(lat),
            "warmup_epochs": o.warmup_epochs,
            "clusters": clusters,
            "leaders": leaders,
            "louvain": info,
            "similarity_d": np.round(d, 6).tolist(),
            "edge_weights_s": np.round(s, 6).tolist(),
        }
        charged_sum = math.fsum(lat) if o.count_warmup else 0.0  # latency_sum_s of the round-0 row
        return Prepared(PhaseCost(charged, n * full_bytes, 0, charged_sum), summary, self.groups, states)

    def select(self, view: RoundView) -> Selection:
        if self.groups is None:
            raise RuntimeError("cefl_leaders: select() before prepare()")
        return Selection(view.online(self.fixed_clients(view.round)))  # a leader offline this round sits it out

    def fixed_clients(self, t: int) -> list[int] | None:
        """CEFL's leaders (FL runs among them only)."""
        return None if self.groups is None else sorted(self.groups.leaders)

    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()
        g = self.groups
        out.update(clusters=None if g is None else [list(c) for c in g.clusters], leaders=None if g is None else list(g.leaders))
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if state.get("clusters") is not None:
            self.groups = ClientGroups([list(c) for c in state["clusters"]], [int(x) for x in state["leaders"]])
