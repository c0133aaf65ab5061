"""No estimate from censored samples (issue 34 item 2): the Kaplan-Meier kernel, the adaptive
deadline on a fleet whose latency distribution is known in closed form, and rounds / latency to
target of runs that never reached it."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from fedselect.config.fleet import DeadlineConfig
from fedselect.fl.availability import Availability
from fedselect.fl.clock import FleetClock, latency_observation
from fedselect.fl.types import ClientOutcome, RunSettings
from fedselect.kernels.censored import kaplan_meier, km_quantile, km_quantile_completed


# ---------------------------------------------------------------- the kernel
def test_kaplan_meier_worked_example():
    # reports at 1, 2, 3 s; two cut at a 3.5 s deadline, one at 2.5 s (the module docstring)
    x = [1.0, 2.0, 3.0, 3.5, 3.5, 2.5]
    c = [False, False, False, True, True, True]
    times, surv = kaplan_meier(x, c)
    assert times.tolist() == [1.0, 2.0, 3.0]
    assert surv.tolist() == pytest.approx([5 / 6, 4 / 6, 4 / 9])
    assert km_quantile(x, c, 0.5) == 3.0
    assert km_quantile(x, c, 0.9) is None  # 1 - S never reaches 0.9 within the data
    assert km_quantile_completed(x, c, 0.9) == pytest.approx(3.5 * math.log(0.1) / math.log(4 / 9))
    assert km_quantile_completed(x, c, 0.5) == 3.0  # identified: no tail


def test_kaplan_meier_without_censoring_is_the_sample_quantile():
    x = np.random.default_rng(0).exponential(2.0, 37)
    for q in (0.1, 0.5, 0.9, 1.0):
        assert km_quantile(x, [False] * x.size, q) == float(np.quantile(x, q, method="inverted_cdf"))


def test_kaplan_meier_edge_cases():
    assert km_quantile_completed([2.0, 2.0], [True, True], 0.9) is None  # nothing but lower bounds
    assert km_quantile_completed([], [], 0.5) is None
    assert km_quantile_completed([1.0, 4.0], [False, True], 1.0) is None  # an exponential tail never ends
    assert km_quantile([3.0, 3.0, 3.0], [False] * 3, 0.9) == 3.0  # an empty range: every value the same
    assert km_quantile([1.0, 1.0], [False, True], 0.5) == 1.0  # censored at an event time: still at risk there
    with pytest.raises(ValueError, match="q must be in"):
        km_quantile([1.0], [False], 0.0)
    with pytest.raises(ValueError, match="finite and >= 0"):
        km_quantile([1.0, -1.0], [False, False], 0.5)


# ---------------------------------------------------------------- the adaptive deadline
def _outcome(k: int, latency: float, failed: str | None = None, steps: int | None = None) -> ClientOutcome:
    return ClientOutcome(k, 1, None, 10, 0.1, 1, latency, 0.0, 0.0, latency, 0, 0, failed, local_steps=steps)


def test_latency_observation_of_each_outcome():
    assert latency_observation(_outcome(0, 2.0)) == (2.0, False)
    assert latency_observation(_outcome(0, 2.0, "nan")) == (2.0, False)  # the work arrived (then was rejected)
    assert latency_observation(_outcome(0, 3.0, "timeout")) == (3.0, True)
    assert latency_observation(_outcome(0, 1.5, "cancelled")) == (1.5, True)
    assert latency_observation(_outcome(0, 2.9, None, steps=3)) == (2.9, True)  # partial work: cut at the deadline
    assert latency_observation(_outcome(0, 3.0, "dropout")) is None
    assert latency_observation(_outcome(0, 0.4, "error")) is None


def _settings(n: int, u: int) -> RunSettings:
    return RunSettings(seed=0, rounds=50, num_clients=n, clients_per_round=u, local_epochs=1)


def _deadline_rounds(percentile: float, window: int, u: int, draw, rounds: int = 50):
    """``rounds`` rounds of the adaptive deadline on latencies drawn i.i.d. by ``draw(rng, u)``:
    (share of the participants in time, deadline) per round; round 1 has no deadline."""
    clock = FleetClock(Availability(u), _settings(u, u), 10, adaptive=DeadlineConfig(percentile=percentile, window=window))
    rng = np.random.default_rng(7)
    share, deadlines = [], []
    for _ in range(rounds):
        d = clock.deadline_s(None)
        lat = draw(rng, u)
        ok = np.ones(u, dtype=bool) if d is None else lat <= d
        outs = [_outcome(k, float(x)) if good else _outcome(k, float(d), "timeout") for k, (x, good) in enumerate(zip(lat, ok))]
        clock.advance(float(max(o.latency_s for o in outs)), outs)
        share.append(float(ok.mean()))
        deadlines.append(d)
    return np.array(share), deadlines


@pytest.mark.parametrize("percentile", [50.0, 90.0])
def test_adaptive_deadline_keeps_its_share_on_a_stationary_fleet(percentile):
    """Latencies Exp(mean 2 s), i.i.d. per participant and round: F(x) = 1 - exp(-x / 2), so the
    p-th percentile is -2 ln(1 - p) s and a p-percentile deadline should let a share p in time.
    Learning only from the participants in time, the deadline sank round after round (the share
    in time fell to about p^t); now it holds p +- 10 points over 50 rounds without drifting."""
    p = percentile / 100.0
    share, deadlines = _deadline_rounds(percentile, 5, 10, lambda rng, u: rng.exponential(2.0, u))
    assert deadlines[0] is None and share[0] == 1.0
    assert abs(share[1:].mean() - p) <= 0.10
    assert abs(share[-25:].mean() - p) <= 0.10  # no drift: the last half too
    assert share[-25:].mean() >= share[1:26].mean() - 0.05
    truth = -2.0 * math.log(1.0 - p)
    assert np.median(deadlines[10:]) == pytest.approx(truth, rel=0.25)


# ---------------------------------------------------------------- rounds / latency to target
def test_to_target_worked_examples():
    from fedselect.report.stats import to_target

    # reached in rounds 20 and 40, the third never within its 50 rounds (fedselect.report.stats docstring)
    tt = to_target([20, 40, None], [50, 50, 50])
    assert (tt.value, tt.std, tt.reached, tt.runs, tt.censored) == (40.0, None, 2, 3, True)
    tt = to_target([20, None, None], [50, 50, 50])  # fewer than half: the median lies beyond 50
    assert (tt.value, tt.beyond, tt.reached) == (None, 50.0, 1)
    tt = to_target([20, 40], [50, 50])  # every run reached it: the mean and sd as before
    assert (tt.value, tt.std, tt.censored) == (30.0, pytest.approx(14.142135623730951), False)
    assert to_target([None, 3], [None, 9]).runs == 1  # a run without a target (no end) is left out


def _three_seeds(tmp_path):
    """Target 0.8. A reaches it in rounds 2, 2, 3 (20, 20, 30 s); B in round 1 (5 s), round 3
    (15 s) and never within its 3 rounds (15 s) in seed 2."""
    import json

    from support.fake_runs import fake_run

    c = tmp_path / "cmp"
    a = [(0.5, 0.8, 0.85), (0.6, 0.82, 0.9), (0.6, 0.7, 0.81)]
    b = [(0.8, 0.85, 0.9), (0.5, 0.6, 0.8), (0.5, 0.6, 0.7)]
    for lab, accs, step in (("A", a, 10), ("B", b, 5)):
        for s, acc in enumerate(accs):
            rows = [(0, 0.1, 0, 0)] + [(r, acc[r - 1], step * r, r) for r in (1, 2, 3)]
            fake_run(c / f"runs/{lab}-s{s}", rows, 3)
    runs = [{"label": lab, "method": lab.lower(), "seed": s, "dir": f"runs/{lab}-s{s}"} for lab in "AB" for s in range(3)]
    (c / "compare.json").write_text(
        json.dumps({"name": "cut", "baseline": "A", "methods": [{"label": "A"}, {"label": "B"}], "runs": runs})
    )
    return c


def test_a_method_that_missed_the_target_is_not_averaged_over_its_lucky_seeds(tmp_path):
    """B's rounds to target: 1, 3 and censored at 3. Before: the mean over the two that reached it,
    2.0 ± 1.41 (2/3 reached), -14.3% vs A's 2.33, and a paired mean over seeds 0 and 1. The
    Kaplan-Meier median (S(1) = 2/3, S(3) = 1/3) is 3.0; A's median 2.0, so +50%; latency to
    target 15 s against 20 s: -25%; the paired cell has no difference (seed 2 is censored)."""
    from fedselect.report.build import build_report

    rep = build_report(_three_seeds(tmp_path), plots=False)
    a, b = rep["table"]
    assert a["rounds_to_target"] == pytest.approx(7 / 3) and not a["rounds_to_target_to_target"].censored
    assert b["rounds_to_target"] == 3.0 and b["rounds_to_target_std"] is None
    assert b["rounds_to_target_vs"] == pytest.approx(50.0)
    assert b["latency_to_target_s"] == 15.0 and b["latency_to_target_s_vs"] == pytest.approx(-25.0)
    md = rep["markdown"]
    row = next(line for line in md.splitlines() if line.startswith("| B | "))
    assert "median 3.0 (2/3 reached)" in row and "median 15.0 (2/3 reached)" in row
    assert "rounds to target (medians: not every run reached it) +50.0% vs A" in md
    assert "Kaplan-Meier median" in md
    cells = rep["paired"][0]["cells"]
    assert cells["rounds_to_target"]["censored"] == [2] and cells["rounds_to_target"]["interval"].mean is None
    assert "- (censored: in 1 of 3 seeds one side never reached the target)" in md
    assert cells["final_accuracy"]["interval"].n == 3  # the other quantities are paired as before
    paired_csv = (tmp_path / "cmp" / "paired.csv").read_text()
    assert "censored: seeds 2 did not reach the target on one side" in paired_csv


def test_one_run_that_never_reached_the_target_reads_beyond_its_rounds(tmp_path):
    from fedselect.report.build import build_report
    from support.fake_runs import fake_run

    fake_run(tmp_path / "r", [(0, 0.1, 0, 0), (1, 0.5, 5, 1), (2, 0.6, 10, 2)], 2)
    (tmp_path / "r" / "config.yaml").write_text("rounds: 2\nmethod: fedavg\nmetrics: {target: 0.8, metric: accuracy}\n")
    md = build_report(tmp_path / "r", plots=False)["markdown"]
    assert "> 2.0 (0/1 reached)" in md and "> 10.0 (0/1 reached)" in md


def test_a_sweep_gives_censored_rounds_to_target_as_a_median(tmp_path):
    """A sweep table cell over 3 seeds reaching the target in rounds 4 and 8 and never within 10:
    the Kaplan-Meier median 8 (2/3 reached), not the mean 6 of the two that reached it; the
    paired cell is blank."""
    import json

    from fedselect.report.build import build_report
    from fedselect.study.sweep import parse_sweep, restrict, run_dir_for

    base = {"rounds": 10, "data": {"dataset": "mnist-embedded", "num_clients": 8}, "model": {"name": "mlp"}}
    sc = parse_sweep(
        {
            "name": "sw",
            "base": base,
            "seeds": [0, 1, 2],
            "baseline": "random",
            "methods": [{"label": "smart", "method": "fedavg"}, {"label": "random", "method": "fedavg", "grid_keys": []}],
            "grid": {"clients_per_round": [2]},
            "columns": ["final_accuracy", "rounds_to_target"],
        }
    )
    reached = {"smart": [4, 8, None], "random": [5, 6, 7]}
    for m in sc.methods:
        for s in sc.seeds:
            d = run_dir_for(tmp_path, m.label, restrict(sc.points()[0], m), s)
            d.mkdir(parents=True, exist_ok=True)
            summary = {"final_accuracy": 0.9, "rounds_to_target": reached[m.label][s], "rounds": 10, "target": 0.9}
            (d / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "sweep.json").write_text(json.dumps({**sc.model_dump(mode="json"), "runs": 6}))
    rep = build_report(tmp_path)
    smart = next(r for r in rep["rows"] if r["method"] == "smart")
    assert smart["rounds_to_target"] == 8.0 and smart["rounds_to_target_std"] is None
    assert "| 2 | smart | 3 | 0.9000 ± 0.0000 | median 8.0 (2/3 reached) |" in rep["markdown"]
    assert rep["paired"][0]["cells"]["rounds_to_target"]["censored"] == [2]


@pytest.mark.slow
def test_adaptive_deadline_on_a_real_run_holds_its_share(tmp_path):
    """A real 50-round run on a stationary fleet known in closed form: 8 clients of 500 samples
    (iid; 400 train, data.holdout_fraction 0.2, no validation set), all selected, one device class f ~ N(1000, 200)
    MHz drawn per client and round, one network of 10 Mb/s without spread, an MLP of 6,370
    parameters. Latency (FR-eq 3-5) L = A / f + tx with A = 400 x 784 x 32 bits x 20 cycles /
    1e6 = 200.704 MHz s and tx = 6,370 x 32 / 10e6 = 0.020384 s, so F(x) = 1 - Phi((A / (x - tx)
    - 1000) / 200) and the 80th percentile is tx + A / (1000 + 200 z_0.2) = 0.2617 s. Before:
    the share of participants in time fell from 0.68 (rounds 1-10) to 0.11 (rounds 31-40); now
    it stays at 0.8 +- 0.1 throughout."""
    from scipy.stats import norm

    from fedselect.experiment.resolve import parse_experiment
    from fedselect.experiment.run import run_experiment

    doc = {
        "name": "deadline",
        "seed": 0,
        "method": "fedavg",
        "rounds": 50,
        "clients_per_round": 8,
        "checkpoint_every": 0,
        "data": {"dataset": "mnist-embedded", "num_clients": 8, "partition": {"scheme": "iid"}, "validation": 0},
        "model": {"name": "mlp", "options": {"hidden": [8]}},
        "train": {"local_epochs": 1, "batch_size": 50, "lr": 0.05, "workers": 0},
        "system": {
            "devices": [{"name": "d", "mean_mhz": 1000.0, "std_mhz": 200.0, "cores": 1}],
            "networks": [{"name": "n", "mean_mbps": 10.0, "std_mbps": 0.0}],
            "adaptive_deadline": {"percentile": 80.0, "window": 5},
        },
    }
    run_experiment(parse_experiment(doc), tmp_path / "r")
    with open(tmp_path / "r" / "metrics.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))[1:]
    cut = [sum(1 for x in r["failed"].split(";") if x.endswith(":timeout")) for r in rows]
    share = 1.0 - np.array(cut) / 8.0
    assert cut[0] == 0  # round 1 has no deadline yet
    assert abs(share[1:].mean() - 0.8) <= 0.1
    for a in range(0, 50, 25):  # each half
        assert abs(share[a : a + 25].mean() - 0.8) <= 0.1
    a_mhz_s, tx = 400 * 784 * 32 * 20 / 1e6, 6370 * 32 / 10e6
    q80 = tx + a_mhz_s / (1000.0 + 200.0 * norm.ppf(0.2))
    assert q80 == pytest.approx(0.2617, abs=1e-4)
    deadlines = [float(r["round_latency_s"]) for r, c in zip(rows, cut) if c]  # a round with a timeout lasts its deadline
    assert np.median(deadlines) == pytest.approx(q80, rel=0.1)
