"""Speed (issue 13): fedselect's training path against a bare PyTorch loop, and scaling rows.

One invocation runs every variant on the same workload and the same client selections, each
in its own subprocess (so start-up and the peak memory of its process tree are its own). All
variants are started first; then round t of every variant runs back to back (the order rotating
from round to round), twice, so that drift of a shared machine hits every variant alike; a
round's time is the faster of its two runs (bursts of other jobs only ever add time):

* ``bare``: the reference, a minimal single-process PyTorch loop as one would write it: the
  MNIST CNN in the papers' order (conv -> ReLU -> maxpool), standard memory layout, PyTorch's
  default thread count, per client ``load_state_dict`` + a new SGD optimiser, the same
  mini-batches (``torch_rng(seed, f"train/{t}/{k}")``), FedAvg of the states, evaluation of the
  10,000 test images in batches of 1,000 under ``no_grad``.
* ``fedselect-inproc``: :class:`fedselect.fl.local.pool.ClientTrainer` with ``workers=0`` (in the
  main process, one torch thread), ``fedavg``, the trainer's evaluation.
* ``fedselect-1w`` / ``fedselect-Nw``: the same with 1 worker process / one per usable core.

Workload (full): full MNIST, N = 100, U = 10, E = 5, B = 50, SGD lr 0.01 momentum 0.9,
Dirichlet 0.5 (min 10), evaluation every round (configs/mnist-fedavg.yaml). ``--quick``: the
embedded MNIST, N = 20, U = 4, E = 1.

Scaling rows: FedAvg per-round time and memory at N = 100, 1,000, 10,000 (U = 10; every
client holds 600 rows of full MNIST so the work per round is the same at every N, and the
round does the O(N) parts of the real loop: the fleet's draws and a uniform choice of U of N),
the time to build a Dirichlet federation at each N, the FLASH-RL DDQN agent per round at
N = 100, 1,000 (and 2,000) with random states of size N x (PCA components + 4), CEFL's
Louvain clustering (``louvain_k``) at N = 100 and 1,000, and the secretary rule at N = 1,600.

Usage::

    make bench ARGS="--only speed"            # or: python benchmarks/run_all.py --only speed [--quick]
    python benchmarks/bench_speed.py [--quick] [--rounds R] [--parts speed,scaling,agents]

Prints tables and writes ``benchmarks/results/bench_speed.json``. Timings are wall-clock
seconds; memory is the peak of the summed RSS (sampled every 0.25 s while the variant runs)
and PSS (sampled after each of its rounds; every second for the other rows) of the variant's
process tree, its workers and fork server included. PSS divides shared pages among the
processes that map them, so it does not count the shared data or libraries several times;
RSS does.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
T_START = time.perf_counter()


# =============================================================================== process tree memory
def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree_pids(root: int) -> list[int]:
    kids = _children_map()
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


_PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss(root: int) -> int:
    """Summed RSS in bytes of ``root`` and its descendants (/proc/PID/statm: cheap)."""
    rss = 0
    for p in tree_pids(root):
        try:
            with open(f"/proc/{p}/statm") as f:
                rss += int(f.read().split()[1]) * _PAGE
        except OSError:
            continue
    return rss


def tree_pss(root: int) -> int:
    """Summed PSS in bytes of ``root`` and its descendants (/proc/PID/smaps_rollup; walks the
    page tables, tens of ms for a torch process: sampled rarely)."""
    pss = 0
    for p in tree_pids(root):
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
                        break
        except OSError:
            continue
    return pss


class TreeSampler(threading.Thread):
    """Peak summed RSS of a process tree every ``period`` s, PSS every ``pss_every`` samples
    (the sampling must not load the machine it measures: about 1 ms per RSS sample)."""

    def __init__(self, pid: int, period: float = 0.25, pss_every: int = 12):
        super().__init__(daemon=True)
        self.pid, self.period, self.pss_every = pid, period, pss_every
        self.peak_rss = self.peak_pss = 0
        self.active = threading.Event()
        self.active.set()
        self.stop = threading.Event()

    def sample_pss(self) -> None:
        self.peak_pss = max(self.peak_pss, tree_pss(self.pid))

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            if self.active.is_set():
                self.peak_rss = max(self.peak_rss, tree_rss(self.pid))
                i += 1
                if i % self.pss_every == 0:
                    self.sample_pss()
            self.stop.wait(self.period)


def loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return math.nan


def run_child(args: list[str], timeout: float = 3600) -> dict:
    """Run this file with ``args`` in a subprocess; its JSON result plus the tree's peak memory."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "out.json"
        load0 = loadavg()
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *args, "--json", str(out)], cwd=ROOT)
        sampler = TreeSampler(proc.pid, pss_every=4)
        sampler.start()
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = "timeout"
        sampler.stop.set()
        sampler.join()
        if rc != 0 or not out.exists():
            return {"error": f"child {args} ended with {rc}"}
        res = json.loads(out.read_text())
        res.update(
            peak_rss_mb=sampler.peak_rss / 2**20,
            peak_pss_mb=(sampler.peak_pss / 2**20) or math.nan,
            process_wall_s=time.perf_counter() - t0,
            loadavg_before=load0,
            loadavg_after=loadavg(),
        )
        return res


# =============================================================================== the workload
def workload(quick: bool) -> dict:
    if quick:
        return {
            "name": "bench-speed-quick",
            "seed": 0,
            "method": "fedavg",
            "rounds": 3,
            "clients_per_round": 4,
            "data": {
                "dataset": "mnist-embedded",
                "num_clients": 20,
                "partition": {"scheme": "dirichlet", "alpha": 0.5, "min_size": 10},
            },
            "model": {"name": "mnist_cnn"},
            "train": {"local_epochs": 1, "batch_size": 50, "lr": 0.01, "momentum": 0.9},
            "checkpoint_every": 0,
        }
    import yaml

    doc = yaml.safe_load((ROOT / "configs" / "mnist-fedavg.yaml").read_text())
    doc["checkpoint_every"] = 0
    return doc


def selections(seed: int, n: int, u: int, rounds: int) -> list[list[int]]:
    """The clients of rounds 1..rounds: uniform without replacement (FedAvg's rule), one
    generator shared by every variant."""
    from fedselect.common.seeding import np_rng

    rng = np_rng(seed, "bench/speed/select")
    return [sorted(int(k) for k in rng.choice(n, size=u, replace=False)) for _ in range(rounds)]


def _fed_and_cfg(quick: bool):
    return fed_and_cfg(workload(quick), "bench_speed workload")


def fed_and_cfg(doc: dict, what: str):
    """(config, federation, :class:`~fedselect.fl.local.train.TrainConfig`, seconds to build the
    federation) of the experiment ``doc`` (a config as a dict; ``what`` names it in errors)."""
    from fedselect.world.federation import build_federation

    cfg, tc = parse_workload(doc, what)
    t0 = time.perf_counter()
    fed = build_federation(cfg)
    return cfg, fed, tc, time.perf_counter() - t0


def parse_workload(doc: dict, what: str):
    """(config, :class:`~fedselect.fl.local.train.TrainConfig`) of the experiment ``doc``."""
    from fedselect.config.schema import parse_config
    from fedselect.fl.local.train import TrainConfig

    cfg = parse_config(doc, what)
    tr = cfg.train
    return cfg, TrainConfig(tr.local_epochs, tr.batch_size, tr.lr, tr.momentum, tr.optimizer, tr.weight_decay)


class BareLoop:
    """The reference loop (module docstring). Plain PyTorch; fedselect only built the data.
    ``device``: where the model, the clients' data and the test set live (``"cpu"``, ``"cuda"``):
    on a GPU it is the loop a user would write there (data moved once, one client after another)."""

    def __init__(self, cfg, fed, tc, device: str = "cpu"):
        import torch
        from torch import nn

        class BareCNN(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1, self.conv2 = nn.Conv2d(1, 20, 5), nn.Conv2d(20, 50, 5)
                self.fc1, self.fc2 = nn.Linear(800, 500), nn.Linear(500, 10)
                self.pool = nn.MaxPool2d(2)

            def forward(self, x):
                x = self.pool(torch.relu(self.conv1(x)))
                x = self.pool(torch.relu(self.conv2(x)))
                return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))

        self.cfg, self.tc = cfg, tc
        self.model = BareCNN().to(device)
        self.global_state = {k: v.to(device, copy=True) for k, v in fed.new_model().state_dict().items()}
        self.data = [(torch.from_numpy(c.train.x).to(device), torch.from_numpy(c.train.y).to(device)) for c in fed.clients]
        self.xt, self.yt = torch.from_numpy(fed.test_set.x).to(device), torch.from_numpy(fed.test_set.y).to(device)

    def round(self, t: int, chosen: list[int], commit: bool = True) -> dict:
        """Round ``t`` on ``chosen``; ``commit=False`` measures it without keeping the new
        global model (a repetition of the same work)."""
        import torch
        from torch import nn

        from fedselect.common.seeding import torch_rng

        model, tc = self.model, self.tc
        t0 = time.perf_counter()
        states, sizes = [], []
        for k in chosen:
            x, y = self.data[k]
            model.load_state_dict(self.global_state)
            opt = torch.optim.SGD(model.parameters(), lr=tc.lr, momentum=tc.momentum)
            g = torch_rng(self.cfg.seed, f"train/{t}/{k}")
            model.train()
            for _ in range(tc.epochs):
                perm = torch.randperm(len(y), generator=g)
                for i in range(0, len(y), tc.batch_size):
                    idx = perm[i : i + tc.batch_size]
                    opt.zero_grad()
                    loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
                    loss.backward()
                    opt.step()
            states.append({n: v.detach().clone() for n, v in model.state_dict().items()})
            sizes.append(len(y))
        total = sum(sizes)
        new_state = {n: sum(s[n] * (m / total) for s, m in zip(states, sizes)) for n in states[0]}
        if self.xt.is_cuda:  # the training's kernels end before the clock reads (GPU work is asynchronous)
            torch.cuda.synchronize(self.xt.device)
        t1 = time.perf_counter()
        model.load_state_dict(new_state)
        model.eval()
        correct, loss_sum = 0, 0.0
        xt, yt = self.xt, self.yt
        with torch.no_grad():
            for i in range(0, len(yt), 1000):
                out = model(xt[i : i + 1000])
                loss_sum += float(nn.functional.cross_entropy(out, yt[i : i + 1000], reduction="sum"))
                correct += int((out.argmax(1) == yt[i : i + 1000]).sum())
        t2 = time.perf_counter()
        if commit:
            self.global_state = new_state
        return {"round": t, "wall_s": t2 - t0, "train_s": t1 - t0, "eval_s": t2 - t1, "accuracy": correct / len(yt)}


class FedselectLoop:
    """fedselect's training path: ClientTrainer jobs, fedavg, the trainer's evaluation.
    ``trainer_options``: more arguments of :class:`~fedselect.fl.local.pool.ClientTrainer` (``device``,
    ``batched``)."""

    def __init__(self, cfg, fed, tc, workers: int, **trainer_options):
        from fedselect.fl.local.pool import ClientTrainer

        self.cfg, self.fed, self.tc = cfg, fed, tc
        self.trainer = ClientTrainer.from_federation(fed, tc, workers=workers, **trainer_options)
        self.global_state = {k: v.clone() for k, v in fed.new_model().state_dict().items()}

    def round(self, t: int, chosen: list[int], commit: bool = True) -> dict:
        from fedselect.fl.aggregate import fedavg
        from fedselect.fl.local.pool import TrainJob

        t0 = time.perf_counter()
        res = self.trainer.train(
            [TrainJob(k, self.global_state, self.tc.epochs, self.cfg.seed, f"train/{t}/{k}") for k in chosen]
        )
        bad = [r.error for r in res if r.error]
        if bad:
            raise RuntimeError(bad[0])
        new_state = fedavg([r.state for r in res], [self.fed.clients[k].num_samples for k in chosen])
        t1 = time.perf_counter()
        m = self.trainer.evaluate(new_state)
        t2 = time.perf_counter()
        if commit:
            self.global_state = new_state
        return {"round": t, "wall_s": t2 - t0, "train_s": t1 - t0, "eval_s": t2 - t1, "accuracy": m["accuracy"]}

    def close(self) -> None:
        self.trainer.close()


def serve_speed(variant: str, quick: bool, workers: int) -> None:
    """Set up one speed variant, then run the rounds the parent asks for on stdin ("round T"),
    answering one JSON line each on stdout; "quit" ends it with a JSON line of totals."""
    import torch

    cfg, fed, tc, build_s = _fed_and_cfg(quick)
    loop = BareLoop(cfg, fed, tc) if variant == "bare" else FedselectLoop(cfg, fed, tc, workers)
    sel = selections(cfg.seed, fed.num_clients, cfg.clients_per_round, 1000)
    ready = {
        "ready_s": time.perf_counter() - T_START,
        "federation_s": build_s,
        "startup_s": 0.0 if variant == "bare" else loop.trainer.startup_s,
        "torch_threads_main": torch.get_num_threads(),
        "num_clients": fed.num_clients,
    }
    print(json.dumps(ready), flush=True)
    try:
        for line in sys.stdin:
            cmd = line.split()
            if not cmd or cmd[0] == "quit":
                break
            t, commit = int(cmd[1]), cmd[2] == "1"
            print(json.dumps(loop.round(t, sel[t - 1], commit)), flush=True)
    finally:
        if variant != "bare":
            loop.close()


class LiveChild:
    """A serving child process (:func:`serve_speed`) with its memory sampler."""

    def __init__(self, args: list[str]):
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), *args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.sampler = TreeSampler(self.proc.pid)
        self.sampler.start()

    def idle(self) -> None:
        """Stop sampling while another variant runs (after one PSS sample)."""
        self.sampler.sample_pss()
        self.sampler.active.clear()

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"benchmark child {self.proc.args} ended early (exit code {self.proc.wait()})")
        return json.loads(line)

    def round(self, t: int, commit: bool = True) -> dict:
        self.sampler.active.set()
        self.proc.stdin.write(f"round {t} {int(commit)}\n")
        self.proc.stdin.flush()
        out = self.read()
        self.idle()
        return out

    def close(self) -> dict:
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait(120)
        self.sampler.stop.set()
        self.sampler.join()
        return {"peak_rss_mb": self.sampler.peak_rss / 2**20, "peak_pss_mb": self.sampler.peak_pss / 2**20}


def speed_rows(variants: list[tuple[str, list[str]]], rounds: int, reps: int) -> dict[str, dict]:
    """Start every variant, then run round t of each back to back (the order rotating from one
    round to the next), ``reps`` times (the last repetition keeps its model), so that the
    machine's drift hits all variants alike; a round's time is the minimum over its repetitions."""
    runs: dict[str, dict] = {}
    children = {}
    for name, args in variants:  # one at a time: start-up is measured alone
        t0 = time.perf_counter()
        c = LiveChild(args)
        info = c.read()
        info["process_ready_s"] = time.perf_counter() - t0
        c.idle()
        children[name] = c
        runs[name] = {**info, "rounds": [], "repetitions": []}
    names = list(children)
    try:
        for t in range(1, rounds + 1):
            order = names[(t - 1) % len(names) :] + names[: (t - 1) % len(names)]
            got: dict[str, list[dict]] = {n: [] for n in names}
            for rep in range(reps):
                for name in order:
                    load = loadavg()
                    r = children[name].round(t, commit=rep == reps - 1)
                    r["loadavg"] = load
                    got[name].append(r)
            for name in names:
                runs[name]["repetitions"].append(got[name])
                best = min(got[name], key=lambda r: r["wall_s"])
                runs[name]["rounds"].append(best)
            print(
                f"  round {t}: "
                + ", ".join(f"{n} " + "/".join(f"{r['wall_s']:.2f}" for r in got[n]) for n in order)
                + f" s (load {loadavg():.2f})",
                flush=True,
            )
    finally:
        for name, c in children.items():
            runs[name].update(c.close())
    return runs


def child_scale(quick: bool, n: int, rounds: int) -> dict:
    """FedAvg rounds at N clients, 600 rows each (fixed work per round), all cores."""
    import numpy as np

    from fedselect.common.seeding import np_rng, torch_rng
    from fedselect.fl.aggregate import fedavg
    from fedselect.fl.local.placement import usable_cores
    from fedselect.fl.local.pool import ClientData, ClientTrainer, ModelSpec, TrainJob
    from fedselect.fl.local.train import TrainConfig
    from fedselect.world.data.catalog import load_dataset
    from fedselect.world.models import build_model
    from fedselect.world.system import Fleet

    train, test = load_dataset("mnist-embedded" if quick else "mnist")
    per = 600
    rng = np_rng(0, "bench/scale/rows")
    t0 = time.perf_counter()
    perm = rng.permutation(len(train))  # client k: 600 consecutive rows of one permutation (wrapping)
    rows = [perm[(s + np.arange(per)) % len(train)] for s in rng.integers(0, len(train), size=n)]
    data = ClientData.from_arrays(train.x, train.y, rows, 10)
    fleet = Fleet.create(n, 0)
    setup_s = time.perf_counter() - t0
    tc = TrainConfig(1 if quick else 5, 50, 0.01, 0.9)
    u = 10
    trainer = ClientTrainer(ModelSpec("mnist_cnn", (1, 28, 28), 10), data, tc, workers=usable_cores(), eval_sets={"test": test})
    state = build_model("mnist_cnn", (1, 28, 28), 10, generator=torch_rng(0, "model-init")).state_dict()
    sel = np_rng(0, "bench/scale/select")
    out = []
    try:
        for t in range(1, rounds + 1):
            a = time.perf_counter()
            draws = fleet.draw(t)
            b = time.perf_counter()
            chosen = [int(k) for k in sel.choice(n, size=u, replace=False)]
            c = time.perf_counter()
            res = trainer.train([TrainJob(k, state, tc.epochs, 0, f"train/{t}/{k}") for k in chosen])
            state = fedavg([r.state for r in res], [per] * u)
            d = time.perf_counter()
            trainer.evaluate(state)
            e = time.perf_counter()
            out.append(
                {
                    "round": t,
                    "wall_s": e - a,
                    "draw_ms": (b - a) * 1e3,
                    "select_ms": (c - b) * 1e3,
                    "train_s": d - c,
                    "eval_s": e - d,
                    "mean_mhz": float(np.mean(draws.freq_mhz)),
                }
            )
    finally:
        trainer.close()
    return {"variant": f"scale-{n}", "num_clients": n, "setup_s": setup_s, "startup_s": trainer.startup_s, "rounds": out}


def child_fedbuild(quick: bool, n: int, scheme: str = "dirichlet") -> dict:
    """Time to build a federation of N clients on full MNIST (the real ``build_federation``):
    Dirichlet(0.5) with ``min_size`` = min(10, 60000 / 4N) (at least 1), or IID."""
    from fedselect.config.schema import parse_config
    from fedselect.world.federation import build_federation

    doc = workload(quick)
    min_size = max(1, min(10, (4000 if quick else 60000) // (4 * n)))
    part = {"scheme": "dirichlet", "alpha": 0.5, "min_size": min_size} if scheme == "dirichlet" else {"scheme": "iid"}
    doc["data"] = {
        "dataset": doc["data"]["dataset"],
        "num_clients": n,
        "partition": part,
        "holdout_fraction": doc["data"].get("holdout_fraction", 0.0),
    }
    cfg = parse_config(doc, "fedbuild")
    t0 = time.perf_counter()
    try:
        fed = build_federation(cfg)
        sizes = [c.num_samples for c in fed.clients]
        res = {"ok": True, "min_client": min(sizes), "max_client": max(sizes)}
    except ValueError as e:
        res = {"ok": False, "error": str(e)[:300]}
    return {
        "variant": f"fedbuild-{scheme}-{n}",
        "num_clients": n,
        "scheme": scheme,
        "min_size": min_size if scheme == "dirichlet" else None,
        "build_s": time.perf_counter() - t0,
        **res,
    }


def child_agent(n: int, rounds: int, components: int = 100) -> dict:
    """FLASH-RL's DDQN agent alone (Table IV defaults), random states of N x (m + 4), m = min(N, 100)."""
    import numpy as np
    import torch

    try:
        from fedselect.kernels.ddqn import DDQNAgent, DDQNConfig  # after the issue-11 refactor
    except ImportError:
        from fedselect.kernels.ddqn import DDQNAgent, DDQNConfig
    from fedselect.common.seeding import np_rng, torch_rng

    m = min(n, components)
    dim = n * (m + 4)
    u = 10
    t0 = time.perf_counter()
    agent = DDQNAgent(
        dim, n, DDQNConfig(), total_rounds=100, rng=np_rng(0, "bench/agent"), torch_generator=torch_rng(0, "bench/agent")
    )
    build_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    state = rng.standard_normal(dim).astype(np.float32)
    for _ in range(agent.config.batch_size):  # fill the memory so that every round learns
        nxt = rng.standard_normal(dim).astype(np.float32)
        agent.remember(state, rng.choice(n, u, replace=False), rng.random(u), nxt, False)
        state = nxt
    times = []
    for t in range(2, rounds + 2):
        a = time.perf_counter()
        chosen = agent.select(state, u, t)
        nxt = rng.standard_normal(dim).astype(np.float32)
        agent.remember(state, chosen, rng.random(u), nxt, False)
        agent.learn()
        agent.end_round(t)
        times.append(time.perf_counter() - a)
        state = nxt
    params = sum(p.numel() for p in agent.main.parameters())
    return {
        "variant": f"agent-{n}",
        "num_clients": n,
        "state_dim": dim,
        "q_params": params,
        "build_s": build_s,
        "round_s": times,
        "torch_threads": torch.get_num_threads(),
    }


def child_small() -> dict:
    """CEFL clustering at N = 100, 1,000 and the secretary rule at N = 1,600 (in-process)."""
    import numpy as np

    try:
        from fedselect.kernels.secretary import alpha_star, secretary_rule
        from fedselect.kernels.similarity import edge_weights, louvain_k, similarity_graph
    except ImportError:
        from fedselect.kernels.secretary import alpha_star, secretary_rule
        from fedselect.kernels.similarity import edge_weights, louvain_k, similarity_graph
    from fedselect.common.seeding import np_rng

    out = {"variant": "small"}
    for n in (100, 1000):
        rng = np.random.default_rng(n)
        pts = rng.standard_normal((n, 8))
        d = np.sqrt(((pts[:, None, :] - pts[None, :, :]) ** 2).sum(-1))
        d = (d + d.T) / 2
        s = edge_weights(d)
        t0 = time.perf_counter()
        similarity_graph(s)
        out[f"cefl_graph_n{n}_s"] = time.perf_counter() - t0
        times = []
        for rep in range(3):
            t0 = time.perf_counter()
            parts, info = louvain_k(s, 4, np_rng(rep, "bench/louvain"))
            times.append(time.perf_counter() - t0)
        out[f"cefl_louvain_k4_n{n}_s"] = statistics.median(times)
        out[f"cefl_louvain_k4_n{n}_calls"] = info["calls"]
    n, budget = 1600, 10
    scores = np.random.default_rng(1).random(n).tolist()
    times = []
    for _ in range(200):
        t0 = time.perf_counter()
        sel = secretary_rule(scores, budget, alpha_star(n, 1, 2, budget))  # budgeted_online's defaults r1 = 1, r2 = 2
        times.append(time.perf_counter() - t0)
    out["secretary_n1600_r10_us"] = statistics.median(times) * 1e6
    out["secretary_n1600_evaluated"] = sel.evaluated
    return out


# =============================================================================== the parent
def _median(xs):
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else math.nan


def speed_table(runs: dict[str, dict]) -> dict:
    """Per-variant median/min/max over the rounds (each round: the minimum over its
    repetitions; round 1 excluded: one-time costs such as the first optimiser's lazy imports),
    and the median over rounds of the ratio to the bare loop's same round."""
    summary = {}
    bare = runs.get("bare", {}).get("rounds", [])
    for name, run in runs.items():
        rows = run.get("rounds", [])[1:] or run.get("rounds", [])
        walls = [r["wall_s"] for r in rows]
        ratios = [r["wall_s"] / b["wall_s"] for r, b in zip(run.get("rounds", [])[1:], bare[1:])]
        summary[name] = {
            "round_median_s": _median(walls),
            "round_min_s": min(walls, default=math.nan),
            "round_max_s": max(walls, default=math.nan),
            "train_median_s": _median([r["train_s"] for r in rows]),
            "eval_median_s": _median([r["eval_s"] for r in rows]),
            "first_round_s": run["rounds"][0]["wall_s"] if run.get("rounds") else math.nan,
            "startup_s": run.get("startup_s", math.nan),
            "ready_s": run.get("process_ready_s", math.nan),
            "peak_rss_mb": run.get("peak_rss_mb", math.nan),
            "peak_pss_mb": run.get("peak_pss_mb", math.nan),
            "ratio_to_bare_median": _median(ratios),
            "ratio_to_bare_of_medians": _median(walls) / _median([b["wall_s"] for b in bare[1:]]) if bare else math.nan,
            "final_accuracy": run["rounds"][-1]["accuracy"] if run.get("rounds") else math.nan,
            "rounds_measured": len(walls),
            "loadavg_median": _median([r.get("loadavg", math.nan) for r in rows]),
        }
    return summary


def print_speed(summary: dict) -> None:
    print(
        f"{'variant':<18}{'median s':>9}{'min':>7}{'max':>7}{'train':>7}{'eval':>7}{'x bare':>8}{'start s':>8}{'ready s':>8}{'RSS MB':>8}{'PSS MB':>8}"
    )
    for name, s in summary.items():
        print(
            f"{name:<18}{s['round_median_s']:>9.3f}{s['round_min_s']:>7.2f}{s['round_max_s']:>7.2f}{s['train_median_s']:>7.2f}"
            f"{s['eval_median_s']:>7.2f}{s['ratio_to_bare_median']:>8.3f}{s['startup_s']:>8.2f}{s['ready_s']:>8.2f}"
            f"{s['peak_rss_mb']:>8.0f}{s['peak_pss_mb']:>8.0f}"
        )


def main(quick: bool = False, rounds: int | None = None, parts: str = "speed,scaling,agents", reps: int | None = None) -> dict:
    from fedselect.fl.local.placement import usable_cores

    cores = usable_cores()
    rounds = rounds or (3 if quick else 6)
    reps = reps or (1 if quick else 2)
    q = ["--quick"] if quick else []
    res: dict = {
        "quick": quick,
        "usable_cores": cores,
        "rounds": rounds,
        "repetitions": reps,
        "loadavg_start": loadavg(),
        "python": sys.version.split()[0],
    }
    want = set(parts.split(","))
    if "speed" in want:
        variants = [
            ("bare", ["--variant", "bare"]),
            ("fedselect-inproc", ["--variant", "fedselect", "--workers", "0"]),
            ("fedselect-1w", ["--variant", "fedselect", "--workers", "1"]),
        ]
        if cores > 1:
            variants.append((f"fedselect-{cores}w", ["--variant", "fedselect", "--workers", str(cores)]))
        variants = [(name, ["--serve", *args]) for name, args in variants]
        runs = speed_rows([(name, [*args, *q]) for name, args in variants], rounds + 1, reps)
        res["speed_runs"] = runs
        res["speed"] = speed_table(runs)
        print_speed(res["speed"])
    if "scaling" in want:
        scale = {}
        for n in (100, 1000) if quick else (100, 1000, 10000):
            r = run_child(["--variant", "scale", "--n", str(n), "--rounds", str(2 if quick else 4), *q])
            if "rounds" in r:
                w = [x["wall_s"] for x in r["rounds"][1:]] or [x["wall_s"] for x in r["rounds"]]
                r["round_median_s"] = _median(w)
                r["draw_ms_median"] = _median([x["draw_ms"] for x in r["rounds"]])
                r["select_ms_median"] = _median([x["select_ms"] for x in r["rounds"]])
            scale[n] = r
            print(
                f"  FedAvg N={n}: "
                + (
                    r.get("error")
                    or f"{r['round_median_s']:.3f} s/round (first round excluded), draw "
                    f"{r['draw_ms_median']:.2f} ms, select {r['select_ms_median']:.2f} ms, setup {r['setup_s']:.1f} s, "
                    f"peak RSS {r['peak_rss_mb']:.0f} MB, PSS {r['peak_pss_mb']:.0f} MB"
                ),
                flush=True,
            )
        res["fedavg_scaling"] = scale
        build = {}
        for n in (20, 100) if quick else (100, 1000, 10000):
            for scheme in ("dirichlet", "iid"):
                r = run_child(["--variant", "fedbuild", "--n", str(n), "--scheme", scheme, *q])
                build[f"{scheme}-{n}"] = r
                print(
                    f"  {scheme} federation N={n}"
                    + (f" (min_size {r.get('min_size')})" if scheme == "dirichlet" else "")
                    + f": {r.get('build_s', math.nan):.1f} s "
                    + (
                        f"ok, clients of {r.get('min_client')}..{r.get('max_client')} samples"
                        if r.get("ok")
                        else str(r.get("error"))
                    )
                    + f", peak RSS {r.get('peak_rss_mb', math.nan):.0f} MB",
                    flush=True,
                )
        res["federation_build"] = build
    if "agents" in want:
        agent = {}
        for n in (100, 300) if quick else (100, 1000, 2000):
            r = run_child(["--variant", "agent", "--n", str(n), "--rounds", str(5 if quick else 10)])
            if "round_s" in r:
                r["round_median_s"] = _median(r["round_s"])
            agent[n] = r
            print(
                f"  FLASH-RL agent N={n}: "
                + (
                    r.get("error")
                    or f"state {r['state_dim']}, Q params {r['q_params']:,}, "
                    f"{r['round_median_s'] * 1e3:.0f} ms/round, build {r['build_s']:.1f} s, peak RSS {r['peak_rss_mb']:.0f} MB"
                ),
                flush=True,
            )
        res["flashrl_agent"] = agent
        small = run_child(["--variant", "small"])
        res["cefl_and_secretary"] = small
        print("  " + ", ".join(f"{k} {v:.4g}" for k, v in small.items() if isinstance(v, (int, float))), flush=True)
    res["loadavg_end"] = loadavg()
    return res


def _child_entry(a) -> dict:
    if a.variant == "scale":
        return child_scale(a.quick, a.n, a.rounds)
    if a.variant == "fedbuild":
        return child_fedbuild(a.quick, a.n, a.scheme)
    if a.variant == "agent":
        return child_agent(a.n, a.rounds)
    if a.variant == "small":
        return child_small()
    raise SystemExit(f"unknown variant {a.variant!r}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a few minutes)")
    ap.add_argument("--rounds", type=int, help="measured rounds per variant, after one warm-up round (default 6; quick 3)")
    ap.add_argument("--reps", type=int, help="repetitions of every round, its time being the minimum (default 2; quick 1)")
    ap.add_argument("--parts", default="speed,scaling,agents", help="comma-separated subset of speed,scaling,agents")
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=100, help=argparse.SUPPRESS)
    ap.add_argument("--scheme", default="dirichlet", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve_speed(a.variant, a.quick, a.workers)
    elif a.variant:
        result = _child_entry(a)
        Path(a.json).write_text(json.dumps(result, default=str))
    else:
        result = main(a.quick, a.rounds, a.parts, a.reps)
        out = HERE / "results"
        out.mkdir(exist_ok=True)
        (out / "bench_speed.json").write_text(json.dumps(result, indent=2, default=str))
        print(f"wrote {out / 'bench_speed.json'}")
