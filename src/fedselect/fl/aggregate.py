"""Aggregation of client models: FedAvg (McMahan et al. 2017) and the partial aggregation of
FedPer and CEFL (CE-eq 6, 7).

States are ``dict[str, torch.Tensor]`` (``model.state_dict()``).
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import torch

State = dict[str, torch.Tensor]


def _check_weights(weights: Sequence[float]) -> list[float]:
    w = [float(x) for x in weights]
    bad = [x for x in w if not math.isfinite(x) or x < 0]
    if bad:
        raise ValueError(f"aggregation weights must be finite and >= 0, got {bad}")
    if sum(w) <= 0:
        raise ValueError(f"aggregation weights sum to {sum(w)}; at least one client needs weight > 0")
    return w


def fedavg(states: Sequence[State], weights: Sequence[float], keys: Iterable[str] | None = None) -> State:
    """Weighted average w = sum_k (n_k / sum n) w_k (McMahan et al.).

    Args:
        states: client states with identical keys and shapes.
        weights: one weight per state, typically the training sample counts n_k (>= 0).
        keys: average only these entries (default: all keys of the first state).

    Returns:
        A new state with the averaged entries. Floating tensors keep their dtype; integer
        buffers (e.g. BatchNorm ``num_batches_tracked``) are not averaged: the max is taken.

    Raises:
        ValueError: no states, a length mismatch, non-finite or negative weights, zero total
        weight, or mismatched keys/shapes.
    """
    if not states:
        raise ValueError("fedavg needs at least one client state")
    if len(states) != len(weights):
        raise ValueError(f"{len(states)} states but {len(weights)} weights")
    w = _check_weights(weights)
    total = sum(w)
    names = list(states[0].keys()) if keys is None else list(keys)
    out: State = {}
    for name in names:
        tensors = []
        for i, s in enumerate(states):
            if name not in s:
                raise ValueError(f"client state {i} lacks entry {name!r}")
            if s[name].shape != states[0][name].shape:
                raise ValueError(f"entry {name!r}: shape {tuple(s[name].shape)} != {tuple(states[0][name].shape)}")
            tensors.append(s[name])
        ref = tensors[0]
        if ref.is_floating_point() or ref.is_complex():
            acc = torch.zeros_like(ref, dtype=torch.float64)
            for t, wk in zip(tensors, w):
                if wk:
                    acc += t.to(torch.float64) * (wk / total)
            out[name] = acc.to(ref.dtype)
        else:
            out[name] = torch.stack(list(tensors)).max(dim=0).values.clone()
    return out


def partial_average(states: Sequence[State], weights: Sequence[float], base_names: Iterable[str]) -> State:
    """Average only the shared base layers (FedPer; CEFL CE-eq 6, 7); personalised entries are
    not part of the result and so never leave the clients.

    Raises:
        ValueError: empty ``base_names``, or any error of :func:`fedavg`.
    """
    base = list(base_names)
    if not base:
        raise ValueError("partial aggregation needs at least one base layer; got an empty set")
    return fedavg(states, weights, keys=base)


def state_bytes(state: State, keys: Iterable[str] | None = None) -> int:
    """Bytes needed to send the given entries (all by default) at their storage dtype."""
    names = state.keys() if keys is None else keys
    return int(sum(state[n].numel() * state[n].element_size() for n in names))


def flat_parameters(state: State, keys: Iterable[str] | None = None) -> torch.Tensor:
    """Concatenate the floating entries of ``state`` (optionally only ``keys``, in that order)
    into one float32 vector ``(P,)`` — the weight vector of FR-eq 7 and of the PCA (FR-eq 12)."""
    names = list(keys) if keys is not None else [k for k, v in state.items() if v.is_floating_point()]
    return torch.cat([state[n].reshape(-1).float() for n in names])


def buffered_update(
    old: State,
    updates: Sequence[State],
    starts: Sequence[State],
    weights: Sequence[float],
    scales: Sequence[float] | None = None,
    server_lr: float = 1.0,
    keys: Iterable[str] | None = None,
) -> State:
    """One asynchronous server step (docs/async.md): ``new = old + eta_g * sum_i (w_i / sum_j w_j)
    * a_i * (y_i - x_i)`` over the updates, ``y_i`` a client's model after local training, ``x_i``
    the model it is measured from, ``w_i`` its weight (normalised here), ``a_i`` its scale (not
    normalised; default 1). FedBuff (Nguyen et al. 2022, Algorithm 1): ``x_i`` the model the client
    downloaded, ``w_i = 1`` (or ``n_i``), ``a_i = S(s_i)``, so a buffer of one stale update moves
    the model by S(s) of its delta; FedAsync (Xie et al. 2019, Algorithm 1): one update, ``x_i =
    old``, ``a = alpha S(s)``: ``(1 - alpha S(s)) old + alpha S(s) y``.

    Computed in float64 per floating entry. When every update is measured from ``old`` itself,
    every scale is 1 and ``eta_g = 1``, the step is exactly FedAvg's weighted mean of the ``y_i``,
    and it is computed as such (:func:`fedavg`, the same float sums as a synchronous round).
    Integer buffers take the max over the updates, as in :func:`fedavg`.

    Returns:
        the new entries (``keys``, default all of ``old``'s).

    Raises:
        ValueError: no updates, lengths that differ, bad weights (see :func:`fedavg`), a scale
            that is negative or not finite.
    """
    if not updates:
        raise ValueError("buffered_update needs at least one update")
    a = [1.0] * len(updates) if scales is None else [float(x) for x in scales]
    if not (len(updates) == len(starts) == len(weights) == len(a)):
        raise ValueError(f"{len(updates)} updates, {len(starts)} start states, {len(weights)} weights, {len(a)} scales")
    if any(not math.isfinite(x) or x < 0 for x in a):
        raise ValueError(f"update scales must be finite and >= 0, got {a}")
    w = _check_weights(weights)
    if float(server_lr) == 1.0 and all(x == 1.0 for x in a) and all(x is old for x in starts):
        return fedavg(updates, w, keys=keys)
    total = sum(w)
    names = list(old.keys()) if keys is None else list(keys)
    out: State = {}
    for name in names:
        ref = old[name]
        if ref.is_floating_point() or ref.is_complex():
            acc = torch.zeros_like(ref, dtype=torch.float64)
            for y, x, wk, ak in zip(updates, starts, w, a):
                if wk and ak:
                    acc += (y[name].to(torch.float64) - x[name].to(torch.float64)) * (wk / total * ak)
            out[name] = (ref.to(torch.float64) + float(server_lr) * acc).to(ref.dtype)
        else:
            out[name] = torch.stack([y[name] for y in updates]).max(dim=0).values.clone()
    return out
