"""CEFL's algorithm — FL among cluster leaders on base layers, then transfer to members
(Chu, Jaafar, Yanikomeroglu; SPEC 2). The clustering and the choice of leaders (CE-eq 3, 4, 5)
are the ``cefl_leaders`` selector's (:mod:`fedselect.selectors.cefl_leaders`); this algorithm
needs its groups and warm-up models.

* ``prepare``: every client's model is its warm-up model (communication part 1, charged by the
  selector).
* rounds 1..T: each leader trains ``train.local_epochs`` epochs from its own model, uploads its
  base layers (part 2); the server averages them with ``a_k = 1/K`` (``leader_weights:
  uniform``, the paper's choice) or by sample count (CE-eq 6) and broadcasts the result, which
  overwrites every leader's base layers (CE-eq 7, part 3). Personalised layers never leave the
  leaders.
* ``finish``: transfer learning — each leader sends its whole model to every member of its
  cluster (part 4); a member starts from it and trains on its own data for at most
  ``transfer_epochs`` (eta) epochs, stopping when the loss on a local validation split
  (``validation_fraction`` of its training data) has not improved for ``patience`` (3)
  epochs; the state with the lowest validation loss (epoch 0 = the leader's model included)
  is kept. No further communication. The phase's simulated time (members in parallel: the
  slowest member's download of the whole model plus its compute for the epochs it ran, FR-eq 3,
  4, with the draws of round T + 1) and the part-4 bytes are charged after the last round and
  counted in the end-to-end latency and the communication (``phases`` in the summary).

Evaluation (SPEC 2): every client on its own held-out split with its own model; during the
rounds a member is scored with its leader's current model (what it would receive), after the
transfer with its fine-tuned model. ``accuracy`` is the mean over clients; ``accuracy_std``
and ``client_accuracy`` give the spread and the per-client values.

Communication (SPEC 2 item 7) in MB (10^6 bytes, float32): parts 1-4 and the total are in the
summary (``communication_parts_mb``, ``communication_mb``); parts 2 and 3 are the bytes the
loop recorded, :func:`cefl_communication` gives the same numbers from the formula.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field

from fedselect.algorithms import register_algorithm
from fedselect.algorithms.base import Finished, RunTotals, ServerState, clone_state
from fedselect.algorithms.fedper import BaseLayerOptions, Personalised, base_layer_names
from fedselect.data.datasets import ArrayDataset
from fedselect.data.partition import local_holdout
from fedselect.fl.aggregate import State, state_bytes
from fedselect.fl.evaluate import evaluate
from fedselect.fl.train import TrainConfig, iterate_minibatches, make_optimizer
from fedselect.fl.types import ClientOutcome, PhaseCost
from fedselect.seeding import np_rng
from fedselect.selectors.base import ClientGroups, Prepared
from fedselect.system import compute_time, to_mb, transmit_time

log = logging.getLogger(__name__)

__all__ = ["CEFL", "CEFLOptions", "fine_tune", "cefl_communication", "regular_fl_communication", "fedper_communication"]


def _check(full_bytes: int, base_bytes: int, rounds: int) -> None:
    if full_bytes < 0 or base_bytes < 0:
        raise ValueError(f"byte counts must be >= 0, got full={full_bytes}, base={base_bytes}")
    if base_bytes > full_bytes:
        raise ValueError(f"base layers ({base_bytes} B) cannot exceed the whole model ({full_bytes} B)")
    if rounds < 0:
        raise ValueError(f"rounds must be >= 0, got {rounds}")


# ------------------------------------------------------------------------ accounting
def cefl_communication(
    full_bytes: int, base_bytes: int, num_clients: int, cluster_sizes: Sequence[int], rounds: int
) -> dict[str, float]:
    """CEFL's communication in four parts (SPEC 2 item 7; CEFL Section II, "Communication cost").

    * part 1: every client uploads its whole warm-up model once: ``N * full``;
    * part 2: every leader uploads its base layers each round: ``T * K * base``;
    * part 3: the server broadcasts the aggregated base layers to every leader each round:
      ``T * K * base``;
    * part 4: every leader sends its whole model to each member of its cluster once:
      ``sum_k (|C_k| - 1) * full``.

    Args:
        full_bytes: bytes of the whole model (float32).
        base_bytes: bytes of the base layers.
        num_clients: N.
        cluster_sizes: ``|C_k|`` for the K clusters (each >= 1, summing to N).
        rounds: T, federated rounds among leaders that were run.

    Returns:
        ``{"part1_mb", "part2_mb", "part3_mb", "part4_mb", "total_mb"}`` in MB (10^6 bytes).

    Raises:
        ValueError: negative sizes, base larger than full, empty clusters, or sizes not
            summing to ``num_clients``.
    """
    _check(full_bytes, base_bytes, rounds)
    sizes = [int(c) for c in cluster_sizes]
    if not sizes or min(sizes) < 1:
        raise ValueError(f"cluster sizes must be >= 1 and non-empty, got {sizes}")
    if sum(sizes) != num_clients:
        raise ValueError(f"cluster sizes {sizes} sum to {sum(sizes)}, not num_clients={num_clients}")
    k = len(sizes)
    parts = {
        "part1_mb": to_mb(num_clients * full_bytes),
        "part2_mb": to_mb(rounds * k * base_bytes),
        "part3_mb": to_mb(rounds * k * base_bytes),
        "part4_mb": to_mb(sum(c - 1 for c in sizes) * full_bytes),
    }
    parts["total_mb"] = to_mb(num_clients * full_bytes + 2 * rounds * k * base_bytes + sum(c - 1 for c in sizes) * full_bytes)
    return parts


def regular_fl_communication(full_bytes: int, participants_per_round: Sequence[int] | int, rounds: int | None = None) -> float:
    """Regular FL (full-participation FedAvg): each participant downloads and uploads the whole
    model every round. ``participants_per_round`` is a per-round list of counts, or one count
    used for ``rounds`` rounds. Returns MB."""
    counts = _counts(participants_per_round, rounds)
    _check(full_bytes, 0, len(counts))
    return to_mb(2 * full_bytes * sum(counts))


def fedper_communication(base_bytes: int, participants_per_round: Sequence[int] | int, rounds: int | None = None) -> float:
    """FedPer: each participant uploads and downloads only the base layers every round. MB."""
    counts = _counts(participants_per_round, rounds)
    _check(base_bytes, base_bytes, len(counts))
    return to_mb(2 * base_bytes * sum(counts))


def _counts(per_round: Sequence[int] | int, rounds: int | None) -> list[int]:
    if isinstance(per_round, int):
        if rounds is None or rounds < 0:
            raise ValueError(f"rounds must be given and >= 0 with a single participant count, got {rounds}")
        return [per_round] * rounds
    return [int(c) for c in per_round]


# ------------------------------------------------------------------------ transfer learning
def fine_tune(
    model: torch.nn.Module,
    train: ArrayDataset,
    val: ArrayDataset,
    cfg: TrainConfig,
    max_epochs: int,
    patience: int,
    generator: torch.Generator,
    holdout: ArrayDataset | None = None,
) -> dict[str, Any]:
    """Train ``model`` in place for at most ``max_epochs`` epochs with early stopping on the
    validation loss, then load the best state (CEFL transfer step; SPEC 2 item 6).

    One optimizer (``cfg``) for all epochs. The validation loss is measured before training
    (epoch 0) and after every epoch; training stops after ``patience`` epochs in a row
    without a strictly lower loss; the state with the lowest loss is kept (the earliest on
    ties). With an empty ``val`` every epoch runs and the last state is kept.

    Args:
        holdout: optional set scored after every epoch for the convergence curve only (it
            never influences training or the choice of state).

    Returns:
        ``{"epochs": epochs run, "best_epoch": e, "val_loss": best loss (nan without val),
        "curve": holdout accuracy after epochs 0..epochs (empty without holdout)}``.

    Raises:
        ValueError: ``max_epochs < 0`` or ``patience < 1``.
    """
    if max_epochs < 0 or patience < 1:
        raise ValueError(f"need max_epochs >= 0 and patience >= 1, got {max_epochs}, {patience}")
    curve = [evaluate(model, holdout)["accuracy"]] if holdout is not None and len(holdout) else []
    use_val = len(val) > 0
    best_loss = evaluate(model, val)["loss"] if use_val else math.nan
    best_state, best_epoch, bad, epochs = clone_state(model.state_dict()), 0, 0, 0
    if len(train) == 0 or max_epochs == 0:
        return {"epochs": 0, "best_epoch": 0, "val_loss": best_loss, "curve": curve}
    x, y = torch.from_numpy(train.x), torch.from_numpy(train.y)
    opt = make_optimizer(model, cfg)
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(1, max_epochs + 1):
        model.train()
        for idx in iterate_minibatches(len(train), cfg.batch_size, generator):
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x[idx]), y[idx]).backward()
            opt.step()
        epochs = epoch
        if curve:
            curve.append(evaluate(model, holdout)["accuracy"])
        if not use_val:
            continue
        v = evaluate(model, val)["loss"]
        if v < best_loss:
            best_loss, best_state, best_epoch, bad = v, clone_state(model.state_dict()), epoch, 0
        else:
            bad += 1
            if bad >= patience:
                break
    if use_val:
        model.load_state_dict(best_state)
    else:
        best_epoch = epochs
    return {"epochs": epochs, "best_epoch": best_epoch, "val_loss": best_loss, "curve": curve}


# ------------------------------------------------------------------------ the algorithm
class CEFLOptions(BaseLayerOptions):
    """Options of CEFL's algorithm (defaults: SPEC 2 and the paper). The clustering options
    (``clusters``, ``warmup_epochs``, ``count_warmup``) belong to the ``cefl_leaders`` selector."""

    leader_weights: Literal["uniform", "samples"] = Field("uniform", description="a_k of CE-eq 6: 1/K or n_k / sum n")
    transfer_epochs: int = Field(50, ge=0, description="eta, most local epochs of a member after the transfer")
    patience: int = Field(3, ge=1, description="early-stopping patience (epochs) of the transfer")
    validation_fraction: float = Field(
        0.2, ge=0.0, lt=1.0, description="share of a member's training data used for early stopping"
    )


@register_algorithm
class CEFL(Personalised):
    """CEFL (module docstring).

    Raises:
        ValueError: an empty or unknown base layer set; a client without held-out data; (at
            ``prepare``) a selector that gave no groups.
    """

    name = "cefl"
    summary = "CEFL: FL among cluster leaders on the base layers, then transfer to members"
    Options = CEFLOptions
    needs_groups = True

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self.base_names = base_layer_names(self.worker, self.options.base_layers)
        st = self.worker.state_dict()
        self.full_bytes = state_bytes(st)
        self.base_bytes = state_bytes(st, self.base_names)
        self.groups: ClientGroups | None = None
        self.leader_of: dict[int, int] = {}
        self.prepared_summary: dict[str, Any] = {}

    def shared_keys(self) -> list[str]:
        return list(self.base_names)

    def prepare(self, state: ServerState, prepared: Prepared) -> ServerState:
        """Take the selector's groups; every client's model becomes its warm-up model."""
        if prepared.groups is None or prepared.warm_states is None:
            raise ValueError(
                "algorithm 'cefl' needs a selector that clusters the clients and names leaders (selector 'cefl_leaders')"
            )
        self._set_groups(prepared.groups)
        self.prepared_summary = {k: v for k, v in prepared.summary.items() if k == "warmup_epochs"}
        return ServerState(state.model, tuple(prepared.warm_states), False)

    def _set_groups(self, groups: ClientGroups) -> None:
        self.groups = groups
        self.leader_of = groups.leader_of()

    def aggregation_weights(self, outcomes: Sequence[ClientOutcome]) -> list[float]:
        if self.options.leader_weights == "uniform":
            return [1.0] * len(outcomes)
        return [float(o.num_samples) for o in outcomes]

    def eval_state(self, state: ServerState, k: int) -> State:
        """A member is scored with its leader's current model (what it would receive)."""
        return state.clients[self.leader_of.get(k, k)]

    # ------------------------------------------------------------ finish: transfer
    def finish(self, state: ServerState, totals: RunTotals, last) -> Finished:
        """Transfer learning to members (part 4), then the final per-client evaluation and
        the communication parts."""
        fed, o = self.fed, self.options
        t0 = time.perf_counter()
        epochs, curves = {}, {}
        clients = list(state.clients)
        groups = self.groups
        draws = fed.fleet.draw(self.settings.rounds + 1)  # the transfer happens after the last round
        transfer_latency = 0.0
        for cluster, lead in zip(groups.clusters, groups.leaders):
            for m in cluster:
                if m == lead:
                    continue
                client = fed.clients[m]
                tr, va = local_holdout(
                    np.arange(client.num_samples), o.validation_fraction, np_rng(self.settings.seed, f"cefl/validation/{m}")
                )
                self.worker.load_state_dict(clients[lead])
                res = fine_tune(
                    self.worker,
                    client.train.subset(tr),
                    client.train.subset(va),
                    self.train_cfg,
                    o.transfer_epochs,
                    o.patience,
                    fed.train_generator(0, m, tag="cefl-transfer"),
                    holdout=client.holdout,
                )
                clients[m] = clone_state(self.worker.state_dict())
                epochs[m], curves[m] = res["epochs"], res["curve"]
                # the member receives the leader's whole model, then trains the epochs it ran (FR-eq 3, 4)
                lat = compute_time(
                    res["epochs"], fed.client_bits(m), self.settings.cycles_per_bit, fed.fleet.cores[m], draws.freq_mhz[m]
                ) + transmit_time(self.full_bytes * 8, draws.bandwidth_mbps[m])
                transfer_latency = max(transfer_latency, lat)
        final_state = ServerState(state.model, tuple(clients), state.aggregated)
        final = self.evaluate_clients(lambda k: clients[k])
        sizes = [len(c) for c in groups.clusters]
        part1 = fed.num_clients * self.full_bytes
        part4 = sum(c - 1 for c in sizes) * self.full_bytes
        up, down = totals.rounds_upload_bytes, totals.rounds_download_bytes
        parts = {"part1_mb": to_mb(part1), "part2_mb": to_mb(up), "part3_mb": to_mb(down), "part4_mb": to_mb(part4)}
        parts["total_mb"] = to_mb(part1 + up + down + part4)
        # convergence of the transfer: mean over all clients, members at epoch e (or their last), leaders fixed
        horizon = max((len(c) for c in curves.values()), default=0)
        lead_acc = {k: final.per_client["client_accuracy"][k] for k in groups.leaders}
        curve = []
        for e in range(horizon):
            vals = [c[min(e, len(c) - 1)] for c in curves.values() if c] + list(lead_acc.values())
            curve.append(float(np.mean(vals)))
        log.info(
            "cefl transfer: member epochs %s; mean client accuracy %.4f +- %.4f; communication %.3f MB",
            epochs,
            final.accuracy,
            final.per_client["accuracy_std"],
            parts["total_mb"],
        )
        warmup_epochs = int(self.prepared_summary.get("warmup_epochs", 0))
        summary = {
            "communication_parts_mb": parts,
            "clusters": groups.clusters,
            "leaders": groups.leaders,
            "transfer_epochs": {str(k): v for k, v in epochs.items()},
            "transfer_curve": curve,
            "transfer_latency_s": transfer_latency,
            "transfer_wall_s": time.perf_counter() - t0,
            "episodes": fed.num_clients * warmup_epochs
            + self.settings.rounds * len(groups.leaders) * self.train_cfg.epochs
            + sum(epochs.values()),
        }
        # members fine-tune in parallel: the phase lasts as long as its slowest member
        return Finished(final_state, final, summary, PhaseCost(transfer_latency, 0, part4))

    # ------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        g = self.groups
        return {
            "clusters": None if g is None else [list(c) for c in g.clusters],
            "leaders": None if g is None else list(g.leaders),
            "prepared_summary": dict(self.prepared_summary),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("clusters") is not None:
            self._set_groups(ClientGroups([list(c) for c in state["clusters"]], [int(x) for x in state["leaders"]]))
        self.prepared_summary = dict(state.get("prepared_summary") or {})
