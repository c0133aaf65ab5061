"""The budgeted online selection rule (Mohammed et al.; BO-eq 6, 7): candidates arrive
one by one, the first alpha* (BO-eq 7, clamped to [0, N - R]) are observed and rejected, the
threshold is their best accuracy, strictly better candidates are accepted irrevocably, and the
tail is filled when the candidates left equal the budget left (:mod:`fedselect.selectors._online`
for arrival, evaluation and re-runs)."""

from __future__ import annotations

from fedselect.kernels.secretary import alpha_star, secretary_rule
from fedselect.selectors import register_selector
from fedselect.selectors._online import OnlineSelection


@register_selector
class Secretary(OnlineSelection):
    """The paper's heuristic (module docstring). Options: ``r1``, ``r2`` (record window) and
    the shared online options."""

    name = "secretary"
    summary = "budgeted online selection: the secretary rule (stopping index alpha*) accepts R arriving candidates"

    def choose(self, scores, budget):
        a = alpha_star(len(scores), self.options.r1, self.options.r2, budget=budget)
        return secretary_rule(scores, budget, a)
