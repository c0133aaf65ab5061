"""FedDyn (Acar et al. 2021, "Federated Learning Based on Dynamic Regularization", ICLR,
Algorithm 1), written outside fedselect as a user would: one file with the local objective and
the algorithm, named by module path (``algorithm: {name: "myobjectives.feddyn:FedDyn"}``).

Client k in round t starts from the server model ``theta^{t-1}`` and minimises::

    L_k(theta) - <g_k, theta> + alpha/2 ||theta - theta^{t-1}||^2                   (Alg. 1)

with ``g_k`` its gradient state (``grad L_k(theta_k^{t-1})``, zero before its first round).
After training to ``theta_k^t`` it updates ``g_k <- g_k - alpha (theta_k^t - theta^{t-1})``; the
server keeps ``h`` (zero at first) and, with m clients and participants P_t::

    h^t     = h^{t-1} - alpha/m sum_{k in P_t} (theta_k^t - theta^{t-1})
    theta^t = mean_{k in P_t} theta_k^t - h^t / alpha

How it plugs in: :class:`DynamicRegularizer` is the local objective, a frozen dataclass with a
plain field (``alpha``) and a tensor field (``grad``: ``g_k``), and only the term ``R(theta)`` as
torch operations (:meth:`DynamicRegularizer.term`): fedselect derives its gradient by autograd
on the sequential path, maps it over the clients on the stacked GPU path (``stackable``), pickles
it to worker processes and sends it over the Flower wire as typed records. ``g_k`` and ``h``
live in the server state's ``aux`` (``aux["h"]``, ``aux["g/<k>"]``), so checkpoints save them and
a resumed run continues exactly; the server computes ``g_k``'s update from the uploaded model, as
the client would (fedselect's clients keep nothing between rounds). The traffic counted is the
paper's (the model each way); on Flower with measured bytes the download also holds ``g_k``.
Only floating parameters have ``g_k`` and ``h``; buffers take FedAvg's average.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import torch
from pydantic import Field

from fedselect.algorithms.base import Algorithm, AlgorithmOptions
from fedselect.fl.local.objective import LocalObjective
from fedselect.fl.types import ClientOutcome, ServerState, State


@dataclass(frozen=True)
class DynamicRegularizer(LocalObjective):
    """FedDyn's term ``R(theta) = -<g_k, theta> + alpha/2 ||theta - theta_0||^2`` (``theta_0``:
    the weights local training starts from, the server model).

    Attributes:
        alpha: the regularisation weight (> 0).
        grad: ``g_k`` by parameter name (the parameters' shapes).
    """

    alpha: float
    grad: State
    stackable = True  # term() is plain torch arithmetic: torch.func.vmap maps it over clients

    def term(self, params: Mapping[str, torch.Tensor], start: Mapping[str, torch.Tensor]) -> torch.Tensor:
        linear = sum((self.grad[n] * params[n]).sum() for n in params)
        proximal = sum(((params[n] - start[n]) ** 2).sum() for n in params)
        return 0.5 * self.alpha * proximal - linear


class FedDynOptions(AlgorithmOptions):
    """``alpha``: FedDyn's regularisation weight (Acar et al. use 0.01 to 0.1)."""

    alpha: float = Field(0.01, gt=0, allow_inf_nan=False, description="regularisation weight alpha > 0")


class FedDyn(Algorithm):
    """FedDyn (module docstring). Options: ``alpha`` (> 0, default 0.01), ``evaluation``."""

    name = "feddyn"
    summary = "FedDyn: dynamic regularisation of the local objectives (Acar et al. 2021)"
    Options = FedDynOptions
    takes_selection_weights = False  # the server mean is uniform over participants (Alg. 1)

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self.param_names = [n for n, p in self.worker.named_parameters() if p.is_floating_point()]

    def _zeros(self, like: State) -> State:
        return {n: torch.zeros_like(like[n], dtype=torch.float32) for n in self.param_names}

    def initial_state(self) -> ServerState:
        st = super().initial_state()
        return replace(st, aux={"h": self._zeros(st.model)})

    def local_objective(self, state: ServerState, k: int) -> DynamicRegularizer:
        g = state.aux.get(f"g/{k}") or self._zeros(state.model)
        return DynamicRegularizer(float(self.options.alpha), {n: g[n] for n in self.param_names})

    def aggregate(self, t: int, state: ServerState, outcomes: Sequence[ClientOutcome]) -> ServerState:
        avg = super().aggregate(t, state, outcomes)  # buffers: FedAvg's average
        x, alpha, m = state.model, float(self.options.alpha), self.fed.num_clients
        aux = dict(state.aux)
        h = aux["h"]
        model, new_h = dict(avg.model), {}
        for o in outcomes:
            g = state.aux.get(f"g/{o.client_id}") or self._zeros(x)
            aux[f"g/{o.client_id}"] = {
                n: (g[n].double() - alpha * (o.state[n].double() - x[n].double())).float() for n in self.param_names
            }
        for n in self.param_names:
            total = sum(o.state[n].double() for o in outcomes)
            hn = h[n].double() - alpha / m * (total - len(outcomes) * x[n].double())
            model[n] = (total / len(outcomes) - hn / alpha).to(x[n].dtype)
            new_h[n] = hn.float()
        aux["h"] = new_h
        return replace(avg, model=model, aux=aux)
