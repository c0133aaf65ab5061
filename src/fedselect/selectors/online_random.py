"""Online random baseline of budgeted online selection (Mohammed et al.).

Same arrival order, evaluations and rounds as ``secretary``
(:class:`fedselect.selectors._online.OnlineSelection`); each arriving candidate is accepted
with probability R / N regardless of its accuracy, with the same tail-fill
(:func:`fedselect.kernels.secretary.online_random_rule`, coin flips from the selector's own
generator, stream ``selector/online_random``).
"""

from __future__ import annotations

from fedselect.kernels.secretary import online_random_rule
from fedselect.selectors import register_selector
from fedselect.selectors._online import OnlineSelection


@register_selector
class OnlineRandom(OnlineSelection):
    name = "online_random"
    summary = "budgeted online baseline: accepts R arriving candidates at random"
    choice_ignores_scores = True  # the scores feed only the competitive ratio

    def choose(self, scores, budget):
        return online_random_rule(len(scores), budget, self.rng)
