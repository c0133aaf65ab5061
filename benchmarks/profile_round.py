"""Where the time of one FedAvg round goes (issue 13; docs/performance.md).

Profiles one round of the full-MNIST workload of ``bench_speed.py`` (N = 100, U = 10, E = 5,
B = 50, evaluation of the 10,000 test images):

1. the bare PyTorch loop (PyTorch's default threads, standard layout, papers' layer order):
   cProfile of the round (Python view) and ``torch.profiler`` operator table;
2. fedselect's in-process path (``ClientTrainer(workers=0)``: one thread, channels-last,
   maxpool before ReLU, evaluation in forward batches of 250): the operator table;
3. one client epoch (600 images) in each configuration of the issue's orientation table
   (threads x memory format x layer order), median of 5;
4. with ``--flashrl``: FLASH-RL (configs/flashrl-mnist-dir05.yaml) through the round loop
   (``run_experiment``) for 3 rounds under cProfile: fedselect's functions by cumulative time
   (warm-up, PCA, selection, local training, evaluation, rewards, DDQN learning).

Usage: ``python benchmarks/profile_round.py [--quick] [--flashrl]`` (prints; writes nothing).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def epoch_table(reps: int = 5) -> list[tuple[str, float]]:
    import numpy as np
    import torch

    from fedselect.common.seeding import torch_rng
    from fedselect.fl.local.train import TrainConfig, local_train
    from fedselect.world.data.datasets import ArrayDataset
    from fedselect.world.models import build_model

    rng = np.random.default_rng(0)
    d = ArrayDataset(rng.random((600, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 600), 10)
    cfg = TrainConfig(1, 50, 0.01, 0.9)

    def papers_order(self, x):
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))

    rows = []
    default_threads = torch.get_num_threads()
    for threads in sorted({1, default_threads}):
        torch.set_num_threads(threads)
        for fmt in ("standard", "channels-last"):
            for order in ("relu->pool (papers)", "pool->relu (fedselect)"):
                m = build_model("mnist_cnn", (1, 28, 28), 10, generator=torch_rng(0, "init"))
                if order.startswith("relu"):
                    m.forward = papers_order.__get__(m)
                if fmt == "channels-last":
                    m = m.to(memory_format=torch.channels_last)
                init = {k: v.clone() for k, v in m.state_dict().items()}
                ts = []
                for _ in range(reps + 1):
                    m.load_state_dict(init)
                    t0 = time.perf_counter()
                    local_train(m, d, cfg, torch_rng(0, "s"))
                    ts.append(time.perf_counter() - t0)
                rows.append((f"{threads} thread(s), {fmt}, {order}", statistics.median(ts[1:])))
    torch.set_num_threads(default_threads)
    return rows


def flashrl_profile(rounds: int = 3) -> None:
    import tempfile

    from fedselect.config.load import load_config
    from fedselect.experiment.run import run_experiment

    cfg = load_config(HERE.parent / "configs" / "flashrl-mnist-dir05.yaml", {"rounds": rounds, "checkpoint_every": 0})
    prof = cProfile.Profile()
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        prof.enable()
        run_experiment(cfg, d)
        prof.disable()
        wall = time.perf_counter() - t0
    st = pstats.Stats(prof)
    print(f"\n== FLASH-RL, full MNIST N = 100, {rounds} rounds through run_experiment: {wall:.1f} s")
    rows = []
    for (file, _line, fn), (_cc, nc, _tt, ct, _callers) in st.stats.items():
        if "/fedselect/" in file and fn not in ("run_experiment", "run_rounds", "_run", "<module>"):
            rows.append((ct, f"{Path(file).parent.name}/{Path(file).stem}.{fn}", nc))
    print("  fedselect functions by cumulative time (calls):")
    for ct, name, nc in sorted(rows, reverse=True)[:25]:
        print(f"  {name:<50} {ct:8.2f} s  ({nc})")


def main(quick: bool) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    import bench_speed as bs

    print(f"torch {torch.__version__}, default threads {torch.get_num_threads()}, load {bs.loadavg():.2f}")
    print("\n== one client epoch (600 images, batch 50), median of 5")
    for name, s in epoch_table():
        print(f"  {name:<55} {s * 1e3:7.1f} ms")

    cfg, fed, tc, _ = bs._fed_and_cfg(quick)
    sel = bs.selections(cfg.seed, fed.num_clients, cfg.clients_per_round, 2)
    bare = bs.BareLoop(cfg, fed, tc)
    bare.round(1, sel[0])  # warm-up (the first optimiser imports torch._dynamo: 2 s)
    print("\n== bare loop, round 2 (cProfile, top 15 by cumulative time)")
    prof = cProfile.Profile()
    prof.enable()
    r = bare.round(2, sel[1])
    prof.disable()
    print(f"  round: {r['wall_s']:.2f} s (train {r['train_s']:.2f}, eval {r['eval_s']:.2f})")
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(15)
    print(s.getvalue())

    fs = bs.FedselectLoop(cfg, fed, tc, workers=0)
    fs.round(1, sel[0])
    for label, loop in (("bare loop", bare), ("fedselect in-process (1 thread, channels-last, pool->relu)", fs)):
        print(f"\n== {label}, round 2 again: operators by self CPU time (torch.profiler)")
        with profile(activities=[ProfilerActivity.CPU]) as p:
            r = loop.round(2, sel[1])
        print(f"  round: {r['wall_s']:.2f} s (train {r['train_s']:.2f}, eval {r['eval_s']:.2f})")
        print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=40))
    fs.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the embedded MNIST workload")
    ap.add_argument("--flashrl", action="store_true", help="profile FLASH-RL rounds through run_experiment instead")
    a = ap.parse_args()
    if a.flashrl:
        flashrl_profile()
    else:
        main(a.quick)
