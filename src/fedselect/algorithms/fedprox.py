"""FedProx (Li et al. 2020, "Federated Optimization in Heterogeneous Networks", eq. 2):
every participant minimises its local loss plus a proximal term that keeps it near the
model it started from,

    h_k(w; w^t) = F_k(w) + mu/2 ||w - w^t||^2,

so local training adds ``mu (w - w^t)`` to each parameter's gradient before every optimiser
step (:func:`fedselect.fl.train.train_steps`; ``w^t`` is the server model the client starts
from). The server averages the updates as FedAvg does (weights n_k / sum n). Nothing extra
travels: the upload and download are FedAvg's.

``mu: 0`` is FedAvg exactly: the jobs carry no proximal term and train on FedAvg's code path,
so ``metrics.csv`` and ``model.pt`` are byte-identical to ``fedavg``'s.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from fedselect.algorithms import register_algorithm
from fedselect.algorithms.base import Algorithm, AlgorithmOptions, ServerState


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

    def job_extras(self, state: ServerState, k: int) -> dict[str, Any]:
        """``{"prox_mu": mu}`` (nothing when ``mu`` is 0: FedAvg's jobs)."""
        mu = float(self.options.mu)
        return {"prox_mu": mu} if mu > 0 else {}
