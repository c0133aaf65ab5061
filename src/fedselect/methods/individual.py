"""Individual training (CEFL's baseline; SPEC 2): every client trains only its own model on its
own data, every round, with no communication at all.

Round t: each client continues from its own state for ``train.local_epochs`` epochs; nothing is
uploaded or downloaded (0 bytes); each client is scored with its own model on its own held-out
split. T rounds x E epochs = the paper's "episodes" (350 in CEFL Table I).
"""

from __future__ import annotations

from fedselect.methods import register_method
from fedselect.methods.personalised import PersonalisedMethod


@register_method
class Individual(PersonalisedMethod):
    """No communication: ``shared_keys() == []`` (module docstring). ``clients_per_round`` is
    ignored: every client trains every round.

    Raises:
        ValueError: a client without held-out data (``data.holdout_fraction`` must be > 0).
    """

    name = "individual"

    def shared_keys(self) -> list[str]:
        return []

    def select(self, t, draws):
        return list(range(self.fed.num_clients))
