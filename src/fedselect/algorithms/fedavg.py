"""FedAvg (McMahan et al. 2017): participants train from the server model, upload
the whole model, the server averages with weights n_k / sum n. Everything is the base class.

With ``evaluation: per_client`` every client scores the server model on its own held-out split
(CEFL's "Regular FL" baseline).
"""

from __future__ import annotations

from fedselect.algorithms import register_algorithm
from fedselect.algorithms.base import Algorithm


@register_algorithm
class FedAvg(Algorithm):
    """Whole-model FedAvg (module docstring). Options: ``evaluation`` (``global`` default)."""

    name = "fedavg"
    summary = "FedAvg: sample-weighted average of whole models"
