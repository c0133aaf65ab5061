"""A range that can be empty (issue 34 item 6): a fleet whose clients are all alike (one device
class, one network, no spread, equal data) is a legitimate fleet. Every normalisation over a
range gives its documented value there, and a whole run of every selector completes on it
(tables, paired intervals, plots and report.html included)."""

from __future__ import annotations

import copy
import csv
import math

import numpy as np
import pytest

from fedselect.experiment.resolve import parse_experiment
from fedselect.kernels.oort import MIN_RANGE, MIN_SHRINK, normalise_utilities
from fedselect.selectors import SELECTORS
from fedselect.selectors._ddqn import _stats
from fedselect.study.compare import parse_compare, run_comparison
from support.registry_cases import cases

#: one device class and one network without spread: every client draws the same frequency and
#: bandwidth every round, and with equal data (iid over 8 clients: 500 samples each) every client
#: has the same latency, so FLASH-RL's L_min = L_max (FR-eq 10)
ALIKE = {
    "devices": [{"name": "one", "mean_mhz": 1000.0, "std_mhz": 0.0, "cores": 1}],
    "networks": [{"name": "net", "mean_mbps": 10.0, "std_mbps": 0.0}],
}


def _base() -> dict:
    return {
        "name": "alike",
        "rounds": 3,
        "clients_per_round": 3,
        "checkpoint_every": 0,
        "data": {"dataset": "mnist-embedded", "num_clients": 8, "partition": {"scheme": "iid"}},
        "model": {"name": "mlp", "options": {"hidden": [8]}},
        "train": {"local_epochs": 1, "batch_size": 50, "lr": 0.05, "workers": 0},
        "metrics": {"target": 0.5},
        "system": copy.deepcopy(ALIKE),
    }


def test_the_fleet_is_really_alike():
    from fedselect.experiment.run import make_simulation
    from fedselect.world.federation import build_federation

    cfg = parse_experiment({**_base(), "method": "fedavg"})
    fed = build_federation(cfg)
    ctx = make_simulation(cfg, fed).ctx
    lo, hi = ctx.latency_bounds()
    assert lo == hi  # FR-eq 10's min-max range is empty
    assert np.ptp(ctx.expected_latency_s()) == 0.0


def test_oort_utilities_alike_follow_fedscales_get_norm():
    """FedScale's get_norm (thirdparty/oort/oort.py): range max(max - 0.999 min, 1e-4). Equal
    utilities u: (u - 0.999 u) / max(0.001 u, 1e-4), i.e. 1 for u >= 0.1, 10 u below."""
    assert normalise_utilities(np.full(4, 5.0), 1.0).tolist() == [1.0] * 4
    assert normalise_utilities(np.full(3, 0.01), 1.0) == pytest.approx([0.01 * (1 - MIN_SHRINK) / MIN_RANGE] * 3)
    assert normalise_utilities(np.zeros(3), 0.95).tolist() == [0.0] * 3  # no positive utility: all 0


def test_ddqn_features_of_a_fleet_alike_standardise_to_zero():
    """FLASH-RL's state standardises n_k, c_k, f, b by the fleet's mean and std; a std of 0 (every
    client alike) is taken as 1, so the feature is 0 for everyone instead of 0 / 0."""
    assert _stats([4.0, 4.0, 4.0]) == (4.0, 1.0)
    assert _stats([1.0, 3.0]) == (2.0, 1.0)  # population std 1
    mean, sd = _stats([1000.0] * 5)
    assert (np.array([1000.0] * 5) - mean) / sd == pytest.approx(np.zeros(5))


def _one_case_per_selector() -> dict[str, dict]:
    """Every registered selector once (with FedAvg, or the algorithm its preset needs), from the
    registry-wide cases: a new selector joins this test without editing it."""
    out: dict[str, dict] = {}
    for doc in cases(_base()).values():
        out.setdefault(doc["selector"]["name"], doc)
    return out


@pytest.mark.slow
def test_every_selector_runs_on_a_fleet_alike(tmp_path):
    """Before: FLASH-RL (and FLASH-RL in async mode) stopped after round 1 with "normalise_latency:
    need finite L_min < L_max" on this fleet; every other selector ran."""
    picked = _one_case_per_selector()
    assert set(picked) == set(SELECTORS.builtin_names())
    methods = [{"label": name, "selector": d["selector"], "algorithm": d["algorithm"]} for name, d in sorted(picked.items())]
    methods.append(
        {
            "label": "flashrl async",
            "selector": copy.deepcopy(picked["flashrl"]["selector"]),
            "algorithm": {"name": "fedavg"},
            "overrides": {"mode": "async", "async.concurrency": 4, "async.buffer_size": 2},
        }
    )
    cc = parse_compare(
        {
            "name": "alike",
            "seeds": [0, 1],
            "baseline": "random",
            "base": {k: v for k, v in _base().items() if k != "name"},
            "methods": methods,
        }
    )
    out = run_comparison(cc, tmp_path / "c")
    for m in methods:
        for seed in (0, 1):
            run = out / next(r["dir"] for r in _runs(out) if r["label"] == m["label"] and r["seed"] == seed)
            rows = list(csv.DictReader(open(run / "metrics.csv", newline="")))
            assert len(rows) == 4 and (run / "summary.json").exists(), m["label"]
            assert all(math.isfinite(float(r["accuracy"])) for r in rows), m["label"]
    table = (out / "table.md").read_text()
    assert all(f"| {m['label']} |" in table for m in methods)
    assert (out / "report.html").exists() and list((out / "plots").glob("*.png"))


def _runs(out):
    import json

    return json.loads((out / "compare.json").read_text())["runs"]
