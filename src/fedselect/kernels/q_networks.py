"""The DDQN agent's Q networks (FLASH-RL Section III-C2) and their parameter counts.

* ``q_network="full"`` (the paper's): MLP ``state_dim -> hidden -> ReLU -> N``
  (:func:`build_q_network`, parameters :func:`full_q_parameters`).
* ``q_network="shared"`` (large N): one small MLP applied to every client's feature block
  (:class:`SharedQNetwork`, :func:`build_shared_q_network`, parameters independent of N:
  :func:`shared_q_parameters`).

Both map ``(B, state_dim) -> (B, N)`` and are initialised from a ``torch.Generator`` (no global RNG).
Used by :class:`fedselect.kernels.ddqn.DDQNAgent`.
"""

from __future__ import annotations

import torch
from torch import nn

from fedselect.world.models import MLP, reset_parameters


def full_q_parameters(state_dim: int, num_actions: int, hidden: int) -> int:
    """Parameters of the full Q network ``state_dim -> hidden -> num_actions`` (weights and biases)."""
    return int(state_dim) * int(hidden) + int(hidden) + int(hidden) * int(num_actions) + int(num_actions)


class SharedQNetwork(nn.Module):
    """Q network whose parameters do not depend on N (``q_network="shared"``).

    The state ``(context_dim + N * feature_dim,)`` is read as a context block ``g`` (e.g. FAVOR's
    PCA row of the global model; may be empty) followed by N client blocks ``x_k`` of
    ``feature_dim`` values. Client k's Q value is one MLP applied to its own block::

        Q(s, a_k) = w2 . relu(W_x x_k + W_c [g, mean_j x_j] + b1) + b2

    (``mean_j x_j`` only with ``pool``): the same weights for every client, so a client is scored
    by its features, not by its index. Maps ``(B, state_dim) -> (B, N)`` like the full network.
    """

    def __init__(self, num_actions: int, feature_dim: int, context_dim: int, hidden: int, pool: bool = True):
        super().__init__()
        if num_actions < 1 or feature_dim < 1 or context_dim < 0 or hidden < 1:
            raise ValueError(
                f"SharedQNetwork: need num_actions, feature_dim, hidden >= 1 and context_dim >= 0, got "
                f"{num_actions}, {feature_dim}, {hidden}, {context_dim}"
            )
        self.num_actions, self.feature_dim, self.context_dim, self.pool = (
            int(num_actions),
            int(feature_dim),
            int(context_dim),
            bool(pool),
        )
        self.client = nn.Linear(self.feature_dim, int(hidden))
        extra = self.context_dim + (self.feature_dim if self.pool else 0)
        self.context = nn.Linear(extra, int(hidden), bias=False) if extra else None
        self.out = nn.Linear(int(hidden), 1)

    @property
    def state_dim(self) -> int:
        return self.context_dim + self.num_actions * self.feature_dim

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        b = s.shape[0]
        x = s[:, self.context_dim :].reshape(b, self.num_actions, self.feature_dim)
        h = self.client(x)  # (B, N, H)
        if self.context is not None:
            parts = [s[:, : self.context_dim]] if self.context_dim else []
            if self.pool:
                parts.append(x.mean(dim=1))
            h = h + self.context(torch.cat(parts, dim=1)).unsqueeze(1)
        return self.out(torch.relu(h)).squeeze(-1)


def shared_q_parameters(feature_dim: int, context_dim: int, hidden: int, pool: bool = True) -> int:
    """Parameters of :class:`SharedQNetwork` (independent of N)."""
    extra = int(context_dim) + (int(feature_dim) if pool else 0)
    return int(feature_dim) * int(hidden) + int(hidden) + extra * int(hidden) + int(hidden) + 1


def build_shared_q_network(
    num_actions: int, feature_dim: int, context_dim: int, hidden: int, pool: bool, generator: torch.Generator
) -> nn.Module:
    """:class:`SharedQNetwork`, initialised from ``generator`` (no global RNG)."""
    net = SharedQNetwork(num_actions, feature_dim, context_dim, hidden, pool)
    reset_parameters(net, generator)
    return net


def build_q_network(state_dim: int, num_actions: int, hidden: int, generator: torch.Generator) -> nn.Module:
    """The main or target Q network (FLASH-RL Section III-C2): ``state_dim -> hidden -> ReLU -> num_actions``, initialised
    from ``generator`` (PyTorch's default uniform rule, no global RNG)."""
    net = MLP(state_dim, num_actions, hidden=(int(hidden),))
    reset_parameters(net, generator)
    return net
