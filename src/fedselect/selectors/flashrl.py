"""FLASH-RL: double deep Q-learning client selection with a reputation-based utility
(Bouaziz et al., Section III).

Per round t, on top of the DDQN machinery (:mod:`fedselect.selectors._ddqn`):

* state s_t = (s_t^1, ..., s_t^N), s_t^k = (PCA(w_k) / sigma_1, z(n_k), z(c_k), z(f_{t,k}),
  z(b_{t,k})) (FR-eq 11, 12);
* reward: the divergence of every participant from the aggregated global model (FR-eq 7),
  utility with the global metric before/after (FR-eq 8), min-max normalised latency,
  reputations (FR-eq 10, or FR-eq 6 / 9), r_t = Psi_t of the U selected (FR-eq 14).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from fedselect.kernels.rewards import (
    normalise_latency,
    normalised_divergence,
    signed_mean_divergence,
    update_reputations,
    utility,
)
from fedselect.selectors import register_selector
from fedselect.selectors._ddqn import DDQNSelector
from fedselect.selectors._ddqn_options import DDQNOptions


class FlashRLOptions(DDQNOptions):
    """FLASH-RL options (Section III-B): reward kind and FR-eq 10 weights."""

    reward: Literal["utility_latency", "utility", "reputation_accuracy"] = Field(
        "utility_latency", description="FR-eq 10 (default), FR-eq 9 or FR-eq 6"
    )
    lam: float = Field(0.6, ge=0, le=1, description="lambda of FR-eq 6/9/10")
    alpha1: float = Field(1.0, ge=0, description="weight of the utility in FR-eq 10")
    alpha2: float = Field(1.0, ge=0, description="weight of the normalised latency in FR-eq 10")
    psi_init: float | None = Field(None, description="Psi_0; null = 1/N")
    performance_metric: Literal["accuracy", "f1_macro"] | None = Field(
        None, description="P of FR-eq 8; null = metrics.metric (accuracy for images, f1_macro for fall detection)"
    )
    divergence: Literal["paper", "code"] = Field(
        "paper",
        description="d of FR-eq 8: paper (FR-eq 7, the mean of |delta w / w|) or code (the authors' Server_FLASHRL.py: "
        "|mean of delta w / w|)",
    )


@register_selector
class FlashRL(DDQNSelector):
    """FLASH-RL (Bouaziz et al.): DDQN selection rewarded by the reputation-based utility FR-eq 10.

    Options (:class:`FlashRLOptions`): Table IV defaults (``eps_end`` 0.2); ``schedule: paper`` /
    ``tuned`` / ``code`` write the paper's, our tuned or the authors' code's agent setting
    (docs/flash-rl.md, "Named schedules"; explicit options override it); ``divergence: code`` takes
    the authors' code's divergence instead of FR-eq 7's; ``reward`` picks FR-eq 10
    (``utility_latency``), FR-eq 9 (``utility``) or FR-eq 6 (``reputation_accuracy``; evaluates every
    participant's local model on the test set, slow).

    Extra per-round columns: ``epsilon``, ``mean_reward`` (mean of r_t), ``td_loss`` (nan before
    the first learning step), ``selected_devices`` / ``selected_networks`` (profile names of the
    selected clients, in selection order).
    """

    name = "flashrl"
    summary = "FLASH-RL: DDQN selection rewarded by the reputation-based utility (divergence, accuracy change, latency)"
    Options = FlashRLOptions

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        n = self.settings.num_clients
        self.psi = np.full(n, 1.0 / n if self.options.psi_init is None else self.options.psi_init, dtype=np.float64)
        self.metric = self.options.performance_metric or self.settings.metric
        self.l_min, self.l_max = ctx.latency_bounds()

    @classmethod
    def state_layout(cls, n, m):
        """No context; client k's block is (PCA row, z(n_k), z(c_k), z(f), z(b)): N x (m + 4) values."""
        return 0, m + 4

    def state_vector(self, t, draws, global_state):
        """s_t = (s_t^1, ..., s_t^N), s_t^k = (PCA row, z(n_k), z(c_k), z(f), z(b)) (FR-eq 11, 12)."""
        return np.concatenate([self.client_rows, self.device_features(draws).astype(np.float32)], axis=1).reshape(-1)

    def round_rewards(self, t, outcomes, feedback):
        """Reputations Psi_t of the selected clients (FR-eq 10 / 9 / 6, FR-eq 14), one per outcome.

        A failed participant gets utility 0 (and accuracy 0 for FR-eq 6); its latency term uses
        :meth:`latency_for`. In ``mode: async`` a client may report twice before one
        aggregation (docs/async.md); its reports then update its reputation one after the
        other, in report order, and each gets the reputation after its own update.
        """
        ids = [o.client_id for o in outcomes]
        before, after = feedback.before.value(self.metric), feedback.after.value(self.metric)
        improved = float(after) > float(before)
        global_flat = self.flat(feedback.global_state).numpy()
        lnorm = normalise_latency(np.array([self.latency_for(o) for o in outcomes]), self.l_min, self.l_max)
        opts = self.options
        if opts.reward == "reputation_accuracy":
            accs = [0.0 if o.failed is not None else self.ctx.evaluate(o.state).value(self.metric) for o in outcomes]
            per_client, fixed = {"local_accuracy": accs}, {"prev_global_accuracy": float(before), "lam": opts.lam}
        else:
            divergence = signed_mean_divergence if opts.divergence == "code" else normalised_divergence
            zeta = [
                0.0 if o.failed is not None else utility(divergence(self.flat(o.state).numpy(), global_flat), improved)
                for o in outcomes
            ]
            per_client, fixed = {"zeta": zeta, "lnorm": lnorm}, {"lam": opts.lam, "alpha1": opts.alpha1, "alpha2": opts.alpha2}
        # pass p updates each client's p-th report of this aggregation (one pass in a round: its ids are distinct)
        occurrence, seen = [], {}
        for k in ids:
            occurrence.append(seen.get(k, 0))
            seen[k] = occurrence[-1] + 1
        rewards = np.zeros(len(ids), dtype=np.float64)
        for p in range(max(occurrence, default=-1) + 1):
            idx = [i for i, n in enumerate(occurrence) if n == p]
            sub = [ids[i] for i in idx]
            inputs = {name: [values[i] for i in idx] for name, values in per_client.items()}
            self.psi = update_reputations(self.psi, sub, opts.reward, **inputs, **fixed)
            rewards[idx] = self.psi[sub]
        return rewards

    def latency_for(self, o) -> float:
        """The latency (s) FR-eq 10 charges participant ``o``: l_t^k of FR-eq 5, the latency of
        its round's work. Delivered (or failed after doing its work: error, non-finite update):
        the latency it reported. Cut before its work was done (a **timeout**, a **cancelled**
        one under over-selection, a straggler's partial work): the latency of its whole work in
        the cost model (``ClientOutcome.planned_latency_s``, the paper's environment computes
        l_t^k for every selected client), where that is unknown (a real transport's timeout, an
        injected hang) its expected latency or the cut if larger: at least the cut, so it never
        scores as fast as the deadline. A **dropout**: its expected latency (a dropout says
        nothing about speed; its reported 0 s, or the deadline, would make it look faster than
        it is)."""
        if o.planned_latency_s is not None:
            return float(o.planned_latency_s)
        if o.failed not in ("timeout", "dropout", "cancelled") and o.local_steps is None:
            return float(o.latency_s)
        if getattr(self, "_expected", None) is None:  # deterministic: computed once, never checkpointed
            self._expected = np.asarray(self.ctx.expected_latency_s(), dtype=np.float64)
        expected = float(self._expected[o.client_id])
        return expected if o.failed == "dropout" else max(expected, float(o.latency_s))

    def state_dict(self):
        st = super().state_dict()
        st["psi"] = self.psi.copy()
        return st

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.psi = np.array(state["psi"], dtype=np.float64, copy=True)
