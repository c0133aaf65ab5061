"""FL primitives and THE round (``fl.round``): jobs and transports, local training, aggregation, evaluation, metrics. Knows no method."""

from fedselect.fl.aggregate import fedavg, partial_average, state_bytes
from fedselect.fl.evaluate import evaluate
from fedselect.fl.local.train import TrainConfig, local_train

__all__ = ["fedavg", "partial_average", "state_bytes", "evaluate", "TrainConfig", "local_train"]
