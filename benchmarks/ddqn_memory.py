"""Peak memory of FLASH-RL and FAVOR at many clients with their default options (issue 39, item 5).

The workload: full MNIST (``make data``), N = 10,000 clients (IID, 6 images each), the papers'
MNIST CNN (P = 431,080), U = 10, E = 1, B = 10, lr 0.05, 3 rounds, evaluation every round, and
the selectors' default options (plus any ``--set``). Each method runs as ``fedselect run`` in its
own process, with the pool's default workers (one per usable core); while it runs, a sampler
reads every 0.25 s

* the main process's peak resident set (``VmHWM`` of /proc/PID/status: what ``/usr/bin/time -v``
  reports as "Maximum resident set size" for it), and
* the summed RSS of its whole process tree (the pool's fork server and workers included; shared
  pages such as the libraries count once per process, so this overstates the memory in use).

Usage::

    python benchmarks/ddqn_memory.py                       # flashrl, favor, fedavg at N = 10,000
    python benchmarks/ddqn_memory.py --methods flashrl --n 2000
    python benchmarks/ddqn_memory.py --src /path/to/other/checkout/src   # another version's code
    python benchmarks/ddqn_memory.py --set method_options.pca_fit_max_mb=null   # the old default

Run one at a time on a machine with enough memory (the old defaults peaked at 11 GB). Writes
``benchmarks/results/ddqn_memory.json``. docs/performance.md ("FLASH-RL at 10,000 clients")
has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_speed import loadavg, tree_rss  # noqa: E402


def experiment(method: str, n: int, rounds: int, dataset: str) -> dict:
    """The benchmark's config (module docstring)."""
    return {
        "name": f"ddqn-memory-{method}-{n}",
        "seed": 0,
        "method": method,
        "rounds": rounds,
        "clients_per_round": 10,
        "data": {"dataset": dataset, "num_clients": n, "partition": {"scheme": "iid"}, "holdout_fraction": 0.0},
        "model": {"name": "mnist_cnn"},
        "train": {"local_epochs": 1, "batch_size": 10, "lr": 0.05},
        "eval_every": 1,
        "checkpoint_every": 0,
    }


def _hwm(pid: int) -> int:
    """VmHWM of ``pid`` in bytes (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def measure(method: str, n: int, rounds: int, dataset: str, sets: list[str], src: str | None) -> dict:
    """One ``fedselect run`` in a child process; its peak memory, wall time and summary."""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = str(Path(src).resolve()) + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "config.yaml"
        cfg.write_text(yaml.safe_dump(experiment(method, n, rounds, dataset)))
        out = Path(d) / "run"
        cmd = [sys.executable, "-m", "fedselect.cli", "run", str(cfg), "-o", str(out), "-q"]
        for s in sets:
            cmd += ["--set", s]
        load0, t0 = loadavg(), time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        peak = {"main": 0, "tree": 0}
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak["main"] = max(peak["main"], _hwm(proc.pid))
                peak["tree"] = max(peak["tree"], tree_rss(proc.pid))
                stop.wait(0.25)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        text = proc.communicate()[0]
        stop.set()
        th.join()
        wall = time.perf_counter() - t0
        res = {
            "method": method,
            "num_clients": n,
            "sets": sets,
            "src": src,
            "returncode": proc.returncode,
            "peak_main_rss_gb": peak["main"] / 1e9,
            "peak_tree_rss_gb": peak["tree"] / 1e9,
            "wall_s": wall,
            "loadavg_before": load0,
            "loadavg_after": loadavg(),
        }
        if proc.returncode != 0:
            res["error"] = text.strip().splitlines()[-3:]
            return res
        summary = json.loads((out / "summary.json").read_text())
        saved = yaml.safe_load((out / "config.yaml").read_text())
        res["final_accuracy"] = summary.get("final_accuracy")
        prepared = summary.get("prepare", {})  # the selector's preparation: "pca_fit_clients" only when sampled
        res["pca_fit_clients_used"] = prepared.get("pca_fit_clients", n) if "pca_components" in prepared else None
        res["selector_options"] = {
            k: v for k, v in saved["selector"]["options"].items() if k.startswith("pca_fit") or k == "q_network"
        }
        return res


def main(
    quick: bool = False,
    methods: tuple[str, ...] = ("flashrl", "favor", "fedavg"),
    n: int = 10_000,
    rounds: int = 3,
    dataset: str = "mnist",
    sets: list[str] | None = None,
    src: str | None = None,
) -> dict:
    if quick:
        n, dataset = min(n, 1000), "mnist-embedded"
    rows = []
    for m in methods:
        r = measure(m, n, rounds, dataset, list(sets or []), src)
        rows.append(r)
        print(
            f"{m:<8} N {n}: "
            + (
                f"ERROR {r['error']}"
                if "error" in r
                else f"peak RSS main {r['peak_main_rss_gb']:.2f} GB, tree {r['peak_tree_rss_gb']:.2f} GB, "
                f"{r['wall_s']:.0f} s, PCA fitted on {r['pca_fit_clients_used']} clients, options {r['selector_options']}"
            ),
            flush=True,
        )
    return {"dataset": dataset, "rounds": rounds, "rows": rows}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default="flashrl,favor,fedavg", help="comma-separated methods (presets)")
    ap.add_argument("--n", type=int, default=10_000, help="clients (default 10,000)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--set", action="append", default=[], help="a config override KEY=VALUE passed to `fedselect run`")
    ap.add_argument("--src", help="run the fedselect sources of this folder (another checkout's src/)")
    ap.add_argument("--quick", action="store_true", help="N <= 1,000 on the embedded MNIST")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "ddqn_memory.json")
    a = ap.parse_args()
    result = main(a.quick, tuple(a.methods.split(",")), a.n, a.rounds, a.dataset, a.set, a.src)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2, default=str))
    print(f"wrote {a.out}")
