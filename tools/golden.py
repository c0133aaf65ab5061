"""Refactor check: run every registered method on small embedded configs and hash its outputs.

A refactor proves itself by byte-identical ``metrics.csv`` and ``model.pt`` before and after,
for the same config and seed (DEVELOPERS.md). This script runs each method through the real
CLI (``fedselect run CONFIG -o DIR -q``) on two embedded-MNIST configs, for every method preset
(``fedselect list``) and every selector without one (run with FedAvg):

* ``mlp``: N = 6, U = 2, T = 5, an MLP, options that exercise each method's state;
* ``cnn-faults``: N = 8, U = 3, T = 4, the MNIST CNN, ``eval_every: 2``, 15% dropout, an
  injected NaN upload and an injected client error (failure paths and skipped evaluations);

and writes ``{config/method: {"metrics.csv": sha256, "model.pt": sha256}}`` as JSON.

Usage::

    python tools/golden.py OUT.json [--work DIR] [--only METHOD ...]
    python tools/golden.py --compare BEFORE.json AFTER.json

Exit status 1 when ``--compare`` finds a difference (each one is printed).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from fedselect.config.presets import PRESETS

#: every method preset (``fedselect list``), plus the selectors that have none (run with FedAvg)
METHODS = list(PRESETS) + ["fedcs"]

#: selectors without a preset: their ``selector`` section (FedCS needs its deadline)
SELECTOR_ONLY = {"fedcs": {"name": "fedcs", "options": {"deadline_s": 5.0}}}

#: options that make each method exercise its state on the tiny configs
OPTIONS = {
    "flashrl": {"warmup_epochs": 1, "rl_batch_size": 2, "memory_capacity": 50, "hidden": 16, "pca_components": 3},
    "favor": {"warmup_epochs": 1, "rl_batch_size": 2, "memory_capacity": 50, "hidden": 16, "pca_components": 3, "target": 0.5},
    "cefl": {"clusters": 2, "warmup_epochs": 1, "transfer_epochs": 3},
    "fedper": {},
    "budgeted_online": {"rerun_every": 2},
    "online_random": {"rerun_every": 2},
    "offline_best": {"rerun_every": 2, "initial_available": 0.7, "mean_stay": 3.0},
    "power_of_choice": {"d": 4},
    "divfl": {"warmup_epochs": 1},
}


def configs(method: str) -> dict[str, dict]:
    mlp = {
        "name": "golden-mlp",
        "seed": 5,
        "method": method,
        "rounds": 5,
        "clients_per_round": 2,
        "data": {
            "dataset": "mnist-embedded",
            "num_clients": 6,
            "partition": {"scheme": "dirichlet", "alpha": 0.5, "min_size": 10},
        },
        "model": {"name": "mlp", "options": {"hidden": [16]}},
        "train": {"local_epochs": 1, "batch_size": 32, "lr": 0.05},
        "method_options": copy.deepcopy(OPTIONS.get(method, {})),
    }
    if method in ("cefl", "fedper"):
        mlp["method_options"]["base_layers"] = 1
    cnn = {
        "name": "golden-cnn",
        "seed": 11,
        "method": method,
        "rounds": 4,
        "clients_per_round": 3,
        "eval_every": 2,
        "data": {
            "dataset": "mnist-embedded",
            "num_clients": 8,
            "partition": {"scheme": "dirichlet", "alpha": 0.3, "min_size": 10},
        },
        "model": {"name": "mnist_cnn"},
        "train": {"local_epochs": 1, "batch_size": 50, "lr": 0.05},
        "faults": {
            "dropout": 0.15,
            "inject": [
                {"kind": "nan", "rounds": [2], "clients": [0, 1, 2, 3]},
                {"kind": "raise", "rounds": [3], "clients": [4, 5]},
            ],
        },
        "metrics": {"target": 0.5},
        "method_options": copy.deepcopy(OPTIONS.get(method, {})),
    }
    if method in ("flashrl", "favor"):
        cnn["eval_every"] = 1  # the DDQN selectors need an evaluation every round
    out = {"mlp": mlp, "cnn-faults": cnn}
    if method in SELECTOR_ONLY:
        for doc in out.values():
            del doc["method"], doc["method_options"]
            doc["selector"] = copy.deepcopy(SELECTOR_ONLY[method])
            doc["algorithm"] = {"name": "fedavg"}
    for doc in out.values():
        if not doc.get("method_options"):
            doc.pop("method_options", None)
    return out


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def run_all(out: Path, work: Path, only: list[str] | None) -> dict:
    result = {}
    exe = Path(sys.executable).with_name("fedselect")
    for method in only or METHODS:
        for cname, doc in configs(method).items():
            cfg = work / f"{cname}-{method}.yaml"
            cfg.write_text(yaml.safe_dump(doc))
            run_dir = work / f"{cname}-{method}"
            r = subprocess.run(
                [str(exe), "run", str(cfg), "-o", str(run_dir), "-q", "--overwrite"],
                capture_output=True,
                text=True,
            )
            key = f"{cname}/{method}"
            if r.returncode != 0:
                result[key] = {"error": (r.stdout + r.stderr)[-2000:]}
                print(f"{key}: FAILED\n{r.stdout}{r.stderr}", file=sys.stderr)
                continue
            result[key] = {"metrics.csv": sha(run_dir / "metrics.csv"), "model.pt": sha(run_dir / "model.pt")}
            print(f"{key}: {result[key]['metrics.csv'][:12]} {result[key]['model.pt'][:12]}", flush=True)
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return result


def compare(a: Path, b: Path) -> int:
    before, after = json.loads(a.read_text()), json.loads(b.read_text())
    bad = 0
    for key in sorted(set(before) | set(after)):
        x, y = before.get(key), after.get(key)
        if x != y:
            bad += 1
            print(f"DIFFERENT {key}: {x} -> {y}")
        else:
            print(f"identical {key}")
    print(f"{len(set(before) | set(after)) - bad} identical, {bad} different")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", type=Path)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    a = ap.parse_args()
    if a.compare:
        return compare(*a.compare)
    if a.out is None:
        ap.error("give OUT.json or --compare BEFORE AFTER")
    work = a.work or Path(tempfile.mkdtemp(prefix="golden-"))
    work.mkdir(parents=True, exist_ok=True)
    res = run_all(a.out, work, a.only)
    return 1 if any("error" in v for v in res.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
