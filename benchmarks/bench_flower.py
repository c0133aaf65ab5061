"""fedselect's simulator vs the same selector inside Flower's simulation engine (Ray), on one
FedAvg workload: embedded MNIST, N = 10 clients (10 simulated SuperNodes), U = 3 per round
(``random``), T = 5 rounds, E = 1, simulated latency.

Each engine runs in a fresh Python process (so imports and start-up count), while this process
samples the process tree's memory (/proc: the child and all its descendants, Ray's gcs_server,
raylet and workers included) every 50 ms until the run's round-0 row, then once a second: one
sample of Ray's tree costs about 40 ms of CPU (``smaps_rollup`` walks every mapping), so
sampling every 50 ms through the rounds took some 40 % of a core from the engine it measured,
more from Flower's tree than from the simulator's (``sampler_cpu_s``: this process's CPU while
it sampled). Measured per engine:

* ``startup_s``: from launching the process to the start of round 1 (imports, building the
  federation; for Flower also starting Ray, the nodes' actors and the ``query`` exchange);
* ``round_s``: wall time of each round (``timing.csv``), ``mean_round_s`` their mean;
* ``total_s``: the whole process, teardown included;
* ``peak_rss_mb``: the peak over time of the summed RSS of the tree; ``peak_pss_mb`` the same
  with PSS (shared pages counted once: Ray's processes share libraries and memory).

Both engines write the same ``metrics.csv`` (checked: ``identical_metrics``). The simulator runs
its clients one after another on one torch thread (at this size its pool would not repay its
start-up); the Flower engine runs 2 Ray actors of 1 CPU
(``client_resources.num_cpus = 1``, ``init_args.num_cpus = 2``), each with one torch thread.
``flower_poll_0.1s`` repeats the Flower run with the strategy polling the SuperLink for replies
every 100 ms (run config ``poll-interval``; the simulation engine's default is 10 ms). ``quick``
measures the MLP only; the full run the MLP and the MNIST CNN.

``python benchmarks/bench_flower.py --full [--repeat N]`` runs the speed benchmark's workload
instead (full MNIST, 100 SuperNodes, 10 per round, E = 5, B = 50, 5 rounds) in four ways: the
simulator with its worker pool on all cores (``simulator``), ``fedselect run --engine flower``
(``flower_engine``: the engine plug-in, one Ray actor per core, a round's long jobs sent the
costliest first, ``in_flight`` = actors + 1) and the ServerApp and ClientApp in Flower's
``run_simulation`` as ``flwr run`` runs them (``flower_app``, with the run-config key
``in-flight`` = actors + 1); ``flower_engine_at_once`` is the engine plug-in with every message
of a round pushed at once (``FlowerOptions()``, as before the window); ``--repeat N`` runs
them N times one after another (every second time in the reverse order), so that they share
the machine's load, and ``summary`` gives each one's medians and their ratios to the simulator
(``round_ratio``: of the medians of the mean seconds per round, rounds 1-5;
``paired_round_ratio``: the median of each repeat's own ratio; ``pss_ratio`` / ``rss_ratio``:
peak memory of the process tree). ``--engines simulator,flower_engine`` runs only those.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SETTINGS = {
    "seed": 0,
    "method": "fedavg",
    "rounds": 5,
    "clients_per_round": 3,
    "data.dataset": "mnist-embedded",
    "data.num_clients": 10,
    "data.partition.scheme": "dirichlet",
    "data.partition.alpha": 0.5,
    "data.partition.min_size": 10,
    "train.local_epochs": 1,
    "train.batch_size": 20,
    "train.lr": 0.05,
    "checkpoint_every": 0,
}

CHILD = textwrap.dedent("""
    import json, os, sys, time, warnings
    t_launch, engine, out, settings = float(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0"); os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
    import torch
    torch.set_num_threads(1)
    marks = {}
    import fedselect.fl.round as runner  # both engines play the round there
    from fedselect.config.overrides import apply_overrides
    from fedselect.config.schema import ExperimentConfig
    from fedselect.experiment.resolve import parse_experiment
    plain = {k: (json.loads(v) if isinstance(v, str) and v[:1] == "[" else v) for k, v in settings.items()
             if k.split(".")[0] in ExperimentConfig.model_fields}
    if engine.startswith("flower-engine"):
        plain["engine"] = "flower"
    cfg = parse_experiment(apply_overrides({}, plain))
    first = runner.play_round
    def play_round(*a, **k):
        marks.setdefault("round1", time.time())
        return first(*a, **k)
    runner.play_round = play_round
    if engine in ("simulator", "flower-engine"):  # `fedselect run` / `fedselect run --engine flower`
        from fedselect.experiment.run import run_experiment
        run_experiment(cfg, out)
    elif engine == "flower-engine-at-once":  # the engine plug-in with every message of a round pushed at once
        from fedselect.flower.grid_run import run_many
        from fedselect.flower.nodes import FlowerOptions
        run_many([(cfg, out)], FlowerOptions())
    else:  # the ServerApp and ClientApp in Flower's run_simulation, as `flwr run` runs them
        from flwr.simulation import run_simulation
        from fedselect.flower.client_app import make_client_app
        from fedselect.flower.server_app import make_server_app
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_simulation(server_app=make_server_app(settings, run_dir=out), client_app=make_client_app(settings),
                           num_supernodes=int(settings.get("data.num_clients", 10)),
                           backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2}})
    marks["end"] = time.time()
    print("MARKS " + json.dumps(marks))
""")


def _tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [pid], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _memory(pids: list[int]) -> tuple[float, float]:
    """(sum of RSS, sum of PSS) in MB over ``pids``."""
    rss = pss = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            continue
    return rss / 1024, pss / 1024


#: seconds between two samples of the process tree's memory before round 1, and during the rounds
SAMPLE_STARTUP_S, SAMPLE_ROUNDS_S = 0.05, 1.0


def _rounds_started(timing: Path) -> bool:
    """Whether the run has written its round-0 row (start-up over, round 1 next)."""
    try:
        return timing.stat().st_size > 0 and len(timing.read_text().splitlines()) >= 2
    except OSError:
        return False


def measure(engine: str, settings: dict, out: Path) -> dict:
    """Run one engine in a fresh process and measure it (module docstring)."""
    env = {
        **os.environ,
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "OMP_NUM_THREADS": "1",
        "FLWR_HOME": tempfile.mkdtemp(prefix="bench-flwr-home-"),
    }
    t_launch = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(t_launch), engine, str(out), json.dumps(settings)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    peak_rss = peak_pss = 0.0
    procs = 0
    cpu0 = time.process_time()
    timing = out / "timing.csv"
    while proc.poll() is None:
        pids = _tree(proc.pid)
        rss, pss = _memory(pids)
        if rss > peak_rss:
            peak_rss, procs = rss, len(pids)
        peak_pss = max(peak_pss, pss)
        # reading smaps_rollup walks every mapping of a process (tens of ms of CPU for Ray's tree
        # on 2 cores): fast during start-up, where the peaks are short, then once a second, so
        # that the sampling does not slow the rounds it measures
        time.sleep(SAMPLE_ROUNDS_S if _rounds_started(timing) else SAMPLE_STARTUP_S)
    sampler_cpu = time.process_time() - cpu0
    output = proc.stdout.read()
    total = time.time() - t_launch
    marks = next((json.loads(line[6:]) for line in output.splitlines() if line.startswith("MARKS ")), None)
    if proc.returncode != 0 or marks is None:
        raise RuntimeError(f"{engine} run failed (exit {proc.returncode}):\n{output[-3000:]}")
    rounds = [float(r.split(",")[1]) for r in (out / "timing.csv").read_text().splitlines()[1:] if not r.startswith("0,")]
    return {
        "startup_s": marks["round1"] - t_launch,
        "round_s": rounds,
        "mean_round_s": sum(rounds) / len(rounds),
        "total_s": total,
        "peak_rss_mb": peak_rss,
        "peak_pss_mb": peak_pss,
        "processes_at_peak": procs,
        "sampler_cpu_s": sampler_cpu,
    }


#: the workload of bench_speed.py (full MNIST, N = 100, U = 10, E = 5, B = 50): ``--full``
FULL = {
    **SETTINGS,
    "data.dataset": "mnist",
    "data.num_clients": 100,
    "clients_per_round": 10,
    "train.local_epochs": 5,
    "train.batch_size": 50,
    "train.lr": 0.01,
    "train.momentum": 0.9,
    "data.holdout_fraction": 0.0,
    "model.name": "mnist_cnn",
}


#: what ``--full`` compares: the simulator, ``fedselect run --engine flower`` (the engine plug-in,
#: :class:`fedselect.flower.engine.FlowerEngine`) and the ServerApp and ClientApp in Flower's
#: ``run_simulation`` (as ``flwr run`` runs them)
FULL_ENGINES = {
    "simulator": "simulator",
    "flower_engine": "flower-engine",
    "flower_engine_at_once": "flower-engine-at-once",
    "flower_app": "flower",
}


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def main_full(repeat: int = 1, engines: list[str] | None = None) -> dict:
    """The speed benchmark's workload (full MNIST, 100 SuperNodes, 10 per round, 5 rounds) in our
    simulator (worker pool, all cores) and in Flower's simulation engine (one Ray actor per core),
    through the engine plug-in and through the Flower apps (``engines``: names of
    :data:`FULL_ENGINES`, all by default; the simulator always runs); ``repeat`` rounds of them,
    one after another (so that they share the machine's load; every second repeat in the reverse
    order, so that a drift of the machine's speed falls on both sides), and the ratios to the
    simulator: ``round_ratio`` (of the medians of the mean seconds per round), ``paired_round_ratio``
    (the median over the repeats of each repeat's own ratio) and ``pss_ratio`` (peak PSS of the
    tree).

    Raises:
        ValueError: an unknown name in ``engines``."""
    names = list(FULL_ENGINES) if not engines else ["simulator", *[e for e in engines if e != "simulator"]]
    unknown = sorted(set(names) - set(FULL_ENGINES))
    if unknown:
        raise ValueError(f"unknown engine(s) {unknown}; choose from {sorted(FULL_ENGINES)}")
    res: dict = {"load_avg_1min": os.getloadavg()[0], "cpus": os.cpu_count(), "workload": dict(FULL), "repeat": repeat}
    runs: dict[str, list[dict]] = {name: [] for name in names}
    identical = True
    with tempfile.TemporaryDirectory(prefix="bench-flower-full-") as tmp:
        for i in range(repeat):
            for name in names if i % 2 == 0 else names[::-1]:
                engine = FULL_ENGINES[name]
                load = os.getloadavg()[0]
                settings = {**FULL, "torch-threads": 1}
                if engine == "flower":  # the run-config key a user sets: the engine plug-in's default
                    settings["in-flight"] = (os.cpu_count() or 1) + 1
                m = measure(engine, settings, Path(tmp) / f"{name}-{i}")
                m["load_avg_1min_before"] = load
                runs[name].append(m)
                same = (Path(tmp) / f"{name}-{i}" / "metrics.csv").read_text() == (
                    Path(tmp) / "simulator-0" / "metrics.csv"
                ).read_text()
                identical = identical and same
    res["runs"] = runs
    res["identical_metrics"] = identical
    summary = {}
    for name, ms in runs.items():
        summary[name] = {
            "mean_round_s": _median([m["mean_round_s"] for m in ms]),
            "startup_s": _median([m["startup_s"] for m in ms]),
            "peak_pss_mb": _median([m["peak_pss_mb"] for m in ms]),
            "peak_rss_mb": _median([m["peak_rss_mb"] for m in ms]),
            "sampler_cpu_s": _median([m["sampler_cpu_s"] for m in ms]),
        }
    sim = summary["simulator"]
    for name, row in summary.items():
        if name != "simulator":
            row["round_ratio"] = row["mean_round_s"] / sim["mean_round_s"]
            row["paired_round_ratio"] = _median(
                [m["mean_round_s"] / s["mean_round_s"] for m, s in zip(runs[name], runs["simulator"], strict=True)]
            )
            row["pss_ratio"] = row["peak_pss_mb"] / sim["peak_pss_mb"]
            row["rss_ratio"] = row["peak_rss_mb"] / sim["peak_rss_mb"]
    res["summary"] = summary
    res["load_avg_1min_after"] = os.getloadavg()[0]
    return res


def main(quick: bool = False) -> dict:
    res: dict = {"load_avg_1min": os.getloadavg()[0], "cpus": os.cpu_count(), "workload": dict(SETTINGS)}
    models = {"mlp": {"model.name": "mlp", "model.options.hidden": "[64]"}}
    if not quick:
        models["mnist_cnn"] = {"model.name": "mnist_cnn"}
    with tempfile.TemporaryDirectory(prefix="bench-flower-") as tmp:
        for name, model in models.items():
            settings = {**SETTINGS, **model, "torch-threads": 1}
            row = {}
            for engine in ("simulator", "flower"):
                row[engine] = measure(engine, settings, Path(tmp) / f"{name}-{engine}")
            # the strategy polls the simulation's grid for replies every 10 ms by default (a deployment's every 0.1 s)
            row["flower_poll_0.1s"] = measure("flower", {**settings, "poll-interval": 0.1}, Path(tmp) / f"{name}-flower-slowpoll")
            row["identical_metrics"] = (Path(tmp) / f"{name}-simulator" / "metrics.csv").read_text() == (
                Path(tmp) / f"{name}-flower" / "metrics.csv"
            ).read_text()
            res[name] = row
    res["load_avg_1min_after"] = os.getloadavg()[0]
    return res


if __name__ == "__main__":
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 1
    engines = sys.argv[sys.argv.index("--engines") + 1].split(",") if "--engines" in sys.argv else None
    print(json.dumps(main_full(repeat, engines) if "--full" in sys.argv else main(quick="--quick" in sys.argv), indent=2))
