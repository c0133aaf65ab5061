"""FedAvgM (Hsu, Qi and Brown 2019, "Measuring the Effects of Non-Identical Data Distribution
for Federated Visual Classification", section 3: FedAvg with server momentum), written outside
fedselect as a user would: one file, named by module path
(``algorithm: {name: "myalgorithms.fedavgm:FedAvgM"}``).

Round t, with the server model ``x_t`` and FedAvg's sample-weighted average ``avg_t`` of the
participants' trained models (the base class's aggregate)::

    Delta_t = x_t - avg_t                    # the pseudo-gradient FedAvg would apply with lr 1
    v_t     = beta * v_{t-1} + Delta_t       # v_0 = 0
    x_{t+1} = x_t - server_lr * v_t

element-wise on the model's floating parameters, computed in float64 and stored in the
parameter's dtype; every other entry (BatchNorm's running statistics, counters) takes FedAvg's
value. ``beta = 0`` and ``server_lr = 1`` is FedAvg, bit for bit (``x - (x - avg) = avg``
exactly in float64 for float32 tensors). The momentum ``v`` lives in the server state's ``aux``
(``aux["v"]``, one float32 tensor per parameter): checkpoints save it, a resumed run continues
exactly, and a rejected (non-finite) aggregate leaves it unchanged. Traffic is FedAvg's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import torch
from pydantic import Field

from fedselect.algorithms import register_algorithm
from fedselect.algorithms.base import Algorithm, AlgorithmOptions, ServerState
from fedselect.fl.types import ClientOutcome


class FedAvgMOptions(AlgorithmOptions):
    """``server_lr`` (> 0; the paper's eta, 1 in its FedAvg-equivalent setting) and ``beta``
    (momentum in [0, 1); the paper sweeps 0.7 to 0.997)."""

    server_lr: float = Field(1.0, gt=0, allow_inf_nan=False, description="server learning rate > 0")
    beta: float = Field(0.9, ge=0, lt=1, description="server momentum in [0, 1)")


@register_algorithm
class FedAvgM(Algorithm):
    """FedAvg with server momentum (module docstring). Options: ``server_lr``, ``beta``,
    ``evaluation``.

    Raises:
        ValueError (as a config error naming the key): ``server_lr`` <= 0 or ``beta`` outside [0, 1).
    """

    name = "fedavgm"
    summary = "FedAvgM: FedAvg with server momentum (Hsu et al. 2019)"
    Options = FedAvgMOptions

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self.param_names = [n for n, p in self.worker.named_parameters() if p.is_floating_point()]

    def initial_state(self) -> ServerState:
        """The seeded initial model and ``v = 0`` for every parameter."""
        st = super().initial_state()
        return replace(st, aux={**st.aux, "v": {n: torch.zeros_like(st.model[n], dtype=torch.float32) for n in self.param_names}})

    def aggregate(self, t: int, state: ServerState, outcomes: Sequence[ClientOutcome]) -> ServerState | None:
        """FedAvg's average, then one momentum step on the parameters (never mutates ``state``)."""
        avg = super().aggregate(t, state, outcomes)
        beta, lr = float(self.options.beta), float(self.options.server_lr)
        model, v = dict(avg.model), {}
        for n in self.param_names:
            x = state.model[n].double()
            v_new = beta * state.aux["v"][n].double() + (x - avg.model[n].double())
            model[n] = (x - lr * v_new).to(state.model[n].dtype)
            v[n] = v_new.to(torch.float32)
        return replace(avg, model=model, aux={**state.aux, "v": v})
