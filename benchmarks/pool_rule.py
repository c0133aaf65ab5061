"""The measurements behind the worker-pool rule (:mod:`fedselect.fl.local.pool_rule`).

One command::

    python benchmarks/pool_rule.py            # every model, 3 repeats
    python benchmarks/pool_rule.py --quick    # fewer models and repeats

(also ``python benchmarks/run_all.py --only pool_rule``). Three parts, each in a fresh process:

1. **The in-process estimate against the real thing**, for the built-in models at batch sizes
   10, 20 and 50: :func:`fedselect.fl.local.pool_rule.measure_costs` (one mini-batch's forward and
   backward pass, a forward pass per evaluated sample) against one local epoch of 5 clients of
   200 random samples and an evaluation of 1,000 in ``ClientTrainer(workers=0)`` (one torch
   thread, as a run trains without a pool). What a real step costs beyond the measured
   forward and backward pass, fitted as ``STEP_OVERHEAD_S + PARAM_STEP_S x parameters``
   (least squares), is compared with the constants in the code. Times are CPU seconds of the process
   (single-threaded: its wall time on an idle core).
2. **Pool start-up**: ``import torch._dynamo`` in a fresh process (what in-process training
   pays on its first optimiser step: ``DYNAMO_S``), then a 2-worker pool of the default run
   (MNIST CNN), the first in the process (``FORK_SERVER_S``) and a second one
   (``WARM_START_S``): wall seconds, and the CPU seconds of the fork server and the workers
   (from ``/proc``: on an idle machine the start-up takes about the fork server's CPU plus one
   worker's).
3. **The default run's rounds** (the embedded default config: 5 clients of 160 samples, E = 2,
   B = 20) with 2 workers and in process, a few rounds each after a warm-up round: the speed-up
   that ``EFFICIENCY`` stands for.

Results go to ``benchmarks/results/pool_rule.json`` and are printed. Linux only (``/proc``).
The machine's load average is recorded: on a shared machine the wall times of parts 2 and 3
are noisy, the CPU seconds of part 1 much less.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: (label, model name, input shape, options)
MODELS = [
    ("mlp-16", "mlp", (1, 28, 28), {"hidden": [16]}),
    ("mlp-25-25", "mlp", (1, 28, 28), {}),
    ("mnist_cnn", "mnist_cnn", (1, 28, 28), {}),
    ("cifar_cnn", "cifar_cnn", (3, 32, 32), {}),
    ("fd_cnn", "fd_cnn", (3, 20, 20), {}),
    ("gru-64", "gru", (50, 6), {"hidden": 64, "layers": 1}),
]
QUICK_MODELS = ("mlp-25-25", "mnist_cnn")
BATCHES = (10, 20, 50)


def loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return float("nan")


def _cpu_s(pid: int) -> float:
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------ part 1
def in_process(quick: bool) -> dict:
    import numpy as np
    import torch

    from fedselect.fl.local import pool_rule
    from fedselect.fl.local.clients import TrainJob
    from fedselect.fl.local.pool import ClientTrainer
    from fedselect.fl.local.train import TrainConfig
    from fedselect.world.data.datasets import ArrayDataset
    from fedselect.world.models import build_model, prefers_channels_last

    repeats = 2 if quick else 3
    rows = []
    for label, name, shape, opts in MODELS:
        if quick and label not in QUICK_MODELS:
            continue
        rng = np.random.default_rng(0)
        n_clients, n = 5, 200
        x = rng.random((n_clients * n, *shape), dtype=np.float32)
        y = rng.integers(0, 2, n_clients * n).astype(np.int64)
        clients = [ArrayDataset(x[k * n : (k + 1) * n], y[k * n : (k + 1) * n], 2) for k in range(n_clients)]
        test = ArrayDataset(rng.random((1000, *shape), dtype=np.float32), rng.integers(0, 2, 1000).astype(np.int64), 2)
        model = build_model(name, shape, 2, generator=torch.Generator().manual_seed(0), **opts)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        for b in BATCHES:
            costs = pool_rule.measure_costs(build_model(name, shape, 2, **opts), x[:b], y[:b], prefers_channels_last(model))
            cfg = TrainConfig(epochs=1, batch_size=b, lr=0.01)
            with ClientTrainer((name, shape, 2, opts), clients, cfg, workers=0, eval_sets={"test": test}) as tr:
                jobs = [TrainJob(k, state, 1, 0, f"bench/{k}") for k in range(n_clients)]
                tr.train(jobs[:1])  # warm-up (lazy imports, the first optimiser step)
                tr.evaluate(state)
                train_cpu, eval_cpu = [], []
                for _ in range(repeats):
                    c = time.process_time()
                    tr.train(jobs)
                    train_cpu.append((time.process_time() - c) / n_clients)
                    c = time.process_time()
                    tr.evaluate(state)
                    eval_cpu.append(time.process_time() - c)
            steps = -(-n // b)
            row = {
                "model": label,
                "batch_size": b,
                "steps": steps,
                "measured_step_s": costs.step_s,
                "measured_eval_sample_s": costs.eval_sample_s,
                "job_cpu_s": min(train_cpu),
                "parameters": costs.parameters,
                "job_estimate_s": pool_rule.estimate_work_s(pool_rule.RunWork(1, 1, 1, b, float(n), 0, 0), costs),
                "overhead_per_step_s": (min(train_cpu) - steps * costs.step_s) / steps,
                "eval_cpu_s": min(eval_cpu),
                "eval_estimate_s": 1000 * costs.eval_sample_s,
            }
            rows.append(row)
            print(
                f"  {label:10s} B={b:2d} job {row['job_cpu_s'] * 1e3:7.1f} ms (estimate {row['job_estimate_s'] * 1e3:7.1f}, "
                f"overhead {row['overhead_per_step_s'] * 1e3:5.2f} ms/step)  eval {row['eval_cpu_s'] * 1e3:6.1f} ms "
                f"(estimate {row['eval_estimate_s'] * 1e3:6.1f})",
                flush=True,
            )
    import statistics

    a = np.array([[1.0, r["parameters"]] for r in rows])
    (overhead, per_param), *_ = np.linalg.lstsq(a, np.array([r["overhead_per_step_s"] for r in rows]), rcond=None)
    return {
        "rows": rows,
        "overhead_per_step_s_median": statistics.median(r["overhead_per_step_s"] for r in rows),
        "fit": {"STEP_OVERHEAD_S": float(overhead), "PARAM_STEP_S": float(per_param)},
        "in_code": {"STEP_OVERHEAD_S": pool_rule.STEP_OVERHEAD_S, "PARAM_STEP_S": pool_rule.PARAM_STEP_S},
        "job_estimate_ratio": [r["job_estimate_s"] / r["job_cpu_s"] for r in rows],
        "eval_estimate_ratio": [r["eval_estimate_s"] / r["eval_cpu_s"] for r in rows],
    }


# ------------------------------------------------------------------------------ parts 2 and 3
def default_federation():
    from fedselect.api import experiment_config
    from fedselect.experiment.resolve import resolve
    from fedselect.world.federation import build_federation

    r = resolve(experiment_config(None), "default")
    return r, build_federation(r.config)


def pool_start(quick: bool) -> dict:
    from multiprocessing import forkserver

    import torch

    from fedselect.fl.local.pool import ClientTrainer

    c = time.process_time()
    import torch._dynamo  # noqa: F401  (what the first optimiser step in a process imports)

    out = {"dynamo_import_cpu_s": time.process_time() - c, "torch_ok": torch.__version__}
    r, fed = default_federation()
    for which in ("first", "second"):
        t = time.perf_counter()
        tr = ClientTrainer.from_federation(fed, r.train_cfg, workers=2)
        wall = time.perf_counter() - t
        fs_pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
        workers_cpu = [_cpu_s(p) for p in tr.worker_pids()]
        out[which] = {
            "wall_s": wall,
            "fork_server_cpu_s": _cpu_s(fs_pid) if (fs_pid and which == "first") else 0.0,
            "worker_cpu_s": workers_cpu,
        }
        out[which]["idle_estimate_s"] = out[which]["fork_server_cpu_s"] + max(workers_cpu)
        tr.close()
    return out


def rounds(quick: bool) -> dict:
    from fedselect.fl.local.clients import TrainJob
    from fedselect.fl.local.pool import ClientTrainer
    from fedselect.fl.local.pool_rule import EFFICIENCY

    r, fed = default_federation()
    cfg = r.config
    n_rounds = 2 if quick else 5
    state = fed.new_model().state_dict()
    res = {}
    for workers in (0, 2):
        with ClientTrainer.from_federation(fed, r.train_cfg, workers=workers) as tr:
            times = []
            for t in range(n_rounds + 1):
                chosen = [(t * cfg.clients_per_round + i) % fed.num_clients for i in range(cfg.clients_per_round)]
                jobs = [TrainJob(k, state, cfg.train.local_epochs, cfg.seed, f"bench/{t}/{k}") for k in chosen]
                w = time.perf_counter()
                tr.train(jobs)
                tr.evaluate(state)
                times.append(time.perf_counter() - w)
            res[f"workers_{workers}_round_s"] = times[1:]  # round 0: warm-up
    import statistics

    a, b = statistics.median(res["workers_0_round_s"]), statistics.median(res["workers_2_round_s"])
    res.update(speedup=a / b, efficiency=a / b / 2, efficiency_in_code=EFFICIENCY)
    return res


# ------------------------------------------------------------------------------ driver
PARTS = {"in_process": in_process, "pool_start": pool_start, "rounds": rounds}


def _child(part: str, quick: bool, out: str) -> None:
    res = PARTS[part](quick)
    Path(out).write_text(json.dumps(res))


def main(quick: bool = False) -> dict:
    import tempfile

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    res: dict = {"quick": quick, "loadavg_start": loadavg()}
    for part in PARTS:
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "part.json"
            load0 = loadavg()
            print(f"== {part}", flush=True)
            subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--child", part, str(out)] + (["--quick"] if quick else []),
                env=env,
                check=True,
            )
            res[part] = json.loads(out.read_text())
            res[part]["loadavg"] = [load0, loadavg()]
    res["loadavg_end"] = loadavg()
    return res


def _cli() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="two models, fewer repeats and rounds")
    ap.add_argument("--child", nargs=2, metavar=("PART", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "pool_rule.json", help="JSON output")
    a = ap.parse_args()
    if a.child:
        _child(a.child[0], a.quick, a.child[1])
        return 0
    res = main(a.quick)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=2))
    ip = res["in_process"]
    print(json.dumps({k: ip[k] for k in ("overhead_per_step_s_median", "fit", "in_code")}, indent=2))
    print(json.dumps({k: res[k] for k in ("pool_start", "rounds")}, indent=2))
    print(f"written: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(_cli())
