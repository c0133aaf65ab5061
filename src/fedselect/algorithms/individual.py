"""Individual training (CEFL's baseline): every client trains only its own model on its
own data, with no communication at all.

Round t: each selected client (every client with the ``all`` selector, the paper's setting)
continues from its own state for ``train.local_epochs`` epochs; nothing is uploaded or
downloaded (0 bytes); each client is scored with its own model on its own held-out split.
T rounds x E epochs = the paper's "episodes" (350 in CEFL Table I).
"""

from __future__ import annotations

from fedselect.algorithms import register_algorithm
from fedselect.algorithms.fedper import Personalised


@register_algorithm
class Individual(Personalised):
    """No communication: ``shared_keys() == []`` (module docstring).

    Raises:
        ValueError: a client without held-out data (``data.holdout_fraction`` must be > 0).
    """

    name = "individual"
    summary = "each client trains alone, no communication"
    shares_model = False
    takes_selection_weights = False

    def shared_keys(self) -> list[str]:
        return []
