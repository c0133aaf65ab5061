"""Every script in benchmarks/ still runs against the current code base: its ``fedselect``
imports resolve (also those inside functions and in the child scripts it writes out), it
imports as a module without running, its ``--help`` works where it has a command line, and
``benchmarks/bench_flashrl.py --mode sim`` gives a sane table on a tiny federation. A benchmark
left behind by a refactoring fails here instead of on the day someone runs it."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
SCRIPTS = sorted(BENCH.glob("*.py"))
#: ``from fedselect.x import a, b`` / ``from fedselect.x import (a, b)`` / ``import fedselect.x``, anywhere in the
#: text (functions and the code of child processes kept in strings included)
FROM_IMPORT = re.compile(r"^\s*from\s+(fedselect(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n#]+)", re.M)
PLAIN_IMPORT = re.compile(r"^\s*import\s+(fedselect(?:\.\w+)*)", re.M)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    return env


def _imports(text: str) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = [(m.group(1), None) for m in PLAIN_IMPORT.finditer(text)]
    for m in FROM_IMPORT.finditer(text):
        for item in m.group(2).strip("()").replace("\\", " ").split(","):
            name = item.split(" as ")[0].strip()
            if name and name != "*":
                out.append((m.group(1), name))
    return out


def test_there_are_benchmarks_and_the_scanner_sees_imports():
    assert len(SCRIPTS) >= 10 and BENCH / "bench_flashrl.py" in SCRIPTS
    got = _imports("x = 1\n    from fedselect.a.b import (c,\n d as e)\nimport fedselect.f  # note\nfrom fedselect import g, h\n")
    assert got == [("fedselect.f", None), ("fedselect.a.b", "c"), ("fedselect.a.b", "d"), ("fedselect", "g"), ("fedselect", "h")]


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_fedselect_imports_of_every_benchmark_resolve(path):
    """Each ``fedselect`` module a benchmark names exists and has the names it takes from it."""
    missing = []
    for module, name in _imports(path.read_text()):
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            missing.append(f"{module}: {e}")
            continue
        if name is not None and not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{module}.{name}")
    assert not missing, f"{path.name} imports what no longer exists: {missing}"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_every_benchmark_imports_without_running(path, monkeypatch):
    """Imported as ``benchmarks/run_all.py`` imports it (not as ``__main__``): nothing runs, and
    the ones run_all.py discovers expose ``main(quick)``."""
    monkeypatch.syspath_prepend(str(BENCH))  # scripts that import a sibling (bench_flashrl: the exploration bound)
    spec = importlib.util.spec_from_file_location(f"_bench_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.path.insert(0, str(BENCH))
    try:
        run_all = importlib.import_module("run_all")
    finally:
        sys.path.remove(str(BENCH))
    if path in run_all.discover():
        assert callable(getattr(mod, "main", None)), f"{path.name} is run by run_all.py but has no main(quick)"


@pytest.mark.parametrize("path", [p for p in SCRIPTS if "argparse" in p.read_text()], ids=lambda p: p.name)
def test_help_of_every_benchmark_with_a_command_line(path):
    proc = subprocess.run(
        [sys.executable, str(path), "--help"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage: " + path.name)


def test_run_all_lists_bench_flashrl():
    sys.path.insert(0, str(BENCH))
    try:
        run_all = importlib.import_module("run_all")
    finally:
        sys.path.remove(str(BENCH))
    assert BENCH / "bench_flashrl.py" in run_all.discover()


def test_bench_flashrl_sim_mode_tiny_run(tmp_path):
    """``--mode sim`` end to end on a tiny federation (embedded MNIST, 10 clients, 3 per round,
    an MLP): one row per latency-aware method (FAVOR skipped), positive latencies, the warm-up
    charged only to the DDQN methods, a bound only for them, and no accuracy (nothing trains)."""
    out = tmp_path / "bench"
    cmd = [
        sys.executable,
        str(BENCH / "bench_flashrl.py"),
        "--mode",
        "sim",
        "--rounds",
        "6",
        "--seeds",
        "0",
        "--out",
        str(out),
        "--set",
        "data.dataset=mnist-embedded",
        "--set",
        "data.num_clients=10",
        "--set",
        "clients_per_round=3",
        "--set",
        "model={name: mlp, options: {hidden: [16]}}",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "skipping favor" in proc.stdout
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ") and not line.startswith("| method")]
    assert [line.split("|")[1].strip() for line in table] == ["fedavg", "flashrl", "flashrl-tuned"]
    res = json.loads((out / "sim-results.json").read_text())
    assert res["mode"] == "sim" and res["rounds"] == 6 and res["seeds"] == [0]
    assert set(res["results"]) == {"fedavg", "flashrl", "flashrl-tuned", "favor"} and res["results"]["favor"] == []
    for m in ("fedavg", "flashrl", "flashrl-tuned"):
        (rec,) = res["results"][m]
        assert rec["seed"] == 0 and rec["e2e_latency_s"] > 0 and rec["mean_round_latency_last10_s"] > 0
        assert rec["final_accuracy"] == 0.0 and rec["rounds_to_target"] is None  # nothing trains, every evaluation scores 0
        metrics = (out / "sim" / f"{m}-s0" / "metrics.csv").read_text().splitlines()
        assert len(metrics) == 1 + 1 + 6  # header, round 0 (the warm-up), rounds 1..6
        if m == "fedavg":
            assert rec["warmup_latency_s"] == 0.0 and rec["oracle_bound"] is None
        else:
            assert rec["warmup_latency_s"] > 0 and 0 < rec["oracle_bound"] < 1
    # one federation: both FLASH-RL runs charge the same warm-up (the straggler among the same 10 clients)
    assert res["results"]["flashrl"][0]["warmup_latency_s"] == res["results"]["flashrl-tuned"][0]["warmup_latency_s"]
