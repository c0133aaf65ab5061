"""Offline best baseline of budgeted online selection (Mohammed et al.).

Same arrival order, evaluations and rounds as ``secretary``
(:class:`fedselect.selectors._online.OnlineSelection`), but it waits for and evaluates all N
candidates and accepts the R with the highest accuracy
(:func:`fedselect.kernels.secretary.offline_best_rule`); its competitive ratio is 1 by definition.
"""

from __future__ import annotations

from fedselect.kernels.secretary import offline_best_rule
from fedselect.selectors import register_selector
from fedselect.selectors._online import OnlineSelection


@register_selector
class OfflineBest(OnlineSelection):
    name = "offline_best"
    summary = "budgeted online baseline: knows every candidate's score in advance, accepts the best R"

    def choose(self, scores, budget):
        return offline_best_rule(scores, budget)
