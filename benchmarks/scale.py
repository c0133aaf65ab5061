"""Scale: per-round time, selection cost and peak memory at N = 1,000 / 10,000 / 100,000 clients.

    python benchmarks/scale.py [--sizes 1000,10000,100000] [--selectors random,oort,...]
                               [--rounds 3] [--dataset mnist] [--quick]

Every (N, selector) pair runs in its own process (`fedselect run` through the library), so
"peak RSS" is that run's own maximum resident set size (``ru_maxrss`` of the child), data
loading included. The federation: full MNIST (``make data``; ``--dataset mnist-embedded``
otherwise) over N clients with ``client_dirichlet`` (alpha 0.5, 20 samples per client,
``replacement: true`` so that every N uses the same per-client data size), an MLP [32], U 10,
E 1, B 20, over-selection 1.3 and Markov availability (about half the fleet online), i.e. the
per-round work is the same at every N and what grows is the selection, the fleet draws and
the bookkeeping. Columns:

* ``select_ms``: mean wall time of the selector's ``select`` per round (rounds 2..R);
* ``round_s``: mean wall time of a round (``timing.csv``, rounds 2..R; round 1 starts workers);
* ``prepare_s``: the selector's one-off preparation (FLASH-RL's warm-up and PCA);
* ``build_s``: loading the data and building the federation;
* ``peak_rss_mb``: the run's peak resident memory (MB).

Also ``python benchmarks/run_all.py --only scale``.
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIZES = (1_000, 10_000, 100_000)
SELECTORS = ("random", "oort", "power_of_choice", "fastest")


def experiment(n: int, selector: str, rounds: int, dataset: str) -> dict:
    """The benchmark's config for N = ``n`` (module docstring)."""
    return {
        "name": f"scale-{selector}-{n}",
        "seed": 0,
        "rounds": rounds,
        "clients_per_round": 10,
        "overselect": 1.3,
        "availability": {"model": "markov", "mean_on_s": 5.0, "mean_off_s": 5.0},
        "checkpoint_every": 0,
        "eval_every": rounds,
        "selector": {"name": selector},
        "algorithm": {"name": "fedavg"},
        "data": {
            "dataset": dataset,
            "num_clients": n,
            "partition": {"scheme": "client_dirichlet", "alpha": 0.5, "samples_per_client": 20, "replacement": True},
            "holdout_fraction": 0.0,
        },
        "model": {"name": "mlp", "options": {"hidden": [32]}},
        "train": {"local_epochs": 1, "batch_size": 20, "lr": 0.05},
    }


def one(n: int, selector: str, rounds: int, dataset: str) -> dict:
    """Run one (N, selector) pair in this process and return its figures."""
    from fedselect.config.schema import parse_config
    from fedselect.experiment.run import run_experiment
    from fedselect.selectors import SELECTORS as REGISTRY

    cls = REGISTRY.get(selector)
    times: list[float] = []
    prep: list[float] = []
    select, prepare = cls.select, cls.prepare

    def timed_select(self, view):
        t = time.perf_counter()
        out = select(self, view)
        times.append(time.perf_counter() - t)
        return out

    def timed_prepare(self):
        t = time.perf_counter()
        out = prepare(self)
        prep.append(time.perf_counter() - t)
        return out

    cls.select, cls.prepare = timed_select, timed_prepare
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        run_experiment(parse_config(experiment(n, selector, rounds, dataset)), d)
        with open(Path(d) / "timing.csv") as f:
            walls = [float(r["wall_s"]) for r in csv.DictReader(f) if int(r["round"]) >= 2]
    total = time.perf_counter() - t0
    return {
        "n": n,
        "selector": selector,
        "rounds": rounds,
        "select_ms": 1000 * sum(times[1:]) / max(1, len(times) - 1),
        "round_s": sum(walls) / max(1, len(walls)),
        "prepare_s": sum(prep),
        "run_s": total,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _child(n: int, selector: str, rounds: int, dataset: str) -> dict:
    cmd = [sys.executable, __file__, "--one", f"{n}:{selector}", "--rounds", str(rounds), "--dataset", dataset]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return {"n": n, "selector": selector, "error": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _dataset(requested: str | None) -> str:
    if requested:
        return requested
    from fedselect.world.data.catalog import load_dataset

    try:
        load_dataset("mnist")
        return "mnist"
    except Exception:  # full MNIST not installed (make data): the embedded 4,000 images
        return "mnist-embedded"


def main(quick: bool = False, sizes=SIZES, selectors=SELECTORS, rounds: int = 3, dataset: str | None = None) -> dict:
    """Every (N, selector) pair in a child process; returns ``{"rows": [...], ...}``."""
    if quick:
        sizes = tuple(s for s in sizes if s <= 10_000)
    ds = _dataset(dataset)
    rows = []
    for n in sizes:
        for sel in selectors:
            r = _child(n, sel, rounds, ds)
            rows.append(r)
            if "error" in r:
                print(f"N {n:>7} {sel:<16} ERROR {r['error']}", flush=True)
            else:
                print(
                    f"N {n:>7} {sel:<16} select {r['select_ms']:8.2f} ms  round {r['round_s']:6.3f} s  "
                    f"prepare {r['prepare_s']:6.1f} s  run {r['run_s']:6.1f} s  peak RSS {r['peak_rss_mb']:7.0f} MB",
                    flush=True,
                )
    base = {r["selector"]: r for r in rows if r.get("n") == min(sizes) and "error" not in r}
    for r in rows:
        b = base.get(r["selector"])
        if b and "error" not in r and b["select_ms"] > 0:
            r["select_vs_smallest"] = r["select_ms"] / b["select_ms"]
    return {"dataset": ds, "rounds": rounds, "rows": rows}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated N")
    ap.add_argument("--selectors", default=",".join(SELECTORS), help="comma-separated registered selectors")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dataset", default=None, help="default: mnist when installed, else mnist-embedded")
    ap.add_argument("--quick", action="store_true", help="N <= 10,000 only")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        n, sel = a.one.split(":")
        print(json.dumps(one(int(n), sel, a.rounds, a.dataset)))
    else:
        res = main(a.quick, [int(s) for s in a.sizes.split(",")], a.selectors.split(","), a.rounds, a.dataset)
        print(json.dumps(res, indent=2))
