import atexit
import os
import shutil
import tempfile

import pytest
import torch

torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")
# tests train in this process unless a test asks for worker processes (results are identical
# for any number of workers: tests/fl/test_pool.py); starting pools in every test would only cost time
os.environ.setdefault("FEDSELECT_WORKERS", "0")
# Flower (the optional extra; its tests and their subprocesses): no telemetry, no update check,
# and its id file in a temporary FLWR_HOME instead of $HOME
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
if "FLWR_HOME" not in os.environ:
    os.environ["FLWR_HOME"] = tempfile.mkdtemp(prefix="fedselect-test-flwr-home-")
    atexit.register(shutil.rmtree, os.environ["FLWR_HOME"], True)


@pytest.fixture
def tiny_cfg_doc():
    """A fast FedAvg experiment on the embedded real MNIST (few clients, few rounds)."""
    return {
        "name": "tiny",
        "seed": 3,
        "rounds": 2,
        "clients_per_round": 2,
        "data": {
            "dataset": "mnist-embedded",
            "num_clients": 8,
            "partition": {"scheme": "dirichlet", "alpha": 0.5, "min_size": 10},
        },
        "model": {"name": "mlp", "options": {"hidden": [32]}},
        "train": {"local_epochs": 1, "batch_size": 32, "lr": 0.05},
    }


def tiny_experiment(method: str | None = "fedavg", seed: int = 4, **over):
    """A resolved tiny experiment on the embedded real MNIST: 8 clients (Dirichlet 0.5), 3 per
    round, 4 rounds, an MLP with 16 hidden units; ``over`` replaces top-level keys."""
    from fedselect.experiment.resolve import parse_experiment

    doc = {
        "name": "tiny",
        "seed": seed,
        "method": method,
        "rounds": 4,
        "clients_per_round": 3,
        "checkpoint_every": 1,
        "data": {
            "dataset": "mnist-embedded",
            "num_clients": 8,
            "partition": {"scheme": "dirichlet", "alpha": 0.5, "min_size": 10},
        },
        "model": {"name": "mlp", "options": {"hidden": [16]}},
        "train": {"local_epochs": 1, "batch_size": 32, "lr": 0.05},
    }
    doc.update(over)
    return parse_experiment(doc)


def with_keys(base: dict, **kv) -> dict:
    """A deep copy of ``base`` with dotted keys replaced (``a__b=1`` sets ``base["a"]["b"]``)."""
    import copy

    d = copy.deepcopy(base)
    for key, value in kv.items():
        node, parts = d, key.split("__")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return d
