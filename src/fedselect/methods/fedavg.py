"""FedAvg (McMahan et al. 2017): U of N clients drawn uniformly at random each round.

The baseline of FLASH-RL and FAVOR. Everything else is the base Method.
"""

from __future__ import annotations

from fedselect.methods import register_method
from fedselect.methods.base import Method


@register_method
class FedAvg(Method):
    name = "fedavg"

    def select(self, t, draws):
        U = self.cfg.clients_per_round
        return sorted(int(k) for k in self.rng.choice(self.fed.num_clients, size=U, replace=False))
