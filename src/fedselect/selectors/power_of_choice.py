"""Power-of-Choice (Cho, Wang, Joshi, "Client Selection in Federated Learning: Convergence Analysis
and Power-of-Choice Selection Strategies", arXiv 2010.01243, 2020; AISTATS 2022 as "Towards
Understanding Biased Client Selection in Federated Learning").

Each round t (pow-d, the paper's Sec. 4 / Algorithm 1):

1. the server samples a candidate set A of d clients without replacement, with probability
   proportional to their data share p_k = n_k / n (one draw after another, renormalised);
2. it sends the current global model w^(t) to the candidates, each computes its local loss
   F_k(w^(t)) (mean cross-entropy over its training data; with FedPer-like algorithms, of the
   model that client would train from) and sends back that one number;
3. the U candidates with the highest loss train (ties: lowest id; a NaN loss never wins).

Variants (``variant``):

* ``pow-d`` — step 2 over every local sample (the paper's pow-d);
* ``cpow-d`` — computation-efficient: each candidate scores a mini-batch of ``minibatch_size``
  samples drawn uniformly without replacement (with the selector's generator), b = 64 in the paper;
* ``rpow-d`` — communication- and computation-free: no probing; each candidate's loss is the mean
  training loss it reported the last time it trained (a client never seen yet ranks first, its
  loss being unknown; a failed client keeps its previous value).

Probing cost (``Selection.cost``; the loop adds it to the round's latency and bytes and records it
in ``probe_latency_s``, ``probe_upload_bytes``, ``probe_download_bytes``, ``candidates_probed``):
each candidate k downloads the model each participant downloads (the algorithm's payload,
``ctx.client_cost(k, ...).download_bytes`` and ``download_s`` at this round's bandwidth), runs a
forward pass over its data, modelled as ``eval_compute_factor`` (1/3: a forward pass costs about a
third of a forward + backward pass) x one local epoch of compute time (FR-eq 4; for cpow-d scaled
by the share b / n_k of its data scored), and uploads ``report_bytes`` (4: one float32) — the
candidates in parallel, so::

    probe latency  = max_{k in A} (download_s_k + factor * epoch_compute_s_k + transmit(report_bytes)_k)
    probe download = d x download payload;   probe upload = d x report_bytes

The download counts in the probe latency whatever ``system.count_download`` says (the probe is an
exchange of its own before training). The selected clients' training traffic is then charged as
usual, so U of the d downloads are charged twice (a deployment that keeps the probed model for
training saves them). rpow-d costs nothing (``candidates_probed`` 0).

Unreachable candidates: a candidate that the round's fault draws make unreachable (a dropout)
cannot answer: nothing is sent to it, its loss is NaN, it is not charged (A above is the set of
candidates that answered) and it is never chosen over a candidate that answered.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fedselect.fl.types import ClientOutcome, RunSettings
from fedselect.kernels.sampling import weighted_sample
from fedselect.selectors import register_selector
from fedselect.selectors.base import Feedback, RoundView, Selection, SelectionCost, Selector, top_u
from fedselect.world.system import RoundDraws


class PowerOfChoiceOptions(BaseModel):
    """Power-of-Choice options (Cho et al. 2020, Sec. 4 and 6)."""

    model_config = ConfigDict(extra="forbid")

    variant: Literal["pow-d", "cpow-d", "rpow-d"] = Field(
        "pow-d",
        description="pow-d: loss on all local data; cpow-d: on a mini-batch; rpow-d: last reported training loss, no probing",
    )
    d: int | None = Field(
        None,
        ge=1,
        description="candidates per round (>= clients_per_round; capped at num_clients); null = 2 x clients_per_round "
        "(the paper's FMNIST setting d = 6 for m = 3)",
    )
    eval_compute_factor: float = Field(
        1.0 / 3.0,
        gt=0,
        description="compute of a candidate's loss evaluation, in local epochs (a forward pass ~ 1/3 of forward + backward)",
    )
    minibatch_size: int = Field(64, ge=1, description="cpow-d: samples each candidate scores (b of the paper)")
    report_bytes: int = Field(4, ge=0, description="bytes a candidate uploads (its loss: one float32)")


@register_selector
class PowerOfChoice(Selector):
    """Power-of-Choice (module docstring). Options: :class:`PowerOfChoiceOptions`.

    Extra per-round columns: ``candidate_ids`` (the d candidates, in draw order) and
    ``mean_candidate_loss`` (mean of their losses as used for the choice; nan when none is known).
    """

    name = "power_of_choice"
    summary = "Power-of-Choice: d candidates drawn by data share probe their loss, the U highest train"
    Options = PowerOfChoiceOptions
    probes = True
    extra_columns = ("candidate_ids", "mean_candidate_loss")

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        n = self.settings.num_clients
        self.num_samples = np.asarray(ctx.num_samples, dtype=np.int64)
        if self.num_samples.sum() <= 0:
            raise ValueError("power_of_choice: the clients hold no training samples (p_k = n_k / n is undefined)")
        self.share = self.num_samples / self.num_samples.sum()
        self.last_loss = np.full(n, np.nan, dtype=np.float64)  # rpow-d: last reported training loss
        self.pending: dict[str, Any] = {}

    @classmethod
    def check(cls, options: PowerOfChoiceOptions, settings: RunSettings) -> list[str]:
        if options.d is not None and options.d < settings.clients_per_round:
            return [
                f"options.d = {options.d} is below clients_per_round = {settings.clients_per_round}: "
                f"the U participants are chosen among the d candidates (d >= U)"
            ]
        return []

    @classmethod
    def flower_app_problems(cls, options: PowerOfChoiceOptions) -> list[str]:
        """pow-d probes with Flower's evaluate message and rpow-d reads the train losses; cpow-d
        needs each candidate to score a mini-batch the server draws, which no Flower message asks."""
        if options.variant == "cpow-d":
            return [
                "variant cpow-d: each candidate scores a mini-batch of samples the server draws, which Flower's evaluate "
                "message cannot ask for; use variant pow-d (the candidates evaluate) or rpow-d (their last train loss)"
            ]
        return []

    @property
    def d(self) -> int:
        """Candidates per round: ``options.d`` (default 2U), at most N."""
        s = self.settings
        return min(s.num_clients, self.options.d if self.options.d is not None else 2 * s.clients_per_round)

    def select(self, view: RoundView) -> Selection:
        s, opts = self.settings, self.options
        u, pool = view.how_many(s), view.pool(s.num_clients)
        d = min(pool.size, max(self.d, u))
        cands = weighted_sample(self.rng, pool, self.share[pool], d)
        samples = None
        if opts.variant == "rpow-d":
            known = self.last_loss[cands]
            losses = [float(x) for x in known]
            big = np.finfo(np.float64).max  # never seen: rank first (unknown loss)
            scores_c = np.where(np.isnan(known), big, known)
            cost = SelectionCost()
        else:
            if view.probe is None:
                raise RuntimeError("power_of_choice needs RoundView.probe (the engine did not provide it)")
            if opts.variant == "cpow-d":
                samples = [
                    np.sort(
                        self.rng.choice(
                            int(self.num_samples[k]), size=min(opts.minibatch_size, int(self.num_samples[k])), replace=False
                        )
                    )
                    for k in cands
                ]
            losses = [float(x) for x in (view.probe(cands) if samples is None else view.probe(cands, samples))]
            scores_c = np.asarray(losses, dtype=np.float64)
            # a candidate that gave no loss could not be reached: nothing moved, nothing is charged
            answered = [i for i, x in enumerate(losses) if math.isfinite(x)]
            scored = None if samples is None else [len(samples[i]) for i in answered]
            cost = self.probe_cost([cands[i] for i in answered], view.draws, scored)
        scores = np.full(s.num_clients, np.nan)
        scores[cands] = scores_c
        chosen = top_u(scores, u, among=cands)
        finite = [x for x in losses if math.isfinite(x)]
        self.pending = {"candidate_ids": list(cands), "mean_candidate_loss": float(np.mean(finite)) if finite else math.nan}
        return Selection(tuple(chosen), cost)

    def probe_cost(self, cands: Sequence[int], draws: RoundDraws, scored: Sequence[int] | None = None) -> SelectionCost:
        """The probing cost of ``cands`` this round (module docstring): latency = the slowest
        candidate's download + forward pass + report upload (s); bytes summed over candidates.

        Args:
            cands: candidate ids. draws: this round's draws.
            scored: samples each candidate scores (cpow-d), None = all of its data.
        """
        opts = self.options
        slowest, down = 0.0, 0
        for i, k in enumerate(cands):
            n_k = int(self.num_samples[k])
            share = 1.0 if scored is None or n_k == 0 else scored[i] / n_k
            c = self.ctx.client_cost(int(k), opts.eval_compute_factor * share, draws)
            lat = c.download_s + c.compute_s + self.ctx.transmit_s(opts.report_bytes, int(k), draws)
            slowest = max(slowest, lat)
            down += int(c.download_bytes)
        return SelectionCost(
            latency_s=slowest, upload_bytes=len(cands) * opts.report_bytes, download_bytes=down, candidates=len(cands)
        )

    def observe(self, t: int, outcomes: Sequence[ClientOutcome], feedback: Feedback) -> dict[str, Any]:
        for o in outcomes:
            if o.failed is None and math.isfinite(o.train_loss):
                self.last_loss[o.client_id] = float(o.train_loss)
        return dict(self.pending)

    def state_dict(self) -> dict[str, Any]:
        st = super().state_dict()
        st.update(last_loss=self.last_loss.copy(), pending=dict(self.pending))
        return st

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.last_loss = np.array(state["last_loss"], dtype=np.float64, copy=True)
        self.pending = dict(state["pending"])
