"""FLASH-RL benchmark (issue 8): FedAvg, FLASH-RL (paper schedule), FLASH-RL (tuned) and FAVOR
on one federation (full MNIST, hetero Dirichlet 0.5, N = 100, U = 10), several seeds.

Two modes, one command each:

* ``--mode train`` (the real benchmark): every method runs the real round loop
  (``fedselect.experiment.run.run_experiment``) from its config in ``configs/``; rounds and seeds
  are options. The issue's full size is ``--rounds 100 --seeds 0 1 2`` (hours on CPU;
  ``fedselect compare configs/flashrl-benchmark-mnist.yaml`` runs the same with the worker pool);
  ``--rounds`` smaller than a config's rounds shortens its epsilon decay and RL batch
  proportionally (``--no-scale`` keeps them).
* ``--mode sim`` (latency only, minutes): the same federations, fleets, draws, latency model,
  round loop and the real FLASH-RL selector (DDQN, state, FR-eq 10), but no local training and
  no evaluation: the run's transport carries every job to a trainer that trains nothing
  (:class:`LatencyOnlyTrainer`): each participant "returns" the global model (so the FedAvg
  aggregate is the global model again, d = 0 up to float rounding, the global metric never
  improves and zeta = 0 in FR-eq 8, leaving the reward 0.6 * (-lnorm) + 0.4 * Psi of FR-eq 10),
  every evaluation scores 0, and the warm-up models are *synthetic* (initial weights + seeded
  Gaussian noise, for the PCA). It measures how much of the exploration bound
  (``flashrl_exploration_bound.py``; here computed with the run's own cost model and the agent's
  own epsilon schedule) the agent captures. Accuracy columns are meaningless there and are not
  printed. FAVOR is skipped: its reward has no latency term.

Results: a table (mean and spread over seeds per method: final accuracy, end-to-end latency of
rounds 1..T, the warm-up latency, rounds to the target, wall time) on stdout and a JSON file
(default ``OUT/MODE-results.json``). ``--set KEY=VALUE`` changes every method's config alike
(e.g. a smaller federation for a smoke test).

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
from typing import Sequence

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from fedselect.cli.options import parse_sets  # noqa: E402
from fedselect.common.files import dumps_json, read_csv_rows  # noqa: E402
from fedselect.common.seeding import np_rng  # noqa: E402
from fedselect.config.load import load_config  # noqa: E402
from fedselect.experiment.run import run_experiment  # noqa: E402
from fedselect.fl.work import LocalTransport, TrainJob, TrainResult  # noqa: E402
from fedselect.world.federation import build_federation  # noqa: E402
from flashrl_exploration_bound import oracle_round  # noqa: E402

CONFIGS = {
    "fedavg": "configs/mnist-fedavg.yaml",
    "flashrl": "configs/flashrl-mnist-dir05.yaml",
    "flashrl-tuned": "configs/flashrl-tuned-mnist-dir05.yaml",
    "favor": "configs/favor-mnist-dir05.yaml",
}
#: methods of ``--mode sim``: those whose reward has a latency term (FAVOR's has none)
SIM_METHODS = ("fedavg", "flashrl", "flashrl-tuned")
#: standard deviation of the synthetic warm-up models' noise around the initial weights
WARMUP_NOISE_STD = 0.01


# ------------------------------------------------------------------ latency-only simulation
class LatencyOnlyTrainer:
    """The trainer of ``--mode sim`` under the real :class:`~fedselect.fl.work.LocalTransport`:
    it trains and evaluates nothing.

    * A round's job returns its start state unchanged (loss NaN): the cost model still charges
      the client's full latency (FR-eq 3-5) and bytes, as for a real update.
    * A warm-up job (stream ``warmup/0/<k>``) returns the start state plus N(0, ``noise_std``^2)
      noise on every floating entry, drawn from ``np_rng(seed, "bench/synthetic-warmup/<k>")``:
      distinct models for the PCA, without training.
    * Every evaluation scores accuracy = macro-F1 = loss = 0.

    Args:
        seed: the run's seed. noise_std: the warm-up noise (weights' units).
    """

    workers = 0

    def __init__(self, seed: int, noise_std: float = WARMUP_NOISE_STD):
        self.seed, self.noise_std = int(seed), float(noise_std)

    def train(self, jobs: Sequence[TrainJob]) -> list[TrainResult]:
        return [TrainResult(j.client_id, self._state(j), math.nan) for j in jobs]

    def _state(self, j: TrainJob) -> dict[str, torch.Tensor]:
        if not j.stream.startswith("warmup/"):
            return {k: v.clone() for k, v in j.start_state.items()}
        g = np_rng(self.seed, f"bench/synthetic-warmup/{j.client_id}")
        return {
            k: v + torch.from_numpy(g.normal(0.0, self.noise_std, tuple(v.shape))).to(v.dtype)
            if v.is_floating_point()
            else v.clone()
            for k, v in j.start_state.items()
        }

    def evaluate(self, state, name: str = "test") -> dict[str, float]:
        return {"accuracy": 0.0, "f1_macro": 0.0, "loss": 0.0}

    def close(self) -> None:
        pass


class LatencyOnlySession:
    """An engine session (:class:`fedselect.engines.Session`) whose runs carry their jobs to a
    :class:`LatencyOnlyTrainer`: how ``--mode sim`` plugs into the real round loop."""

    def connect(self, plan, fed, workers=None):
        return LocalTransport(fed, LatencyOnlyTrainer(plan.config.seed), plan.train_cfg)


# ------------------------------------------------------------------ helpers
def scaled_overrides(cfg_path: str, rounds: int, seed: int, scale: bool, sets: dict | None = None) -> dict:
    """Overrides for a shortened run: ``sets`` (dotted keys given to every method), rounds, seed,
    no checkpoints, and (``scale``) epsilon decay and RL batch size of a DDQN method shrunk in
    proportion to rounds / config rounds."""
    sets = dict(sets or {})
    base = load_config(ROOT / cfg_path, sets)
    ov = {**sets, "rounds": rounds, "seed": seed, "checkpoint_every": 0}
    if scale and rounds < base.rounds and base.method in ("flashrl", "favor"):
        f = rounds / base.rounds
        mo = base.method_options
        dec = mo.get("eps_decay_rounds") or base.rounds
        ov["method_options.eps_decay_rounds"] = max(1, round(dec * f))
        batch = mo.get("rl_batch_size", 50)
        ov["method_options.rl_batch_size"] = max(min(batch, 5), round(batch * f))
    return ov


def oracle_bound(sim, rounds: int, seed: int, repeats: int = 50) -> float | None:
    """Largest relative saving in end-to-end latency (rounds 1..``rounds``) of a perfect-knowledge
    epsilon-greedy agent (:func:`flashrl_exploration_bound.oracle_round`) over FedAvg's uniform
    choice of U, with the run's own cost model (FR-eq 3-5: ``sim.ctx.client_cost``) and its
    agent's epsilon schedule (round 1 uniform when the agent's is); None for a selector
    without a DDQN agent."""
    agent = getattr(sim.selector, "agent", None)
    if agent is None:
        return None
    n, u, e = sim.settings.num_clients, sim.settings.clients_per_round, sim.settings.local_epochs
    lats = []
    for t in range(1, rounds + 1):
        d = sim.ctx.draw(t)
        lats.append(np.array([sim.ctx.client_cost(k, e, d).latency_s for k in range(n)]))
    eps = [1.0 if t == 1 and agent.config.uniform_first_round else agent.epsilon(t) for t in range(1, rounds + 1)]
    rng = np_rng(seed, "bench/oracle")
    fed_e2e = np.mean([sum(float(lat[rng.choice(n, u, replace=False)].max()) for lat in lats) for _ in range(repeats)])
    orc = np.mean([sum(oracle_round(lat, u, eps[t - 1], rng) for t, lat in enumerate(lats, 1)) for _ in range(repeats)])
    return float(1 - orc / fed_e2e)


def run(mode: str, methods: list[str], rounds: int, seeds: list[int], out: Path, scale: bool, sets: dict | None = None) -> dict:
    """Run ``methods`` (keys of :data:`CONFIGS`) for each seed on one federation per seed, into
    ``out/<method>-s<seed>``; returns ``{"mode", "rounds", "seeds", "scaled", "results": {method:
    [one record per seed]}}``.

    Raises:
        ValueError: the methods' data sections differ (the comparison needs one federation).
    """
    results: dict[str, list[dict]] = {m: [] for m in methods}
    for seed in seeds:
        fed = None
        for m in methods:
            if mode == "sim" and m not in SIM_METHODS:
                print(f"[sim] skipping {m}: its reward has no latency term", flush=True)
                continue
            ov = scaled_overrides(CONFIGS[m], rounds, seed, scale, sets)
            cfg = load_config(ROOT / CONFIGS[m], ov)
            if fed is None:
                fed = build_federation(cfg)
                data0 = cfg.data.model_dump()
            elif cfg.data.model_dump() != data0:
                raise ValueError(
                    f"{CONFIGS[m]}: data section differs from the first method's; the comparison needs one federation"
                )
            run_dir = out / f"{m}-s{seed}"
            sims = []
            t0 = time.perf_counter()
            summary = run_experiment(
                cfg,
                run_dir,
                federation=fed,
                overwrite=True,
                session=LatencyOnlySession() if mode == "sim" else None,
                on_simulation=sims.append,
            )
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
                rec["oracle_bound"] = oracle_bound(sims[0], rounds, seed)
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
    rounds; 5.6 min on 2 cores shared with other jobs) plus a 5-round training run of FedAvg and
    tuned FLASH-RL (seed 0, ~5 min); not quick = the issue's full benchmark (hours on CPU)."""
    out = ROOT / "runs" / "bench-flashrl"
    if quick:
        sim = run("sim", ["fedavg", "flashrl", "flashrl-tuned"], 100, [0], out / "sim", True)
        tr = run("train", ["fedavg", "flashrl-tuned"], 5, [0], out / "train", True)
        print(table(sim)), print(table(tr))
        return {"sim": sim, "train": tr}
    full = run("train", list(CONFIGS), 100, [0, 1, 2], out / "train-full", True)
    print(table(full))
    return {"train": full}


def cli(argv: list[str] | None = None) -> dict:
    """The command line (module docstring); returns the results also written to the JSON file."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["train", "sim"], default="sim", help="real training, or the latency-only simulation")
    ap.add_argument(
        "--methods",
        nargs="+",
        default=list(CONFIGS),
        choices=list(CONFIGS),
        help="which methods (configs: " + ", ".join(f"{m} {c}" for m, c in CONFIGS.items()) + ")",
    )
    ap.add_argument("--rounds", type=int, default=100, help="rounds T of every run")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="one federation and one run per method per seed")
    ap.add_argument(
        "--out", type=Path, default=ROOT / "runs" / "bench-flashrl", help="run directories go to OUT/MODE/<method>-s<seed>"
    )
    ap.add_argument(
        "--no-scale", action="store_true", help="keep the configs' epsilon decay and RL batch when --rounds is smaller"
    )
    ap.add_argument(
        "--set",
        dest="sets",
        action="append",
        metavar="KEY=VALUE",
        help="override a key of every method's config, e.g. --set data.num_clients=20 (repeatable; values are YAML)",
    )
    ap.add_argument("--json", type=Path, help="write the results here (default OUT/MODE-results.json)")
    a = ap.parse_args(argv)
    if a.rounds < 1:
        ap.error(f"--rounds must be >= 1, got {a.rounds}")
    try:
        sets = parse_sets(a.sets)
    except ValueError as e:
        ap.error(str(e))
    t0 = time.perf_counter()
    res = run(a.mode, a.methods, a.rounds, a.seeds, a.out / a.mode, not a.no_scale, sets)
    res["total_wall_s"] = time.perf_counter() - t0
    print(table(res))
    print(f"total wall time {res['total_wall_s']:.0f} s")
    path = a.json or a.out / f"{a.mode}-results.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps_json(res, indent=2, default=str))  # strict JSON: non-finite numbers as null
    return res


if __name__ == "__main__":
    cli()
