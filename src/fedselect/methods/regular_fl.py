"""Regular FL (CEFL's baseline; SPEC 2): full-participation FedAvg (the core's ``full``
method: all N clients every round, whole model up and down), scored the CEFL way: the global
model on every client's own held-out split (mean, std and per-client accuracy).
"""

from __future__ import annotations

from fedselect.methods import register_method
from fedselect.methods.full import FullParticipation
from fedselect.methods.personalised import PerClientEvaluation


@register_method
class RegularFL(PerClientEvaluation, FullParticipation):
    """``full`` with per-client evaluation (module docstring). ``clients_per_round`` is ignored.

    Raises:
        ValueError: a client without held-out data (``data.holdout_fraction`` must be > 0).
    """

    name = "regular_fl"
