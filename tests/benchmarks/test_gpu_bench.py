"""``python benchmarks/gpu.py --device cpu --quick`` keeps working without a GPU (issue 39): the
command runs, its table and JSON hold every variant of every workload with finite figures, and
the stacked path agrees with the sequential one (the tolerances of the CPU tests of
fl/local/batched.py). Timings are only recorded, never asserted."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ("bare", "stacked", "sequential", "pool")


@pytest.mark.slow
def test_gpu_benchmark_quick_on_cpu(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")  # one thread per process: a shared machine's cores stay usable
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--device", "cpu", "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    result = json.loads((tmp_path / "gpu.json").read_text())
    table = (tmp_path / "gpu.md").read_text()
    assert table.strip() in res.stdout  # printed too
    assert result["device"] == "cpu" and result["quick"] and result["rounds"] == 2
    assert set(result["workloads"]) == {"a", "b", "c"}
    for key, w in result["workloads"].items():
        summary = w["summary"]
        assert set(summary) == set(VARIANTS), key
        for name, s in summary.items():
            for field in ("round_median_s", "round_min_s", "round_max_s", "train_median_s", "eval_median_s", "speedup_vs_bare"):
                assert math.isfinite(s[field]) and s[field] > 0, (key, name, field, s[field])
            assert s["round_min_s"] <= s["round_median_s"] <= s["round_max_s"]
            assert s["rounds_measured"] == 2 and len(s["accuracy_per_round"]) == 3
            assert all(0.0 <= a <= 1.0 for a in s["accuracy_per_round"]) and s["final_accuracy"] == s["accuracy_per_round"][-1]
            assert s["peak_gpu_mb"] is None  # n/a on CPU
            assert f"| {key}: {w['title']} | {name} |" in table
        # fedselect's paths train the same clients to the same weights: the stacked path within the
        # CPU tests' tolerances of fl/local/batched.py (rtol 1e-4, atol 2e-5 after one round), the pool exactly
        seq, stacked = summary["sequential"], summary["stacked"]
        assert seq["max_weight_diff_vs_sequential"] == 0.0
        assert stacked["weights_close"] is True and stacked["max_weight_diff_vs_sequential"] < 2e-5
        assert summary["pool"]["max_weight_diff_vs_sequential"] == 0.0
        # accuracies to one test image (1,000 in the embedded set): float reordering of ~1e-8 can
        # only flip a prediction whose two best logits tie to that precision
        for a, b in zip(stacked["accuracy_per_round"], seq["accuracy_per_round"]):
            assert a == pytest.approx(b, rel=1e-4, abs=1e-3)
        assert summary["bare"]["weights_close"] is True  # the bare loop computes the same FedAvg
    assert result["workloads"]["b"]["clients_per_round"] == result["workloads"]["b"]["num_clients"]
