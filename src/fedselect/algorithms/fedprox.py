"""FedProx (Li et al. 2020, "Federated Optimization in Heterogeneous Networks", eq. 2):
every participant minimises its local loss plus a proximal term that keeps it near the
model it started from,

    h_k(w; w^t) = F_k(w) + mu/2 ||w - w^t||^2,

so local training adds ``mu (w - w^t)`` to each parameter's gradient before every optimiser
step (``w^t`` is the server model the client starts from). That term is this file's
:class:`ProximalTerm`, the client's :class:`~fedselect.fl.local.objective.LocalObjective`: each job
carries one, and local training applies it wherever the job runs (this process, the worker
pool, the stacked GPU path, a Flower node). The server averages the updates as FedAvg does
(weights n_k / sum n). Nothing extra travels: the upload and download are FedAvg's (the job
carries only ``mu``).

``mu: 0`` is FedAvg exactly: the jobs carry no objective and train on FedAvg's code path,
so ``metrics.csv`` and ``model.pt`` are byte-identical to ``fedavg``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch
from pydantic import Field

from fedselect.algorithms import register_algorithm
from fedselect.algorithms.base import Algorithm, AlgorithmOptions, ServerState
from fedselect.fl.local.objective import LocalObjective


@dataclass(frozen=True)
class ProximalTerm(LocalObjective):
    """FedProx's local objective (Li et al. 2020, eq. 2): ``R(w) = mu/2 ||w - w_0||^2`` over the
    trained parameters, ``w_0`` their values when local training starts (the server model).

    Attributes:
        mu: the proximal weight (unitless, finite, >= 0; 0 adds nothing).

    Raises:
        ValueError: ``mu`` negative, not finite or not a number.
    """

    mu: float
    stackable = True  # the term is vmap-able (the stacked GPU path may train it)

    def __post_init__(self) -> None:
        mu = self.mu
        if isinstance(mu, bool) or not isinstance(mu, (int, float)) or not math.isfinite(mu) or mu < 0:
            raise ValueError(f"ProximalTerm: mu must be a finite number >= 0, got {mu!r}")

    def term(self, params: Mapping[str, torch.Tensor], start: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``mu/2 sum_n ||w_n - w0_n||^2`` (the stacked path)."""
        return 0.5 * float(self.mu) * sum(((params[n] - start[n]) ** 2).sum() for n in params)

    def begin(self, params: Sequence[tuple[str, torch.Tensor]]) -> Callable[[], None]:
        """Its gradient in closed form: ``p.grad += mu (p - p_0)`` after every backward pass."""
        anchor = {n: p.detach().clone() for n, p in params}
        mu = float(self.mu)

        def add() -> None:
            with torch.no_grad():
                for n, p in params:
                    if p.grad is not None and mu:
                        p.grad.add_(p - anchor[n], alpha=mu)

        return add


class FedProxOptions(AlgorithmOptions):
    """``mu``: the proximal weight (>= 0; 0 = FedAvg). Li et al. tune it in {0.001, 0.01,
    0.1, 1}; 0.01 is the default here."""

    mu: float = Field(0.01, ge=0, allow_inf_nan=False, description="proximal weight mu >= 0 (0 = FedAvg)")


@register_algorithm
class FedProx(Algorithm):
    """FedProx (module docstring): FedAvg aggregation, local loss + ``mu/2 ||w - w^t||^2``.

    Options: ``mu`` (float >= 0, default 0.01; unitless weight on the squared L2 distance of
    the weights), ``evaluation``.

    Raises:
        ValueError (as a config error naming ``mu``): ``mu`` negative or not finite.
    """

    name = "fedprox"
    summary = "FedProx: FedAvg with a proximal term mu/2 ||w - w_global||^2 in the local loss"
    Options = FedProxOptions

    def local_objective(self, state: ServerState, k: int) -> ProximalTerm | None:
        """``ProximalTerm(mu)`` (None when ``mu`` is 0: FedAvg's jobs)."""
        mu = float(self.options.mu)
        return ProximalTerm(mu) if mu > 0 else None
