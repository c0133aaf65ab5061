"""Work items: everything a client does, as typed jobs that a transport carries out.

A round (:mod:`fedselect.fl.round`) and the services of the selectors and algorithms never run
client code themselves: they hand jobs to a :class:`Transport` and read typed results back.

=====================  =====================================  ==================================
job                    what the client does                   used by
=====================  =====================================  ==================================
``TrainJob``           local training from a start state      rounds, warm-ups (FLASH-RL, FAVOR,
                                                              CEFL), candidates (budgeted online),
                                                              Individual
``EvalJob``            score a state on its own data          per-client evaluation (CEFL, FedPer,
                       (held-out split or training samples)   Regular FL), Power-of-Choice probes;
                       or on the server's validation / test   decisions (validation), reports
                       set (``client None``)                  (test)
``FineTuneJob``        CEFL's transfer: fine-tune a leader's  CEFL's finish
                       model with early stopping
=====================  =====================================  ==================================

:class:`LocalTransport` is the simulator's: training in the worker pool
(:class:`fedselect.fl.local.pool.ClientTrainer`), scores on the server's validation and test sets in
the pool, a client's own data in this process. A Flower node runs the very same :class:`LocalTransport` on its federation for
the jobs the server sends it (:mod:`fedselect.flower.transport`), which is what makes both
engines give the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, Sequence, Union

import numpy as np
import torch

from fedselect.common.seeding import np_rng, torch_rng
from fedselect.fl.evaluate import evaluate, predict
from fedselect.fl.local.clients import TrainJob, TrainResult
from fedselect.fl.local.finetune import fine_tune
from fedselect.fl.local.train import TrainConfig
from fedselect.fl.types import Evaluation, State
from fedselect.world.data.partition import local_holdout

__all__ = [
    "TrainJob",
    "TrainResult",
    "EvalJob",
    "EvalResult",
    "FineTuneJob",
    "FineTuneResult",
    "Job",
    "Result",
    "Transport",
    "LocalTransport",
    "Submissions",
    "job_cost",
    "EVAL_SPLITS",
    "SERVER_SPLITS",
]

#: where an :class:`EvalJob` scores: a client's held-out split, its training data, the server's
#: validation set (what decisions read), the test set (what is reported)
EVAL_SPLITS = ("holdout", "train", "validation", "test")
#: the splits the server holds (an :class:`EvalJob` on them has no client)
SERVER_SPLITS = ("validation", "test")


@dataclass(frozen=True)
class EvalJob:
    """Score ``state`` on client ``client_id``'s ``split`` (``holdout`` or ``train``; only the
    training ``samples`` when given), or on one of the server's sets (``client_id`` None,
    ``split`` ``validation`` or ``test``). ``loss_only``: only the mean cross-entropy is needed
    (probes)."""

    client_id: int | None
    state: State
    split: str = "holdout"
    samples: tuple[int, ...] | None = None
    loss_only: bool = False

    def __post_init__(self) -> None:
        if self.split not in EVAL_SPLITS:
            raise ValueError(f"EvalJob: split must be one of {list(EVAL_SPLITS)}, got {self.split!r}")
        if (self.client_id is None) != (self.split in SERVER_SPLITS):
            raise ValueError(
                f"EvalJob: the server's sets {list(SERVER_SPLITS)} have no client (client_id None); a client's split needs its id"
            )
        if self.samples is not None and self.split != "train":
            raise ValueError("EvalJob: samples index a client's training data (split 'train')")


@dataclass(frozen=True)
class EvalResult:
    """Accuracy, macro-F1 (in [0, 1]; NaN with ``loss_only``) and mean cross-entropy of an
    :class:`EvalJob` over ``num_examples`` rows; ``error`` says why it could not be done."""

    client_id: int | None
    accuracy: float
    f1_macro: float
    loss: float
    num_examples: int = 0
    error: str | None = None

    def as_dict(self) -> dict[str, float]:
        return {"accuracy": self.accuracy, "f1_macro": self.f1_macro, "loss": self.loss}

    def evaluation(self) -> Evaluation:
        """The figures as an :class:`~fedselect.fl.types.Evaluation`."""
        return Evaluation(self.accuracy, self.f1_macro, self.loss)


@dataclass(frozen=True)
class FineTuneJob:
    """CEFL's transfer to member ``client_id`` (CE Section II-D): start from
    ``start_state`` (its leader's model), train at most ``max_epochs`` epochs on its training
    data less a validation share (``validation_fraction``, drawn by ``np_rng(seed,
    validation_stream)``), stop after ``patience`` epochs without a lower validation loss,
    keep the best state; mini-batch order ``torch_rng(seed, stream)``."""

    client_id: int
    start_state: State
    max_epochs: int
    patience: int
    validation_fraction: float
    seed: int
    stream: str
    validation_stream: str


@dataclass(frozen=True)
class FineTuneResult:
    """The fine-tuned state, epochs run, best epoch, its validation loss and the held-out
    accuracy after epochs 0..epochs (``curve``); ``error`` when it failed."""

    client_id: int
    state: State | None
    epochs: int = 0
    best_epoch: int = 0
    val_loss: float = math.nan
    curve: tuple[float, ...] = ()
    error: str | None = None


Job = Union[TrainJob, EvalJob, FineTuneJob]
Result = Union[TrainResult, EvalResult, FineTuneResult]


def job_cost(job: Job, samples: int) -> int:
    """A job's work relative to others for a client of ``samples`` training samples (sample
    passes), to hand out the costliest first: :meth:`TrainJob.cost`; ``max_epochs x samples``
    for a :class:`FineTuneJob` (its most); the rows scored for an :class:`EvalJob` (its
    ``samples`` when given, else ``samples``; the held-out split is a share of them)."""
    if isinstance(job, TrainJob):
        return job.cost(samples)
    if isinstance(job, FineTuneJob):
        return int(job.max_epochs) * int(samples)
    return len(job.samples) if job.samples is not None else int(samples)


class Transport(Protocol):
    """Carries jobs to the clients and their results back.

    Attributes:
        measured: results carry measured times (Flower with ``latency: measured``); the round
            then takes latencies from them instead of the cost model.
        workers: processes training side by side (sizes the warm-up's batches).
    """

    measured: bool
    workers: int

    def run(self, jobs: Sequence[Job]) -> list[Result]:
        """The results in job order; a job that fails gives a result with ``error`` set."""

    def submit(self, jobs: Sequence[Job]) -> list[int]:
        """Start ``jobs`` without waiting for them (``mode: async``: a client starts when its
        slot frees); returns one ticket per job for :meth:`collect`."""

    def collect(self, tickets: Sequence[int]) -> list[Result]:
        """The results of submitted jobs, in ticket order, waiting for them where needed; each
        ticket is collected once."""

    def arrival_order(self, seeded: list[int]) -> Sequence[int]:
        """The order in which budgeted-online candidates arrive (the seeded order here)."""

    def summary(self) -> dict:
        """What the transport adds to ``summary.json`` (``{}`` for the simulator's)."""

    def close(self) -> None: ...


class Submissions:
    """:meth:`Transport.submit` / :meth:`Transport.collect` over a transport's ``run``: the
    jobs submitted are carried out together (side by side in the worker pool) when the first of
    them is collected, so an async run trains every job in flight in one batch, and jobs never
    collected (still in flight when the run ends) are never trained. Results do not depend on
    how the jobs are batched.

    Args:
        run: carries out a list of jobs, returning their results in order.

    Raises:
        KeyError: :meth:`collect` of a ticket never submitted or already collected.
    """

    def __init__(self, run):
        self._run = run
        self._next = 0
        self._pending: dict[int, Job] = {}
        self._done: dict[int, Result] = {}

    def submit(self, jobs: Sequence[Job]) -> list[int]:
        tickets = list(range(self._next, self._next + len(jobs)))
        self._next += len(jobs)
        self._pending.update(zip(tickets, jobs))
        return tickets

    def collect(self, tickets: Sequence[int]) -> list[Result]:
        unknown = [t for t in tickets if t not in self._pending and t not in self._done]
        if unknown:
            raise KeyError(f"tickets {unknown} were never submitted or were already collected")
        if any(t in self._pending for t in tickets):
            order = sorted(self._pending)
            for t, res in zip(order, self._run([self._pending.pop(t) for t in order])):
                self._done[t] = res
        return [self._done.pop(t) for t in tickets]


class LocalTransport:
    """Runs jobs on a federation's data in this process and its worker pool (module docstring).

    Args:
        fed: the federation (clients' data, test set, model).
        trainer: the training engine (:class:`fedselect.fl.local.pool.ClientTrainer` or anything with
            ``train(jobs)``, ``evaluate(state, "test")``, ``workers`` and ``close()``).
        train_cfg: local-training settings (fine-tuning uses them too).
    """

    measured = False

    def __init__(self, fed, trainer, train_cfg: TrainConfig):
        self.fed, self.trainer, self.train_cfg = fed, trainer, train_cfg
        self.workers = int(getattr(trainer, "workers", 0) or 0)
        self._model = None
        self._submitted = Submissions(self.run)

    def _scratch(self) -> torch.nn.Module:
        if self._model is None:
            self._model = self.fed.new_model()
        return self._model

    def run(self, jobs: Sequence[Job]) -> list[Result]:
        """Training jobs go to the trainer together (side by side), the rest run here."""
        train = [j for j in jobs if isinstance(j, TrainJob)]
        trained = iter(self.trainer.train(train) if train else [])
        out: list[Result] = []
        for j in jobs:
            if isinstance(j, TrainJob):
                out.append(next(trained))
            elif isinstance(j, EvalJob):
                out.append(self._evaluate(j))
            elif isinstance(j, FineTuneJob):
                out.append(self._fine_tune(j))
            else:
                raise TypeError(f"unknown job {type(j).__name__}")
        return out

    def submit(self, jobs: Sequence[Job]) -> list[int]:
        """Deferred (:class:`Submissions`): carried out when the first of them is collected."""
        return self._submitted.submit(jobs)

    def collect(self, tickets: Sequence[int]) -> list[Result]:
        """The submitted jobs' results (:class:`Submissions`)."""
        return self._submitted.collect(tickets)

    def _evaluate(self, j: EvalJob) -> EvalResult:
        if j.split in SERVER_SPLITS:
            if j.split == "validation" and not len(self.fed.validation_indices):
                return EvalResult(None, math.nan, math.nan, math.nan, 0, "no validation set (data.validation is 0)")
            m = self.trainer.evaluate(j.state, j.split)
            size = len(self.fed.test_set) if j.split == "test" else len(self.fed.validation_indices)
            return EvalResult(None, float(m["accuracy"]), float(m["f1_macro"]), float(m["loss"]), size)
        client = self.fed.clients[j.client_id]
        data = client.holdout if j.split == "holdout" else client.train
        if j.samples is not None:
            idx = np.asarray(j.samples, dtype=np.int64)
            if idx.size and (idx.min() < 0 or idx.max() >= len(data)):
                return EvalResult(
                    j.client_id, math.nan, math.nan, math.nan, 0, f"sample index out of range ({len(data)} samples)"
                )
            data = data.subset(idx)
        if len(data) == 0:
            return EvalResult(j.client_id, math.nan, math.nan, math.nan, 0)
        model = self._scratch()
        model.load_state_dict(j.state)
        if j.loss_only:
            return EvalResult(j.client_id, math.nan, math.nan, float(predict(model, data)[1]), len(data))
        m = evaluate(model, data)
        return EvalResult(j.client_id, m["accuracy"], m["f1_macro"], m["loss"], len(data))

    def _fine_tune(self, j: FineTuneJob) -> FineTuneResult:
        client = self.fed.clients[j.client_id]
        tr, va = local_holdout(np.arange(client.num_samples), j.validation_fraction, np_rng(j.seed, j.validation_stream))
        model = self._scratch()
        model.load_state_dict(j.start_state)
        res = fine_tune(
            model,
            client.train.subset(tr),
            client.train.subset(va),
            self.train_cfg,
            j.max_epochs,
            j.patience,
            torch_rng(j.seed, j.stream),
            holdout=client.holdout,
        )
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return FineTuneResult(
            j.client_id, state, res["epochs"], res["best_epoch"], res["val_loss"], tuple(float(c) for c in res["curve"])
        )

    def arrival_order(self, seeded: list[int]) -> Sequence[int]:
        return seeded

    def summary(self) -> dict:
        """Nothing to add to ``summary.json``."""
        return {}

    def close(self) -> None:
        self.trainer.close()
