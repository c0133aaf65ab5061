"""Parallel local training and evaluation in a pool of worker processes (issue 13).

:class:`ClientTrainer` trains the clients of a round side by side, one worker process per
usable core, each running PyTorch with exactly **one** intra-op thread. Every client trains
from its own seeded generator (``fedselect.seeding.torch_rng(seed, stream)``) on one thread, so
a client's result depends only on its job -- never on the number of workers, on which worker
ran it, or on the main process's ``torch.get_num_threads()``: results are bit-identical for
``workers = 0`` (in the calling process), 1, 2, ...

Design:

* **Data shared, not copied.** The federation's training inputs and labels are copied once
  into shared-memory tensors (``Tensor.share_memory_()``); a client is a range of one shared
  int64 row-index tensor. Workers receive the handles at start-up (``torch.multiprocessing``
  passes them as file descriptors) and gather each mini-batch ``x[rows[perm[b]]]`` from them,
  exactly the batches :func:`fedselect.fl.train.local_train` forms from a client's own copy
  (:func:`fedselect.fl.train.train_steps`). Evaluation sets are shared the same way.
* **No per-client model construction.** Each worker builds its model once and keeps it; a job
  copies its start state into the worker's shared input buffer (one ``copy_`` per entry), the
  worker loads it, trains and writes the trained state into its shared output buffer, which the
  main process copies out. Only small messages go through the pipes.
* **Channels-last** (``channels_last``, default: the model's preference,
  :func:`fedselect.models.prefers_channels_last`): the workers' CNN runs in
  ``torch.channels_last`` memory format, 1.5-2x faster per client epoch on CPU
  (docs/performance.md). States come back contiguous (standard layout). It changes float
  results in the last bits compared with the standard layout (other convolution kernels);
  ``channels_last=False`` trains bit-identically to ``local_train`` on a standard model.
* **A dying worker never hangs the run.** The main process waits on the workers' pipes and
  process sentinels together; a worker that dies (killed by a signal, out of memory, a crash in
  native code) is reported as a :class:`TrainResult` with ``error`` set for the client it was
  training, and a fresh worker takes its place for the following jobs. ``job_timeout_s`` (off
  by default) also bounds a job's wall time: a worker past it is killed and its job reported.
* **Start method** ``forkserver`` (default; ``spawn`` also works): never ``fork``, which is
  unsafe once PyTorch has started threads. The fork server preloads torch and this module, so
  starting (or restarting) a worker takes a fraction of a second after the first.

Usage (one round of FedAvg)::

    with ClientTrainer.from_federation(fed, train_cfg, workers=2) as trainer:
        jobs = [TrainJob(k, global_state, epochs=5, seed=seed, stream=f"train/{t}/{k}") for k in chosen]
        results = trainer.train(jobs)                      # in job order
        metrics = trainer.evaluate(new_global_state, "test")   # {"accuracy", "f1_macro", "loss"}

``workers=0`` trains in the calling process (with one torch thread while it trains) and
starts no process. On ``device="cuda"`` everything runs in the calling process on the GPU
(sequentially, or stacked with ``torch.func`` when ``batched``; :mod:`fedselect.fl.batched`).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
import traceback
import weakref
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import wait as mp_wait
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from fedselect.data.datasets import ArrayDataset
from fedselect.fl.clientdata import ClientData, _shared_copy
from fedselect.fl.clients import TrainJob, TrainResult
from fedselect.fl.faults import ClientFailure
from fedselect.fl.train import TrainConfig, train_steps
from fedselect.models import build_model, prefers_channels_last
from fedselect.seeding import torch_rng

log = logging.getLogger("fedselect")

State = dict[str, torch.Tensor]

__all__ = [
    "ClientTrainer",
    "ClientData",
    "ModelSpec",
    "TrainJob",
    "TrainResult",
    "usable_cores",
    "resolve_device",
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


def usable_cores() -> int:
    """CPU cores this process may run on (``len(os.sched_getaffinity(0))``; ``os.cpu_count()``
    where affinity is not available)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


# ---------------------------------------------------------------------------- job types
@dataclass(frozen=True)
class ModelSpec:
    """What a worker needs to build the model: ``build_model(name, input_shape, num_classes,
    **options)`` (:mod:`fedselect.models`). The initial weights do not matter (every job loads
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


# ---------------------------------------------------------------------------- the worker
@dataclass
class _WorkerInit:
    spec: ModelSpec
    data: ClientData
    eval_sets: dict[str, tuple[torch.Tensor, torch.Tensor]]
    train_cfg: TrainConfig
    channels_last: bool
    in_buf: State
    out_buf: State
    eval_forward_batch: int


class _Crash(ClientFailure):
    """The fault drill of ``TrainJob.crash_after_batches`` where no process may be killed."""


#: exceptions of local training that mean "this client failed" (kind ``error``), as in
#: :class:`fedselect.fl.clients.SequentialTrainer`; any other exception is a bug and stops the run
_CLIENT_FAILURES = (ClientFailure, MemoryError)


def _load(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    model.load_state_dict(state)


def _store(model: nn.Module, out: State) -> None:
    with torch.no_grad():
        for name, v in model.state_dict().items():
            out[name].copy_(v)


def _train_job(
    model: nn.Module,
    data: ClientData,
    cfg: TrainConfig,
    client_id: int,
    epochs: int,
    seed: int,
    stream: str,
    trainable,
    sample_losses: bool,
    crash_after: int | None,
    in_process: bool,
) -> tuple[float, float, int]:
    stats: dict | None = {} if sample_losses else None
    after = None
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
        data.client_rows(client_id),
        cfg,
        torch_rng(seed, stream),
        epochs=epochs,
        trainable=trainable,
        stats=stats,
        after_batch=after,
    )
    if stats is None:
        return loss, 0.0, 0
    return loss, float(stats["sum_sq_sample_loss"]), int(stats["num_sample_losses"])


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


def _warm_up(model: nn.Module, init: _WorkerInit) -> None:
    """One throw-away optimiser step and one forward pass, so that one-time costs (lazy
    imports, kernel set-up) fall into the start-up, not into the first job's time limit. Every
    job loads its own start state, so the weights changed here are never used."""
    from fedselect.fl.train import make_optimizer

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


def _worker_main(conn, init: _WorkerInit) -> None:
    """Loop of one worker process: build the model once, then serve jobs until told to stop."""
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
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        kind, task = msg[0], msg[1]
        try:
            if kind == "train":
                _, _, client_id, epochs, seed, stream, trainable, sample_losses, crash_after = msg
                _load(model, init.in_buf)
                loss, sq, cnt = _train_job(
                    model,
                    init.data,
                    init.train_cfg,
                    client_id,
                    epochs,
                    seed,
                    stream,
                    trainable,
                    sample_losses,
                    crash_after,
                    in_process=False,
                )
                _store(model, init.out_buf)
                conn.send(("ok", task, loss, sq, cnt))
            elif kind == "eval":
                _, _, name, start, stop, load = msg
                if load:
                    _load(model, init.in_buf)
                x, y = init.eval_sets[name]
                pred, loss = eval_chunk(model, x, y, start, stop, init.eval_forward_batch)
                conn.send(("eval", task, pred, loss))
            else:
                conn.send(("bug", task, f"unknown message {kind!r}"))
        except _CLIENT_FAILURES as e:  # the client failed: reported for this job
            conn.send(("error", task, f"{type(e).__name__}: {e}"))
        except Exception:  # a bug: the main process stops the run with this traceback
            conn.send(("bug", task, traceback.format_exc(limit=8)))


@dataclass
class _Worker:
    proc: Any
    conn: Any
    pid: int | None = None
    seq: int = -1  # number of the message it is working on (answers carry it back)
    ready: bool = False
    loaded: Any = None  # key of the evaluation state in the model, or None


@dataclass
class _Task:
    kind: str  # "train" | "eval"
    payload: tuple
    state: State | None  # to copy into the worker's input buffer before sending (None: none)
    state_key: Any = None  # evaluation: identifies the state, to skip reloading it
    attempts: int = 0


# ---------------------------------------------------------------------------- the trainer
class ClientTrainer:
    """Trains clients' local models (and evaluates models) in parallel worker processes.

    Args:
        model_spec: :class:`ModelSpec`, or a tuple ``(name, input_shape, num_classes, options)``.
        data: every client's training data: a :class:`ClientData`, or a list of client
            :class:`ArrayDataset` (client k = ``data[k]``; concatenated into one shared copy).
        train_cfg: local-training hyper-parameters (SGD/Adam, lr, batch size, ...).
        workers: worker processes; None = :func:`usable_cores`; 0 = train in the calling
            process (one torch thread while training, no process started); more than
            :func:`usable_cores` starts :func:`usable_cores` of them, with a warning.
        eval_sets: named evaluation sets (e.g. ``{"test": fed.test_set}``) for :meth:`evaluate`.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (cuda when available).
            On a GPU the trainer works in the calling process and ``workers`` is ignored.
        batched: on a GPU, train the jobs of one call stacked with ``torch.func``
            (:mod:`fedselect.fl.batched`); None = yes on a GPU where the model allows it, never
            on CPU (slower there, docs/performance.md). True on CPU is for tests.
        channels_last: None = the model's preference (:func:`fedselect.models.prefers_channels_last`).
        job_timeout_s: wall-clock bound of one job in a worker (None: no bound; a worker that
            dies is detected either way).
        start_method: ``"forkserver"`` (default) or ``"spawn"``.
        start_timeout_s: how long to wait for the workers to come up.
        eval_forward_batch: inputs per forward pass in an evaluation chunk; None = 250 for the
            channels-last CNNs, the whole chunk (1,000) for other models.

    Raises:
        ValueError: a bad argument (names it and what is allowed).
        RuntimeError: a worker failed to start (its error is in the message).
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
    ):
        t0 = time.perf_counter()
        self.spec = model_spec if isinstance(model_spec, ModelSpec) else ModelSpec(*model_spec)
        if not isinstance(data, ClientData):
            data = ClientData.from_datasets(list(data))
        if workers is None:
            workers = usable_cores()
        if int(workers) != workers or workers < 0:
            raise ValueError(f"workers must be an integer >= 0 (0 = in the calling process), got {workers!r}")
        cores = usable_cores()
        if workers > cores:  # more processes than cores only add start-up time and memory
            log.warning(
                "%d workers asked for but this process may use %d cores: starting %d (results do not depend on it)",
                workers,
                cores,
                cores,
            )
            workers = cores
        if start_method not in ("forkserver", "spawn"):
            raise ValueError(f"start_method must be 'forkserver' or 'spawn', got {start_method!r}")
        if job_timeout_s is not None and not job_timeout_s > 0:
            raise ValueError(f"job_timeout_s must be > 0 or None, got {job_timeout_s!r}")
        if eval_forward_batch is not None and eval_forward_batch < 1:
            raise ValueError(f"eval_forward_batch must be >= 1, got {eval_forward_batch!r}")
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
        if batched is None:
            from fedselect.fl.batched import supports_batched

            batched = on_gpu and supports_batched(model)
        self.batched = bool(batched)
        if self.batched and self.workers > 0:
            raise ValueError(
                "batched=True trains in the calling process: use it with workers=0 or on a GPU "
                f"(got workers={self.workers} on {self.device})"
            )
        self._param_names = {n for n, _ in model.named_parameters()}
        eval_sets = dict(eval_sets or {})
        self._eval_sizes = {name: len(d) for name, d in eval_sets.items()}
        self._closed = False
        self._seq = 0
        self._workers: list[_Worker] = []
        self._ctx = None
        if self.workers == 0:
            self._model = model.to(self.device)
            if self.channels_last:
                self._model = self._model.to(memory_format=torch.channels_last)
            self.data = data if not on_gpu else data.to(self.device)
            self._eval = {
                n: (torch.from_numpy(d.x).to(self.device), torch.from_numpy(d.y).to(self.device)) for n, d in eval_sets.items()
            }
        else:
            self._model = None
            self.data = data.shared()
            self._eval = {
                n: (_shared_copy(torch.from_numpy(d.x)), _shared_copy(torch.from_numpy(d.y))) for n, d in eval_sets.items()
            }
            template = model.state_dict()
            import torch.multiprocessing as tmp

            self._ctx = tmp.get_context(start_method)
            if start_method == "forkserver":
                # torch._dynamo is imported lazily by the first optimiser (2 s): preload it once
                self._ctx.set_forkserver_preload(["torch", "torch._dynamo", "fedselect.fl.pool"])
            self._inits = []
            for _ in range(self.workers):
                in_buf = {k: _shared_copy(torch.zeros_like(v)) for k, v in template.items()}
                out_buf = {k: _shared_copy(torch.zeros_like(v)) for k, v in template.items()}
                self._inits.append(
                    _WorkerInit(
                        self.spec, self.data, self._eval, train_cfg, self.channels_last, in_buf, out_buf, self.eval_forward_batch
                    )
                )
            try:
                for i in range(self.workers):
                    self._workers.append(self._spawn(i))
                self._await_ready(start_timeout_s)
            except BaseException:
                self.close()
                raise
            self._finalizer = weakref.finalize(self, _shutdown, self._workers)
        self.startup_s = time.perf_counter() - t0

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_federation(cls, fed, train_cfg: TrainConfig, **kwargs) -> "ClientTrainer":
        """A trainer over a :class:`fedselect.federation.Federation`: its training set shared
        once, client k = ``fed.clients[k].train_indices``, the test set registered as
        ``"test"``, the model of ``fed.model``."""
        m = fed.model
        spec = ModelSpec(m.name, tuple(fed.input_shape), int(fed.num_classes), dict(m.options))
        data = ClientData.from_arrays(fed.train_set.x, fed.train_set.y, [c.train_indices for c in fed.clients], fed.num_classes)
        eval_sets = dict(kwargs.pop("eval_sets", None) or {})
        eval_sets.setdefault("test", fed.test_set)
        return cls(spec, data, train_cfg, eval_sets=eval_sets, **kwargs)

    def _spawn(self, i: int) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=_worker_main, args=(child, self._inits[i]), daemon=True, name=f"fedselect-worker-{i}")
        proc.start()
        child.close()
        return _Worker(proc, parent, proc.pid)

    def _await_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        waiting = set(range(len(self._workers)))
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"ClientTrainer: {len(waiting)} worker(s) did not start within {timeout:.0f} s")
            ready = mp_wait([self._workers[i].conn for i in waiting] + [self._workers[i].proc.sentinel for i in waiting], left)
            for i in list(waiting):
                w = self._workers[i]
                if w.conn in ready or w.conn.poll():
                    try:
                        msg = w.conn.recv()
                    except (EOFError, OSError):
                        msg = None
                    if msg is None or msg[0] != "ready":
                        w.proc.join(1)
                        raise RuntimeError(
                            f"ClientTrainer: worker {i} failed to start (exit code {w.proc.exitcode}); a script "
                            "that starts workers needs the `if __name__ == '__main__':` guard (multiprocessing "
                            "re-imports the main module); run with workers=0 to see errors in this process"
                        )
                    w.ready = True
                    waiting.discard(i)
                elif w.proc.sentinel in ready or not w.proc.is_alive():
                    w.proc.join(1)
                    raise RuntimeError(
                        f"ClientTrainer: worker {i} died while starting (exit code {w.proc.exitcode}); "
                        "run with workers=0 to see the error in this process"
                    )

    def _restart(self, i: int) -> None:
        w = self._workers[i]
        _kill(w)
        self._workers[i] = self._spawn(i)

    def worker_pids(self) -> list[int]:
        """Process ids of the workers (empty with ``workers=0``)."""
        return [w.pid for w in self._workers]

    # ------------------------------------------------------------------ public API
    def train(self, jobs: Sequence[TrainJob]) -> list[TrainResult]:
        """Run every job (:class:`fedselect.fl.clients.TrainJob`); results in job order. A job
        whose training raised :class:`fedselect.fl.faults.ClientFailure` (or ``MemoryError``),
        whose worker died (a signal, the out-of-memory killer), or that ran past
        ``job_timeout_s`` gives a result with ``error`` set and ``state`` None.

        Raises:
            ValueError: a job names a client outside the data, a negative epoch count, unknown
                trainable names, or a start state whose entries do not match the model.
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
        if not jobs:
            return []
        if self.workers == 0:
            if self.batched:
                from fedselect.fl.batched import train_batched

                return train_batched(self._model, self.data, list(jobs), self.train_cfg, self.device)
            return [self._train_here(j) for j in jobs]
        tasks = [
            _Task(
                "train",
                (
                    j.client_id,
                    int(j.epochs),
                    int(j.seed),
                    str(j.stream),
                    None if j.trainable is None else frozenset(j.trainable),
                    bool(j.sample_losses),
                    j.crash_after_batches,
                ),
                j.start_state,
            )
            for j in jobs
        ]
        out = self._run(tasks)
        bugs = [(j.client_id, o[1]) for j, o in zip(jobs, out) if o[0] == "bug"]
        if bugs:
            raise RuntimeError(
                f"local training of client {bugs[0][0]} raised in a worker process (a bug, not a client failure):\n{bugs[0][1]}"
            )
        results = []
        for j, o in zip(jobs, out):
            if o[0] == "ok":
                results.append(TrainResult(j.client_id, o[1], o[2], o[3], o[4]))
            else:
                results.append(TrainResult(j.client_id, None, math.nan, error=o[1]))
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
            RuntimeError: a chunk failed twice (a worker died twice on it).
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
            with _threads(1):
                for s in states:
                    _load(self._model, s)
                    outs.append([eval_chunk(self._model, x, y, a, b, self.eval_forward_batch) for a, b in chunks])
        else:
            key = object()
            tasks = [_Task("eval", (name, a, b), s, (key, si)) for si, s in enumerate(states) for a, b in chunks]
            res = self._run(tasks)
            outs = []
            for si in range(len(states)):
                part = res[si * len(chunks) : (si + 1) * len(chunks)]
                for r in part:
                    if r[0] != "eval":
                        raise RuntimeError(f"evaluation on {name!r} failed: {r[1]}")
                outs.append([(r[1], r[2]) for r in part])
        y_true = self._eval_labels(name)
        return [_metrics(y_true, o, n) for o in outs]

    def close(self) -> None:
        """Stop the workers (idempotent). Shared memory is freed with the last reference."""
        if self._closed:
            return
        self._closed = True
        fin = getattr(self, "_finalizer", None)
        if fin is not None:
            fin.detach()
        _shutdown(self._workers)

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

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("ClientTrainer is closed")

    def _eval_labels(self, name: str) -> np.ndarray:
        return self._eval[name][1].cpu().numpy()

    def _train_here(self, j: TrainJob) -> TrainResult:
        try:
            with _threads(1) if self.device.type == "cpu" else _nothing():
                _load(self._model, j.start_state)
                loss, sq, cnt = _train_job(
                    self._model,
                    self.data,
                    self.train_cfg,
                    j.client_id,
                    j.epochs,
                    j.seed,
                    j.stream,
                    j.trainable,
                    j.sample_losses,
                    j.crash_after_batches,
                    in_process=True,
                )
                state = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in self._model.state_dict().items()}
            return TrainResult(j.client_id, state, loss, sq, cnt)
        except _CLIENT_FAILURES as e:
            return TrainResult(j.client_id, None, math.nan, error=f"{type(e).__name__}: {e}")

    def _send(self, i: int, t: _Task) -> bool:
        """Hand task ``t`` to worker ``i``; False when the worker turned out dead."""
        w = self._workers[i]
        load = True
        if t.state is not None:
            if t.kind == "eval" and w.loaded == t.state_key:
                load = False
            else:
                buf = self._inits[i].in_buf
                with torch.no_grad():
                    for k, v in t.state.items():
                        buf[k].copy_(v)
                w.loaded = t.state_key if t.kind == "eval" else None
        self._seq += 1
        w.seq = self._seq
        msg = ("train", w.seq, *t.payload) if t.kind == "train" else ("eval", w.seq, *t.payload, load)
        try:
            w.conn.send(msg)
        except (BrokenPipeError, EOFError, OSError):
            return False
        return True

    def _cost(self, t: _Task) -> int:
        if t.kind != "train":
            return 0
        return t.payload[1] * self.data.num_samples(t.payload[0])

    def _deadline(self, i: int, since: float) -> float | None:
        """When the task given to worker ``i`` at ``since`` is overdue: ``start_timeout_s``
        while the worker is still starting, then ``job_timeout_s`` from when it was ready."""
        if not self._workers[i].ready:
            return since + self.start_timeout_s
        return None if self.job_timeout_s is None else since + self.job_timeout_s

    def _run(self, tasks: list[_Task]) -> list[tuple]:
        """Run ``tasks`` on the workers, dynamically; outcomes in task order:
        ("ok", state, loss, sq, count) | ("eval", pred, loss) | ("failed", why)."""
        for i, w in enumerate(self._workers):  # replace workers that died while idle
            if not w.proc.is_alive():
                self._restart(i)
        running: dict[int, tuple[int, float]] = {}
        try:
            return self._dispatch(tasks, running)
        except BaseException:
            # interrupted (KeyboardInterrupt, a bug): never leave a worker busy with a job whose
            # answer a later call could mistake for its own
            for i in list(running):
                self._restart(i)
            raise

    def _dispatch(self, tasks: list[_Task], running: dict[int, tuple[int, float]]) -> list[tuple]:
        out: list[tuple | None] = [None] * len(tasks)
        # longest first (epochs x samples), so that a large client does not start last and
        # leave the other workers idle; the outcomes stay in task order
        queue = deque(sorted(range(len(tasks)), key=lambda i: -self._cost(tasks[i])))
        while queue or running:
            for i in range(len(self._workers)):
                if i in running or not queue:
                    continue
                ti = queue.popleft()
                t = tasks[ti]
                if not self._send(i, t):
                    self._restart(i)
                    if not self._send(i, t):
                        out[ti] = ("failed", f"worker {i} could not be started")
                        continue
                running[i] = (ti, time.monotonic())
            if not running:
                continue
            deadlines = [d for i, (_, t0) in running.items() if (d := self._deadline(i, t0)) is not None]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            ready = set(
                mp_wait([self._workers[i].conn for i in running] + [self._workers[i].proc.sentinel for i in running], timeout)
            )
            for i in list(running):
                ti, t0 = running[i]
                w = self._workers[i]
                failure = None
                if w.conn in ready or w.conn.poll():
                    try:
                        msg = w.conn.recv()
                    except (EOFError, OSError):
                        msg = None
                    if msg is not None and msg[0] == "ready":  # a restarted worker announcing itself:
                        w.ready = True  # the job's clock starts now
                        running[i] = (ti, time.monotonic())
                        continue
                    if msg is not None and msg[1] != w.seq:  # an answer to an abandoned call: drop it
                        continue
                    if msg is None:
                        w.proc.join(5)
                        failure = _death(w)
                    else:
                        del running[i]
                        out[ti] = self._collect(i, tasks[ti], msg)
                        continue
                elif w.proc.sentinel in ready or not w.proc.is_alive():
                    w.proc.join(5)
                    failure = _death(w)
                else:
                    d = self._deadline(i, t0)
                    if d is not None and time.monotonic() >= d:
                        failure = (
                            f"job ran past job_timeout_s={self.job_timeout_s:g} s; worker process {w.pid} was killed"
                            if w.ready
                            else f"worker process {w.pid} did not start within start_timeout_s={self.start_timeout_s:g} s"
                        )
                if failure is None:
                    continue
                del running[i]
                self._restart(i)
                t = tasks[ti]
                t.attempts += 1
                if t.kind == "eval" and t.attempts < 2:
                    queue.appendleft(ti)  # evaluation has no failure semantics: retry once
                else:
                    out[ti] = ("failed", failure)
        return out  # type: ignore[return-value]

    def _collect(self, i: int, t: _Task, msg: tuple) -> tuple:
        if msg[0] == "ok":
            buf = self._inits[i].out_buf
            state = {k: v.clone() for k, v in buf.items()}
            return ("ok", state, float(msg[2]), float(msg[3]), int(msg[4]))
        if msg[0] == "eval":
            return ("eval", msg[2], float(msg[3]))
        self._workers[i].loaded = None
        if msg[0] == "bug":
            return ("bug", str(msg[2]))
        return ("failed", str(msg[2]))


def _death(w: _Worker) -> str:
    code = w.proc.exitcode
    how = f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
    return f"worker process {w.pid} died ({how}) while running this job"


def _kill(w: _Worker) -> None:
    try:
        if w.proc.is_alive():
            w.proc.kill()
        w.proc.join(5)
    except (OSError, ValueError, AssertionError):
        pass
    try:
        w.conn.close()
    except OSError:
        pass


def _shutdown(workers: list[_Worker]) -> None:
    for w in workers:
        try:
            w.conn.send(None)
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + 5
    for w in workers:
        try:
            w.proc.join(max(0.0, deadline - time.monotonic()))
        except (AssertionError, ValueError):
            pass
        _kill(w)


def _metrics(y_true: np.ndarray, chunks: list[tuple[np.ndarray, float]], n: int) -> dict[str, float]:
    from sklearn.metrics import f1_score

    pred = np.concatenate([c[0] for c in chunks])
    loss_sum = 0.0
    for c in chunks:
        loss_sum += c[1]
    return {
        "accuracy": float((pred == y_true).mean()),
        "f1_macro": float(f1_score(y_true, pred, average="macro", zero_division=0)),
        "loss": float(loss_sum / max(n, 1)),
    }


_thread_lock = threading.Lock()


@contextmanager
def _threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads, restoring the previous count."""
    with _thread_lock:
        before = torch.get_num_threads()
        if before != n:
            torch.set_num_threads(n)
        try:
            yield
        finally:
            if before != n:
                torch.set_num_threads(before)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def resolve_device(device: str | torch.device) -> torch.device:
    """``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (cuda when available, else cpu).

    Raises:
        ValueError: an unknown name, or cuda asked for where none is available.
    """
    name = str(device)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {device!r}") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device {device!r}: no CUDA device is available here (torch.cuda.is_available() is False); use 'cpu' or 'auto'"
        )
    return dev
