"""Overhead of the Ray backend (fedselect.study.backends.RayBackend) on this machine.

Measures: starting and stopping a local Ray instance; the round trip of an empty task once
workers are warm; the first task on a fresh worker (which imports torch and fedselect); and a
small budgeted-online sweep (the structure of configs/budgeted-sweep-small.yaml, 16 runs) with
the local backend and with Ray (1 CPU per run), checking that the tables agree
but for wall-clock columns. ``quick`` uses 8 runs. Needs the optional extra fedselect[flower].
"""

from __future__ import annotations

import csv
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def _sweep(quick: bool) -> dict:
    return {
        "name": "bench-ray-grid",
        "seeds": [0] if quick else [0, 1],
        "base": {
            "rounds": 3,
            "data": {
                "dataset": "iot-synthetic",
                "options": {"windows": 120, "min_records": 50},
                "num_clients": 12,
                "partition": {"scheme": "fat_thin"},
                "holdout_fraction": 0.0,
            },
            "model": {"name": "mlp"},
            "train": {"local_epochs": 1, "batch_size": 8, "optimizer": "adam", "lr": 0.003},
            "checkpoint_every": 0,
        },
        "methods": [
            {"label": "secretary", "method": "budgeted_online"},
            {"label": "online random", "method": "online_random", "grid_keys": ["data.num_clients", "clients_per_round"]},
            {"label": "offline best", "method": "offline_best", "grid_keys": ["data.num_clients", "clients_per_round"]},
        ],
        "grid": {"data.num_clients": [12], "clients_per_round": [2, 3], "method_options.r2": [1, 2]},
    }


def _table(path: Path) -> list[list[str]]:
    rows = list(csv.reader(path.open()))
    keep = [i for i, h in enumerate(rows[0]) if not h.startswith("wall_s")]
    return [[r[i] for i in keep] for r in rows]


def main(quick: bool = False) -> dict:
    import ray
    import torch

    from fedselect.study.backends import RayBackend
    from fedselect.study.sweep import parse_sweep
    from fedselect.study.sweep_run import run_sweep

    torch.set_num_threads(1)
    cpus = min(2, os.cpu_count() or 1)
    res: dict = {"cpus": cpus, "load_avg_1min": os.getloadavg()[0]}

    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    res["ray_init_s"] = time.perf_counter() - t0

    @ray.remote(num_cpus=1)
    def empty() -> int:
        return os.getpid()

    @ray.remote(num_cpus=1)
    def heavy() -> float:
        t = time.perf_counter()
        import fedselect.fl.round  # noqa: F401  (what a sweep task imports)

        return time.perf_counter() - t

    t0 = time.perf_counter()
    ray.get([empty.remote() for _ in range(cpus)])
    res["first_empty_tasks_s"] = time.perf_counter() - t0
    rtts = []
    for _ in range(50 if quick else 200):
        t = time.perf_counter()
        ray.get(empty.remote())
        rtts.append(time.perf_counter() - t)
    res["empty_task_round_trip_ms_median"] = 1000 * statistics.median(rtts)
    t0 = time.perf_counter()
    res["import_fedselect_in_worker_s"] = ray.get([heavy.remote() for _ in range(cpus)])
    res["first_heavy_tasks_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ray.shutdown()
    res["ray_shutdown_s"] = time.perf_counter() - t0

    sc = parse_sweep(_sweep(quick))
    tmp = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    try:
        t0 = time.perf_counter()
        run_sweep(sc, tmp / "local")
        res["sweep_local_s"] = time.perf_counter() - t0
        backend = RayBackend(num_cpus=cpus)
        t0 = time.perf_counter()
        run_sweep(sc, tmp / "ray", backend=backend)
        res["sweep_ray_s"] = time.perf_counter() - t0
        res["sweep_ray_startup_s"] = backend.startup_s
        res["sweep_runs"] = len(backend.task_info)
        res["sweep_ray_task_s_sum"] = sum(i["task_s"] for i in backend.task_info.values())
        res["sweep_ray_worker_processes"] = len({i["pid"] for i in backend.task_info.values()})
        res["tables_equal_but_wall"] = _table(tmp / "local" / "table.csv") == _table(tmp / "ray" / "table.csv")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return res


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(main(quick="--quick" in sys.argv), indent=2))
