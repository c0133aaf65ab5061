"""The `fastest` oracle selector: the U clients of lowest latency (FR-eq 3), by hand."""

from __future__ import annotations

import pytest

from fedselect.experiment.resolve import parse_experiment
from fedselect.experiment.run import make_simulation
from fedselect.selectors.base import RoundView


def _cfg(**over):
    doc = {
        "name": "fastest",
        "seed": 4,
        "method": "fastest",
        "rounds": 2,
        "clients_per_round": 2,
        "data": {"dataset": "mnist-embedded", "num_clients": 4, "partition": {"scheme": "iid"}},
        "model": {"name": "mlp", "options": {"hidden": [8]}},
        "train": {"local_epochs": 1, "batch_size": 50, "lr": 0.05},
        "system": {
            "devices": [
                {"name": "fast", "mean_mhz": 1000, "std_mhz": 0, "cores": 4},
                {"name": "slow", "mean_mhz": 100, "std_mhz": 0, "cores": 1},
            ],
            "networks": [{"name": "net", "mean_mbps": 10, "std_mbps": 0}],
        },
    }
    doc.update(over)
    return parse_experiment(doc)


def test_expected_latency_by_hand_and_the_two_fast_clients_win():
    sim = make_simulation(_cfg())
    sizes = [c.num_samples for c in sim.fed.clients]
    assert sizes == [720] * 4  # 4,000 images less 400 for the server's validation set; iid: 900 each, 20% held out
    # |D| = 720 x 784 x 32 bits; g = 20; E = 1. MLP 784-8-10: 6370 float32 = 25480 B = 203840 bits at 10 Mb/s
    fast = 720 * 784 * 32 * 20 / (4 * 1000e6) + 203840 / 10e6  # 0.0903168 + 0.020384
    slow = 720 * 784 * 32 * 20 / (1 * 100e6) + 203840 / 10e6  # 3.612672 + 0.020384
    names = [d.name for d in sim.fed.fleet.devices]
    assert sorted(names) == ["fast", "fast", "slow", "slow"]
    exp = sim.ctx.expected_latency_s()
    assert exp.tolist() == pytest.approx([fast if n == "fast" else slow for n in names])
    assert fast == pytest.approx(0.1107008) and slow == pytest.approx(3.633056)
    sel = sim.selector.select(RoundView(1, sim.fed.fleet.draw(1)))
    assert list(sel.clients) == sorted(k for k, n in enumerate(names) if n == "fast")


def test_actual_latency_follows_the_rounds_draws():
    cfg = _cfg(
        selector={"name": "fastest", "options": {"latency": "actual"}},
        method=None,
        system={
            "devices": [{"name": "a", "mean_mhz": 500, "std_mhz": 300, "cores": 1}],
            "networks": [{"name": "n", "mean_mbps": 10, "std_mbps": 5}],
        },
    )
    sim = make_simulation(cfg)
    picks = set()
    for t in range(1, 6):
        d = sim.fed.fleet.draw(t)
        lat = [sim.ctx.client_cost(k, 1, d).latency_s for k in range(4)]
        want = sorted(sorted(range(4), key=lambda k: (lat[k], k))[:2])
        sel = sim.selector.select(RoundView(t, d))
        assert list(sel.clients) == want
        picks.add(tuple(want))
    assert len(picks) > 1  # one profile for all: only the draws tell clients apart


def test_fastest_runs_and_beats_random_on_latency(tmp_path):
    from fedselect.experiment.run import run_experiment

    fast = run_experiment(_cfg(rounds=3), tmp_path / "fast")
    rand = run_experiment(_cfg(rounds=3, method="fedavg"), tmp_path / "rand")
    assert fast["e2e_latency_s"] == pytest.approx(3 * 0.1107008)
    assert rand["e2e_latency_s"] >= fast["e2e_latency_s"]
