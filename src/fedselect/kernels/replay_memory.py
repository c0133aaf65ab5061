"""The DDQN agent's replay memory: a ring buffer of transitions (FLASH-RL Section III-C2).

Used by :class:`fedselect.kernels.ddqn.DDQNAgent`; capacity 1000 in the paper, oldest transition
overwritten first. States are stored one array per state (memory grows with the transitions
pushed) and ``s_t`` shares the array of the previous ``s_{t+1}`` when they are equal.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class ReplayMemory:
    """Ring buffer of transitions ``(s, a, r, s', done)`` (FLASH-RL Section III-C2's replay memory).

    Shapes: ``s, s'`` ``(state_dim,)`` float32; ``a`` ``(U,)`` int64; ``r`` ``(U,)`` float32;
    ``done`` bool. ``a``, ``r`` are ``(capacity, U)`` arrays allocated on the first push, U
    its number of actions; a transition with fewer actions (``mode: async``, where a buffer's
    outcomes vary in number) is padded (``lengths`` says how many are real), one with more
    widens the arrays. The states are kept one array per stored state (not a
    ``(capacity, state_dim)`` block), so memory grows with the transitions pushed, and a
    transition's ``s`` shares the array of the previous transition's ``s'`` when the two are
    equal (consecutive rounds: s_{t+1} stored at round t is s_{t+1} used at round t + 1).
    """

    def __init__(self, capacity: int, state_dim: int):
        if capacity < 1:
            raise ValueError(f"ReplayMemory: capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.state_dim = int(state_dim)
        self.size = 0
        self.pos = 0
        self.s: list[np.ndarray | None] = [None] * self.capacity
        self.s2: list[np.ndarray | None] = [None] * self.capacity
        self.a: np.ndarray | None = None
        self.r: np.ndarray | None = None
        self.done: np.ndarray | None = None
        self.lengths: np.ndarray | None = None  # (capacity,) real actions of each transition

    def __len__(self) -> int:
        return self.size

    def push(self, s, a, r, s2, done: bool) -> None:
        """Store one transition, overwriting the oldest when full.

        Raises:
            ValueError: wrong state size, ``a`` and ``r`` of different lengths, no action, or
                non-finite values.
        """
        s = np.asarray(s, dtype=np.float32).reshape(-1)
        s2 = np.asarray(s2, dtype=np.float32).reshape(-1)
        a = np.asarray(a, dtype=np.int64).reshape(-1)
        r = np.asarray(r, dtype=np.float32).reshape(-1)
        if s.size != self.state_dim or s2.size != self.state_dim:
            raise ValueError(f"ReplayMemory.push: states must have {self.state_dim} values, got {s.size} and {s2.size}")
        if a.size != r.size or a.size == 0:
            raise ValueError(f"ReplayMemory.push: {a.size} actions but {r.size} rewards")
        if not (np.all(np.isfinite(r)) and np.all(np.isfinite(s)) and np.all(np.isfinite(s2))):
            raise ValueError("ReplayMemory.push: states and rewards must be finite")
        if self.a is None:
            self._allocate(a.size)
        if a.size > self.a.shape[1]:  # widen: the earlier transitions are padded
            old_a, old_r = self.a, self.r
            self.a = np.zeros((self.capacity, a.size), np.int64)
            self.r = np.zeros((self.capacity, a.size), np.float32)
            self.a[:, : old_a.shape[1]], self.r[:, : old_r.shape[1]] = old_a, old_r
        i = self.pos
        prev = self.s2[(i - 1) % self.capacity] if self.size else None
        self.s[i] = prev if prev is not None and np.array_equal(prev, s) else s.copy()
        self.s2[i] = s2.copy()
        self.a[i], self.r[i] = 0, 0.0
        self.a[i, : a.size], self.r[i, : a.size], self.done[i], self.lengths[i] = a, r, bool(done), a.size
        self.pos = (self.pos + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def _allocate(self, u: int) -> None:
        self.a = np.zeros((self.capacity, u), np.int64)
        self.r = np.zeros((self.capacity, u), np.float32)
        self.done = np.zeros(self.capacity, bool)
        self.lengths = np.zeros(self.capacity, np.int64)

    def _states(self, which: list, idx) -> np.ndarray:
        return np.stack([which[int(i)] for i in idx]).astype(np.float32, copy=False)

    def sample(self, batch_size: int, rng: np.random.Generator):
        """A minibatch of ``batch_size`` distinct stored transitions, as torch tensors
        ``(s (B, D), a (B, U), r (B, U), s2 (B, D), done (B,))``."""
        if batch_size > self.size:
            raise ValueError(f"ReplayMemory.sample: asked for {batch_size} of {self.size} transitions")
        return self.sample_with_lengths(batch_size, rng)[:5]

    def sample_with_lengths(self, batch_size: int, rng: np.random.Generator):
        """:meth:`sample` plus each transition's number of real actions, ``lengths (B,)``
        int64 (the rest of its row of ``a`` / ``r`` is padding)."""
        if batch_size > self.size:
            raise ValueError(f"ReplayMemory.sample: asked for {batch_size} of {self.size} transitions")
        idx = rng.choice(self.size, size=batch_size, replace=False)
        return (
            torch.from_numpy(self._states(self.s, idx)),
            torch.from_numpy(self.a[idx]),
            torch.from_numpy(self.r[idx]),
            torch.from_numpy(self._states(self.s2, idx)),
            torch.from_numpy(self.done[idx].astype(np.float32)),
            torch.from_numpy(self.lengths[idx]),
        )

    def state_dict(self) -> dict[str, Any]:
        """Copies of the filled part of the buffer and the ring pointer."""
        n = self.size
        arrays = {}
        if n:
            arrays = {k: getattr(self, k)[:n].copy() for k in ("a", "r", "done")}
            if (self.lengths[:n] != self.a.shape[1]).any():  # padded transitions (mode: async)
                arrays["lengths"] = self.lengths[:n].copy()
            arrays["s"], arrays["s2"] = self._states(self.s, range(n)), self._states(self.s2, range(n))
        # the ring keeps its physical order; pos says where the next write goes
        return {"capacity": self.capacity, "state_dim": self.state_dim, "size": n, "pos": self.pos, **arrays}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["capacity"]) != self.capacity or int(state["state_dim"]) != self.state_dim:
            raise ValueError(
                f"ReplayMemory.load_state_dict: saved capacity/state_dim {state['capacity']}/{state['state_dim']} "
                f"!= {self.capacity}/{self.state_dim}"
            )
        self.size, self.pos = int(state["size"]), int(state["pos"])
        self.s, self.s2 = [None] * self.capacity, [None] * self.capacity
        if "s" not in state:
            self.a = self.r = self.done = None
            return
        u = np.asarray(state["a"]).shape[1]
        self._allocate(u)
        n = self.size
        for k in ("a", "r", "done"):
            getattr(self, k)[:n] = np.asarray(state[k])
        self.lengths[:n] = np.asarray(state["lengths"]) if "lengths" in state else u
        s_all, s2_all = np.asarray(state["s"], np.float32), np.asarray(state["s2"], np.float32)
        for i in range(n):
            self.s2[i] = s2_all[i].copy()
            prev = self.s2[(i - 1) % self.capacity]
            self.s[i] = prev if i and np.array_equal(prev, s_all[i]) else s_all[i].copy()
