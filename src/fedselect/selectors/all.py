"""Full participation: every client in every round (Regular FL, FedPer and Individual training
in the CEFL paper; ``clients_per_round`` is ignored)."""

from __future__ import annotations

from fedselect.selectors import register_selector
from fedselect.selectors.base import RoundView, Selection, Selector


@register_selector
class AllClients(Selector):
    """Every client, ids in order."""

    name = "all"
    summary = "every client every round (full participation)"

    def select(self, view: RoundView) -> Selection:
        return Selection(range(self.settings.num_clients))
