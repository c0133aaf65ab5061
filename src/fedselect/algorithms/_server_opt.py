"""Adaptive server optimisers (Reddi et al. 2021, "Adaptive Federated Optimization",
Algorithm 2): FedAdagrad, FedAdam and FedYogi share everything but the second-moment rule.

Round t, with the server model x_t and the participants' trained models::

    Delta_t = avg_k(w_k) - x_t                       # pseudo-gradient: FedAvg's average minus x
    m_t     = beta1 m_{t-1} + (1 - beta1) Delta_t
    v_t     = v_{t-1} + Delta_t^2                                              # FedAdagrad
    v_t     = beta2 v_{t-1} + (1 - beta2) Delta_t^2                            # FedAdam
    v_t     = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)        # FedYogi
    x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)

element-wise, with ``m_{-1} = 0`` and ``v_{-1} = tau^2`` (the paper asks ``v_{-1} >= tau^2``);
no bias correction (as in the paper). ``avg_k(w_k)`` is the base class's aggregate: the
sample-weighted FedAvg average, or FedNova's normalised one with stragglers' partial work, so
``Delta_t`` is the update FedAvg would apply.

Only the model's parameters (``named_parameters``) are optimised. Every other entry — integer
buffers such as BatchNorm's ``num_batches_tracked`` and the running statistics — takes FedAvg's
value: they are statistics of the data, not weights, and an adaptive step could turn a running
variance negative. The moments ``m`` and ``v`` (one float32 tensor per parameter each) live in
:attr:`ServerState.aux` (``aux["m"]``, ``aux["v"]``), so they are checkpointed and committed with
the model: a resumed run continues exactly, and a rejected (non-finite) aggregate leaves them
unchanged. Traffic is FedAvg's (the moments never leave the server).
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar, Sequence

import torch
from pydantic import Field

from fedselect.algorithms.base import Algorithm, AlgorithmOptions, ServerState
from fedselect.fl.types import ClientOutcome, State

__all__ = ["ServerOptOptions", "AdagradOptions", "AdaptiveOptions", "ServerOptimizer", "server_step"]


class ServerOptOptions(AlgorithmOptions):
    """Options of every adaptive server optimiser: ``server_lr`` (eta > 0), ``beta1`` in [0, 1),
    ``tau`` > 0 (the adaptivity / stability constant)."""

    server_lr: float = Field(0.03, gt=0, allow_inf_nan=False, description="server learning rate eta > 0")
    beta1: float = Field(0.9, ge=0, lt=1, description="first-moment decay beta1 in [0, 1)")
    tau: float = Field(1e-3, gt=0, allow_inf_nan=False, description="adaptivity tau > 0 (v starts at tau^2)")


class AdagradOptions(ServerOptOptions):
    """FedAdagrad's options: no ``beta2``; ``server_lr`` defaults to 0.1, since with ``beta1``
    0.9 and ``v`` summing every ``Delta^2`` its steps are ~10x smaller than FedAdam's at the
    same eta (docs/algorithms.md)."""

    server_lr: float = Field(0.1, gt=0, allow_inf_nan=False, description="server learning rate eta > 0")


class AdaptiveOptions(ServerOptOptions):
    """FedAdam's and FedYogi's options: those of :class:`ServerOptOptions` and ``beta2`` in [0, 1)."""

    beta2: float = Field(0.99, ge=0, lt=1, description="second-moment decay beta2 in [0, 1)")


def server_step(
    rule: str,
    x: torch.Tensor,
    delta: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    eta: float,
    beta1: float,
    beta2: float,
    tau: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of Reddi et al.'s Algorithm 2 on one tensor (module docstring), computed in
    float64 and returned in ``x``'s dtype: ``(x_new, m_new, v_new)``.

    Args:
        rule: ``adagrad``, ``adam`` or ``yogi``. x, delta, m, v: tensors of one shape.

    Raises:
        ValueError: an unknown rule.
    """
    d, md, vd = delta.double(), m.double(), v.double()
    d2 = d * d
    m_new = beta1 * md + (1 - beta1) * d
    if rule == "adagrad":
        v_new = vd + d2
    elif rule == "adam":
        v_new = beta2 * vd + (1 - beta2) * d2
    elif rule == "yogi":
        v_new = vd - (1 - beta2) * d2 * torch.sign(vd - d2)
    else:
        raise ValueError(f"unknown server optimiser rule {rule!r}; allowed: 'adagrad', 'adam', 'yogi'")
    x_new = x.double() + eta * m_new / (v_new.sqrt() + tau)
    return x_new.to(x.dtype), m_new.to(m.dtype), v_new.to(v.dtype)


class ServerOptimizer(Algorithm):
    """Base of FedAdagrad, FedAdam and FedYogi (module docstring); subclasses set :attr:`rule`."""

    rule: ClassVar[str] = ""
    Options = AdaptiveOptions

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self.param_names = [n for n, p in self.worker.named_parameters() if p.is_floating_point()]

    def _moments(self, like: State) -> dict[str, State]:
        tau2 = float(self.options.tau) ** 2
        m = {n: torch.zeros_like(like[n], dtype=torch.float32) for n in self.param_names}
        v = {n: torch.full_like(like[n], tau2, dtype=torch.float32) for n in self.param_names}
        return {"m": m, "v": v}

    def initial_state(self) -> ServerState:
        """The seeded initial model, ``m = 0`` and ``v = tau^2`` for every parameter."""
        st = super().initial_state()
        return replace(st, aux=self._moments(st.model))

    def aggregate(self, t: int, state: ServerState, outcomes: Sequence[ClientOutcome]) -> ServerState | None:
        """FedAvg's average (or FedNova's), then one adaptive step on the parameters."""
        avg = super().aggregate(t, state, outcomes)
        aux = state.aux if "m" in state.aux else self._moments(state.model)
        o = self.options
        beta2 = float(getattr(o, "beta2", 0.0))
        model, m, v = dict(avg.model), {}, {}
        for n in self.param_names:
            x = state.model[n]
            model[n], m[n], v[n] = server_step(
                self.rule, x, avg.model[n].double() - x.double(), aux["m"][n], aux["v"][n], o.server_lr, o.beta1, beta2, o.tau
            )
        return replace(avg, model=model, aux={**state.aux, "m": m, "v": v})
