"""Parallel local training and evaluation in a pool of worker processes (issue 13).

:class:`ClientTrainer` trains the clients of a round side by side, one worker process per
usable core, each running PyTorch with exactly **one** intra-op thread. Every client trains
from its own seeded generator (``fedselect.common.seeding.torch_rng(seed, stream)``) on one thread, so
a client's result depends only on its job -- never on the number of workers, on which worker
ran it, or on the main process's ``torch.get_num_threads()``: results are bit-identical for
``workers = 0`` (in the calling process), 1, 2, ...

The training inputs, labels and evaluation sets are copied once into shared memory; each
worker builds its model once and trains from the shared rows (:mod:`fedselect.fl.local.pool_worker`);
the two sides exchange small typed messages (:mod:`fedselect.fl.local.pool_messages`); a worker that
dies or runs past ``job_timeout_s`` fails only its job and is replaced
(:mod:`fedselect.fl.local.pool_dispatch`). **Channels-last** (``channels_last``, default: the model's
preference, :func:`fedselect.world.models.prefers_channels_last`): the workers' CNN runs in
``torch.channels_last`` memory format, 1.5-2x faster per client epoch on CPU
(docs/performance.md); states come back contiguous. It changes float results in the last bits
compared with the standard layout; ``channels_last=False`` trains bit-identically to
``local_train`` on a standard model.

Usage (one round of FedAvg)::

    with ClientTrainer.from_federation(fed, train_cfg, workers=2) as trainer:
        jobs = [TrainJob(k, global_state, epochs=5, seed=seed, stream=f"train/{t}/{k}") for k in chosen]
        results = trainer.train(jobs)                      # in job order
        metrics = trainer.evaluate(new_global_state, "test")   # {"accuracy", "f1_macro", "loss"}

``workers=0`` trains in the calling process (with one torch thread while it trains) and
starts no process; so does any ``workers`` where a worker could not re-import the main module
or build the model (:func:`fedselect.fl.local.placement.worker_obstacle`). On ``device="cuda"``
everything runs in the calling process on the GPU (sequentially, or stacked with
``torch.func`` when ``batched``; :mod:`fedselect.fl.local.batched`).
"""

from __future__ import annotations

import logging
import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from typing import Iterator, Mapping, Sequence

import numpy as np
import torch

from fedselect.fl.evaluate import macro_f1
from fedselect.fl.local.clientdata import ClientData, _shared_copy
from fedselect.fl.local.clients import TrainJob, TrainResult
from fedselect.fl.local.device_errors import on_device
from fedselect.fl.local.objective import objective_path
from fedselect.fl.local.placement import resolve_device, torch_threads, worker_count, worker_obstacle
from fedselect.fl.local.pool_dispatch import Task, WorkerPool
from fedselect.fl.local.pool_messages import EvalDone, EvalTask, Failed, ModelSpec, TrainDone, TrainTask, WorkerInit
from fedselect.fl.local.pool_worker import CLIENT_FAILURES, eval_chunk, load_state, train_job
from fedselect.fl.local.train import TrainConfig
from fedselect.fl.types import State
from fedselect.world.data.datasets import ArrayDataset
from fedselect.world.models import MODELS, prefers_channels_last

log = logging.getLogger("fedselect")

__all__ = [
    "ClientTrainer",
    "ClientData",
    "ModelSpec",
    "TrainJob",
    "TrainResult",
    "eval_chunk",
    "EVAL_CHUNK",
    "EVAL_FORWARD_BATCH",
]

#: rows of an evaluation set whose cross-entropy is summed as one float32 sum before being
#: added (in float64, in order) to the total: the chunking of :func:`fedselect.fl.evaluate.predict`
#: with its default ``batch_size``, so that both give the same loss
EVAL_CHUNK = 1000
#: inputs per forward pass inside an evaluation chunk (smaller batches stay in cache: measured
#: 1.5-2x faster than 1000 for the CNNs on CPU, docs/performance.md)
EVAL_FORWARD_BATCH = 250


#: notices logged as warnings in this process (later ones at info level: one line per process)
_NOTICED: set[str] = set()


def _notice(message: str) -> None:
    """Log ``message`` as a warning the first time in this process, at info level after (a
    comparison builds one trainer per run, and says it once)."""
    log.log(logging.INFO if message in _NOTICED else logging.WARNING, "%s", message)
    _NOTICED.add(message)


def _check_options(start_method: str, job_timeout_s: float | None, eval_forward_batch: int | None, eval_threads: int) -> None:
    """:class:`ClientTrainer`'s options checked, each named with what is allowed (ValueError)."""
    if start_method not in ("forkserver", "spawn"):
        raise ValueError(f"start_method must be 'forkserver' or 'spawn', got {start_method!r}")
    if job_timeout_s is not None and not job_timeout_s > 0:
        raise ValueError(f"job_timeout_s must be > 0 or None, got {job_timeout_s!r}")
    if eval_forward_batch is not None and eval_forward_batch < 1:
        raise ValueError(f"eval_forward_batch must be >= 1, got {eval_forward_batch!r}")
    if isinstance(eval_threads, bool) or not isinstance(eval_threads, int) or eval_threads < 1:
        raise ValueError(f"eval_threads must be an integer >= 1, got {eval_threads!r}")


class ClientTrainer:
    """Trains clients' local models (and evaluates models) in parallel worker processes.

    Args:
        model_spec: :class:`ModelSpec`, or a tuple ``(name, input_shape, num_classes, options)``.
        data: every client's training data: a :class:`ClientData`, or a list of client
            :class:`ArrayDataset` (client k = ``data[k]``; concatenated into one shared copy).
        train_cfg: local-training hyper-parameters (SGD/Adam, lr, batch size, ...).
        workers: worker processes; None = :func:`~fedselect.fl.local.placement.usable_cores`;
            0 = train in the calling process (one torch thread while training, no process
            started); more than the usable cores starts one per usable core, with a warning.
        eval_sets: named evaluation sets (e.g. ``{"test": fed.test_set}``) for :meth:`evaluate`.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (cuda when available).
            On a GPU the trainer works in the calling process and ``workers`` is ignored.
        batched: on a GPU, train the jobs of one call stacked with ``torch.func``
            (:mod:`fedselect.fl.local.batched`); None = yes on a GPU where the model allows it, never
            on CPU (slower there, docs/performance.md). True on CPU is for tests.
        channels_last: None = the model's preference (:func:`fedselect.world.models.prefers_channels_last`).
        job_timeout_s: wall-clock bound of one job in a worker (None: no bound; a worker that
            dies is detected either way).
        start_method: ``"forkserver"`` (default) or ``"spawn"``.
        start_timeout_s: how long to wait for the workers to come up.
        eval_forward_batch: inputs per forward pass in an evaluation chunk; None = 250 for the
            channels-last CNNs, the whole chunk (1,000) for other models.
        eval_threads: with ``workers=0`` on CPU, the evaluation chunks of :meth:`evaluate` are
            spread over this many threads of the calling process, each with one torch thread
            (each chunk is computed exactly as in a worker: the result does not depend on it);
            1 = one after another.

    Raises:
        ValueError: a bad argument (names it and what is allowed), e.g. cuda where none is available.
        RuntimeError: a worker failed to start (its error is in the message);
            :class:`~fedselect.fl.local.device_errors.DeviceError` when the data does not fit on the GPU.

    Where worker processes cannot re-import the main module or build the model (a script on
    stdin, a script calling fedselect outside ``if __name__ == "__main__":``, a model defined
    in a notebook: :func:`~fedselect.fl.local.placement.worker_obstacle`), ``workers > 0``
    trains in the calling process instead, with a one-line warning (once per process); results
    do not depend on it.
    """

    def __init__(
        self,
        model_spec: ModelSpec | tuple,
        data: ClientData | Sequence[ArrayDataset],
        train_cfg: TrainConfig,
        workers: int | None = None,
        eval_sets: Mapping[str, ArrayDataset] | None = None,
        device: str = "cpu",
        batched: bool | None = None,
        channels_last: bool | None = None,
        job_timeout_s: float | None = None,
        start_method: str = "forkserver",
        start_timeout_s: float = 300.0,
        eval_forward_batch: int | None = None,
        eval_threads: int = 1,
    ):
        t0 = time.perf_counter()
        spec = model_spec if isinstance(model_spec, ModelSpec) else ModelSpec(*model_spec)
        self.spec = replace(spec, name=MODELS.path_of(spec.name))  # what a worker process can import
        if not isinstance(data, ClientData):
            data = ClientData.from_datasets(list(data))
        workers = worker_count(workers)
        _check_options(start_method, job_timeout_s, eval_forward_batch, eval_threads)
        self.eval_threads = eval_threads
        self.device = resolve_device(device)
        self.train_cfg = train_cfg
        self.job_timeout_s = job_timeout_s
        self.start_timeout_s = float(start_timeout_s)
        model = self.spec.build()
        self.channels_last = prefers_channels_last(model) if channels_last is None else bool(channels_last)
        # the CNNs evaluate faster in forward batches of 250 (their logits do not depend on the
        # batch size); other models' logits do (matrix kernels), so they keep the whole chunk
        if eval_forward_batch is None:
            eval_forward_batch = EVAL_FORWARD_BATCH if self.channels_last else EVAL_CHUNK
        self.eval_forward_batch = int(eval_forward_batch)
        self._names = list(model.state_dict().keys())
        self._shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        on_gpu = self.device.type != "cpu"
        self.workers = 0 if on_gpu else int(workers)
        self._choose_batched(batched, on_gpu, model)
        self._train_here_if_workers_cannot_start()
        self._param_names = {n for n, _ in model.named_parameters()}
        eval_sets = dict(eval_sets or {})
        self._eval_sizes = {name: len(d) for name, d in eval_sets.items()}
        self._closed = False
        self._pool: WorkerPool | None = None
        if self.workers == 0:
            self._place_here(model, data, eval_sets, on_gpu)
        else:
            self._start_workers(model, data, eval_sets, train_cfg, start_method, job_timeout_s)
        self.startup_s = time.perf_counter() - t0

    def _choose_batched(self, batched: bool | None, on_gpu: bool, model: torch.nn.Module) -> None:
        """``self.batched``: as asked, or (None) on a GPU where the model allows stacking."""
        if batched is None:
            from fedselect.fl.local.batched import supports_batched

            batched = on_gpu and supports_batched(model)
        self.batched = bool(batched)
        if self.batched and self.workers > 0:
            raise ValueError(
                "batched=True trains in the calling process: use it with workers=0 or on a GPU "
                f"(got workers={self.workers} on {self.device})"
            )

    def _train_here_if_workers_cannot_start(self) -> None:
        """``workers = 0``, with a notice once per process, where worker processes could not
        re-import the main module or build the model
        (:func:`~fedselect.fl.local.placement.worker_obstacle`)."""
        obstacle = worker_obstacle(self.spec.name) if self.workers > 0 else None
        if obstacle is not None:
            _notice(
                f"worker processes cannot start or cannot build model {self.spec.name!r} here ({obstacle}): "
                "training in this process (results do not depend on it)"
            )
            self.workers = 0

    def _place_here(self, model: torch.nn.Module, data: ClientData, eval_sets: dict[str, ArrayDataset], on_gpu: bool) -> None:
        """Training in the calling process: the model, the clients' data and the evaluation sets
        on the trainer's device."""
        with on_device(self.device, "moving the model, the clients' data and the evaluation sets to the device"):
            self._model = model.to(self.device)
            if self.channels_last:
                self._model = self._model.to(memory_format=torch.channels_last)
            self.data = data if not on_gpu else data.to(self.device)
            self._eval = {
                n: (torch.from_numpy(d.x).to(self.device), torch.from_numpy(d.y).to(self.device)) for n, d in eval_sets.items()
            }

    def _start_workers(
        self,
        model: torch.nn.Module,
        data: ClientData,
        eval_sets: dict[str, ArrayDataset],
        train_cfg: TrainConfig,
        start_method: str,
        job_timeout_s: float | None,
    ) -> None:
        """Training in worker processes: the data and the evaluation sets copied once into shared
        memory, two shared state buffers per worker (start state in, trained state out), the pool
        started."""
        self._model = None
        self.data = data.shared()
        self._eval = {n: (_shared_copy(torch.from_numpy(d.x)), _shared_copy(torch.from_numpy(d.y))) for n, d in eval_sets.items()}
        template = model.state_dict()
        inits = []
        for _ in range(self.workers):
            in_buf = {k: _shared_copy(torch.zeros_like(v)) for k, v in template.items()}
            out_buf = {k: _shared_copy(torch.zeros_like(v)) for k, v in template.items()}
            inits.append(
                WorkerInit(
                    self.spec, self.data, self._eval, train_cfg, self.channels_last, in_buf, out_buf, self.eval_forward_batch
                )
            )
        self._pool = WorkerPool(inits, start_method, self.start_timeout_s, job_timeout_s)

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_federation(cls, fed, train_cfg: TrainConfig, **kwargs) -> "ClientTrainer":
        """A trainer over a :class:`fedselect.world.federation.Federation`: its training set shared
        once, client k = ``fed.clients[k].train_indices``, the test set registered as
        ``"test"`` and the server's validation set (when it has rows) as ``"validation"``, the
        model of ``fed.model``."""
        m = fed.model
        spec = ModelSpec(m.name, tuple(fed.input_shape), int(fed.num_classes), dict(m.options))
        data = ClientData.from_arrays(fed.train_set.x, fed.train_set.y, [c.train_indices for c in fed.clients], fed.num_classes)
        eval_sets = dict(kwargs.pop("eval_sets", None) or {})
        eval_sets.setdefault("test", fed.test_set)
        if len(fed.validation_indices):
            eval_sets.setdefault("validation", fed.validation_set)
        return cls(spec, data, train_cfg, eval_sets=eval_sets, **kwargs)

    def worker_pids(self) -> list[int]:
        """Process ids of the workers (empty with ``workers=0``)."""
        return [] if self._pool is None else self._pool.pids()

    # ------------------------------------------------------------------ public API
    def train(self, jobs: Sequence[TrainJob]) -> list[TrainResult]:
        """Run every job (:class:`fedselect.fl.local.clients.TrainJob`); results in job order. A job
        whose training raised :class:`fedselect.fl.faults.ClientFailure` (or ``MemoryError``),
        whose worker died (a signal, the out-of-memory killer), or that ran past
        ``job_timeout_s`` gives a result with ``error`` set and ``state`` None.

        Raises:
            fedselect.fl.local.device_errors.DeviceError: the GPU failed (out of memory, a CUDA error):
                the message names the device and what to do.
            ValueError: a job names a client outside the data, a negative epoch count, unknown
                trainable names, a start state whose entries do not match the model, or an
                objective that does not fit the model (its ``check``) or, with worker
                processes, whose class they cannot import.
            RuntimeError: the trainer is closed, or training raised any other exception (a bug:
                the message holds the worker's traceback; the other jobs were completed first).
        """
        self._check_open()
        for j in jobs:
            if not 0 <= j.client_id < self.data.num_clients:
                raise ValueError(f"TrainJob: client_id {j.client_id} outside [0, {self.data.num_clients})")
            if j.epochs < 0:
                raise ValueError(f"TrainJob: epochs must be >= 0, got {j.epochs} for client {j.client_id}")
            if j.trainable is not None and not set(j.trainable) <= self._param_names:
                raise ValueError(
                    f"TrainJob for client {j.client_id}: trainable names no parameter of the model: "
                    f"{sorted(set(j.trainable) - self._param_names)}; parameters: {sorted(self._param_names)}"
                )
            self._check_state(j.start_state, f"TrainJob for client {j.client_id}")
            if j.objective is not None:
                self._check_objective(j)
        if not jobs:
            return []
        if self.workers == 0:
            # partial work and objectives that cannot be stacked train one after another
            if self.batched and all(j.max_steps is None and (j.objective is None or j.objective.stackable) for j in jobs):
                from fedselect.fl.local.batched import train_batched

                with on_device(self.device, f"training {len(jobs)} clients stacked"):
                    return train_batched(self._model, self.data, list(jobs), self.train_cfg, self.device)
            with on_device(self.device, f"training {len(jobs)} clients one after another"):
                return [self._train_here(j) for j in jobs]
        tasks = [Task(TrainTask.of(j), j.start_state, cost=j.cost(self.data.num_samples(j.client_id))) for j in jobs]
        out = self._pool.run(tasks)
        bugs = [(j.client_id, o.reason) for j, o in zip(jobs, out) if isinstance(o, Failed) and o.bug]
        if bugs:
            raise RuntimeError(
                f"local training of client {bugs[0][0]} raised in a worker process (a bug, not a client failure):\n{bugs[0][1]}"
            )
        results = []
        for j, o in zip(jobs, out):
            if isinstance(o, TrainDone):
                results.append(TrainResult(j.client_id, o.state, o.loss, o.sum_sq_sample_loss, o.num_sample_losses))
            else:
                results.append(TrainResult(j.client_id, None, math.nan, error=o.reason))
        return results

    def evaluate(self, state: State, name: str = "test") -> dict[str, float]:
        """``{"accuracy", "f1_macro", "loss"}`` of the model with weights ``state`` on the
        evaluation set ``name``, as :func:`fedselect.fl.evaluate.evaluate` defines them.

        The set is cut into fixed chunks of :data:`EVAL_CHUNK` rows spread over the workers; a
        chunk's cross-entropy is one float32 sum and the chunks are added in order, so the
        result does not depend on the number of workers. With ``channels_last=False`` and
        ``eval_forward_batch=1000`` it is bit-identical to :func:`fedselect.fl.evaluate.evaluate`
        (whatever the thread count: the forward pass of these models does not depend on it).

        Raises:
            KeyError: unknown set name (lists the registered ones).
            RuntimeError: a chunk failed twice (a worker died twice on it); a
                :class:`~fedselect.fl.local.device_errors.DeviceError` when the GPU failed.
        """
        return self.evaluate_many([state], name)[0]

    def evaluate_many(self, states: Sequence[State], name: str = "test") -> list[dict[str, float]]:
        """:meth:`evaluate` for several models at once (e.g. every participant's local model)."""
        self._check_open()
        for i, st in enumerate(states):
            self._check_state(st, f"evaluate: state {i}")
        if name not in self._eval_sizes:
            raise KeyError(f"unknown evaluation set {name!r}; registered: {sorted(self._eval_sizes)}")
        n = self._eval_sizes[name]
        chunks = [(a, min(a + EVAL_CHUNK, n)) for a in range(0, n, EVAL_CHUNK)]
        if n == 0:
            return [{"accuracy": math.nan, "f1_macro": math.nan, "loss": math.nan} for _ in states]
        if self.workers == 0:
            outs = []
            x, y = self._eval[name]
            threads = min(self.eval_threads, len(chunks)) if self.device.type == "cpu" else 1
            # each thread computes whole chunks with one torch thread, as a worker does
            pool = ThreadPoolExecutor(threads, initializer=torch.set_num_threads, initargs=(1,)) if threads > 1 else None
            try:
                with torch_threads(1), on_device(self.device, f"evaluating {len(states)} model(s) on {name!r}"):
                    for s in states:
                        load_state(self._model, s)

                        def chunk(c: tuple[int, int]) -> tuple[np.ndarray, float]:
                            return eval_chunk(self._model, x, y, c[0], c[1], self.eval_forward_batch)

                        outs.append(list(pool.map(chunk, chunks)) if pool is not None else [chunk(c) for c in chunks])
            finally:
                if pool is not None:
                    pool.shutdown()
        else:
            key = object()
            tasks = [Task(EvalTask(-1, name, a, b), s, (key, si)) for si, s in enumerate(states) for a, b in chunks]
            res = self._pool.run(tasks)
            outs = []
            for si in range(len(states)):
                part = res[si * len(chunks) : (si + 1) * len(chunks)]
                for r in part:
                    if not isinstance(r, EvalDone):
                        raise RuntimeError(f"evaluation on {name!r} failed: {r.reason}")
                outs.append([(r.pred, r.loss) for r in part])
        y_true = self._eval_labels(name)
        return [_metrics(y_true, o, n) for o in outs]

    def close(self) -> None:
        """Stop the workers (idempotent). Shared memory is freed with the last reference."""
        if self._closed:
            return
        self._closed = True
        if self._pool is not None:
            self._pool.close()

    def __enter__(self) -> "ClientTrainer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _check_state(self, state: Mapping[str, torch.Tensor], what: str) -> None:
        if set(state) != set(self._names):
            missing = sorted(set(self._names) - set(state))
            extra = sorted(set(state) - set(self._names))
            raise ValueError(f"{what}: state entries do not match the model (missing {missing}, unexpected {extra})")
        bad = [k for k in self._names if tuple(state[k].shape) != self._shapes[k]]
        if bad:
            raise ValueError(
                f"{what}: entries of the wrong shape: "
                + ", ".join(f"{k} {tuple(state[k].shape)} (model: {self._shapes[k]})" for k in bad)
            )

    def _check_objective(self, j: TrainJob) -> None:
        try:
            j.objective.check(self._param_names)
        except ValueError as e:
            raise ValueError(f"TrainJob for client {j.client_id}: {e}") from None
        if self.workers == 0:
            return
        cls = type(j.objective)
        where = objective_path(cls)
        main = sys.modules.get("__main__")
        if "<locals>" in where:
            why = "is defined inside a function"
        elif cls.__module__ == "__main__" and not getattr(main, "__file__", None):
            why = "is defined in this notebook or `python -c`"
        else:
            return
        raise ValueError(
            f"TrainJob for client {j.client_id}: objective class {where} {why}, which worker processes cannot import; "
            "define it at the top level of a module (or train with workers=0)"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("ClientTrainer is closed")

    def _eval_labels(self, name: str) -> np.ndarray:
        return self._eval[name][1].cpu().numpy()

    def _train_here(self, j: TrainJob) -> TrainResult:
        try:
            with torch_threads(1) if self.device.type == "cpu" else _nothing():
                done = train_job(self._model, self.data, self.train_cfg, j, in_process=True)
                # the standard layout with the strides a worker's buffers have (a channels-last
                # weight with one input channel counts as contiguous but keeps other strides,
                # which model.pt would record): the same bytes for any number of workers
                state = {
                    k: v.detach().to("cpu", copy=True, memory_format=torch.contiguous_format)
                    for k, v in self._model.state_dict().items()
                }
            return TrainResult(j.client_id, state, done.loss, done.sum_sq_sample_loss, done.num_sample_losses)
        except CLIENT_FAILURES as e:
            return TrainResult(j.client_id, None, math.nan, error=f"{type(e).__name__}: {e}")


def _metrics(y_true: np.ndarray, chunks: list[tuple[np.ndarray, float]], n: int) -> dict[str, float]:
    pred = np.concatenate([c[0] for c in chunks])
    loss_sum = 0.0
    for c in chunks:
        loss_sum += c[1]
    return {
        "accuracy": float((pred == y_true).mean()),
        "f1_macro": macro_f1(y_true, pred),
        "loss": float(loss_sum / max(n, 1)),
    }


@contextmanager
def _nothing() -> Iterator[None]:
    yield
