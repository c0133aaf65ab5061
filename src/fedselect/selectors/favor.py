"""FAVOR (Wang, Kaplan, Niu, Li, INFOCOM 2020; cited by FLASH-RL as [13]).

Same DDQN machinery, warm-up and PCA as FLASH-RL (:mod:`fedselect.selectors._ddqn`), with
FAVOR's own state and reward:

* state s_t = (PCA(w_global), PCA(w_1), ..., PCA(w_N)) concatenated, ``(N + 1) * m`` values
  (each PCA row divided by the same fixed sigma_1 as FLASH-RL's); client rows change only for
  participants, the global row every round;
* selection: top-U by Q with epsilon-greedy per slot (the shared agent);
* reward: the scalar ``r_t = 64^(P_t - target) - 1`` (P = global accuracy, a fraction) given to
  every selected action. ``target`` defaults per data set: MNIST 0.99, Fashion-MNIST 0.85,
  CIFAR-10 0.55; otherwise ``metrics.target``; configurable with the option ``target``.

Departure from the FAVOR paper: FAVOR's agent is trained over many FL episodes; here, as in
FLASH-RL's comparison, it learns online within one run.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from fedselect.kernels.rewards import favor_reward
from fedselect.selectors import register_selector
from fedselect.selectors._ddqn import DDQNSelector
from fedselect.selectors._ddqn_options import DDQNOptions

#: default target accuracy per data set name (the targets of Wang et al.'s experiments)
DEFAULT_TARGETS = {"mnist": 0.99, "mnist-embedded": 0.99, "fashion-mnist": 0.85, "cifar10": 0.55}


class FavorOptions(DDQNOptions):
    target: float | None = Field(None, gt=0, le=1, description="target of the reward 64^(P - target) - 1; null = per data set")
    reward_base: float = Field(64.0, gt=1, description="base of FAVOR's exponential reward")
    performance_metric: Literal["accuracy", "f1_macro"] | None = Field(None, description="P; null = metrics.metric")


@register_selector
class Favor(DDQNSelector):
    """FAVOR (Wang et al., INFOCOM 2020). Extra columns as FLASH-RL's (``epsilon``, ``mean_reward``, ``td_loss``,
    ``selected_devices``, ``selected_networks``).

    Raises:
        ValueError: no target given and none known for the data set (found from the config
            alone, before any data is loaded).
    """

    name = "favor"
    summary = "FAVOR: DDQN selection with an accuracy-based reward (64^(acc - target) - 1)"
    Options = FavorOptions
    wants_global_state = True

    @classmethod
    def check(cls, options, settings):
        out = super().check(options, settings)
        if options.target is None and DEFAULT_TARGETS.get(settings.dataset, settings.target) is None:
            out.append(
                f"selector 'favor': no reward target known for dataset {settings.dataset!r}; set the option target "
                f"(or metrics.target) to a value in (0, 1]"
            )
        return out

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self.metric = self.options.performance_metric or self.settings.metric
        target = self.options.target
        if target is None:
            target = DEFAULT_TARGETS.get(self.settings.dataset, self.settings.target)
        if target is None:
            raise ValueError(self.check(self.options, self.settings)[-1])
        self.target = float(target)

    @classmethod
    def state_layout(cls, n, m):
        """Context: the global model's PCA row (m values); client k's block: its PCA row (m): (N + 1) x m values."""
        return m, m

    def state_vector(self, t, draws, global_state):
        """(PCA(global), PCA(w_1), ..., PCA(w_N)), float32 ``((N + 1) * m,)``."""
        g = self.project(global_state)
        return np.concatenate([g[None, :], self.client_rows], axis=0).reshape(-1).astype(np.float32)

    def round_rewards(self, t, outcomes, feedback):
        r = favor_reward(feedback.after.value(self.metric), self.target, self.options.reward_base)
        return np.full(len(outcomes), r)
