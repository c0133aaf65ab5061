"""Local training of the selected clients: jobs in, results out (the simulator's hot path).

A :class:`TrainJob` names everything one client's local update depends on — its id, the weights
it starts from, the epochs, the seeded stream of its mini-batch order and the algorithm's change
to its objective (:mod:`fedselect.fl.local.objective`) — so the result does not depend on where or in
which order the jobs run: the trainer (:class:`fedselect.fl.local.pool.ClientTrainer`) runs the same
jobs in this process, in parallel worker processes or stacked on a GPU, and a Flower node runs
the one it is sent (:mod:`fedselect.flower.wire`).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedselect.fl.local.objective import LocalObjective
from fedselect.fl.types import Measured, State


@dataclass(frozen=True)
class TrainJob:
    """One client's local update.

    Attributes:
        client_id: k (indexes the trainer's client data sets).
        start_state: the weights it starts from.
        epochs: local epochs E.
        seed, stream: the mini-batch order comes from ``torch_rng(seed, stream)``
            (:mod:`fedselect.common.seeding`), e.g. stream ``train/<t>/<k>``.
        sample_losses: also return the sum of squared per-sample losses (Oort).
        trainable: names of the parameters to update, the others frozen (None: all).
        max_steps: stop after this many optimiser steps (a straggler's partial work,
            ``straggler: partial``); None = all ``epochs``.
        objective: the algorithm's change to the local objective
            (:class:`fedselect.fl.local.objective.LocalObjective`: FedProx's proximal term, SCAFFOLD's
            drift correction, ...); None = plain local training (the mean cross-entropy).
        crash_after_batches: fault drill: a worker process of :class:`fedselect.fl.local.pool.ClientTrainer`
            kills itself (SIGKILL) after this many mini-batches, as an out-of-memory kill would;
            trainers in this process report the job failed instead.
    """

    client_id: int
    start_state: State
    epochs: int
    seed: int
    stream: str
    sample_losses: bool = False
    trainable: frozenset[str] | None = None
    crash_after_batches: int | None = None
    max_steps: int | None = None
    objective: LocalObjective | None = None

    def __post_init__(self) -> None:
        if self.objective is not None and not isinstance(self.objective, LocalObjective):
            raise TypeError(
                f"TrainJob for client {self.client_id}: objective must be a fedselect.fl.local.objective.LocalObjective "
                f"or None, got {type(self.objective).__name__}"
            )

    def cost(self, samples: int) -> int:
        """The job's work relative to others, for a client of ``samples`` training samples:
        ``epochs x samples`` (sample passes). A trainer with several workers hands out the
        costliest job first (longest-processing-time first), which shortens a round's wall time
        and never changes a result."""
        return int(self.epochs) * int(samples)


@dataclass(frozen=True)
class TrainResult:
    """The outcome of a :class:`TrainJob`: the new state and mean loss, or an error message.

    Attributes:
        error: why the job failed (None: it did not).
        failure: the failure's kind when the transport knows it (``dropout``: the client
            never answered; ``timeout``: still silent at a wall-clock deadline); None with
            ``error`` set means ``error``.
        measured: the measured round trip and bytes (Flower with measured latency), or None.
    """

    client_id: int
    state: State | None
    loss: float
    sum_sq_sample_loss: float = 0.0
    num_sample_losses: int = 0
    error: str | None = None
    failure: str | None = None
    measured: Measured | None = None
