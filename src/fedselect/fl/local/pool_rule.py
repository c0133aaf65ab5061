"""When a run's worker pool repays its start-up: the rule behind ``workers`` left unset.

:class:`fedselect.fl.local.pool.ClientTrainer` trains the clients of a round in worker processes,
1.7x to 1.8x faster than one process on 2 cores (docs/performance.md). Starting the pool costs
time first: the fork server imports torch and ``torch._dynamo`` (about 1.7 s the first time in
a process; a later pool finds it running and starts in about 0.1 s). Training in the calling
process has a start-up of its own, smaller: its first optimiser step imports ``torch._dynamo``
(about 1 s), unless something imported it before. So where the number of workers is not given
(no ``--workers``, no ``train.workers``, no ``FEDSELECT_WORKERS``), a run starts the pool only
when the time it saves exceeds the difference:

    work_s x (1 - 1 / (EFFICIENCY x min(workers, U)))  >  start_s

* ``work_s`` (:func:`estimate_work_s`): the run's local training and evaluation of the global
  model, in one process: ``rounds x U x E x ceil(n / B) x (step_s + STEP_OVERHEAD_S +
  PARAM_STEP_S x parameters) + evaluations x eval_samples x eval_sample_s``, with ``n`` the
  clients' mean training samples
  and ``step_s`` / ``eval_sample_s`` measured on the run's own model and data
  (:func:`measure_costs`: a forward and backward pass of one mini-batch, and a forward pass, on
  one thread, best of 3 after a warm-up, in CPU seconds; tens of milliseconds), so a user's
  model is judged by what it costs here;
* ``start_s`` (:func:`start_s`): ``FORK_SERVER_S`` for the first pool in a process, else
  ``WARM_START_S``, less ``DYNAMO_S`` where this process has not imported ``torch._dynamo`` yet;
* ``U``: the clients trained side by side in a round (``ceil(overselect x U)``).

The constants were measured with ``benchmarks/pool_rule.py`` (docs/performance.md,
"Start-up"). The estimate counts the selected clients' local epochs and the evaluations of the
global model, not a method's extra training (CEFL's rounds over every client, a warm-up), so
such runs are estimated low. Results are identical whichever way the rule goes (every client
trains from its own seeded generator on one thread), and an explicit ``workers`` is always
honoured; the measurement preserves the global torch generator's state.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

log = logging.getLogger("fedselect")

__all__ = [
    "DYNAMO_S",
    "EFFICIENCY",
    "FORK_SERVER_S",
    "PARAM_STEP_S",
    "STEP_OVERHEAD_S",
    "WARM_START_S",
    "Costs",
    "RunWork",
    "estimate_work_s",
    "measure_costs",
    "pool_pays",
    "start_s",
]

#: seconds of an optimiser step beside the forward and backward pass (gathering the
#: mini-batch, zeroing gradients, the loop), and per parameter (the optimiser's update):
#: benchmarks/pool_rule.py, part 1
STEP_OVERHEAD_S = 0.4e-3
PARAM_STEP_S = 3e-9
#: start-up of the first pool in a process (the fork server importing torch and torch._dynamo,
#: then each worker building its model), seconds: benchmarks/pool_rule.py, part 2
FORK_SERVER_S = 2.0
#: start-up of a later pool in the same process (the fork server is running), seconds
WARM_START_S = 0.25
#: what the first optimiser step in a process pays to import torch._dynamo, seconds
DYNAMO_S = 1.0
#: speed-up of w workers over one process, per worker (1.7x for 2 workers on 2 cores)
EFFICIENCY = 0.85


@dataclass(frozen=True)
class Costs:
    """In-process costs of a model: ``step_s`` seconds for the forward and backward pass of one
    mini-batch and ``eval_sample_s`` seconds of forward pass per evaluated sample (measured),
    ``parameters`` its trainable parameters (each updated by every optimiser step)."""

    step_s: float
    eval_sample_s: float
    parameters: int = 0


@dataclass(frozen=True)
class RunWork:
    """What a run trains and evaluates, for :func:`estimate_work_s`.

    Attributes:
        rounds: T. side_by_side: clients trained per round (``ceil(overselect x U)``).
        local_epochs: E. batch_size: B. client_samples: mean training samples of a client.
        evaluations: evaluations of the global model (the initial one included).
        eval_samples: samples of one evaluation (test set, plus the server's validation set).
    """

    rounds: int
    side_by_side: int
    local_epochs: int
    batch_size: int
    client_samples: float
    evaluations: int
    eval_samples: int


def measure_costs(
    model: nn.Module, x: np.ndarray, y: np.ndarray, channels_last: bool = False, eval_batch: int = 250, repeats: int = 3
) -> Costs:
    """Time ``model`` here, on one torch thread: the forward and backward pass of the mini-batch
    ``x`` / ``y`` (float32 ``(B, *input_shape)``, int64 ``(B,)``), and a forward pass of up to
    ``eval_batch`` rows of ``x`` repeated, per sample; the best of ``repeats`` after one warm-up.
    CPU seconds of this thread, not wall seconds: what the work costs on an idle core, whatever
    else loads the machine (the start-up figures it is weighed against are idle ones too).
    No optimiser step (it would import torch._dynamo); the gradients are dropped, the model's
    mode and the global torch generator's state are restored.
    """
    from fedselect.fl.local.placement import torch_threads

    xb, yb = torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(np.ascontiguousarray(y))
    if channels_last and xb.dim() == 4:
        model = model.to(memory_format=torch.channels_last)
        xb = xb.contiguous(memory_format=torch.channels_last)
    reps = max(1, -(-eval_batch // max(len(xb), 1)))
    xe = torch.cat([xb] * reps)[:eval_batch] if len(xb) else xb
    was_training = model.training
    step, fwd = math.inf, math.inf
    with torch_threads(1), torch.random.fork_rng(devices=[]):
        try:
            for i in range(repeats + 1):
                model.train()
                t = time.thread_time()
                nn.functional.cross_entropy(model(xb), yb).backward()
                model.zero_grad(set_to_none=True)
                if i:
                    step = min(step, time.thread_time() - t)
                model.eval()
                t = time.thread_time()
                with torch.inference_mode():
                    model(xe)
                if i:
                    fwd = min(fwd, (time.thread_time() - t) / max(len(xe), 1))
        finally:
            model.zero_grad(set_to_none=True)
            model.train(was_training)
    return Costs(float(step), float(fwd), sum(p.numel() for p in model.parameters() if p.requires_grad))


def estimate_work_s(w: RunWork, c: Costs) -> float:
    """Seconds the run's training and evaluation would take in one process (module docstring)."""
    steps = math.ceil(w.client_samples / max(w.batch_size, 1)) if w.client_samples > 0 else 0
    train = w.rounds * w.side_by_side * w.local_epochs * steps * (c.step_s + STEP_OVERHEAD_S + PARAM_STEP_S * c.parameters)
    return float(train + w.evaluations * w.eval_samples * c.eval_sample_s)


def start_s(warm: bool, dynamo_imported: bool | None = None) -> float:
    """What a pool costs more than training in this process before either trains (module
    docstring): ``warm``, a pool was started in this process before; ``dynamo_imported``
    (default: whether ``torch._dynamo`` is imported here), the in-process trainer would not pay
    for that import."""
    if dynamo_imported is None:
        dynamo_imported = "torch._dynamo" in sys.modules
    return max((WARM_START_S if warm else FORK_SERVER_S) - (0.0 if dynamo_imported else DYNAMO_S), 0.0)


def pool_pays(work_s: float, workers: int, side_by_side: int, start: float) -> bool:
    """Whether ``workers`` worker processes, training ``side_by_side`` clients of a round at
    once, save more than ``start`` seconds on ``work_s`` seconds of in-process work."""
    parallel = min(int(workers), max(int(side_by_side), 1))
    if parallel < 2:
        return False
    return work_s * (1.0 - 1.0 / (EFFICIENCY * parallel)) > start


def run_work(fed, cfg) -> RunWork:
    """The :class:`RunWork` of experiment ``cfg`` (:class:`fedselect.config.schema.ExperimentConfig`)
    on federation ``fed``."""
    rounds = int(cfg.rounds)
    if cfg.mode == "async":
        side = int(cfg.async_.concurrency or cfg.clients_per_round)
    else:
        side = math.ceil(float(cfg.overselect) * int(cfg.clients_per_round))
    every = max(int(cfg.eval_every), 1)
    evaluations = 1 + rounds // every + (1 if rounds % every else 0)
    sizes = [len(c.train_indices) for c in fed.clients]
    return RunWork(
        rounds=rounds,
        side_by_side=side,
        local_epochs=int(cfg.train.local_epochs),
        batch_size=int(cfg.train.batch_size),
        client_samples=float(np.mean(sizes)) if sizes else 0.0,
        evaluations=evaluations,
        eval_samples=len(fed.test_set) + len(fed.validation_indices),
    )


def auto_workers(fed, cfg, cores: int) -> int:
    """The worker processes of a run that did not say (module docstring): ``cores`` when the
    pool repays its start-up on ``cfg``'s work on ``fed``, else 0 (train in this process; so
    always with one usable core or one client per round, where no pool can save anything).
    Logged at info level with the figures it decided on."""
    from fedselect.fl.local.pool_dispatch import forkserver_started
    from fedselect.world.models import prefers_channels_last

    work = run_work(fed, cfg)
    if min(cores, work.side_by_side) < 2:
        log.info(
            "worker pool: none, training in this process (%d usable core(s), %d client(s) per round)", cores, work.side_by_side
        )
        return 0
    with torch.random.fork_rng(devices=[]):  # layers' default init draws from the global generator
        model = fed.new_model("pool-rule-probe")
    b = max(1, min(work.batch_size, len(fed.train_set)))
    costs = measure_costs(model, fed.train_set.x[:b], fed.train_set.y[:b], prefers_channels_last(model))
    work_s = estimate_work_s(work, costs)
    start = start_s(forkserver_started())
    pays = pool_pays(work_s, cores, work.side_by_side, start)
    log.info(
        "worker pool: %s (estimated %.2f s of training and evaluation in one process, a %.2f ms step, "
        "%.1f us per evaluated sample; the pool would start in about %.2f s more); --workers N decides instead",
        f"{cores} workers" if pays else "none, training in this process",
        work_s,
        costs.step_s * 1e3,
        costs.eval_sample_s * 1e6,
        start,
    )
    return cores if pays else 0
