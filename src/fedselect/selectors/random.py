"""FedAvg's selector (McMahan et al. 2017): U of N clients uniformly at random each round,
without replacement (the baseline of FLASH-RL and FAVOR)."""

from __future__ import annotations

from fedselect.selectors import register_selector
from fedselect.selectors.base import RoundView, Selection, Selector


@register_selector
class RandomSelector(Selector):
    """U distinct clients drawn uniformly each round (ids sorted). Generator stream
    ``selector/fedavg`` (kept from the ``fedavg`` method, so results are unchanged)."""

    name = "random"
    summary = "FedAvg's choice: U distinct clients uniformly at random each round"
    rng_stream = "selector/fedavg"

    def select(self, view: RoundView) -> Selection:
        s = self.settings
        return Selection(sorted(int(k) for k in self.rng.choice(s.num_clients, size=s.clients_per_round, replace=False)))
