"""Online random baseline of budgeted online selection (SPEC 3).

Same arrival order, evaluations and round loop as ``budgeted_online``
(:class:`fedselect.methods.budgeted_online.OnlineSelection`); each arriving candidate is
accepted with probability R / N regardless of its accuracy, with the same tail-fill
(:func:`fedselect.methods.secretary.online_random_rule`, coin flips from the method's own
seeded generator).
"""

from __future__ import annotations

from fedselect.methods import register_method
from fedselect.methods.budgeted_online import OnlineSelection
from fedselect.methods.secretary import online_random_rule


@register_method
class OnlineRandom(OnlineSelection):
    name = "online_random"

    def choose(self, scores, budget):
        return online_random_rule(len(scores), budget, self.rng)
