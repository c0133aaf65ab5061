"""What :class:`fedselect.fl.local.pool.ClientTrainer` and its worker processes send each other.

A worker starts from a :class:`WorkerInit` (passed as the process's argument) and announces
itself with :class:`Ready`. The parent then sends :class:`TrainTask` (a
:class:`~fedselect.fl.local.clients.TrainJob` whose start state travels in the worker's shared input
buffer, not in the message) or :class:`EvalTask`, and finally
:class:`Stop`; the worker answers each task with :class:`TrainDone` (the trained state is in its
shared output buffer), :class:`EvalDone` or :class:`Failed`, carrying the task's ``seq`` back.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import numpy as np
import torch
from torch import nn

from fedselect.common.seeding import torch_rng
from fedselect.fl.local.clientdata import ClientData
from fedselect.fl.local.clients import TrainJob
from fedselect.fl.local.train import TrainConfig
from fedselect.fl.types import State
from fedselect.world.models import build_model


@dataclass(frozen=True)
class ModelSpec:
    """What a worker needs to build the model: ``build_model(name, input_shape, num_classes,
    **options)`` (:mod:`fedselect.world.models`). The initial weights do not matter (every job loads
    its start state)."""

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    options: Mapping[str, Any] = field(default_factory=dict)

    def build(self) -> nn.Module:
        return build_model(
            self.name,
            tuple(self.input_shape),
            int(self.num_classes),
            generator=torch_rng(0, "pool/scratch-model"),
            **dict(self.options),
        )


@dataclass
class WorkerInit:
    """A worker's start-up: the model, the shared data and evaluation sets, its shared state
    buffers (``in_buf``: the start state of the next task; ``out_buf``: a trained state)."""

    spec: ModelSpec
    data: ClientData
    eval_sets: dict[str, tuple[torch.Tensor, torch.Tensor]]
    train_cfg: TrainConfig
    channels_last: bool
    in_buf: State
    out_buf: State
    eval_forward_batch: int


# ---------------------------------------------------------------------------- parent -> worker
@dataclass(frozen=True)
class TrainTask:
    """Run ``job``, starting from the state in the worker's input buffer: the job travels
    without it (``start_state`` empty; :meth:`of`).

    The job goes through the pipe as the bytes of a plain ``pickle`` (its local objective's
    tensors copied in), never through ``torch.multiprocessing``'s reductions, which would move
    the sender's tensors into shared memory in place and keep a file descriptor open for each
    (an algorithm's per-client state, e.g. FedDyn's gradients, lives for the whole run)."""

    seq: int
    job: TrainJob

    @classmethod
    def of(cls, job: TrainJob) -> "TrainTask":
        """The task of ``job`` (its start state goes through the input buffer)."""
        return cls(-1, replace(job, start_state={}))

    def __reduce__(self):
        return _train_task, (self.seq, pickle.dumps(self.job, protocol=pickle.HIGHEST_PROTOCOL))


def _train_task(seq: int, job: bytes) -> TrainTask:
    return TrainTask(seq, pickle.loads(job))


@dataclass(frozen=True)
class EvalTask:
    """Predict rows ``[start, stop)`` of evaluation set ``name``; ``load``: load the input
    buffer first (False: the model already holds that state)."""

    seq: int
    name: str
    start: int
    stop: int
    load: bool = True


@dataclass(frozen=True)
class Stop:
    """The worker ends its loop."""


# ---------------------------------------------------------------------------- worker -> parent
@dataclass(frozen=True)
class Ready:
    """The worker built its model and waits for tasks."""

    pid: int


@dataclass(frozen=True)
class TrainDone:
    """A :class:`TrainTask` trained: the state is in the worker's output buffer; the parent
    fills in ``state`` with a copy of it."""

    seq: int
    loss: float
    sum_sq_sample_loss: float
    num_sample_losses: int
    state: State | None = None


@dataclass(frozen=True)
class EvalDone:
    """An :class:`EvalTask`'s predicted labels and summed cross-entropy."""

    seq: int
    pred: np.ndarray
    loss: float


@dataclass(frozen=True)
class Failed:
    """A task that gave no result: a client failure (``bug`` False: the job reports
    ``reason``), or any other exception (``bug`` True: ``reason`` is its traceback and the run
    stops). The parent also reports a worker that died or ran past its time this way."""

    seq: int
    reason: str
    bug: bool = False
