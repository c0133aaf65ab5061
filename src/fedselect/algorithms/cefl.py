"""CEFL's algorithm — FL among cluster leaders on base layers, then transfer to members
(Chu, Jaafar, Yanikomeroglu). The clustering and the choice of leaders (CE-eq 3, 4, 5)
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
  slowest member's download of the whole model plus its compute for the epochs it ran, FR-eq 4,
  5, with the draws of round T + 1) and the part-4 bytes are charged after the last round and
  counted in the end-to-end latency and the communication (``phases`` in the summary).

Evaluation (the paper's metric): every client on its own held-out split with its own model; during the
rounds a member is scored with its leader's current model (what it would receive), after the
transfer with its fine-tuned model. ``accuracy`` is the mean over clients; ``accuracy_std``
and ``client_accuracy`` give the spread and the per-client values. Because the rounds' scores
are not those of the members' own models, the figures read off the rounds (best, last-k
mean, rounds / latency to target) are blank in the summary and the tables
(:attr:`CEFL.round_scores` says why); the final figures are the transfer's.

Communication (the paper's four parts) in MB (10^6 bytes, float32): parts 1-4 and the total are in the
summary (``communication_parts_mb``, ``communication_mb``); parts 2 and 3 are the bytes the
loop recorded, :func:`cefl_communication` gives the same numbers from the formula.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field

from fedselect.algorithms import register_algorithm
from fedselect.algorithms.base import Finished, RunTotals, ServerState, clone_state
from fedselect.algorithms.fedper import BaseLayerOptions, Personalised, base_layer_names
from fedselect.fl.aggregate import State, state_bytes
from fedselect.fl.cost import CostModel
from fedselect.fl.local.finetune import fine_tune
from fedselect.fl.types import ClientOutcome, PhaseCost
from fedselect.fl.work import FineTuneJob
from fedselect.selectors.base import ClientGroups, Prepared
from fedselect.world.system import to_mb

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
    """CEFL's communication in four parts (CEFL Section II, "Communication cost").

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


# ------------------------------------------------------------------------ the algorithm
class CEFLOptions(BaseLayerOptions):
    """Options of CEFL's algorithm (the paper names eta and a_k; the defaults are fedselect's,
    docs/cefl.md). The clustering options (``clusters``,
    ``warmup_epochs``, ``count_warmup``) belong to the ``cefl_leaders`` selector."""

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
    takes_selection_weights = False
    round_scores = (
        "during the rounds a member is scored with its leader's current model, which it receives only in the transfer "
        "after the last round; scoring every round with the model a member would have after a transfer would mean "
        "running the transfer (up to transfer_epochs epochs per member) at every evaluated round, so only the final "
        "figures, after the transfer, score every client with its own model"
    )

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
        jobs = [
            FineTuneJob(
                m,
                clients[lead],
                o.transfer_epochs,
                o.patience,
                o.validation_fraction,
                self.settings.seed,
                f"cefl-transfer/0/{m}",
                f"cefl/validation/{m}",
            )
            for cluster, lead in zip(groups.clusters, groups.leaders)
            for m in cluster
            if m != lead
        ]
        cost = CostModel(fed, self.settings, self.payload_bytes())
        transfer_latency = 0.0
        for job, res in zip(jobs, self.ctx.run(jobs)):
            m = job.client_id
            if res.error is not None:  # the member keeps its leader's model
                log.warning("cefl transfer: member %d could not fine-tune (%s); it keeps its leader's model", m, res.error)
                clients[m], epochs[m], curves[m] = clone_state(job.start_state), 0, []
            else:
                clients[m], epochs[m], curves[m] = res.state, res.epochs, list(res.curve)
            # the member receives the leader's whole model, then trains the epochs it ran (FR-eq 4, 5)
            transfer_latency = max(transfer_latency, cost.receive_and_train_s(m, epochs[m], self.full_bytes, draws))
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
