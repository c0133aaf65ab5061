"""Local training of the selected clients: jobs in, results out (the simulator's hot path).

A :class:`TrainJob` names everything one client's local update depends on — its id, the weights
it starts from, the epochs, and the seeded stream of its mini-batch order — so the result does
not depend on where or in which order the jobs run. :class:`SequentialTrainer` runs them one
after another in this process; a worker pool (:mod:`fedselect.fl.pool`) runs the same jobs in
parallel processes with identical results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from fedselect.data.datasets import ArrayDataset
from fedselect.fl.faults import ClientFailure
from fedselect.fl.train import TrainConfig, local_train
from fedselect.fl.types import Measured, State
from fedselect.seeding import torch_rng


@dataclass(frozen=True)
class TrainJob:
    """One client's local update.

    Attributes:
        client_id: k (indexes the trainer's client data sets).
        start_state: the weights it starts from.
        epochs: local epochs E.
        seed, stream: the mini-batch order comes from ``torch_rng(seed, stream)``
            (:mod:`fedselect.seeding`), e.g. stream ``train/<t>/<k>``.
        sample_losses: also return the sum of squared per-sample losses (Oort).
        trainable: names of the parameters to update, the others frozen (None: all).
        max_steps: stop after this many optimiser steps (a straggler's partial work,
            ``straggler: partial``); None = all ``epochs``.
        prox_mu: FedProx's proximal weight mu >= 0 (Li et al. 2020): the local objective gains
            ``mu/2 ||w - w_start||^2`` (its gradient ``mu (w - w_start)`` is added to every
            parameter's gradient); 0 = plain local training, exactly the code path without it.
        correction: SCAFFOLD's drift correction ``c - c_k`` (Karimireddy et al. 2020), one
            tensor per parameter name, added to every mini-batch gradient; None = none.
        crash_after_batches: fault drill: a worker process of :class:`fedselect.fl.pool.ClientTrainer`
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
    prox_mu: float = 0.0
    correction: State | None = None


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


class SequentialTrainer:
    """Runs :class:`TrainJob` s one after another in this process, in one scratch model.

    Args:
        model_factory: ``() -> nn.Module`` building the architecture (weights are overwritten).
        datasets: the clients' training sets, indexed by client id.
        train_cfg: local-training settings.
    """

    def __init__(self, model_factory, datasets: Sequence[ArrayDataset], train_cfg: TrainConfig):
        self.worker = model_factory()
        self.datasets = list(datasets)
        self.train_cfg = train_cfg

    def train(self, jobs: Sequence[TrainJob]) -> list[TrainResult]:
        """Results in job order."""
        return [self._one(j) for j in jobs]

    def _one(self, job: TrainJob) -> TrainResult:
        if job.crash_after_batches is not None:
            return TrainResult(job.client_id, None, math.nan, error="fault drill: crash (in this process: reported, not killed)")
        self.worker.load_state_dict(job.start_state)
        stats: dict | None = {} if job.sample_losses else None
        try:
            loss = local_train(
                self.worker,
                self.datasets[job.client_id],
                self.train_cfg,
                torch_rng(job.seed, job.stream),
                epochs=job.epochs,
                stats=stats,
                trainable=None if job.trainable is None else set(job.trainable),
                max_steps=job.max_steps,
                prox_mu=job.prox_mu,
                correction=job.correction,
            )
        except ClientFailure as e:  # a client-side failure: the round goes on without this client
            return TrainResult(job.client_id, None, math.nan, error=str(e) or type(e).__name__)
        state = {n: v.detach().clone() for n, v in self.worker.state_dict().items()}
        stats = stats or {}
        return TrainResult(
            job.client_id,
            state,
            loss if loss is not None else math.nan,
            float(stats.get("sum_sq_sample_loss", 0.0)),
            int(stats.get("num_sample_losses", 0)),
        )

    def close(self) -> None:
        """Nothing to release (a pool closes its workers)."""
