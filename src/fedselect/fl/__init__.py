"""THE round (:mod:`fedselect.fl.round`; its rules for what comes back in
:mod:`fedselect.fl.round_rules`) and what it is made of: jobs and transports, aggregation,
evaluation, the cost model, clocks and availability, faults, fairness figures, the typed values;
local training in :mod:`fedselect.fl.local`. Knows no method."""

from fedselect.fl.aggregate import fedavg, partial_average, state_bytes
from fedselect.fl.evaluate import evaluate
from fedselect.fl.local.train import TrainConfig, local_train

__all__ = ["fedavg", "partial_average", "state_bytes", "evaluate", "TrainConfig", "local_train"]
