import os

import pytest
import torch

torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def tiny_cfg_doc():
    """A fast FedAvg experiment on the embedded real MNIST (few clients, few rounds)."""
    return {
        "name": "tiny", "seed": 3, "rounds": 2, "clients_per_round": 2,
        "data": {"dataset": "mnist-embedded", "num_clients": 8, "partition": {"scheme": "dirichlet", "alpha": 0.5, "min_size": 10}},
        "model": {"name": "mlp", "options": {"hidden": [32]}},
        "train": {"local_epochs": 1, "batch_size": 32, "lr": 0.05},
    }
