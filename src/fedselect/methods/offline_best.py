"""Offline best baseline of budgeted online selection (SPEC 3).

Same arrival order, evaluations and round loop as ``budgeted_online``
(:class:`fedselect.methods.budgeted_online.OnlineSelection`), but it waits for and evaluates
all N candidates and accepts the R with the highest accuracy
(:func:`fedselect.methods.secretary.offline_best_rule`); its competitive ratio is 1 by definition.
"""

from __future__ import annotations

from fedselect.methods import register_method
from fedselect.methods.budgeted_online import OnlineSelection
from fedselect.methods.secretary import offline_best_rule


@register_method
class OfflineBest(OnlineSelection):
    name = "offline_best"

    def choose(self, scores, budget):
        return offline_best_rule(scores, budget)
