"""Start-up (issue 35): imports only where used, macro-F1 without scikit-learn, the rule that
decides whether a run's worker pool repays its start-up, and benchmarks/startup.py's output.
Timings are measured in the benchmark, never asserted here."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import fedselect
from fedselect.fl.evaluate import macro_f1
from fedselect.fl.local import pool_rule

ROOT = Path(__file__).resolve().parents[2]
SRC = str(Path(fedselect.__file__).resolve().parents[1])
#: libraries a command must not import unless it uses them
HEAVY = ("torch", "pandas", "matplotlib", "sklearn", "scipy", "networkx", "flwr", "ray", "pyarrow")


def _env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "FEDSELECT_WORKERS"}
    env["PYTHONPATH"] = os.pathsep.join([SRC, env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


IMPORTS_AT_EXIT = """
import atexit, sys
HEAVY = {heavy!r}
atexit.register(lambda: print("IMPORTED", sorted(m for m in HEAVY if m in sys.modules), file=sys.stderr))
from fedselect.cli import main
sys.argv = ["fedselect", *sys.argv[1:]]
main()
"""


def _imported(args: list[str], cwd: Path, **env) -> list[str]:
    r = subprocess.run(
        [sys.executable, "-c", IMPORTS_AT_EXIT.format(heavy=HEAVY), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_env(**env),
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    line = [x for x in r.stderr.splitlines() if x.startswith("IMPORTED")][-1]
    return eval(line.split(" ", 1)[1])  # a list literal we printed


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["run", "--help"], ["compare", "--help"], ["sweep", "--help"]])
def test_help_imports_no_heavy_library(args, tmp_path):
    assert _imported(args, tmp_path) == []


@pytest.mark.slow
def test_list_imports_no_data_frame_plot_or_learning_library(tmp_path):
    """``fedselect list`` reads the components' options (classes that import torch), nothing else."""
    assert set(_imported(["list"], tmp_path)) <= {"torch"}


@pytest.mark.slow
def test_default_run_imports_only_torch(tmp_path):
    """``fedselect run`` of the default FedAvg experiment, data from the cache: torch, and no data
    frame, plotting, scikit-learn, scipy or graph library."""
    env = {"FEDSELECT_CACHE_DIR": str(tmp_path / "cache")}
    _imported(["run", "-q", "--rounds", "1", "-o", str(tmp_path / "fill")], tmp_path, **env)  # fills the cache
    assert _imported(["run", "-q", "--rounds", "1", "-o", str(tmp_path / "r")], tmp_path, **env) == ["torch"]
    assert (tmp_path / "r" / "metrics.csv").read_bytes() == (tmp_path / "fill" / "metrics.csv").read_bytes()


# ------------------------------------------------------------------ macro-F1 without scikit-learn
def test_macro_f1_is_sklearns_bit_for_bit():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(0)
    cases = [
        (np.array([0, 1, 2, 2]), np.array([0, 2, 1, 2])),
        (np.array([3, 3, 3]), np.array([3, 3, 3])),  # one label, all right
        (np.array([1, 1]), np.array([0, 0])),  # disjoint labels
        (np.array([0, 1, 1, 0, 1]), np.array([1, 1, 1, 1, 1])),  # binary
    ]
    for i in range(1000):
        n, k = int(rng.integers(1, 400)), int(rng.integers(1, 12))
        y = rng.integers(0, k, n)
        p = y.copy()
        wrong = rng.random(n) < rng.random()
        p[wrong] = rng.integers(0, k + int(i % 2), int(wrong.sum()))  # sometimes a label y never holds
        cases.append((y, p))
    for y, p in cases:
        assert macro_f1(y, p) == float(f1_score(y, p, average="macro", zero_division=0)), (y, p)
    # hand-computed: F1 = 2TP / (2TP + FP + FN) of labels 0, 1, 2 = 2/2, 0/2, 2/4
    assert macro_f1(np.array([0, 1, 2, 2]), np.array([0, 2, 1, 2])) == (1.0 + 0.0 + 0.5) / 3
    assert math.isnan(macro_f1(np.array([], dtype=np.int64), np.array([], dtype=np.int64)))
    with pytest.raises(ValueError, match="3 true labels but 2 predicted"):
        macro_f1(np.array([0, 1, 2]), np.array([0, 1]))


# ------------------------------------------------------------------ the pool rule
def test_work_estimate_hand_computed():
    """The default run: 30 rounds x 5 clients x 2 epochs x ceil(160 / 20) = 8 steps of
    (4 ms + STEP_OVERHEAD_S), and 31 evaluations of 1,000 samples at 60 us."""
    w = pool_rule.RunWork(
        rounds=30, side_by_side=5, local_epochs=2, batch_size=20, client_samples=160.0, evaluations=31, eval_samples=1000
    )
    c = pool_rule.Costs(step_s=4e-3, eval_sample_s=60e-6)
    expected = 30 * 5 * 2 * 8 * (4e-3 + pool_rule.STEP_OVERHEAD_S) + 31 * 1000 * 60e-6
    assert pool_rule.estimate_work_s(w, c) == pytest.approx(expected, rel=1e-12)
    w161 = pool_rule.RunWork(1, 1, 1, 20, 161.0, 0, 0)  # 161 samples: 9 mini-batches, the last of 1
    assert pool_rule.estimate_work_s(w161, c) == pytest.approx(9 * (4e-3 + pool_rule.STEP_OVERHEAD_S))
    big = pool_rule.Costs(step_s=4e-3, eval_sample_s=60e-6, parameters=431_080)  # the optimiser updates every parameter
    assert pool_rule.estimate_work_s(w161, big) == pytest.approx(
        9 * (4e-3 + pool_rule.STEP_OVERHEAD_S + 431_080 * pool_rule.PARAM_STEP_S)
    )


def test_pool_pays_when_the_saving_exceeds_the_start():
    e = pool_rule.EFFICIENCY
    saving_10s = 10 * (1 - 1 / (2 * e))  # 4.1 s with 2 workers
    assert pool_rule.pool_pays(10.0, workers=2, side_by_side=5, start=saving_10s - 0.01)
    assert not pool_rule.pool_pays(10.0, workers=2, side_by_side=5, start=saving_10s + 0.01)
    assert not pool_rule.pool_pays(1e6, workers=2, side_by_side=1, start=0.0)  # one client per round
    assert not pool_rule.pool_pays(1e6, workers=1, side_by_side=5, start=0.0)  # one worker
    assert pool_rule.pool_pays(10.0, workers=8, side_by_side=3, start=10 * (1 - 1 / (3 * e)) - 0.01)  # 3 at once


def test_start_cost_of_a_pool_over_training_here():
    f, w, d = pool_rule.FORK_SERVER_S, pool_rule.WARM_START_S, pool_rule.DYNAMO_S
    assert pool_rule.start_s(warm=False, dynamo_imported=False) == pytest.approx(max(f - d, 0))
    assert pool_rule.start_s(warm=False, dynamo_imported=True) == pytest.approx(f)
    assert pool_rule.start_s(warm=True, dynamo_imported=False) == pytest.approx(max(w - d, 0))
    assert pool_rule.start_s(warm=True, dynamo_imported=True) == pytest.approx(w)


def test_measure_costs_leaves_no_trace():
    from fedselect.common.seeding import torch_rng
    from fedselect.world.models import build_model

    model = build_model("mlp", (1, 28, 28), 10, generator=torch_rng(0, "m"), hidden=[8])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(123)
    rng_state = torch.get_rng_state()
    x = np.random.default_rng(0).random((20, 1, 28, 28), dtype=np.float32)
    c = pool_rule.measure_costs(model, x, np.arange(20) % 10)
    assert 0 < c.step_s < 10 and 0 < c.eval_sample_s < 1
    assert torch.equal(torch.get_rng_state(), rng_state)
    assert model.training and all(p.grad is None for p in model.parameters())
    assert c.parameters == sum(p.numel() for p in model.parameters()) == 784 * 8 + 8 + 8 * 10 + 10
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def _federation(**over):
    from fedselect.experiment.resolve import resolve
    from fedselect.world.federation import build_federation
    from support.tiny import tiny_experiment

    r = resolve(tiny_experiment("fedavg", **over))
    return r, build_federation(r.config)


def test_run_work_of_a_config():
    r, fed = _federation(rounds=5, eval_every=2, clients_per_round=3, overselect=1.5)
    cfg = r.config
    w = pool_rule.run_work(fed, cfg)
    assert w.rounds == 5 and w.side_by_side == 5  # ceil(1.5 x 3)
    assert w.evaluations == 1 + 2 + 1  # round 0, rounds 2 and 4, the last round
    assert w.client_samples == pytest.approx(np.mean([len(c.train_indices) for c in fed.clients]))
    assert w.eval_samples == len(fed.test_set) + len(fed.validation_indices)
    assert (w.local_epochs, w.batch_size) == (cfg.train.local_epochs, cfg.train.batch_size)


def test_auto_workers_decides_by_the_work(caplog):
    """A 1-round MLP run trains here; the same with 100,000 rounds starts the pool (on 2 or more
    cores); one client per round never does."""
    import logging

    cores = 2
    r, fed = _federation(rounds=1)
    small_cfg = r.config
    with caplog.at_level(logging.INFO, logger="fedselect"):
        assert pool_rule.auto_workers(fed, small_cfg, cores) == 0
    assert "worker pool: none, training in this process (estimated" in caplog.text
    assert pool_rule.auto_workers(fed, small_cfg.model_copy(update={"rounds": 100_000}), cores) == cores
    assert pool_rule.auto_workers(fed, small_cfg.model_copy(update={"rounds": 100_000}), 1) == 0
    r1, fed1 = _federation(rounds=100_000, clients_per_round=1)
    assert pool_rule.auto_workers(fed1, r1.config, cores) == 0


def test_an_explicit_worker_count_is_honoured(monkeypatch):
    """--workers / train.workers / FEDSELECT_WORKERS bypass the rule."""
    from fedselect.experiment.simulation import make_trainer

    r, fed = _federation(rounds=1)
    called = []
    monkeypatch.setattr("fedselect.experiment.simulation.auto_workers", lambda *a: called.append(a) or 0)
    monkeypatch.setenv("FEDSELECT_WORKERS", "0")
    with make_trainer(fed, r.train_cfg, None, "cpu", config=r.config) as tr:
        assert tr.workers == 0
    monkeypatch.delenv("FEDSELECT_WORKERS")
    with make_trainer(fed, r.train_cfg, 0, "cpu", config=r.config) as tr:
        assert tr.workers == 0
    assert called == []
    with make_trainer(fed, r.train_cfg, None, "cpu", config=r.config) as tr:
        assert tr.workers == 0 and len(called) == 1


# ------------------------------------------------------------------ the benchmark's output
@pytest.mark.slow
def test_startup_benchmark_quick_output(tmp_path):
    out = tmp_path / "startup.json"
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "startup.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        env=_env(FEDSELECT_CACHE_DIR=str(tmp_path / "cache")),
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["quick"] is True and res["cores"] >= 1
    for key in ("interpreter_wall_s", "help_wall_s", "import_cli_wall_s", "loadavg_start", "loadavg_end"):
        assert isinstance(res[key], float) and res[key] >= 0, key
    assert set(res["scenarios"]) == {"run", "compare"}
    for name, runs in (("run", 1), ("compare", 3)):
        s = res["scenarios"][name]
        assert s["command"].startswith(f"fedselect {name} -q --rounds 1")
        (rep,) = s["repeats"]
        assert "error" not in rep, rep
        for phase in ("interpreter_s", "import_cli_s", "import_run_s", "data_load_s", "federation_s", "pool_start_s"):
            assert rep[phase] >= 0, phase
            if phase != "interpreter_s":
                assert rep[phase[:-2] + "_cpu_s"] >= 0, phase
        assert rep["runs"] == runs and len(rep["pool_workers"]) == runs
        assert rep["first_round_s"] > 0 and rep["rounds_s"] >= rep["first_round_s"] + rep["initial_eval_s"]
        assert rep["total_wall_s"] >= rep["import_run_s"] and rep["tree_cpu_s"] >= rep["main_cpu_s"] * 0.9
        assert set(s["median"]) >= set(("total_wall_s", "tree_cpu_s", "first_round_s", "pool_start_cpu_s"))
    assert "| phase |" in r.stdout and "first round" in r.stdout
