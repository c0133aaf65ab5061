"""SCAFFOLD (Karimireddy et al. 2020, "SCAFFOLD: Stochastic Controlled Averaging for Federated
Learning", Algorithm 1 with option II control variates).

The server holds a control variate ``c`` and every client ``k`` its own ``c_k`` (all zero at
the start; one tensor per model parameter). In round t, with the server model ``x``::

    client k:  y <- x;  K steps  y <- y - lr (g_k(y) - c_k + c)              (Alg. 1 line 10)
               c_k+ = c_k - c + (x - y) / (K lr)                              (line 12, option II)
               uploads  Delta y_k = y - x  and  Delta c_k = c_k+ - c_k        (line 13)
    server:    x <- x + eta_g mean_k(Delta y_k)                               (line 16)
               c <- c + |S|/N mean_k(Delta c_k)  =  c + (1/N) sum_k Delta c_k

``mean_k`` is the plain mean over the participants S that reported (as in the paper, not
sample-weighted); N is the number of clients. With SGD momentum rho (``train.momentum``) a
constant gradient moves the weights by ``a_K lr`` instead of ``K lr`` after K steps, with
``a_K = (K - rho (1 - rho^K) / (1 - rho)) / (1 - rho)`` (FedNova's normalisation, also used by
straggler averaging); option II then divides by ``a_K lr`` so that ``c_k`` estimates the
gradient; ``a_K = K`` without momentum (the paper's formula). K is the client's local steps
(``E ceil(n_k / B)``, or a straggler's partial steps).

Where it runs: local training gets ``c - c_k`` as the job's objective, this file's
:class:`DriftCorrection` (:meth:`Scaffold.local_objective`; added to every mini-batch gradient
wherever the job runs: this process, the worker pool, the stacked GPU path, Flower nodes). The
controls are kept by the server in :attr:`ServerState.aux` (``aux["c"]``, ``aux["c/<k>"]`` once
client k has trained), so they are checkpointed with the model and a resumed run continues
exactly; because ``c_k+`` follows from ``x``, ``y`` and K, the server computes it from the
uploaded model. The traffic is the paper's and is counted in bytes: each participant downloads
``x`` and ``c`` and uploads ``y`` and ``Delta c_k``, i.e. the model's bytes plus the parameters'
bytes each way — twice FedAvg's for a model without buffers. (On Flower with measured bytes, the
download measured is the model plus ``c - c_k``; the upload is the model only.)

Only the parameters have control variates; other entries (BatchNorm buffers) take FedAvg's
average. Local training must use SGD (``train.optimizer: sgd``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

import torch
from pydantic import Field

from fedselect.algorithms import register_algorithm
from fedselect.algorithms.base import Algorithm, AlgorithmOptions, ServerState
from fedselect.fl.aggregate import state_bytes
from fedselect.fl.local.objective import LocalObjective
from fedselect.fl.types import ClientOutcome, State

__all__ = ["ScaffoldOptions", "Scaffold", "DriftCorrection", "momentum_steps"]


@dataclass(frozen=True)
class DriftCorrection(LocalObjective):
    """SCAFFOLD's local objective (Algorithm 1 line 10): ``R(w) = <c - c_k, w>``, so every
    mini-batch gradient gains ``c - c_k`` and a step is ``y <- y - lr (g(y) - c_k + c)``
    (before momentum and weight decay).

    Attributes:
        correction: ``c - c_k`` by parameter name (float32, the parameters' shapes).

    Raises:
        ValueError: (when training starts) ``correction`` lacks a trained parameter.
    """

    correction: State
    stackable = True  # the term is vmap-able (the stacked GPU path may train it)

    def term(self, params: Mapping[str, torch.Tensor], start: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``sum_n <c - c_k, w>_n`` (the stacked path)."""
        return sum((self.correction[n] * params[n]).sum() for n in params)

    def begin(self, params: Sequence[tuple[str, torch.Tensor]]) -> Callable[[], None]:
        """Its gradient in closed form: ``p.grad += (c - c_k)`` after every backward pass."""
        missing = sorted(n for n, _ in params if n not in self.correction)
        if missing:
            raise ValueError(f"correction lacks parameters {missing}")
        corr = {n: self.correction[n].to(p.device, p.dtype) for n, p in params}

        def add() -> None:
            with torch.no_grad():
                for n, p in params:
                    if p.grad is not None:
                        p.grad.add_(corr[n])

        return add


def momentum_steps(k: int, rho: float) -> float:
    """``a_K``: how many plain SGD steps K steps with momentum ``rho`` amount to for a constant
    gradient (``K`` when ``rho`` is 0; module docstring)."""
    if rho <= 0:
        return float(k)
    return (k - rho * (1 - rho**k) / (1 - rho)) / (1 - rho)


class ScaffoldOptions(AlgorithmOptions):
    """``server_lr``: the global step size eta_g > 0 (1 = the paper's usual choice)."""

    server_lr: float = Field(1.0, gt=0, allow_inf_nan=False, description="global step size eta_g > 0")


@register_algorithm
class Scaffold(Algorithm):
    """SCAFFOLD with option II control variates (module docstring).

    Options: ``server_lr`` (eta_g, default 1.0), ``evaluation``. State: ``c`` and each trained
    client's ``c_k`` (float32, one tensor per parameter, in ``ServerState.aux``). Bytes per
    participant and round: upload = model + parameters, download = model + parameters.

    Raises:
        ValueError: ``train.optimizer`` is not ``sgd``; (as a config error naming the key)
            ``server_lr`` <= 0.
    """

    name = "scaffold"
    summary = "SCAFFOLD: control variates correct client drift (Karimireddy et al. 2020, option II)"
    Options = ScaffoldOptions
    takes_selection_weights = False  # the server step averages the model changes uniformly (Algorithm 1, line 16)

    @classmethod
    def check(cls, options, settings) -> list[str]:
        """Local training must be SGD (``train.optimizer: sgd``)."""
        if settings.optimizer != "sgd":
            return [f"needs train.optimizer: sgd (its control variates assume SGD steps), got {settings.optimizer!r}"]
        return []

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        if self.train_cfg.optimizer != "sgd":
            raise ValueError(
                f"algorithm 'scaffold' needs train.optimizer: sgd (its control variates assume SGD steps), "
                f"got {self.train_cfg.optimizer!r}"
            )
        self.param_names = [n for n, p in self.worker.named_parameters() if p.is_floating_point()]

    def _zeros(self, like: State) -> State:
        return {n: torch.zeros_like(like[n], dtype=torch.float32) for n in self.param_names}

    def initial_state(self) -> ServerState:
        """The seeded initial model and ``c = 0`` (every ``c_k`` 0 until client k trains)."""
        st = super().initial_state()
        return replace(st, aux={"c": self._zeros(st.model)})

    def payload_bytes(self) -> tuple[int, int]:
        """(model + control variate) bytes each way: ``y`` and ``Delta c_k`` up, ``x`` and ``c`` down."""
        up, down = super().payload_bytes()
        ctrl = state_bytes(self.worker.state_dict(), self.param_names)
        return up + ctrl, down + ctrl

    def local_objective(self, state: ServerState, k: int) -> DriftCorrection:
        """``DriftCorrection(c - c_k)`` for client ``k``'s local training."""
        c = state.aux["c"] if "c" in state.aux else self._zeros(state.model)
        ck = state.aux.get(f"c/{k}")
        return DriftCorrection({n: (c[n] - ck[n]) if ck is not None else c[n].clone() for n in self.param_names})

    def local_steps(self, o: ClientOutcome) -> int:
        """K: the optimiser steps client ``o`` took (``E ceil(n_k / B)`` or its partial steps)."""
        if o.local_steps is not None:
            return int(o.local_steps)
        return int(o.epochs) * math.ceil(o.num_samples / self.train_cfg.batch_size)

    def aggregate(self, t: int, state: ServerState, outcomes: Sequence[ClientOutcome]) -> ServerState | None:
        """Lines 12-17 of Algorithm 1 (module docstring); buffers take FedAvg's average."""
        avg = super().aggregate(t, state, outcomes)
        x = state.model
        c = state.aux["c"] if "c" in state.aux else self._zeros(x)
        cfg = self.train_cfg
        rho = cfg.momentum if cfg.optimizer == "sgd" else 0.0
        n_clients = self.fed.num_clients
        aux = dict(state.aux)
        dy_sum = {n: torch.zeros_like(x[n], dtype=torch.float64) for n in self.param_names}
        dc_sum = {n: torch.zeros_like(x[n], dtype=torch.float64) for n in self.param_names}
        for o in outcomes:
            ck = state.aux.get(f"c/{o.client_id}")
            a = momentum_steps(self.local_steps(o), rho) * cfg.lr
            new_ck = {}
            for n in self.param_names:
                xd, yd = x[n].double(), o.state[n].double()
                dy_sum[n] += yd - xd
                old = ck[n].double() if ck is not None else torch.zeros_like(xd)
                if a > 0:
                    new = old - c[n].double() + (xd - yd) / a
                else:  # no step taken: nothing learnt about the client's gradient
                    new = old
                dc_sum[n] += new - old
                new_ck[n] = new.to(torch.float32)
            aux[f"c/{o.client_id}"] = new_ck
        s = len(outcomes)
        eta = float(self.options.server_lr)
        model = dict(avg.model)
        new_c = {}
        for n in self.param_names:
            model[n] = (x[n].double() + eta * dy_sum[n] / s).to(x[n].dtype)
            new_c[n] = (c[n].double() + dc_sum[n] / n_clients).to(torch.float32)
        aux["c"] = new_c
        return replace(avg, model=model, aux=aux)
