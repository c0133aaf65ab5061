"""Local objectives: what carrying and applying one costs per round of local training.

One round of U = 4 clients (embedded MNIST, the MNIST CNN, E = 1, B = 32), trained by
:class:`fedselect.fl.local.pool.ClientTrainer` with no objective, FedProx's ``ProximalTerm`` and
SCAFFOLD's ``DriftCorrection`` (closed-form hooks), and FedProx's term through the base class's
autograd hook (what a user's objective without its own ``begin`` costs): in this process
(``workers=0``) and, for the pool, with two worker processes (the objective pickled with each
job). Best of ``reps`` rounds; run it on an idle machine:
``python benchmarks/run_all.py --only local_objective``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


def main(quick: bool = False) -> dict:
    import torch

    from fedselect.algorithms.fedprox import ProximalTerm
    from fedselect.algorithms.scaffold import DriftCorrection
    from fedselect.experiment.resolve import parse_experiment, resolve
    from fedselect.fl.local.clients import TrainJob
    from fedselect.fl.local.objective import LocalObjective
    from fedselect.fl.local.pool import ClientTrainer
    from fedselect.world.federation import build_federation

    @dataclass(frozen=True)
    class ProxByAutograd(ProximalTerm):
        def begin(self, params):
            return LocalObjective.begin(self, params)

    doc = {
        "name": "bench-objective",
        "seed": 0,
        "data": {"dataset": "mnist-embedded", "num_clients": 8, "partition": {"scheme": "iid"}},
        "model": {"name": "mnist_cnn"},
        "train": {"local_epochs": 1, "batch_size": 32, "lr": 0.05},
    }
    r = resolve(parse_experiment(doc))
    fed = build_federation(r.config)
    model = fed.new_model()
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    corr = {n: torch.full_like(p, 1e-3) for n, p in model.named_parameters()}
    kinds = {
        "none": None,
        "fedprox": ProximalTerm(0.01),
        "scaffold": DriftCorrection(corr),
        "fedprox_by_autograd": ProxByAutograd(0.01),
    }
    reps = 1 if quick else 3
    res: dict = {"clients_per_round": 4, "model": "mnist_cnn", "reps": reps, "torch_threads": torch.get_num_threads()}

    def round_s(trainer, objective) -> float:
        jobs = [TrainJob(k, start, 1, 0, f"train/1/{k}", objective=objective) for k in range(4)]
        best = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            trainer.train(jobs)
            best = min(best, time.perf_counter() - t)
        return best

    with ClientTrainer.from_federation(fed, r.train_cfg, workers=0) as here:
        for name, obj in kinds.items():
            res[f"in_process_{name}_round_s"] = round_s(here, obj)
    with ClientTrainer.from_federation(fed, r.train_cfg, workers=2) as pool:
        for name in ("none", "scaffold"):
            res[f"pool2_{name}_round_s"] = round_s(pool, kinds[name])
    return res


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(main("--quick" in sys.argv), indent=2))
