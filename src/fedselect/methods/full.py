"""Full participation: every client in every round (CEFL's "Regular FL" baseline)."""

from __future__ import annotations

from fedselect.methods import register_method
from fedselect.methods.base import Method


@register_method
class FullParticipation(Method):
    name = "full"

    def select(self, t, draws):
        return list(range(self.fed.num_clients))
