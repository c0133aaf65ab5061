"""The worker-process side of :class:`fedselect.fl.local.pool.ClientTrainer`, and the job code it
shares with training in the calling process.

A worker builds its model once (:func:`worker_main`), warms it up, then serves tasks
(:mod:`fedselect.fl.local.pool_messages`) on one torch thread until told to stop. It trains from the
shared training data: a client is a range of one shared row-index tensor, and each mini-batch
``x[rows[perm[b]]]`` is gathered from the shared inputs, exactly the batches
:func:`fedselect.fl.local.train.local_train` forms from a client's own copy
(:func:`fedselect.fl.local.train.train_steps`). Start and trained states go through the worker's
shared buffers, one ``copy_`` per entry; only small messages go through the pipe.
"""

from __future__ import annotations

import os
import signal
import traceback
from dataclasses import replace
from typing import Mapping

import numpy as np
import torch
from torch import nn

from fedselect.common.seeding import torch_rng
from fedselect.fl.faults import ClientFailure
from fedselect.fl.local.clientdata import ClientData
from fedselect.fl.local.clients import TrainJob
from fedselect.fl.local.pool_messages import EvalDone, EvalTask, Failed, Ready, Stop, TrainDone, TrainTask, WorkerInit
from fedselect.fl.local.train import TrainConfig, train_steps
from fedselect.fl.types import State


class _Crash(ClientFailure):
    """The fault drill of ``TrainJob.crash_after_batches`` where no process may be killed."""


#: exceptions of local training that mean "this client failed" (kind ``error``); any other
#: exception is a bug and stops the run
CLIENT_FAILURES = (ClientFailure, MemoryError)


def load_state(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    model.load_state_dict(state)


def _store(model: nn.Module, out: State) -> None:
    with torch.no_grad():
        for name, v in model.state_dict().items():
            out[name].copy_(v)


def train_job(model: nn.Module, data: ClientData, cfg: TrainConfig, job: TrainJob, in_process: bool) -> TrainDone:
    """Run ``job`` in ``model`` (loaded with ``job.start_state`` here) on client
    ``job.client_id``'s rows of ``data``: the one place a :class:`TrainJob`'s fields become a
    training call, in a worker process and in the calling process alike. The trained state
    stays in ``model``.

    Args:
        in_process: the fault drill (``crash_after_batches``) raises a client failure instead of
            killing the process.

    Returns:
        The loss and Oort's sample-loss statistics (``seq`` -1; the caller sets it).
    """
    load_state(model, job.start_state)
    stats: dict | None = {} if job.sample_losses else None
    after = None
    crash_after = job.crash_after_batches
    if crash_after is not None:

        def after(i: int) -> None:
            if i >= crash_after:
                if in_process:
                    raise _Crash(f"fault drill: crash after {crash_after} mini-batches (in-process: reported, not killed)")
                os.kill(os.getpid(), signal.SIGKILL)

    loss = train_steps(
        model,
        data.x,
        data.y,
        data.client_rows(job.client_id),
        cfg,
        torch_rng(job.seed, job.stream),
        epochs=job.epochs,
        trainable=job.trainable,
        stats=stats,
        after_batch=after,
        max_steps=job.max_steps,
        objective=job.objective,
    )
    if stats is None:
        return TrainDone(-1, loss, 0.0, 0)
    return TrainDone(-1, loss, float(stats["sum_sq_sample_loss"]), int(stats["num_sample_losses"]))


def eval_chunk(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, start: int, stop: int, forward_batch: int
) -> tuple[np.ndarray, float]:
    """Predicted labels of rows ``[start, stop)`` and their summed cross-entropy (one float32
    sum, as :func:`fedselect.fl.evaluate.predict` sums one batch)."""
    model.eval()
    with torch.inference_mode():
        logits = torch.cat([model(x[i : min(i + forward_batch, stop)]) for i in range(start, stop, forward_batch)])
        loss = float(nn.functional.cross_entropy(logits, y[start:stop], reduction="sum"))
        return logits.argmax(dim=1).cpu().numpy().copy(), loss


def _warm_up(model: nn.Module, init: WorkerInit) -> None:
    """One throw-away optimiser step and one forward pass, so that one-time costs (lazy
    imports, kernel set-up) fall into the start-up, not into the first job's time limit. Every
    job loads its own start state, so the weights changed here are never used."""
    from fedselect.fl.local.train import make_optimizer

    shape = init.spec.input_shape
    b = max(1, min(init.train_cfg.batch_size, 64))
    x = torch.zeros((b, *shape))
    model.train()
    opt = make_optimizer(model, init.train_cfg)
    nn.functional.cross_entropy(model(x), torch.zeros(b, dtype=torch.int64)).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    model.eval()
    with torch.inference_mode():
        model(torch.zeros((min(init.eval_forward_batch, 8), *shape)))


def _serve(model: nn.Module, init: WorkerInit, task: TrainTask | EvalTask) -> TrainDone | EvalDone:
    if isinstance(task, TrainTask):
        done = train_job(model, init.data, init.train_cfg, replace(task.job, start_state=init.in_buf), in_process=False)
        _store(model, init.out_buf)
        return replace(done, seq=task.seq)
    if task.load:
        load_state(model, init.in_buf)
    x, y = init.eval_sets[task.name]
    pred, loss = eval_chunk(model, x, y, task.start, task.stop, init.eval_forward_batch)
    return EvalDone(task.seq, pred, loss)


def worker_main(conn, init: WorkerInit) -> None:
    """Loop of one worker process: build the model once, then serve tasks until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    model = init.spec.build()
    if init.channels_last:
        model = model.to(memory_format=torch.channels_last)
    _warm_up(model, init)
    conn.send(Ready(os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if isinstance(msg, Stop):
            return
        seq = getattr(msg, "seq", -1)
        try:
            if not isinstance(msg, (TrainTask, EvalTask)):
                raise TypeError(f"unknown message {msg!r}")
            conn.send(_serve(model, init, msg))
        except CLIENT_FAILURES as e:  # the client failed: reported for this job
            conn.send(Failed(seq, f"{type(e).__name__}: {e}"))
        except Exception:  # a bug: the main process stops the run with this traceback
            conn.send(Failed(seq, traceback.format_exc(limit=8), bug=True))
