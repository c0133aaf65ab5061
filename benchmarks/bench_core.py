"""Core speed: partitioning, fleet draws, and FedAvg rounds on embedded MNIST (2 CPU cores)."""

from __future__ import annotations

import tempfile
import time

import numpy as np


def main(quick: bool = False) -> dict:
    import torch

    from fedselect.config.schema import parse_config
    from fedselect.experiment.run import run_experiment
    from fedselect.world.data.partition import make_partitioner
    from fedselect.world.system import Fleet

    res = {"torch_threads": torch.get_num_threads()}
    labels = np.repeat(np.arange(10), 6000)
    for scheme, params in [
        ("iid", {}),
        ("dirichlet", {"alpha": 0.5, "min_size": 10}),
        ("shards", {"shards_per_client": 2}),
        ("label_skew", {"labels_per_client": 2}),
    ]:
        t = time.perf_counter()
        make_partitioner(scheme, **params).split(labels, 100, np.random.default_rng(0))
        res[f"partition_{scheme}_60k_100clients_s"] = time.perf_counter() - t
    fleet = Fleet.create(1000, 0)
    t = time.perf_counter()
    for r in range(100):
        fleet.draw(r)
    res["fleet_draw_1000clients_ms_per_round"] = (time.perf_counter() - t) * 10
    rounds = 5 if quick else 30
    cfg = parse_config({"name": "bench-default", "rounds": rounds, "checkpoint_every": 0})
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        s = run_experiment(cfg, d)
        res["default_fedavg_rounds"] = rounds
        res["default_fedavg_wall_s"] = time.perf_counter() - t
        res["default_fedavg_final_accuracy"] = s["final_accuracy"]
        res["default_fedavg_e2e_latency_s"] = s["e2e_latency_s"]
    return res
