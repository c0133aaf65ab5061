"""Several clients' local training stacked into one computation (``torch.func``), for GPUs.

:func:`train_batched` trains the clients of one call side by side: their weights are stacked
along a new leading dimension, and every optimiser step runs ``vmap(grad(loss))`` over the
clients still training, one mini-batch each. Each client keeps its own mini-batch order (from
its own generator, exactly the batches of :func:`fedselect.fl.local.train.local_train`), its own
number of steps (clients with fewer samples or epochs drop out of the stack when done) and its
own optimiser state; SGD (momentum, weight decay) and Adam are re-implemented on the stacked
tensors with the formulas of ``torch.optim.SGD`` / ``torch.optim.Adam``.

A job's local objective (:mod:`fedselect.fl.local.objective`: FedProx's proximal term, SCAFFOLD's
correction, ...) is added to its client's loss inside the mapped function
(:meth:`~fedselect.fl.local.objective.LocalObjective.term` of the trained parameters and their start
values, its tensor fields stacked client by client); :class:`~fedselect.fl.local.pool.ClientTrainer`
sends jobs here only when every objective's class declares ``stackable``. Jobs with different
objective classes or plain fields train in separate stacks.

A last mini-batch smaller than the others is padded and the padding masked out of the loss
(``sum(w_i * ce_i) / sum(w_i)``), so each client's loss and gradient are mathematically those
of the sequential path. The float results are not bit-identical to it (batched convolution
kernels add in another order, the masked mean is computed differently): the tests check
``allclose`` against the sequential path on CPU (docs/performance.md gives the differences).

On a GPU this turns a round's ``U x steps`` small kernel launches into ``steps`` larger ones.
On CPU it is slower than training the clients one after another (measured,
docs/performance.md), so :class:`fedselect.fl.local.pool.ClientTrainer` uses it only on GPUs.
Models with buffers (BatchNorm), recurrent layers or dropout are not supported
(:func:`supports_batched`); they train sequentially.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

import torch
from torch import nn

from fedselect.common.seeding import torch_rng
from fedselect.fl.local.objective import LocalObjective, objective_fields, stack_key
from fedselect.fl.local.train import TrainConfig

if TYPE_CHECKING:
    from fedselect.fl.local.clientdata import ClientData
    from fedselect.fl.local.clients import TrainJob, TrainResult


def supports_batched(model: nn.Module) -> bool:
    """True when ``model`` can be trained stacked: no buffers, no recurrent, normalisation or
    dropout layers (feed-forward convolutional / linear networks such as the papers' CNNs and
    the MLP)."""
    if any(True for _ in model.buffers()):
        return False
    banned = (nn.RNNBase, nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd, nn.LayerNorm, nn.GroupNorm)
    return not any(isinstance(m, banned) for m in model.modules())


def _schedule(n: int, epochs: int, batch_size: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Local positions of every mini-batch of every epoch (as ``iterate_minibatches``)."""
    out = []
    for _ in range(epochs):
        perm = torch.randperm(n, generator=generator)
        out.extend(perm[i : i + batch_size] for i in range(0, n, batch_size))
    return out


def train_batched(
    model: nn.Module, data: "ClientData", jobs: list["TrainJob"], cfg: TrainConfig, device: torch.device | str = "cpu"
) -> list["TrainResult"]:
    """Train every job stacked (see module docstring); results in job order.

    Args:
        model: a template of the model (its weights are not used; it must pass
            :func:`supports_batched`); ``data``: every client's samples (on ``device`` or CPU).
        jobs: :class:`fedselect.fl.local.clients.TrainJob` s; jobs with different ``trainable`` sets or
            objectives of different classes or plain fields (:func:`~fedselect.fl.local.objective.stack_key`)
            are trained in separate stacks. A job with ``crash_after_batches`` is reported failed.

    Raises:
        ValueError: the model does not support stacking, an unknown optimiser, or an objective
            whose class does not declare ``stackable``.
    """
    from fedselect.fl.local.clients import TrainResult

    if not supports_batched(model):
        raise ValueError(
            f"train_batched: {type(model).__name__} has buffers, recurrent, normalisation or dropout layers; "
            "train it sequentially"
        )
    if cfg.optimizer not in ("sgd", "adam"):
        raise ValueError(f"unknown optimizer {cfg.optimizer!r}; allowed: 'sgd', 'adam'")
    unstackable = sorted({type(j.objective).__name__ for j in jobs if j.objective is not None and not j.objective.stackable})
    if unstackable:
        raise ValueError(f"train_batched: objectives {unstackable} do not declare `stackable`; train them sequentially")
    device = torch.device(device)
    results: list[TrainResult | None] = [None] * len(jobs)
    groups: dict[tuple, list[int]] = {}
    for i, j in enumerate(jobs):
        if j.crash_after_batches is not None:
            results[i] = TrainResult(
                j.client_id,
                None,
                math.nan,
                error=f"fault drill: crash after {j.crash_after_batches} mini-batches (batched path: reported, not killed)",
            )
            continue
        trainable = None if j.trainable is None else frozenset(j.trainable)
        groups.setdefault((trainable, stack_key(j.objective)), []).append(i)
    for (trainable, _), idx in groups.items():
        try:
            out = _train_stack(model, data, [jobs[i] for i in idx], cfg, device, trainable)
        # host memory exhausted: the stack's clients failed (a GPU's out-of-memory is the device's
        # failure, not theirs: it propagates, and ClientTrainer raises fl.local.device_errors.DeviceError)
        except MemoryError as e:
            err = f"{type(e).__name__}: {e}"
            out = [TrainResult(jobs[i].client_id, None, math.nan, error=err) for i in idx]
        for i, r in zip(idx, out):
            results[i] = r
    return results  # type: ignore[return-value]


def _step_function(model: nn.Module, jobs: list["TrainJob"], start: dict[str, torch.Tensor], device: torch.device):
    """``step(p_train, p_frozen, xb, yb, wb, sel) -> (grads, (loss, per))``: every client's
    gradient and masked mean cross-entropy (``per``: each sample's, detached) on its mini-batch,
    mapped over the clients still training (rows ``sel`` of the stack; None: all). With an
    objective (one class and plain fields per stack) the gradient is that of ``loss + R_k``,
    ``R_k`` its :meth:`~fedselect.fl.local.objective.LocalObjective.term` of the client's trained
    weights, their values at the start (``start``, stacked) and its tensor fields (stacked)."""
    from torch.func import functional_call, grad_and_value, vmap

    def loss_fn(p_train, p_frozen, xb, yb, wb):
        logits = functional_call(model, {**p_train, **p_frozen}, (xb,))
        per = nn.functional.cross_entropy(logits, yb, reduction="none")
        loss = (per * wb).sum() / wb.sum()
        return loss, per.detach()

    objective: LocalObjective | None = jobs[0].objective
    if objective is None:
        plain = vmap(grad_and_value(loss_fn, has_aux=True))
        return lambda p_train, p_frozen, xb, yb, wb, sel: plain(p_train, p_frozen, xb, yb, wb)
    per_job = [objective_fields(j.objective)[1] for j in jobs]
    fields = {f: {n: torch.stack([t[f][n] for t in per_job]).to(device) for n in st} for f, st in per_job[0].items()}
    start = {n: v.clone() for n, v in start.items()}

    def objective_loss(p_train, p_frozen, xb, yb, wb, start_k, fields_k):
        loss, per = loss_fn(p_train, p_frozen, xb, yb, wb)
        total = loss + replace(objective, **fields_k).term(p_train, start_k)
        return total, (loss.detach(), per)

    mapped = vmap(grad_and_value(objective_loss, has_aux=True))

    def step(p_train, p_frozen, xb, yb, wb, sel):
        def rows(st: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            return st if sel is None else {n: v.index_select(0, sel) for n, v in st.items()}

        grads, (_, aux) = mapped(p_train, p_frozen, xb, yb, wb, rows(start), {f: rows(st) for f, st in fields.items()})
        return grads, aux

    return step


def _train_stack(
    model: nn.Module,
    data: "ClientData",
    jobs: list["TrainJob"],
    cfg: TrainConfig,
    device: torch.device,
    trainable: frozenset[str] | None,
) -> list["TrainResult"]:
    """Train one stack (one ``trainable`` set, one objective class and plain fields): at step
    ``s`` the clients with more than ``s`` mini-batches take one step together; results in job
    order."""
    names = [n for n, _ in model.named_parameters()]
    train_names = [n for n in names if trainable is None or n in trainable]
    frozen_names = [n for n in names if n not in train_names]
    K = len(jobs)
    params = {n: torch.stack([j.start_state[n].detach().to(device, torch.float32) for j in jobs]) for n in names}
    client_rows, scheds = _schedules(data, jobs, cfg)
    steps = [len(s) for s in scheds]
    sgd = cfg.optimizer == "sgd"
    state1 = {n: torch.zeros_like(params[n]) for n in train_names}  # SGD momentum buffer / Adam exp_avg
    state2 = {n: torch.zeros_like(params[n]) for n in train_names} if not sgd else {}
    step_losses: list[list[torch.Tensor]] = [[] for _ in range(K)]
    sq_parts: list[list[torch.Tensor]] = [[] for _ in range(K)]
    counts = [0] * K
    want_stats = [j.sample_losses for j in jobs]

    step_fn = _step_function(model, jobs, {n: params[n] for n in train_names}, device)
    model = model.to(device)
    for s in range(max(steps, default=0)):
        act = [k for k in range(K) if s < steps[k]]
        batches = [scheds[k][s] for k in act]
        xb, yb, wb = _gather(data.x, data.y, [client_rows[k] for k in act], batches, device)
        full = len(act) == K
        sel = None if full else torch.tensor(act, device=device)
        p_act = {n: (params[n] if full else params[n].index_select(0, sel)) for n in names}
        grads, (loss, per) = step_fn({n: p_act[n] for n in train_names}, {n: p_act[n] for n in frozen_names}, xb, yb, wb, sel)
        with torch.no_grad():
            _optimizer_step(params, state1, state2, p_act, grads, train_names, cfg, s, sel)
            for a, k in enumerate(act):
                step_losses[k].append(loss[a])
                if want_stats[k]:
                    nb = len(batches[a])
                    sq_parts[k].append((per[a, :nb].double() ** 2).sum())
                    counts[k] += nb
    return _results(jobs, params, names, step_losses, sq_parts, counts)


def _schedules(
    data: "ClientData", jobs: list["TrainJob"], cfg: TrainConfig
) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
    """Each job's client's rows of the shared data (on the CPU) and its mini-batches of every
    epoch (:func:`_schedule`, from the job's own generator; none without epochs or samples)."""
    rows_cpu = data.rows.cpu()
    offsets = data.offsets.cpu()
    scheds, client_rows = [], []
    for j in jobs:
        r = rows_cpu[int(offsets[j.client_id]) : int(offsets[j.client_id + 1])]
        client_rows.append(r)
        n = len(r)
        scheds.append(_schedule(n, j.epochs, cfg.batch_size, torch_rng(j.seed, j.stream)) if j.epochs > 0 and n > 0 else [])
    return client_rows, scheds


def _gather(
    x: torch.Tensor, y: torch.Tensor, rows: list[torch.Tensor], batches: list[torch.Tensor], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step's stacked mini-batches ``(xb, yb, wb)``, one row per client still training: a
    shorter batch is padded with its first sample and masked out by the weights ``wb`` (1 for a
    real sample, 0 for padding)."""
    bmax = max(len(b) for b in batches)
    gi = torch.empty((len(batches), bmax), dtype=torch.int64)
    w = torch.zeros((len(batches), bmax), dtype=torch.float32)
    for a, (client_rows, b) in enumerate(zip(rows, batches)):
        r = client_rows[b]
        gi[a, : len(b)] = r
        gi[a, len(b) :] = r[0]
        w[a, : len(b)] = 1.0
    gi_d = gi.to(device)
    return x[gi_d], y[gi_d], w.to(device)


def _optimizer_step(
    params: dict[str, torch.Tensor],
    state1: dict[str, torch.Tensor],
    state2: dict[str, torch.Tensor],
    p_act: dict[str, torch.Tensor],
    grads: dict[str, torch.Tensor],
    train_names: list[str],
    cfg: TrainConfig,
    s: int,
    sel: torch.Tensor | None,
) -> None:
    """Optimiser step ``s`` (0-based) of the clients still training (rows ``sel`` of the stack;
    None: all) from their weights ``p_act`` and gradients ``grads``, with the formulas of
    ``torch.optim.SGD`` (momentum, weight decay) and ``torch.optim.Adam``: ``params`` and the
    optimiser states (``state1``: SGD's momentum buffer or Adam's exp_avg; ``state2``: Adam's
    exp_avg_sq) are updated in place at those rows."""
    full = sel is None
    sgd = cfg.optimizer == "sgd"
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    for n in train_names:
        p, g = p_act[n], grads[n]
        if cfg.weight_decay:
            g = g + cfg.weight_decay * p
        m1 = state1[n] if full else state1[n].index_select(0, sel)
        if sgd:
            if cfg.momentum:
                m1 = m1 * cfg.momentum + g
                g = m1
            new_p = p - cfg.lr * g
        else:
            t = s + 1
            m2 = state2[n] if full else state2[n].index_select(0, sel)
            m1 = m1.lerp(g, 1 - beta1)
            m2 = m2 * beta2 + (1 - beta2) * g * g
            denom = (m2.sqrt() / math.sqrt(1 - beta2**t)) + eps
            new_p = p - (cfg.lr / (1 - beta1**t)) * m1 / denom
            if full:
                state2[n] = m2
            else:
                state2[n].index_copy_(0, sel, m2)
        if full:
            params[n], state1[n] = new_p, m1
        else:
            params[n].index_copy_(0, sel, new_p)
            state1[n].index_copy_(0, sel, m1)


def _results(
    jobs: list["TrainJob"],
    params: dict[str, torch.Tensor],
    names: list[str],
    step_losses: list[list[torch.Tensor]],
    sq_parts: list[list[torch.Tensor]],
    counts: list[int],
) -> list["TrainResult"]:
    """Each job's result: its client's trained weights (on the CPU), its mean mini-batch loss
    (added in step order, as the sequential path does; nan without a step) and its sum of
    squared per-sample losses."""
    from fedselect.fl.local.clients import TrainResult

    out = []
    for k, j in enumerate(jobs):
        state = {n: params[n][k].detach().to("cpu").clone() for n in names}
        losses = torch.stack(step_losses[k]).tolist() if step_losses[k] else []
        total = 0.0
        for v in losses:
            total += v
        sq = 0.0
        for v in torch.stack(sq_parts[k]).tolist() if sq_parts[k] else []:
            sq += v
        out.append(TrainResult(j.client_id, state, total / len(losses) if losses else math.nan, sq, counts[k]))
    return out
