"""FedAdagrad (Reddi et al. 2021, Algorithm 2 with the Adagrad second moment):
``v_t = v_{t-1} + Delta_t^2``, ``x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)``
(:mod:`fedselect.algorithms._server_opt` gives the whole update and what is stored). There is
no ``beta2`` (giving one is an error)."""

from __future__ import annotations

from fedselect.algorithms import register_algorithm
from fedselect.algorithms._server_opt import AdagradOptions, ServerOptimizer


@register_algorithm
class FedAdagrad(ServerOptimizer):
    """FedAdagrad: the squared pseudo-gradients accumulate in ``v``, so every parameter's
    step shrinks as its updates add up. Options: ``server_lr`` (eta, default 0.1), ``beta1``
    (0.9), ``tau`` (1e-3), ``evaluation``. State: ``m``, ``v`` in ``ServerState.aux``.
    Traffic: FedAvg's.

    Raises:
        ValueError (as a config error naming the key): ``server_lr`` or ``tau`` <= 0, ``beta1``
        outside [0, 1), any ``beta2``.
    """

    name = "fedadagrad"
    summary = "FedAdagrad: server-side Adagrad on the pseudo-gradient of FedAvg's average (Reddi et al. 2021)"
    Options = AdagradOptions
    rule = "adagrad"
