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
    uses_count = False

    def select(self, view: RoundView) -> Selection:
        """Every client online this round (all of them without an availability model)."""
        return Selection(view.pool(self.settings.num_clients).tolist())
