"""The clients' last local updates as representative gradients, shared by the selectors that
read them (``clustered_sampling`` with ``clustering: similarity``, ``divfl``).

A participant's update is ``w_k - w``: the parameters it uploads after local training minus
those it started from (the model the selector saw when it chose it, ``RoundView.global_state``:
the global model with FedAvg, its shared layers with FedPer). :class:`UpdateTracker` remembers
that start model for every client it picks and, when the client reports, hands the update to a
:class:`fedselect.kernels.representatives.Representatives`. A client that failed keeps its
previous vector. Only the uploaded parameters count (``SelectorContext.upload_keys`` among the
model's parameters): with FedPer the base layers.

:func:`warmup_cost` is the cost of a warm-up of every client (round 0): each downloads the
initial model, trains ``epochs`` epochs and uploads (FR-eq 3-5 at round 0's draws), in parallel.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from fedselect.fl.aggregate import flat_parameters
from fedselect.fl.types import ClientOutcome, PhaseCost, State
from fedselect.kernels.representatives import Representatives

__all__ = ["update_keys", "UpdateTracker", "warmup_cost"]


def update_keys(ctx) -> list[str]:
    """The parameters a participant uploads, in model order (its update's entries)."""
    up = None if ctx.upload_keys is None else set(ctx.upload_keys)
    return [n for n in ctx.parameter_names if up is None or n in up]


def warmup_cost(ctx, epochs: int, count: bool = True) -> tuple[PhaseCost, float]:
    """(the phase's charged cost, the straggler's latency in s) of a warm-up of all N clients
    (module docstring); with ``count`` False no latency is charged (the bytes are)."""
    draws = ctx.draw(0)
    costs = [ctx.client_cost(k, epochs, draws) for k in range(ctx.settings.num_clients)]
    lat = max((c.latency_s for c in costs), default=0.0)
    up, down = sum(c.upload_bytes for c in costs), sum(c.download_bytes for c in costs)
    charged_sum = math.fsum(c.latency_s for c in costs) if count else 0.0
    return PhaseCost(lat if count else 0.0, up, down, charged_sum), lat


class UpdateTracker:
    """Representative updates of the N clients (module docstring).

    Args:
        ctx: the selector's context (parameter names, upload keys, N).
        metric: the dissimilarity of :mod:`fedselect.kernels.representatives`.
    """

    def __init__(self, ctx, metric: str):
        self.keys = update_keys(ctx)
        dim = int(flat_parameters(ctx.initial_state(), self.keys).numel())
        self.reps = Representatives(ctx.settings.num_clients, dim, metric)
        self.starts: dict[int, np.ndarray] = {}

    @property
    def matrix(self) -> np.ndarray:
        """``(N, N)`` dissimilarities of the representatives."""
        return self.reps.matrix

    def flat(self, state: State) -> np.ndarray:
        return flat_parameters(state, self.keys).numpy()

    def chosen(self, ids: Sequence[int], start: State | None) -> None:
        """``ids`` start training from ``start`` (``RoundView.global_state``).

        Raises:
            RuntimeError: no start model (the engine did not fill ``global_state``)."""
        if start is None:
            raise RuntimeError("the selector needs RoundView.global_state (wants_global_state) to measure updates")
        vec = self.flat(start)
        for k in ids:
            self.starts[int(k)] = vec

    def learn(self, outcomes: Sequence[ClientOutcome]) -> list[int]:
        """Take the updates of the participants that reported (their states, ``wants_weights``);
        returns their ids."""
        ids, vecs = [], []
        for o in outcomes:
            start = self.starts.pop(o.client_id, None)
            if o.ok and o.state is not None and start is not None:
                ids.append(o.client_id)
                vecs.append(self.flat(o.state) - start)
        if ids:
            self.reps.update(ids, np.stack(vecs))
        return ids

    def set_all(self, vectors: np.ndarray) -> None:
        """Every client's vector at once (``(N, P)``, e.g. after a warm-up)."""
        self.reps.update(range(self.reps.vectors.shape[0]), vectors)

    def state_dict(self) -> dict[str, Any]:
        return {"reps": self.reps.state_dict(), "starts": {int(k): v.copy() for k, v in self.starts.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.reps.load_state_dict(state["reps"])
        self.starts = {int(k): np.array(v, dtype=np.float32, copy=True) for k, v in state["starts"].items()}
