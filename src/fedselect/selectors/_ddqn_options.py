"""The options of the DDQN selectors FLASH-RL and FAVOR, and what they imply.

* :data:`SCHEDULES`: the named agent settings (``schedule: paper / tuned / code``).
* :class:`DDQNOptions`: the agent, state, warm-up, PCA and Q-network options (defaults: FLASH-RL
  Table IV, except ``eps_end`` 0.2), checked when the config is read; :meth:`DDQNOptions.agent_config`
  turns them into the agent's :class:`~fedselect.kernels.ddqn.DDQNConfig`.
* :func:`pca_fit_size`: how many clients' warm-up models the PCA is fitted on under
  ``pca_fit_clients`` and ``pca_fit_max_mb``.

The selectors themselves live in :mod:`fedselect.selectors._ddqn` (the shared machinery),
:mod:`fedselect.selectors.flashrl` and :mod:`fedselect.selectors.favor`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fedselect.kernels.ddqn import DDQNConfig

#: the named agent settings of ``schedule`` (docs/flash-rl.md, "Named schedules"): each expands to
#: these explicit options. ``paper``: FLASH-RL Table IV (epsilon 0.9 -> 0.35 linearly over all T
#: rounds, RL batch 50 = learning start, Adam 0.01, one learning step a round); ``tuned``: ours for
#: FLASH-RL on MNIST (epsilon 0.9 -> 0.2 reached at round 30, RL batch 10, Adam 0.001, 10 steps a
#: round); ``code``: the FLASH-RL authors' ``RL/DQL.py`` and tutorial (epsilon 0.9 falling by
#: 0.7 / 500 a round to its floor 0.2 at round 502 whatever T and the data set, RL batch 50,
#: learning from the first transition on min(stored, 50) of them, Adam 0.01, one step a round)
SCHEDULES: dict[str, dict[str, Any]] = {
    "paper": {
        "eps_init": 0.9,
        "eps_end": 0.35,
        "eps_decay_rounds": None,
        "rl_batch_size": 50,
        "rl_learn_start": None,
        "rl_lr": 0.01,
        "rl_learn_steps": 1,
    },
    "tuned": {
        "eps_init": 0.9,
        "eps_end": 0.2,
        "eps_decay_rounds": 30,
        "rl_batch_size": 10,
        "rl_learn_start": None,
        "rl_lr": 0.001,
        "rl_learn_steps": 10,
    },
    "code": {
        "eps_init": 0.9,
        "eps_end": 0.2,
        "eps_decay_rounds": 502,
        "rl_batch_size": 50,
        "rl_learn_start": 1,
        "rl_lr": 0.01,
        "rl_learn_steps": 1,
    },
}


class DDQNOptions(BaseModel):
    """Agent and state options shared by FLASH-RL and FAVOR (defaults: FR Table IV,
    except ``eps_end`` 0.2).

    ``schedule`` (``paper`` / ``tuned`` / ``code``, :data:`SCHEDULES`) writes a named agent
    setting's seven options (``eps_init``, ``eps_end``, ``eps_decay_rounds``, ``rl_batch_size``,
    ``rl_learn_start``, ``rl_lr``, ``rl_learn_steps``); any of them also given explicitly overrides
    the schedule's value. The
    name itself is not kept: a resolved config (``config.yaml``) holds the explicit values only,
    identical to writing them out. Unset (the default), the options keep their own defaults.
    """

    model_config = ConfigDict(extra="forbid")
    schedule: Literal["paper", "tuned", "code"] | None = Field(
        None,
        exclude=True,
        description="named agent setting: paper (Table IV: eps 0.9 -> 0.35 over all rounds, RL batch 50, Adam 0.01, 1 step), "
        "tuned (eps 0.9 -> 0.2 by round 30, RL batch 10, Adam 0.001, 10 steps) or code (the authors' RL/DQL.py: eps 0.9 -> "
        "0.2 by round 502, RL batch 50, learning from round 1, Adam 0.01, 1 step); explicit options override it; null = none",
    )
    pca_components: int = Field(100, ge=1, description="PCA components per model (capped by N)")
    warmup_epochs: int = Field(1, ge=1, description="local epochs of the warm-up of all clients")
    count_warmup: bool = Field(True, description="count the warm-up's straggler latency in the end-to-end latency")
    hidden: int = Field(512, ge=1)
    rl_lr: float = Field(0.01, gt=0, description="Adam learning rate of the Q network")
    gamma: float = Field(0.9, ge=0, le=1)
    memory_capacity: int = Field(1000, ge=1)
    rl_batch_size: int = Field(50, ge=1, description="minibatch size; learning starts once the memory holds this many")
    rl_learn_start: int | None = Field(
        None,
        ge=1,
        description="transitions stored before learning starts, on minibatches of min(stored, rl_batch_size); "
        "null = rl_batch_size (1: from round 1, as the authors' RL/DQL.py)",
    )
    target_sync: int = Field(10, ge=1, description="P, rounds between target-network copies")
    rl_learn_steps: int = Field(1, ge=1, description="Adam steps per round (paper: 1; a tuning knob)")
    eps_init: float = Field(0.9, ge=0, le=1)
    eps_end: float = Field(0.2, ge=0, le=1, description="0.35 for MNIST in the paper")
    eps_decay_rounds: int | None = Field(None, ge=1, description="rounds of linear decay; null = all rounds")
    checkpoint_pca: bool = Field(
        True, description="store the PCA in checkpoints; false = refit it on resume by re-running the deterministic warm-up"
    )
    pca_fit_clients: int | None = Field(
        1000,
        ge=1,
        description="fit the PCA on a seeded sample of at most this many clients' warm-up models (all when N is not larger); "
        "null = no bound in clients",
    )
    pca_fit_max_mb: float | None = Field(
        256.0,
        gt=0,
        description="fit the PCA on at most as many clients' warm-up models as fit in this many MiB (clients x weights x 4 "
        "bytes; the full SVD needs about 5x that); null = no bound in memory",
    )
    q_network: Literal["auto", "full", "shared"] = Field(
        "auto",
        description="full: the paper's state -> hidden -> N network; shared: one per-client MLP, parameters independent of N; "
        "auto: full while its parameter count is <= q_network_max_params, else shared",
    )
    q_network_max_params: int = Field(
        100_000_000, ge=1, description="largest full Q network (parameters) that auto picks and that full accepts"
    )
    shared_hidden: int = Field(64, ge=1, description="hidden width of the shared Q network")
    shared_pool: bool = Field(True, description="the shared Q network also sees the mean of all clients' features")

    @model_validator(mode="before")
    @classmethod
    def _expand_schedule(cls, data: Any) -> Any:
        """``schedule: NAME`` -> the :data:`SCHEDULES` entry under the explicit options (which win).
        An unknown name is left for the field's check (``Input should be 'paper', 'tuned' or 'code'``)."""
        if isinstance(data, dict):
            name = data.get("schedule")
            if isinstance(name, str) and name in SCHEDULES:
                return {**SCHEDULES[name], **data}
        return data

    @model_validator(mode="after")
    def _learning_can_start(self) -> "DDQNOptions":
        if self.rl_learn_start is not None and self.rl_learn_start > self.memory_capacity:
            raise ValueError(
                f"rl_learn_start {self.rl_learn_start} > memory_capacity {self.memory_capacity}: the replay memory "
                "never holds that many transitions, so the agent would never learn"
            )
        return self

    def agent_config(self, q_network: str = "full") -> DDQNConfig:
        return DDQNConfig(
            hidden=self.hidden,
            lr=self.rl_lr,
            gamma=self.gamma,
            memory_capacity=self.memory_capacity,
            batch_size=self.rl_batch_size,
            learn_start=self.rl_learn_start,
            target_sync=self.target_sync,
            eps_init=self.eps_init,
            eps_end=self.eps_end,
            eps_decay_rounds=self.eps_decay_rounds,
            learn_steps=self.rl_learn_steps,
            q_network=q_network,
            shared_hidden=self.shared_hidden,
            shared_pool=self.shared_pool,
        )


def pca_fit_size(num_clients: int, num_weights: int, options: DDQNOptions) -> int:
    """k, the clients whose warm-up models the PCA is fitted on: ``min(N, pca_fit_clients,
    floor(pca_fit_max_mb MiB / (4 P)))`` and at least 1, for N = ``num_clients`` and P =
    ``num_weights`` float32 weights per model (a bound left null does not count). k = N means
    the PCA is fitted on every client, as FLASH-RL Section III-C1 does.

    Raises:
        ValueError: N or P below 1."""
    if num_clients < 1 or num_weights < 1:
        raise ValueError(f"pca_fit_size: num_clients and num_weights must be >= 1, got {num_clients} and {num_weights}")
    k = num_clients if options.pca_fit_clients is None else min(num_clients, options.pca_fit_clients)
    if options.pca_fit_max_mb is not None:
        k = min(k, max(1, int(options.pca_fit_max_mb * 2**20 // (4 * num_weights))))
    return k
