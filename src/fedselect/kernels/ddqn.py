"""Double deep Q-learning agent with multi-action selection (FLASH-RL Section III-C2).

Shared by the FLASH-RL and FAVOR selectors (:mod:`fedselect.selectors.flashrl`, :mod:`fedselect.selectors.favor`).

* Main and target networks: MLP ``state_dim -> 512 -> ReLU -> N``; output k is Q(s, a_k), the
  value of selecting client k (``q_network="full"``, the paper's;
  :func:`~fedselect.kernels.q_networks.build_q_network`). With ``q_network="shared"`` (large N)
  one small MLP is applied to every client's own feature block of the state (plus the state's
  context block and, with ``shared_pool``, the mean of all clients' blocks) and gives that
  client's Q value: parameters independent of N (:class:`~fedselect.kernels.q_networks.SharedQNetwork`).
  Either way the network maps ``(B, state_dim) -> (B, N)``, so selection, the double-Q targets
  and learning are the same code.
* Selection: epsilon-greedy per slot; U distinct clients (:meth:`DDQNAgent.select`).
* Epsilon: linear from ``eps_init`` (round 1) to ``eps_end`` (round ``eps_decay_rounds``),
  constant afterwards (:func:`linear_epsilon`).
* Replay memory of transitions ``(s_t, a_t (U ids), r_t (U rewards), s_{t+1}, done)``, capacity
  1000, oldest overwritten first; its memory grows with the transitions pushed (one array per
  stored state, and s_t shares the array of the previous s_{t+1} when they are equal)
  (:class:`~fedselect.kernels.replay_memory.ReplayMemory`).
* Learning (FR-eq 15, 16): for every stored action a_k of a minibatch sample,
  ``Y = r_k + gamma * Q_target(s', argmax_a Q_main(s', a)) * (1 - done)`` and
  ``loss = mean over (sample, action) of (Y - Q_main(s, a_k))^2``; one Adam step, once the memory
  holds ``learn_start`` (default: ``batch_size``) transitions, on min(batch_size, stored) of them.
* The target network is hard-copied from the main network every P rounds (:meth:`end_round`).
* Non-finite numbers never win and never stick: a NaN or infinite Q value ranks below every
  finite one (selection and the double-Q argmax; ties by lowest id), and a learning step whose
  TD loss, updated weights or outputs on its minibatch are not finite is discarded (weights
  and Adam state restored to their last finite values), logged as a warning naming the round
  the first time (INFO afterwards), and the run goes on.

Randomness: the caller passes a ``numpy.random.Generator`` (epsilon draws, random slots,
minibatch sampling) and a ``torch.Generator`` (network initialisation). No global RNG is used.
:meth:`DDQNAgent.state_dict` holds everything needed to resume bit-identically: both networks,
the optimiser, the memory, the counters and both generators' states.
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from fedselect.kernels.q_networks import build_q_network, build_shared_q_network
from fedselect.kernels.replay_memory import ReplayMemory

log = logging.getLogger("fedselect.ddqn")


def rank_scores(q) -> np.ndarray:
    """Scores for ranking: non-finite values (NaN, +-inf) become ``-inf``, so they are never
    preferred to a finite score; ``np.argmax`` then breaks ties by the lowest index."""
    q = np.asarray(q, dtype=np.float64)
    return np.where(np.isfinite(q), q, -np.inf)


def linear_epsilon(round_: int, eps_init: float = 0.9, eps_end: float = 0.2, decay_rounds: int = 100) -> float:
    """Exploration rate of round ``round_`` (1-based), linear decay from FLASH-RL Table IV's eps_init to eps_end
    (the paper does not give the schedule's shape).

    ``eps(1) = eps_init``, ``eps(decay_rounds) = eps_end``, linear in between and ``eps_end``
    afterwards. ``decay_rounds = 1`` means ``eps_end`` from round 1 on.

    Raises:
        ValueError: ``round_ < 1``, ``decay_rounds < 1`` or an epsilon outside [0, 1].
    """
    if round_ < 1:
        raise ValueError(f"linear_epsilon: rounds are 1-based, got round {round_}")
    if decay_rounds < 1:
        raise ValueError(f"linear_epsilon: eps_decay_rounds must be >= 1, got {decay_rounds}")
    for name, v in (("eps_init", eps_init), ("eps_end", eps_end)):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"linear_epsilon: {name} must lie in [0, 1], got {v}")
    if decay_rounds == 1:
        return float(eps_end)
    frac = min(1.0, (round_ - 1) / (decay_rounds - 1))
    return float(eps_init + (eps_end - eps_init) * frac)


@dataclass
class DDQNConfig:
    """Agent hyper-parameters; defaults are FLASH-RL Table IV.

    Attributes:
        hidden: width of the single hidden layer (512).
        lr: Adam learning rate (0.01).
        gamma: discount rate (0.9).
        memory_capacity: replay memory size in transitions (1000).
        batch_size: minibatch size (50): a minibatch is min(batch_size, transitions stored).
        learn_start: learning starts once the memory holds this many transitions; None (default)
            = ``batch_size`` (FLASH-RL Table IV); 1 = from the first transition, on minibatches of all the
            memory until it holds ``batch_size`` (the FLASH-RL authors' ``RL/DQL.py``).
        target_sync: P, rounds between hard copies main -> target (10).
        eps_init, eps_end: exploration rate at round 1 and at ``eps_decay_rounds``.
        eps_decay_rounds: rounds of linear decay; ``None`` = all rounds of the run.
        uniform_first_round: round 1 picks U clients uniformly at random (fedselect's choice:
            the agent has seen nothing yet).
        learn_steps: Adam steps per round (default 1); each on a fresh minibatch. A tuning
            knob (replay ratio), not in the paper.
        q_network: ``"full"`` (the paper's ``state_dim -> hidden -> N``) or ``"shared"``
            (:class:`~fedselect.kernels.q_networks.SharedQNetwork`, needs the state layout, see :class:`DDQNAgent`).
        shared_hidden: hidden width of the shared network (64).
        shared_pool: the shared network also sees the mean of all clients' feature blocks.
    """

    hidden: int = 512
    lr: float = 0.01
    gamma: float = 0.9
    memory_capacity: int = 1000
    batch_size: int = 50
    learn_start: int | None = None
    target_sync: int = 10
    eps_init: float = 0.9
    eps_end: float = 0.2
    eps_decay_rounds: int | None = None
    uniform_first_round: bool = True
    learn_steps: int = 1
    q_network: str = "full"
    shared_hidden: int = 64
    shared_pool: bool = True

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        for name in ("hidden", "memory_capacity", "batch_size", "target_sync", "learn_steps", "shared_hidden"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"DDQN config: {name} must be >= 1, got {getattr(self, name)}")
        if self.batch_size > self.memory_capacity:
            raise ValueError(f"DDQN config: batch_size {self.batch_size} > memory_capacity {self.memory_capacity}")
        if self.learn_start is not None and not 1 <= int(self.learn_start) <= self.memory_capacity:
            raise ValueError(
                f"DDQN config: learn_start must lie in [1, memory_capacity = {self.memory_capacity}] or be null, "
                f"got {self.learn_start}"
            )
        if not self.lr > 0:
            raise ValueError(f"DDQN config: lr must be > 0, got {self.lr}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"DDQN config: gamma must lie in [0, 1], got {self.gamma}")
        for name in ("eps_init", "eps_end"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"DDQN config: {name} must lie in [0, 1], got {getattr(self, name)}")
        if self.eps_decay_rounds is not None and int(self.eps_decay_rounds) < 1:
            raise ValueError(f"DDQN config: eps_decay_rounds must be >= 1 or null, got {self.eps_decay_rounds}")
        if self.q_network not in ("full", "shared"):
            raise ValueError(f"DDQN config: q_network must be 'full' or 'shared', got {self.q_network!r}")


def double_q_targets(
    main: nn.Module, target: nn.Module, r: torch.Tensor, s2: torch.Tensor, done: torch.Tensor, gamma: float
) -> torch.Tensor:
    """Double-Q targets for every taken action, FR-eq 16.

    ``Y[b, j] = r[b, j] + gamma * Q_target(s2[b], argmax_a Q_main(s2[b], a)) * (1 - done[b])``.

    Args:
        r: rewards ``(B, U)``; s2: next states ``(B, D)``; done: ``(B,)`` in {0, 1}.

    Returns:
        ``(B, U)`` float32 tensor, no gradient.
    """
    with torch.no_grad():
        q_main = main(s2)
        q_main = torch.where(torch.isfinite(q_main), q_main, torch.full_like(q_main, -math.inf))  # NaN never wins
        best = q_main.argmax(dim=1, keepdim=True)  # (B, 1) chosen by the main net
        q_next = target(s2).gather(1, best).squeeze(1)  # (B,) valued by the target net
        return r + gamma * (q_next * (1.0 - done)).unsqueeze(1)


class DDQNAgent:
    """DDQN client selector with multi-action selection (FR-eq 15, 16).

    Args:
        state_dim: length D of the state vector.
        num_actions: N, one action per client.
        config: :class:`DDQNConfig` (Table IV defaults).
        total_rounds: T, used when ``config.eps_decay_rounds`` is ``None``.
        rng: ``numpy.random.Generator`` for epsilon draws, random slots and minibatches.
        torch_generator: ``torch.Generator`` for the network initialisation.
        feature_dim, context_dim: the state layout for ``config.q_network == "shared"``: a
            context block of ``context_dim`` values, then ``num_actions`` client blocks of
            ``feature_dim`` values (``state_dim == context_dim + num_actions * feature_dim``).
            Unused by the full network.

    Raises:
        ValueError: non-positive sizes, a bad config field, or a shared network without a
            layout matching ``state_dim``.
    """

    def __init__(
        self,
        state_dim: int,
        num_actions: int,
        config: DDQNConfig,
        total_rounds: int,
        rng: np.random.Generator,
        torch_generator: torch.Generator,
        feature_dim: int | None = None,
        context_dim: int = 0,
    ):
        if state_dim < 1 or num_actions < 1 or total_rounds < 1:
            raise ValueError(
                f"DDQNAgent: need state_dim, num_actions, total_rounds >= 1, got {state_dim}, {num_actions}, {total_rounds}"
            )
        if not isinstance(rng, np.random.Generator):
            raise ValueError("DDQNAgent: rng must be a numpy.random.Generator")
        if not isinstance(torch_generator, torch.Generator):
            raise ValueError("DDQNAgent: torch_generator must be a torch.Generator")
        config.validate()
        self.config = config
        self.state_dim, self.num_actions, self.total_rounds = int(state_dim), int(num_actions), int(total_rounds)
        self.rng = rng
        self.torch_generator = torch_generator
        if config.q_network == "shared":
            if feature_dim is None or int(context_dim) + self.num_actions * int(feature_dim) != self.state_dim:
                raise ValueError(
                    f"DDQNAgent: a shared Q network needs feature_dim and context_dim with context_dim + "
                    f"num_actions * feature_dim == state_dim, got {feature_dim}, {context_dim} for "
                    f"{self.num_actions} actions and state_dim {self.state_dim}"
                )
            self.main = build_shared_q_network(
                self.num_actions, int(feature_dim), int(context_dim), config.shared_hidden, config.shared_pool, torch_generator
            )
        else:
            self.main = build_q_network(self.state_dim, self.num_actions, config.hidden, torch_generator)
        self.target = copy.deepcopy(self.main)
        self.target.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.main.parameters(), lr=config.lr)
        self.memory = ReplayMemory(config.memory_capacity, self.state_dim)
        self.learn_steps = 0
        self.last_loss: float | None = None
        self.discarded_steps = 0  # learning steps dropped for a non-finite loss / weights
        self.nonfinite_q_rounds = 0  # selections that met a non-finite Q value
        self._round: int | None = None  # the round of the last select(), for messages

    # ---- exploration -------------------------------------------------------------------
    @property
    def decay_rounds(self) -> int:
        return int(self.config.eps_decay_rounds or self.total_rounds)

    def epsilon(self, round_: int) -> float:
        """Exploration rate of round ``round_`` (1-based); see :func:`linear_epsilon`."""
        return linear_epsilon(round_, self.config.eps_init, self.config.eps_end, self.decay_rounds)

    def q_values(self, state) -> np.ndarray:
        """Q_main(state, .) as a float64 array ``(N,)``."""
        s = torch.as_tensor(np.asarray(state, dtype=np.float32).reshape(1, -1))
        if s.shape[1] != self.state_dim:
            raise ValueError(f"DDQNAgent: state has {s.shape[1]} values, expected {self.state_dim}")
        with torch.no_grad():
            return self.main(s)[0].double().numpy()

    def select(self, state, k: int, round_: int, among=None) -> list[int]:
        """Choose ``k`` distinct clients, epsilon-greedy per slot (FLASH-RL Section III-C2: the U actions of highest Q).

        For each of the k slots, with probability eps a uniformly random not-yet-chosen client,
        else the not-yet-chosen client with the highest Q (ties: lowest id; a NaN or infinite Q
        ranks below every finite one, see :func:`rank_scores`). Round 1 is uniform when
        ``uniform_first_round``.

        Args:
            state: ``(state_dim,)`` state vector s_t.
            k: U, number of clients to choose.
            round_: t, 1-based.
            among: the ids that may be chosen (the clients online), or None for all N.

        Returns:
            k distinct client ids (python ints), in slot order.

        Raises:
            ValueError: ``k`` < 1 or more than N.
        """
        ids = np.arange(self.num_actions) if among is None else np.asarray(among, dtype=np.int64)
        if not 1 <= k <= ids.size:
            raise ValueError(f"DDQNAgent.select: cannot choose {k} clients out of {ids.size}")
        self._round = int(round_)
        if round_ == 1 and self.config.uniform_first_round:
            return [int(c) for c in self.rng.choice(ids, size=k, replace=False)]
        eps = self.epsilon(round_)
        raw = self.q_values(state)
        q = rank_scores(raw)
        if not np.all(np.isfinite(raw)):
            self.nonfinite_q_rounds += 1
            log.log(
                logging.WARNING if self.nonfinite_q_rounds == 1 else logging.INFO,
                "round %d: Q values of clients %s are not finite; they rank below every finite value%s",
                round_,
                np.flatnonzero(~np.isfinite(raw)).tolist(),
                " (later rounds like this are logged at INFO level)" if self.nonfinite_q_rounds == 1 else "",
            )
        free = np.zeros(self.num_actions, bool)
        free[ids] = True
        chosen: list[int] = []
        for _ in range(k):
            cand = np.flatnonzero(free)
            if self.rng.random() < eps:
                c = int(cand[self.rng.integers(cand.size)])
            else:
                c = int(cand[np.argmax(q[cand])])
            chosen.append(c)
            free[c] = False
        return chosen

    # ---- learning ----------------------------------------------------------------------
    def remember(self, s, a, r, s2, done: bool) -> None:
        """Push a transition (see :class:`~fedselect.kernels.replay_memory.ReplayMemory`)."""
        a = np.asarray(a, dtype=np.int64)
        if a.size and (a.min() < 0 or a.max() >= self.num_actions):
            raise ValueError(f"DDQNAgent.remember: actions must lie in [0, {self.num_actions}), got {a.tolist()}")
        self.memory.push(s, a, r, s2, done)

    def learn(self, round_: int | None = None) -> float | None:
        """``learn_steps`` (default 1) Adam steps, each on a fresh minibatch of min(batch_size,
        stored) transitions, if the memory holds >= ``learn_start`` (default: batch_size) of them.

        A step whose TD loss is not finite is not taken, and a step that leaves a weight, or
        the network's output on the minibatch's states, non-finite is undone (main network and
        Adam state restored from a snapshot taken before it): the network keeps its last finite
        weights and the run goes on. The first
        discarded step is logged as a warning naming ``round_`` (default: the round of the
        last :meth:`select`), later ones at INFO level; :attr:`discarded_steps` counts them.

        Returns:
            The TD loss (mean over samples and taken actions of the squared error; averaged over
            the kept steps), or None when the memory is still too small or every step was
            discarded.
        """
        start = self.config.batch_size if self.config.learn_start is None else self.config.learn_start
        if len(self.memory) < start:
            return None
        losses = [loss for loss in (self._learn_step(round_) for _ in range(self.config.learn_steps)) if loss is not None]
        if not losses:
            return None
        self.last_loss = float(np.mean(losses))
        return self.last_loss

    def _learn_step(self, round_: int | None = None) -> float | None:
        s, a, r, s2, done, lengths = self.memory.sample_with_lengths(min(self.config.batch_size, len(self.memory)), self.rng)
        y = double_q_targets(self.main, self.target, r, s2, done, self.config.gamma)
        q_taken = self.main(s).gather(1, a)  # (B, U)
        if bool((lengths == a.shape[1]).all()):
            loss = torch.mean((y - q_taken) ** 2)
        else:  # padded transitions (mode: async): the mean over the real actions only
            mask = (torch.arange(a.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)).to(q_taken.dtype)
            loss = torch.sum(mask * (y - q_taken) ** 2) / torch.sum(mask)
        value = float(loss.detach())
        if not math.isfinite(value):
            self._discard(round_, f"TD loss {value}")
            return None
        snapshot = (copy.deepcopy(self.main.state_dict()), copy.deepcopy(self.optimizer.state_dict()))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        finite = all(bool(torch.isfinite(p).all()) for p in self.main.parameters())
        if finite:
            with torch.no_grad():
                finite = bool(torch.isfinite(self.main(s)).all() and torch.isfinite(self.main(s2)).all())
        if not finite:
            self.main.load_state_dict(snapshot[0])
            self.optimizer.load_state_dict(snapshot[1])
            self.optimizer.zero_grad(set_to_none=True)
            self._discard(round_, f"the step would make the Q network's weights or outputs non-finite (TD loss {value:.6g})")
            return None
        self.learn_steps += 1
        return value

    def _discard(self, round_: int | None, why: str) -> None:
        self.discarded_steps += 1
        t = round_ if round_ is not None else self._round
        where = f"round {t}" if t is not None else "a round"
        if self.discarded_steps == 1:
            log.warning(
                "%s: DDQN learning step discarded: %s; the Q network keeps its last finite weights and the "
                "run goes on (further discarded steps are logged at INFO level)",
                where,
                why,
            )
        else:
            log.info("%s: DDQN learning step discarded: %s (%d discarded so far)", where, why, self.discarded_steps)

    def sync_target(self) -> None:
        """Hard copy main -> target."""
        self.target.load_state_dict(self.main.state_dict())

    def end_round(self, round_: int) -> bool:
        """Call once after learning in round ``round_``; syncs the target every P rounds.

        Returns:
            True when the target network was synced.
        """
        if round_ % self.config.target_sync == 0:
            self.sync_target()
            return True
        return False

    # ---- checkpoints -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: networks, optimiser, memory, counters, config, and the
        numpy / torch generator states."""
        return {
            "config": asdict(self.config),
            "state_dim": self.state_dim,
            "num_actions": self.num_actions,
            "total_rounds": self.total_rounds,
            "main": copy.deepcopy(self.main.state_dict()),
            "target": copy.deepcopy(self.target.state_dict()),
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "memory": self.memory.state_dict(),
            "learn_steps": self.learn_steps,
            "last_loss": self.last_loss,
            "discarded_steps": self.discarded_steps,
            "nonfinite_q_rounds": self.nonfinite_q_rounds,
            "rng": copy.deepcopy(self.rng.bit_generator.state),
            "torch_generator": self.torch_generator.get_state().clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`.

        Raises:
            ValueError: the saved agent has another state size or number of actions.
        """
        if int(state["state_dim"]) != self.state_dim or int(state["num_actions"]) != self.num_actions:
            raise ValueError(
                f"DDQNAgent.load_state_dict: saved agent has state_dim={state['state_dim']}, "
                f"num_actions={state['num_actions']}; this one {self.state_dim}, {self.num_actions}"
            )
        self.config = DDQNConfig(**state["config"])
        self.total_rounds = int(state["total_rounds"])
        self.main.load_state_dict(state["main"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.memory.load_state_dict(state["memory"])
        self.learn_steps = int(state["learn_steps"])
        self.last_loss = state["last_loss"]
        self.discarded_steps = int(state.get("discarded_steps", 0))
        self.nonfinite_q_rounds = int(state.get("nonfinite_q_rounds", 0))
        self.rng.bit_generator.state = copy.deepcopy(state["rng"])
        self.torch_generator.set_state(state["torch_generator"])
