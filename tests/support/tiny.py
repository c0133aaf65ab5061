"""The tiny experiment of the tests: small federations on the embedded real MNIST
(``mnist-embedded``) that run in seconds."""

from __future__ import annotations

#: options that make each method run (and exercise its state) on the tiny config
METHOD_OPTIONS = {
    "flashrl": {"warmup_epochs": 1, "rl_batch_size": 2, "memory_capacity": 50, "hidden": 16, "pca_components": 3},
    "favor": {"warmup_epochs": 1, "rl_batch_size": 2, "memory_capacity": 50, "hidden": 16, "pca_components": 3, "target": 0.5},
    "cefl": {"clusters": 2, "base_layers": 1, "warmup_epochs": 1},
    "fedper": {"base_layers": 1},
    "budgeted_online": {"rerun_every": 2},
    "online_random": {"rerun_every": 2},
}
