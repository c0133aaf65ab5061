"""Exploration bound of epsilon-greedy client selection under our latency model (issue 8).

Every epsilon-random slot is as likely to pick a straggler as FedAvg's uniform choice is, so
even an agent that knows the fastest clients perfectly cannot save more than a bound that
depends only on the epsilon schedule. This script simulates that *oracle* agent: each of the
U slots is, with probability eps_t, a uniformly random not-yet-chosen client, else the
not-yet-chosen client with the lowest true latency this round (FR-eq 3-5 via
:mod:`fedselect.world.system`). It compares the end-to-end latency (sum of per-round
stragglers) with FedAvg (U uniform clients) over the same fleet and draws.

No learning happens; it takes a few seconds:

    .venv/bin/python benchmarks/flashrl_exploration_bound.py            # full MNIST sizes
    .venv/bin/python benchmarks/flashrl_exploration_bound.py --equal-sizes
"""

from __future__ import annotations

import argparse

import numpy as np

from fedselect.common.files import dumps_json
from fedselect.common.seeding import np_rng
from fedselect.kernels.ddqn import linear_epsilon
from fedselect.world.system import Fleet, compute_time, data_bits, transmit_time

MNIST_CNN_PARAMS = 431_080

SCHEDULES = {
    "paper (0.9->0.35 over all rounds)": (0.9, 0.35, None),
    "0.9->0.35 by round 30": (0.9, 0.35, 30),
    "0.9->0.2 by round 30": (0.9, 0.2, 30),
}


def client_sizes(num_clients: int, seed: int, equal: bool) -> np.ndarray:
    """Training-set sizes of the clients: full MNIST, hetero Dirichlet 0.5 (or 60000/N each)."""
    if equal:
        return np.full(num_clients, 60_000 // num_clients)
    from fedselect.world.data.catalog import load_dataset
    from fedselect.world.data.partition import make_partitioner

    train, _ = load_dataset("mnist", seed=seed)
    parts = make_partitioner("dirichlet", alpha=0.5, min_size=10).split(train.y, num_clients, np_rng(seed, "partition"))
    return np.array([len(p) for p in parts])


def latencies(fleet: Fleet, sizes: np.ndarray, t: int, epochs: int, g: float, model_bits: float) -> np.ndarray:
    d = fleet.draw(t)
    bits = np.array([data_bits(n, 784) for n in sizes])
    return compute_time(epochs, bits, g, fleet.cores, d.freq_mhz) + transmit_time(model_bits, d.bandwidth_mbps)


def oracle_round(lat: np.ndarray, u: int, eps: float, rng: np.random.Generator) -> float:
    order = list(np.argsort(lat, kind="stable"))
    free = np.ones(lat.size, bool)
    chosen = []
    for _ in range(u):
        if rng.random() < eps:
            c = int(rng.choice(np.flatnonzero(free)))
        else:
            c = next(int(i) for i in order if free[i])
        free[c] = False
        chosen.append(c)
    return float(lat[chosen].max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--per-round", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--cycles-per-bit", type=float, default=20.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--repeats", type=int, default=200, help="Monte-Carlo repetitions of the random choices per seed")
    ap.add_argument("--equal-sizes", action="store_true", help="60000/N samples per client instead of the Dirichlet 0.5 split")
    ap.add_argument(
        "--schedule",
        action="append",
        default=[],
        metavar="EPS0,EPS1,ROUNDS",
        help="extra linear schedule, e.g. 0.9,0.1,20 (repeatable)",
    )
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    model_bits = 32.0 * MNIST_CNN_PARAMS
    schedules = dict(SCHEDULES)
    for spec in args.schedule:
        try:
            e0, e1, dec = spec.split(",")
            schedules[f"{float(e0)}->{float(e1)} by round {int(dec)}"] = (float(e0), float(e1), int(dec))
        except ValueError:
            ap.error(f"--schedule {spec!r}: expected EPS0,EPS1,ROUNDS like 0.9,0.1,20")
    results: dict[str, list[float]] = {name: [] for name in schedules}
    fedavg_e2e = []
    for seed in args.seeds:
        fleet = Fleet.create(args.clients, seed)
        sizes = client_sizes(args.clients, seed, args.equal_sizes)
        lats = [latencies(fleet, sizes, t, args.epochs, args.cycles_per_bit, model_bits) for t in range(1, args.rounds + 1)]
        rng = np_rng(seed, "exploration-bound")
        fed = np.mean(
            [
                sum(float(lat[rng.choice(args.clients, args.per_round, replace=False)].max()) for lat in lats)
                for _ in range(args.repeats)
            ]
        )
        fedavg_e2e.append(fed)
        for name, (e0, e1, dec) in schedules.items():
            e2e = np.mean(
                [
                    sum(
                        oracle_round(lat, args.per_round, linear_epsilon(t, e0, e1, dec or args.rounds), rng)
                        for t, lat in enumerate(lats, start=1)
                    )
                    for _ in range(args.repeats)
                ]
            )
            results[name].append(1.0 - e2e / fed)
    print(
        f"N={args.clients} U={args.per_round} T={args.rounds} E={args.epochs} seeds={args.seeds} "
        f"repeats={args.repeats} sizes={'equal' if args.equal_sizes else 'MNIST Dirichlet 0.5'}"
    )
    print(f"FedAvg end-to-end latency: {np.mean(fedavg_e2e):.1f} s (per seed {np.round(fedavg_e2e, 1).tolist()})")
    for name, vals in results.items():
        print(
            f"  oracle, {name:36s}: at most {100 * np.mean(vals):5.1f}% lower (per seed {np.round(100 * np.array(vals), 1).tolist()})"
        )
    if args.json:
        with open(args.json, "w") as f:  # strict JSON: non-finite numbers as null
            f.write(dumps_json({"fedavg_e2e_s": fedavg_e2e, "max_reduction": results, "args": vars(args)}, indent=2, default=str))


if __name__ == "__main__":
    main()
