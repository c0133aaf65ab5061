"""GPU speed (issue 39): the stacked ``torch.func`` path against a bare GPU loop, side by side.

One command, one process, the same clients and rounds for every variant:

* ``bare``: a bare sequential PyTorch loop on the device, as a user would write it
  (:class:`bench_speed.BareLoop`: data moved to the device once, one client after another,
  ``load_state_dict`` + a new SGD optimiser per client, FedAvg, evaluation in batches of 1,000);
* ``stacked``: fedselect's :class:`~fedselect.fl.local.pool.ClientTrainer` on the device with
  ``batched=True`` (:mod:`fedselect.fl.local.batched`: all clients of a round trained at once with
  ``torch.func.vmap(grad(...))``), what ``--device cuda`` / ``auto`` uses on a GPU;
* ``sequential``: the same trainer on the device with ``batched=False`` (one client after another);
* ``pool``: fedselect's CPU worker pool, one worker process per usable core (what a run uses
  without a GPU).

Workloads (MNIST CNN, SGD lr 0.01 momentum 0.9, evaluation of the whole test set every round):

* ``a``: the paper's FedAvg (configs/mnist-fedavg.yaml: full MNIST, N = 100, Dirichlet 0.5,
  U = 10, E = 5, B = 50);
* ``b``: the same federation, all 100 clients every round, E = 1;
* ``c``: the cross-device shape that pfl-research benchmarks: N = 1,000 clients of 60 images
  (``client_dirichlet``, alpha 0.5), U = 50, E = 1, B = 10.

``--quick``: the embedded MNIST (1,000 test images), a) N = 20 clients of 60 images, U = 4,
E = 1, B = 10; b) the same, U = 20; c) N = 100 clients of 20 images, U = 10, E = 1,
B = 10; 2 rounds measured. It runs on CPU in well under a minute and is part of the test suite
(tests/benchmarks/test_gpu_bench.py).

Per variant and workload: the median wall-clock seconds per round after one warm-up round
(training + FedAvg + evaluation; the device is synchronised around every round), the peak GPU
memory of the variant (``torch.cuda.max_memory_allocated`` from its set-up to its last round,
MB; ``null`` for variants on CPU), the accuracy after the last round, the speed-up over the bare
loop (its median / the variant's), and the largest absolute difference of the global weights
after round 1 from the ``sequential`` variant's (the stacked path matches it up to float
reordering: ``weights_close`` applies the tolerances of the CPU tests of the stacked path,
rtol 1e-4, atol 2e-5). Variants run one after another, each after ``gc`` and
``torch.cuda.empty_cache()``, so each one's peak memory is its own.

Usage::

    python benchmarks/gpu.py                          # the device: cuda when available, else cpu
    python benchmarks/gpu.py --device cuda --rounds 5 --out benchmarks/results
    python benchmarks/gpu.py --device cpu --quick     # seconds: the check the test suite runs
    python benchmarks/gpu.py --workloads a,c --variants bare,stacked

Writes ``gpu.json`` and ``gpu.md`` (the table) to ``--out`` (default benchmarks/results/) and
prints the table. docs/performance.md ("The GPU path") says how to read it.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_speed import BareLoop, FedselectLoop, fed_and_cfg, loadavg, parse_workload, selections, workload  # noqa: E402

VARIANTS = ("bare", "stacked", "sequential", "pool")
WORKLOADS = ("a", "b", "c")
#: the tolerances of the CPU tests of the stacked path (tests/fl/test_pool.py, SGD): weights after one round
RTOL, ATOL = 1e-4, 2e-5


def workloads(quick: bool) -> dict[str, dict]:
    """Workload key -> {"title", "doc": the experiment as a config dict} (module docstring)."""
    a = workload(False)  # configs/mnist-fedavg.yaml: the paper's FedAvg
    a.update(name="gpu-a", checkpoint_every=0)
    n_c, per_c, u_c = 1000, 60, 50
    if quick:  # the embedded MNIST, small clients: seconds on a CPU
        a["data"] = {
            "dataset": "mnist-embedded",
            "num_clients": 20,
            "partition": {"scheme": "client_dirichlet", "alpha": 0.5, "samples_per_client": 60},
            "holdout_fraction": 0.0,
        }
        a.update(clients_per_round=4, train=dict(a["train"], local_epochs=1, batch_size=10))
        n_c, per_c, u_c = 100, 20, 10
    b = copy.deepcopy(a)
    b["name"], b["clients_per_round"] = "gpu-b", a["data"]["num_clients"]
    b["train"] = dict(a["train"], local_epochs=1)
    c = copy.deepcopy(a)
    c["name"], c["clients_per_round"] = "gpu-c", u_c
    c["data"] = {
        "dataset": a["data"]["dataset"],
        "num_clients": n_c,
        "partition": {"scheme": "client_dirichlet", "alpha": 0.5, "samples_per_client": per_c},
        "holdout_fraction": 0.0,
    }
    c["train"] = dict(a["train"], local_epochs=1, batch_size=10)
    n_a, u_a, e_a, b_a = a["data"]["num_clients"], a["clients_per_round"], a["train"]["local_epochs"], a["train"]["batch_size"]
    return {
        "a": {"title": f"{'FedAvg' if quick else 'paper FedAvg'}: N {n_a}, U {u_a}, E {e_a}, B {b_a}", "doc": a},
        "b": {"title": f"all clients: N {n_a}, U {n_a}, E 1, B {b_a}", "doc": b},
        "c": {"title": f"cross-device: N {n_c} x {per_c} images, U {u_c}, E 1, B 10", "doc": c},
    }


def resolve_bench_device(name: str) -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``; ``cuda`` without CUDA is refused."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {name}: no CUDA device here (torch {torch.__version__}); use --device cpu or auto")
    return name


def make_loop(variant: str, cfg, fed, tc, device: str):
    from fedselect.fl.local.placement import usable_cores

    if variant == "bare":
        return BareLoop(cfg, fed, tc, device=device)
    if variant == "stacked":
        return FedselectLoop(cfg, fed, tc, 0, device=device, batched=True)
    if variant == "sequential":
        return FedselectLoop(cfg, fed, tc, 0, device=device, batched=False)
    if variant == "pool":
        return FedselectLoop(cfg, fed, tc, usable_cores(), device="cpu")
    raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")


def _on_gpu(variant: str, device: str) -> bool:
    return variant != "pool" and device.startswith("cuda")


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _cpu_state(state: dict) -> dict:
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}


def run_variant(variant: str, cfg, fed, tc, chosen: list[list[int]], device: str) -> dict:
    """Set up ``variant``, run round 1 (warm-up) .. len(chosen) on the given selections."""
    import torch

    gpu = _on_gpu(variant, device)
    gc.collect()
    if gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    loop = make_loop(variant, cfg, fed, tc, device)
    _sync(device)
    setup_s = time.perf_counter() - t0
    rounds, first_state = [], None
    try:
        for t, sel in enumerate(chosen, start=1):
            _sync(device)
            load = loadavg()
            a = time.perf_counter()
            r = loop.round(t, sel)
            _sync(device)
            r["wall_s"] = time.perf_counter() - a  # the round including the final synchronisation
            r["loadavg"] = load
            rounds.append(r)
            if t == 1:
                first_state = _cpu_state(loop.global_state)
    finally:
        if hasattr(loop, "close"):
            loop.close()
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if gpu else None
    del loop
    return {"setup_s": setup_s, "rounds": rounds, "peak_gpu_mb": peak, "first_state": first_state}


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def summarise(runs: dict[str, dict]) -> dict[str, dict]:
    """Per variant: median / min / max s per round (round 1 left out), train and evaluation
    medians, speed-up over ``bare``, peak GPU MB, final accuracy, weight difference after
    round 1 from ``sequential``."""
    ref = runs.get("sequential", {}).get("first_state")
    bare = runs.get("bare")
    bare_med = _median([r["wall_s"] for r in bare["rounds"][1:]]) if bare else math.nan
    out = {}
    for name, run in runs.items():
        rows = run["rounds"][1:] or run["rounds"]
        med = _median([r["wall_s"] for r in rows])
        diff = None
        if ref is not None and run.get("first_state") is not None:
            import torch

            st = run["first_state"]
            diff = max(float((st[k].float() - ref[k].float()).abs().max()) for k in ref)
            close = all(torch.allclose(st[k].float(), ref[k].float(), rtol=RTOL, atol=ATOL) for k in ref)
        out[name] = {
            "round_median_s": med,
            "round_min_s": min(r["wall_s"] for r in rows),
            "round_max_s": max(r["wall_s"] for r in rows),
            "train_median_s": _median([r["train_s"] for r in rows]),
            "eval_median_s": _median([r["eval_s"] for r in rows]),
            "first_round_s": run["rounds"][0]["wall_s"],
            "setup_s": run["setup_s"],
            "speedup_vs_bare": bare_med / med if med > 0 else math.nan,
            "peak_gpu_mb": run["peak_gpu_mb"],
            "final_accuracy": run["rounds"][-1]["accuracy"],
            "accuracy_per_round": [r["accuracy"] for r in run["rounds"]],
            "max_weight_diff_vs_sequential": diff,
            "weights_close": None if diff is None else bool(close),
            "rounds_measured": len(rows),
            "loadavg_median": _median([r["loadavg"] for r in rows]),
        }
    return out


def device_info(device: str) -> dict:
    import torch

    from fedselect.fl.local.placement import usable_cores

    info = {
        "device": device,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "usable_cores": usable_cores(),
    }
    if device.startswith("cuda"):
        p = torch.cuda.get_device_properties(device)
        info.update(
            gpu=p.name,
            gpu_memory_gb=p.total_memory / 1e9,
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            tf32_conv=torch.backends.cudnn.allow_tf32,
            tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
        )
    return info


def table(result: dict) -> str:
    """The results as a Markdown table (one row per workload and variant)."""
    dev = result["info"]
    where = dev.get("gpu", "CPU") + f", torch {dev['torch']}, {dev['usable_cores']} cores"
    lines = [
        f"GPU benchmark on {result['device']} ({where}){' --quick' if result['quick'] else ''}: "
        f"{result['rounds']} rounds measured after 1 warm-up round",
        "",
        "| workload | variant | median s/round | min | max | train s | eval s | x bare | peak GPU MB | accuracy | "
        "max abs diff of weights from sequential, round 1 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, w in result["workloads"].items():
        for name, s in w["summary"].items():
            gpu = "n/a" if s["peak_gpu_mb"] is None else f"{s['peak_gpu_mb']:.0f}"
            diff = "-" if s["max_weight_diff_vs_sequential"] is None else f"{s['max_weight_diff_vs_sequential']:.2e}"
            lines.append(
                f"| {key}: {w['title']} | {name} | {s['round_median_s']:.4f} | {s['round_min_s']:.4f} | {s['round_max_s']:.4f} | "
                f"{s['train_median_s']:.4f} | {s['eval_median_s']:.4f} | {s['speedup_vs_bare']:.2f} | {gpu} | "
                f"{s['final_accuracy']:.4f} | {diff} |"
            )
    return "\n".join(lines)


def main(
    device: str = "auto",
    quick: bool = False,
    rounds: int | None = None,
    which: tuple[str, ...] = WORKLOADS,
    variants: tuple[str, ...] = VARIANTS,
    out: Path | None = None,
) -> dict:
    """Run the benchmark; returns the result dict (also written to ``out``/gpu.json and gpu.md)."""
    device = resolve_bench_device(device)
    rounds = rounds or (2 if quick else 5)
    result = {
        "device": device,
        "quick": quick,
        "rounds": rounds,
        "info": device_info(device),
        "loadavg_start": loadavg(),
        "workloads": {},
    }
    feds: dict[str, tuple] = {}
    specs = workloads(quick)
    for key in which:
        spec = specs[key]
        doc = spec["doc"]
        data_key = json.dumps([doc["data"], doc.get("seed")], sort_keys=True)
        if data_key in feds:  # a) and b) share one federation
            cfg, tc = parse_workload(doc, key)
            fed = feds[data_key]
        else:
            cfg, fed, tc, _ = fed_and_cfg(doc, f"benchmarks/gpu.py workload {key}")
            feds[data_key] = fed
        chosen = selections(cfg.seed, fed.num_clients, cfg.clients_per_round, rounds + 1)
        runs = {}
        for v in variants:
            runs[v] = run_variant(v, cfg, fed, tc, chosen, device)
            r = runs[v]["rounds"]
            print(
                f"  {key} {v}: " + ", ".join(f"{x['wall_s']:.3f}" for x in r) + f" s/round, accuracy {r[-1]['accuracy']:.4f}",
                flush=True,
            )
        summary = summarise(runs)
        result["workloads"][key] = {
            "title": spec["title"],
            "num_clients": fed.num_clients,
            "clients_per_round": cfg.clients_per_round,
            "local_epochs": tc.epochs,
            "batch_size": tc.batch_size,
            "summary": summary,
        }
    result["loadavg_end"] = loadavg()
    text = table(result)
    print(text)
    out = out or HERE / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "gpu.md").write_text(text + "\n")
    print(f"wrote {out / 'gpu.json'} and {out / 'gpu.md'}")
    return result


def _names(text: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    got = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in got if x not in allowed]
    if bad or not got:
        raise SystemExit(f"--{what} {text!r}: expected a comma-separated subset of {','.join(allowed)}")
    return got


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto", help="cuda, cuda:N, cpu or auto (cuda when available; default)")
    ap.add_argument("--quick", action="store_true", help="embedded MNIST, small federations: seconds, even on CPU")
    ap.add_argument("--rounds", type=int, help="rounds measured after the warm-up round (default 5; quick 2)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated subset of a,b,c")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of " + ",".join(VARIANTS))
    ap.add_argument("--out", type=Path, help="folder for gpu.json and gpu.md (default benchmarks/results)")
    a = ap.parse_args()
    main(
        a.device,
        a.quick,
        a.rounds,
        _names(a.workloads, WORKLOADS, "workloads"),
        _names(a.variants, VARIANTS, "variants"),
        a.out,
    )
