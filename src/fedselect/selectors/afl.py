"""Active Federated Learning, AFL (Goetz, Malik, Bui, Moon, Liu, Kumar, "Active Federated
Learning", arXiv 1909.12641, 2019): clients are sampled with a probability that grows with a
valuation of how much their data would still teach the model.

Each round, with m clients to pick among the online ones (the paper's Algorithm 1):

1. the ``alpha1`` share of the clients with the lowest valuations, ``floor(alpha1 x online)``,
   get probability 0;
2. the others get ``P(k) ~ exp(alpha2 v_k)`` (a softmax of temperature ``1 / alpha2``);
3. ``floor((1 - alpha3) m)`` clients are drawn by P without replacement, the other
   ``m - floor((1 - alpha3) m)`` uniformly at random among the online clients not drawn yet;
4. the chosen clients train and report their valuation, the loss-based one of the paper:
   ``v_k = L_k / sqrt(n_k)`` with ``L_k`` the sum of the client's training losses, here
   ``n_k x`` its mean training loss over the local epochs (reported with its update, no extra
   computation), i.e. ``v_k = sqrt(n_k) x mean loss``; a client that failed keeps its previous
   valuation.

Defaults: the paper's alpha1 = 0.75, alpha2 = 0.01, alpha3 = 0.1.

Where the paper is silent, chosen here: a client that has never reported has no valuation; it
ranks above every valued client in step 1 (it is never cut before the valued ones) and its
weight in step 2 is that of the highest valuation known (all weights are equal before any
report, so round 1 is uniform); ties in step 1 are broken at random with the selector's
generator. Plato's AFL (``examples/client_selection/afl``) uses the mean loss before training
divided by sqrt(n_k) and adds 0.01 to every probability; neither is done here.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fedselect.fl.types import ClientOutcome
from fedselect.kernels.sampling import weighted_sample
from fedselect.selectors import register_selector
from fedselect.selectors.base import Feedback, RoundView, Selection, Selector


class AFLOptions(BaseModel):
    """AFL's options (Goetz et al. 2019, Algorithm 1; defaults the paper's)."""

    model_config = ConfigDict(extra="forbid")

    alpha1: float = Field(0.75, ge=0, lt=1, description="share of the online clients with the lowest valuations cut")
    alpha2: float = Field(0.01, ge=0, allow_inf_nan=False, description="softmax factor: P(k) ~ exp(alpha2 v_k)")
    alpha3: float = Field(0.1, ge=0, le=1, description="share of the m places drawn uniformly at random")


def afl_probabilities(values: np.ndarray, alpha1: float, alpha2: float, tiebreak: np.ndarray) -> np.ndarray:
    """Steps 1-2 of the module docstring: probabilities ``(n,)`` over the online clients from
    their valuations ``values`` (NaN = never reported) and a random ``tiebreak`` ``(n,)``.

    Example: values [3, 1, 2, nan], alpha1 0.5, alpha2 1: clients 1 and 2 are cut; client 0
    and the unvalued client 3 get e^3 each, so P = [0.5, 0, 0, 0.5].
    """
    v = np.asarray(values, dtype=np.float64)
    known = np.isfinite(v)
    rank_value = np.where(known, v, np.inf)  # never reported: above every valued client
    order = np.lexsort((tiebreak, rank_value))
    keep = np.ones(v.size, dtype=bool)
    keep[order[: int(math.floor(alpha1 * v.size + 1e-9))]] = False
    top = float(v[known & keep].max()) if np.any(known & keep) else 0.0
    logits = np.where(known, v, top) - top  # shifted by the largest: exp never overflows
    w = np.where(keep, np.exp(alpha2 * logits), 0.0)
    return w / w.sum()


@register_selector
class AFL(Selector):
    """AFL (module docstring). Options: :class:`AFLOptions`.

    Extra per-round columns: ``valued_clients`` (clients with a valuation when the round was
    selected) and ``mean_valuation`` (mean valuation of this round's participants that reported;
    nan without any).
    """

    name = "afl"
    summary = "AFL: sampling by a softmax of loss-based valuations, the lowest cut, a share uniform"
    Options = AFLOptions
    extra_columns = ("valued_clients", "mean_valuation")

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self.num_samples = np.asarray(ctx.num_samples, dtype=np.float64)
        self.values = np.full(self.settings.num_clients, np.nan)
        self.pending: dict[str, Any] = {}

    def select(self, view: RoundView) -> Selection:
        o, s = self.options, self.settings
        pool, m = view.pool(s.num_clients), view.how_many(s)
        p = afl_probabilities(self.values[pool], o.alpha1, o.alpha2, self.rng.random(pool.size))
        weighted = min(int(math.floor((1.0 - o.alpha3) * m + 1e-9)), int(np.count_nonzero(p)))
        chosen = weighted_sample(self.rng, pool, p, weighted)
        rest = np.setdiff1d(pool, np.asarray(chosen, dtype=np.int64))
        chosen += [int(k) for k in self.rng.choice(rest, size=min(m - len(chosen), rest.size), replace=False)]
        self.pending = {"valued_clients": int(np.isfinite(self.values).sum())}
        return Selection(tuple(chosen))

    def observe(self, t: int, outcomes: Sequence[ClientOutcome], feedback: Feedback) -> dict[str, Any]:
        got = []
        for out in outcomes:
            if out.ok and math.isfinite(out.train_loss):
                k = out.client_id
                self.values[k] = math.sqrt(self.num_samples[k]) * float(out.train_loss)
                got.append(self.values[k])
        return {**self.pending, "mean_valuation": float(np.mean(got)) if got else math.nan}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "values": self.values.copy(), "pending": dict(self.pending)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.values = np.array(state["values"], dtype=np.float64, copy=True)
        self.pending = dict(state["pending"])
