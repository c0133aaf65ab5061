"""FedYogi (Reddi et al. 2021, Algorithm 2 with the Yogi second moment):
``v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)``,
``x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)``
(:mod:`fedselect.algorithms._server_opt` gives the whole update and what is stored)."""

from __future__ import annotations

from fedselect.algorithms import register_algorithm
from fedselect.algorithms._server_opt import AdaptiveOptions, ServerOptimizer


@register_algorithm
class FedYogi(ServerOptimizer):
    """FedYogi: like FedAdam, but ``v`` moves towards ``Delta^2`` by at most ``(1 - beta2)
    Delta^2`` per round (additive, sign-controlled), so it grows and shrinks more gently.
    Options: ``server_lr`` (eta, default 0.03), ``beta1`` (0.9), ``beta2`` (0.99), ``tau``
    (1e-3), ``evaluation``. State: ``m``, ``v`` in ``ServerState.aux``. Traffic: FedAvg's.

    Raises:
        ValueError (as a config error naming the key): ``server_lr`` or ``tau`` <= 0, a beta
        outside [0, 1).
    """

    name = "fedyogi"
    summary = "FedYogi: server-side Yogi on the pseudo-gradient of FedAvg's average (Reddi et al. 2021)"
    Options = AdaptiveOptions
    rule = "yogi"
