"""Per-client models and per-client evaluation, shared by FedPer, CEFL, Individual and Regular FL.

Two pieces, both plugged into :class:`fedselect.methods.base.Method` through its hooks (the
round loop is untouched):

* :class:`PerClientEvaluation` (mixin): ``evaluate`` scores a model per client on that
  client's own held-out split (``data.holdout_fraction`` > 0) and reports the mean over
  clients as ``accuracy`` / ``f1_macro`` / ``loss`` (the CEFL paper's metric, SPEC 2), plus the
  standard deviation over clients (``accuracy_std``) and every client's accuracy
  (``client_accuracy``, ``;``-separated in ``metrics.csv``). Which model client ``k`` is scored
  with is :meth:`PerClientEvaluation.eval_state` (default: the global model).
* :class:`PersonalisedMethod`: every client keeps its own model state (``client_states``, all
  starting from the common initialisation). Only the entries in :meth:`shared_keys` travel:
  a participant starts from its own state with the server's current shared entries laid over
  it (the download), uploads only the shared entries, the server averages them
  (:func:`fedselect.fl.partial_average`, CE-eq 6) and every participant overwrites its shared
  entries with the average (CE-eq 7); personalised entries never leave the client and stay
  bit-identical. ``shared_keys() == []`` means no communication at all (Individual training).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedselect.fl.aggregate import State, partial_average
from fedselect.fl.evaluate import evaluate
from fedselect.methods.base import ClientUpdate, Method, clone_state

__all__ = ["PerClientEvaluation", "PersonalisedMethod", "per_client_summary"]


def per_client_summary(results: list[dict[str, float]]) -> dict[str, Any]:
    """Mean / std over clients of per-client ``{"accuracy", "f1_macro", "loss"}`` dicts.

    Returns ``accuracy``, ``f1_macro``, ``loss`` (means), ``accuracy_std`` (population std over
    clients, ``ddof=0``) and ``client_accuracy`` (list, client order).
    """
    acc = np.array([r["accuracy"] for r in results], dtype=np.float64)
    return {
        "accuracy": float(acc.mean()),
        "f1_macro": float(np.mean([r["f1_macro"] for r in results])),
        "loss": float(np.mean([r["loss"] for r in results])),
        "accuracy_std": float(acc.std()),
        "client_accuracy": [float(a) for a in acc],
    }


class PerClientEvaluation:
    """Mixin for :class:`Method` subclasses: per-client evaluation on each client's held-out
    split (module docstring). Put it first in the bases: ``class X(PerClientEvaluation, Base)``.

    Raises (at construction):
        ValueError: some client has an empty held-out split (``data.holdout_fraction`` is 0 or
            the client is too small); the message names the clients.
    """

    extra_columns = ["accuracy_std", "client_accuracy"]

    def __init__(self, cfg, fed):
        super().__init__(cfg, fed)
        empty = [c.id for c in fed.clients if len(c.holdout) == 0]
        if empty:
            raise ValueError(
                f"method {self.name!r} evaluates every client on its own held-out split, but clients {empty} have none; "
                f"set data.holdout_fraction > 0 (now {cfg.data.holdout_fraction})"
            )

    def eval_state(self, k: int) -> State:
        """The model client ``k`` is scored with (default: the global model)."""
        return self.global_model.state_dict()

    def evaluate_clients(self) -> dict[str, Any]:
        """Per-client evaluation of :meth:`eval_state` on each held-out split; see
        :func:`per_client_summary` for the keys."""
        results = []
        for k, client in enumerate(self.fed.clients):
            self.worker.load_state_dict(self.eval_state(k))
            results.append(evaluate(self.worker, client.holdout))
        return per_client_summary(results)

    def evaluate(self, t: int) -> dict[str, Any]:
        out = self.evaluate_clients()
        self._last_eval = (t, out)
        return out

    def observe(self, t: int, updates, before, after) -> dict[str, Any]:
        extra = super().observe(t, updates, before, after) or {}
        last = getattr(self, "_last_eval", None)
        if last is not None and last[0] == t:
            extra = {**extra, "accuracy_std": last[1]["accuracy_std"],
                     "client_accuracy": [round(a, 6) for a in last[1]["client_accuracy"]]}
        return extra


    def finish(self) -> dict[str, Any] | None:
        """Final per-client figures for the summary: ``accuracy_std`` and ``client_accuracy``
        of the last round's evaluation (evaluated now if the last round was not)."""
        extra = super().finish() or {}
        last = getattr(self, "_last_eval", None)
        out = last[1] if last is not None and last[0] == self.cfg.rounds else self.evaluate_clients()
        return {**extra, **out}


class PersonalisedMethod(PerClientEvaluation, Method):
    """A method whose clients keep their own models; only :meth:`shared_keys` are exchanged
    (module docstring). Subclasses give ``select`` and ``shared_keys`` and may change
    :meth:`aggregation_weights`."""

    def __init__(self, cfg, fed):
        super().__init__(cfg, fed)
        init = clone_state(self.global_model.state_dict())
        self.client_states: list[State] = [clone_state(init) for _ in range(fed.num_clients)]
        self.has_aggregate = False  # True once the server holds an average of the shared entries

    # ------------------------------------------------------------ what travels
    def shared_keys(self) -> list[str]:
        """State entries exchanged with the server (default: all; ``[]``: none)."""
        return list(self.global_model.state_dict().keys())

    def upload_keys(self) -> list[str]:
        return self.shared_keys()

    def download_keys(self) -> list[str]:
        return self.shared_keys()

    def aggregation_weights(self, updates: list[ClientUpdate]) -> list[float]:
        """Weights a_k of the participants in the average (default: n_k, as FedAvg)."""
        return [float(u.num_samples) for u in updates]

    # ------------------------------------------------------------ hooks
    def start_state(self, k: int) -> State:
        """Client ``k``'s own state, with the server's shared entries laid over it once the
        server holds an aggregate (the download)."""
        own = self.client_states[k]
        keys = self.shared_keys()
        if not self.has_aggregate or not keys:
            return own
        g = self.global_model.state_dict()
        return {n: (g[n] if n in keys else v) for n, v in own.items()}

    def aggregate(self, t: int, updates: list[ClientUpdate]) -> None:
        """CE-eq 6 on the shared entries, then CE-eq 7: each participant keeps its trained
        state with the shared entries replaced by the average."""
        if not updates:
            return
        keys = self.shared_keys()
        avg: State = {}
        if keys:
            avg = partial_average([u.state for u in updates], self.aggregation_weights(updates), keys)
            self.global_model.load_state_dict(avg, strict=False)
            self.has_aggregate = True
        for u in updates:
            st = clone_state(u.state)
            for n, v in avg.items():
                st[n] = v.clone()
            self.client_states[u.client_id] = st

    def eval_state(self, k: int) -> State:
        return self.client_states[k]

    # ------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()
        out["client_states"] = [clone_state(s) for s in self.client_states]
        out["has_aggregate"] = self.has_aggregate
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.client_states = [clone_state(s) for s in state["client_states"]]
        self.has_aggregate = bool(state["has_aggregate"])

