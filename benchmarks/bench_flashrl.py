"""FLASH-RL benchmark (issue 8): FedAvg, FLASH-RL (paper schedule), FLASH-RL (tuned) and FAVOR
on one federation (full MNIST, hetero Dirichlet 0.5, N = 100, U = 10), several seeds.

Two modes, one command each:

* ``--mode train`` (the real benchmark): every method runs the real round loop
  (``fedselect.runner.run_experiment``) from its config in ``configs/``; rounds and seeds are
  options. The issue's full size is ``--rounds 100 --seeds 0 1 2`` (about 20 s per round on one
  CPU core, i.e. hours); ``--rounds`` smaller than a config's rounds shortens its epsilon decay
  and RL batch proportionally (``--no-scale`` keeps them).
* ``--mode sim`` (latency only, minutes): the same federations, fleets, draws, latency model and
  the real DDQN/FR-eq 10 code, but no local training, no aggregation and no evaluation: each
  participant "returns" the global model (so d = 0, the global metric never improves and
  zeta = 0 in FR-eq 8, leaving the reward 0.6 * (-lnorm) + 0.4 * Psi of FR-eq 10), and the
  warm-up models are *synthetic* (initial weights + seeded Gaussian noise, for the PCA). It
  measures how much of the exploration bound (``flashrl_exploration_bound.py``) the agent
  captures. Accuracy columns are meaningless there and are not printed.

Results: a table (mean and spread over seeds per method: final accuracy, end-to-end latency of
rounds 1..T, the warm-up latency, rounds to the target, wall time) on stdout and a JSON file.

    .venv/bin/python benchmarks/bench_flashrl.py --mode sim --rounds 100 --seeds 0 1 2
    .venv/bin/python benchmarks/bench_flashrl.py --mode train --rounds 20 --seeds 0 \\
        --methods fedavg flashrl-tuned
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from fedselect.common.files import dumps_json, read_csv_rows  # noqa: E402
from fedselect.common.seeding import np_rng  # noqa: E402
from fedselect.config.load import load_config  # noqa: E402
from fedselect.experiment.run import run_experiment  # noqa: E402
from fedselect.methods import import_methods, register_method  # noqa: E402
from fedselect.methods.ddqn import linear_epsilon  # noqa: E402
from fedselect.methods.fedavg import FedAvg  # noqa: E402
from fedselect.methods.flashrl import FlashRL  # noqa: E402
from fedselect.world.federation import build_federation  # noqa: E402
from flashrl_exploration_bound import oracle_round  # noqa: E402

CONFIGS = {
    "fedavg": "configs/mnist-fedavg.yaml",
    "flashrl": "configs/flashrl-mnist-dir05.yaml",
    "flashrl-tuned": "configs/flashrl-tuned-mnist-dir05.yaml",
    "favor": "configs/favor-mnist-dir05.yaml",
}


# ------------------------------------------------------------------ latency-only simulation
class _NoTraining:
    """Participants return the global model untouched; nothing is aggregated or evaluated."""

    def local_update(self, t, k, draws):
        return self.make_update(t, k, self.global_model.state_dict(), math.nan, self.local_epochs(t, k), draws)

    def aggregate(self, t, updates):
        return None

    def evaluate(self, t):
        return {"accuracy": 0.0, "f1_macro": 0.0, "loss": 0.0}


@register_method
class FedAvgLatencySim(_NoTraining, FedAvg):
    name = "fedavg-latency-sim"


@register_method
class FlashRLLatencySim(_NoTraining, FlashRL):
    name = "flashrl-latency-sim"

    def _warmup(self):
        """Synthetic warm-up models: initial weights + N(0, 0.01^2) noise (seeded), no training."""
        from fedselect.methods.base import flat_parameters

        init = self.global_model.state_dict()
        w0 = flat_parameters(init).numpy()
        g = np_rng(self.cfg.seed, "bench/synthetic-warmup")
        draws = self.fed.fleet.draw(0)
        rows, updates = [], []
        for k in range(self.fed.num_clients):
            rows.append((w0 + g.normal(0, 0.01, w0.size)).astype(np.float32))
            u = self.make_update(0, k, init, math.nan, self.options.warmup_epochs, draws)
            u.state = None
            updates.append(u)
        return updates, np.stack(rows)


# ------------------------------------------------------------------ helpers
def scaled_overrides(cfg_path: str, rounds: int, seed: int, scale: bool) -> dict:
    """Overrides for a shortened run: rounds, seed, no checkpoints, and (``scale``) epsilon decay
    and RL batch size shrunk in proportion to rounds / config rounds."""
    base = load_config(ROOT / cfg_path)
    ov = {"rounds": rounds, "seed": seed, "checkpoint_every": 0}
    if scale and rounds < base.rounds and base.method in ("flashrl", "favor"):
        f = rounds / base.rounds
        mo = dict(base.method_options)
        dec = mo.get("eps_decay_rounds") or base.rounds
        mo["eps_decay_rounds"] = max(1, round(dec * f))
        batch = mo.get("rl_batch_size", 50)
        mo["rl_batch_size"] = max(min(batch, 5), round(batch * f))
        ov["method_options"] = mo
    return ov


def oracle_bound(fed, cfg, rounds: int, seed: int, repeats: int = 50) -> float | None:
    """Largest relative saving of a perfect-knowledge epsilon-greedy agent under ``cfg``'s schedule."""
    if cfg.method not in ("flashrl", "flashrl-latency-sim", "favor"):
        return None
    from fedselect.methods.base import Method  # noqa: F401  (documentation: same latency model)
    from fedselect.world.system import compute_time, transmit_time

    mo = cfg.method_options
    e0, e1, dec = mo.get("eps_init", 0.9), mo.get("eps_end", 0.2), mo.get("eps_decay_rounds") or rounds
    model_bits = 32.0 * sum(p.numel() for p in fed.new_model().parameters())
    bits = np.array([fed.client_bits(k) for k in range(fed.num_clients)])
    lats = []
    for t in range(1, rounds + 1):
        d = fed.fleet.draw(t)
        lats.append(
            compute_time(cfg.train.local_epochs, bits, cfg.system.cycles_per_bit, fed.fleet.cores, d.freq_mhz)
            + transmit_time(model_bits, d.bandwidth_mbps)
        )
    rng = np_rng(seed, "bench/oracle")
    u = cfg.clients_per_round
    fed_e2e = np.mean([sum(float(lat[rng.choice(len(lat), u, replace=False)].max()) for lat in lats) for _ in range(repeats)])
    orc = np.mean(
        [sum(oracle_round(lat, u, linear_epsilon(t, e0, e1, dec), rng) for t, lat in enumerate(lats, 1)) for _ in range(repeats)]
    )
    return float(1 - orc / fed_e2e)


def run(mode: str, methods: list[str], rounds: int, seeds: list[int], out: Path, scale: bool) -> dict:
    torch.set_num_threads(1)
    import_methods()
    results: dict[str, list[dict]] = {m: [] for m in methods}
    for seed in seeds:
        fed = None
        for m in methods:
            ov = scaled_overrides(CONFIGS[m], rounds, seed, scale)
            if mode == "sim":
                ov["method"] = {
                    "fedavg": "fedavg-latency-sim",
                    "flashrl": "flashrl-latency-sim",
                    "flashrl-tuned": "flashrl-latency-sim",
                }.get(m)
                if ov["method"] is None:
                    print(f"[sim] skipping {m}: its reward has no latency term", flush=True)
                    continue
            cfg = load_config(ROOT / CONFIGS[m], ov)
            if fed is None:
                fed = build_federation(cfg)
                data0 = cfg.data.model_dump()
            elif cfg.data.model_dump() != data0:
                raise ValueError(
                    f"{CONFIGS[m]}: data section differs from the first method's; the comparison needs one federation"
                )
            run_dir = out / f"{m}-s{seed}"
            t0 = time.perf_counter()
            summary = run_experiment(cfg, run_dir, federation=fed, overwrite=True)
            wall = time.perf_counter() - t0
            rows = read_csv_rows(run_dir / "metrics.csv")
            warm = float(rows[0]["e2e_latency_s"])
            rec = {
                "seed": seed,
                "final_accuracy": summary["final_accuracy"],
                "best_accuracy": summary["best_accuracy"],
                "e2e_latency_s": summary["e2e_latency_s"] - warm,
                "warmup_latency_s": warm,
                "rounds_to_target": summary["rounds_to_target"],
                "wall_s": wall,
                "mean_round_latency_last10_s": float(np.mean([float(r["round_latency_s"]) for r in rows[-10:]])),
            }
            if mode == "sim":
                rec["oracle_bound"] = oracle_bound(fed, cfg, rounds, seed)
            results[m].append(rec)
            print(
                f"[{mode}] {m} seed {seed}: "
                + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in rec.items()),
                flush=True,
            )
    return {"mode": mode, "rounds": rounds, "seeds": seeds, "scaled": scale, "results": results}


def table(res: dict) -> str:
    def ms(vals):
        vals = [v for v in vals if v is not None]
        if not vals:
            return "-"
        return f"{np.mean(vals):.4g} ± {np.std(vals):.2g}" if len(vals) > 1 else f"{vals[0]:.4g}"

    base = res["results"].get("fedavg") or []
    base_e2e = {r["seed"]: r["e2e_latency_s"] for r in base}
    lines = [
        f"mode={res['mode']} rounds={res['rounds']} seeds={res['seeds']}",
        "| method | final acc | e2e latency rounds 1..T (s) | vs FedAvg | warm-up (s) | rounds to target | bound | wall (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m, recs in res["results"].items():
        if not recs:
            continue
        rel = [r["e2e_latency_s"] / base_e2e[r["seed"]] - 1 for r in recs if r["seed"] in base_e2e]
        acc = ms([r["final_accuracy"] for r in recs]) if res["mode"] == "train" else "n/a"
        rtt = [r["rounds_to_target"] for r in recs]
        rtt_s = "n/a" if res["mode"] == "sim" else (ms(rtt) + (f" ({sum(x is None for x in rtt)} never)" if None in rtt else ""))
        bound = [r.get("oracle_bound") for r in recs]
        lines.append(
            f"| {m} | {acc} | {ms([r['e2e_latency_s'] for r in recs])} | "
            f"{ms([100 * x for x in rel]) + ' %' if rel and m != 'fedavg' else '-'} | "
            f"{ms([r['warmup_latency_s'] for r in recs])} | {rtt_s} | "
            f"{ms([-100 * b for b in bound if b is not None]) + ' %' if any(b is not None for b in bound) else '-'} | "
            f"{ms([r['wall_s'] for r in recs])} |"
        )
    return "\n".join(lines)


def main(quick: bool = True) -> dict:
    """Entry point of ``benchmarks/run_all.py``: quick = the latency simulation (seed 0, 100
    rounds, ~4 min) plus a 5-round training run of FedAvg and tuned FLASH-RL (seed 0, ~5 min);
    not quick = the issue's full benchmark (hours on CPU)."""
    out = ROOT / "runs" / "bench-flashrl"
    if quick:
        sim = run("sim", ["fedavg", "flashrl", "flashrl-tuned"], 100, [0], out / "sim", True)
        tr = run("train", ["fedavg", "flashrl-tuned"], 5, [0], out / "train", True)
        print(table(sim)), print(table(tr))
        return {"sim": sim, "train": tr}
    full = run("train", list(CONFIGS), 100, [0, 1, 2], out / "train-full", True)
    print(table(full))
    return {"train": full}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=["train", "sim"], default="sim")
    ap.add_argument("--methods", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-flashrl")
    ap.add_argument(
        "--no-scale", action="store_true", help="keep the configs' epsilon decay and RL batch when --rounds is smaller"
    )
    ap.add_argument("--json", type=Path, help="write the results here (default OUT/MODE-results.json)")
    a = ap.parse_args()
    t0 = time.perf_counter()
    res = run(a.mode, a.methods, a.rounds, a.seeds, a.out / a.mode, not a.no_scale)
    res["total_wall_s"] = time.perf_counter() - t0
    print(table(res))
    print(f"total wall time {res['total_wall_s']:.0f} s")
    path = a.json or a.out / f"{a.mode}-results.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps_json(res, indent=2, default=str))  # strict JSON: non-finite numbers as null
