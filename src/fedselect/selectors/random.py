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
        if view.available is None and view.how_many(s) == s.clients_per_round:  # the draws of every earlier version
            return Selection(sorted(int(k) for k in self.rng.choice(s.num_clients, size=s.clients_per_round, replace=False)))
        pool = view.pool(s.num_clients)
        return Selection(sorted(int(k) for k in self.rng.choice(pool, size=view.how_many(s), replace=False)))
