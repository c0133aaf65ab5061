"""Fairness figures (fedselect.fl.fairness): participation by hand, their metrics.csv columns and
summary keys, the final model's per-client accuracy, the tables and report.html."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from fedselect.experiment.run import run_experiment
from fedselect.fl.fairness import (
    client_accuracy_figures,
    gini,
    jain_index,
    never_selected_share,
    participation_figures,
    selection_counts,
    worst_share_mean,
)
from support.tiny import tiny_experiment


def _rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_participation_worked_example():
    # counts [3, 1, 0, 0]: (3 + 1)^2 / (4 (9 + 1)) = 0.4; ordered pairs differ by 2 x (2 + 3 + 3 + 1 + 1) = 20,
    # / (2 x 4^2 x mean 1) = 0.625; two of four never selected
    assert jain_index([3, 1, 0, 0]) == pytest.approx(0.4)
    assert gini([3, 1, 0, 0]) == pytest.approx(0.625)
    assert never_selected_share([3, 1, 0, 0]) == 0.5
    assert participation_figures([3, 1, 0, 0]) == pytest.approx(
        {"participation_jain": 0.4, "participation_gini": 0.625, "never_selected_share": 0.5}
    )


def test_participation_extremes():
    assert jain_index([5] * 7) == pytest.approx(1.0) and gini([5] * 7) == 0.0 and never_selected_share([5] * 7) == 0.0
    one = [0, 0, 9, 0, 0]  # one client takes every place: J = 1/N, G = 1 - 1/N
    assert jain_index(one) == pytest.approx(0.2) and gini(one) == pytest.approx(0.8)
    assert math.isnan(jain_index([0, 0])) and math.isnan(gini([0, 0])) and never_selected_share([0, 0]) == 1.0
    rng = np.random.default_rng(0)
    for _ in range(20):  # the O(N log N) Gini equals the definition over all pairs
        x = rng.integers(0, 6, size=9)
        if x.sum() == 0:
            continue
        pairs = np.abs(x[:, None] - x[None, :]).sum() / (2 * x.size**2 * x.mean())
        assert gini(x) == pytest.approx(pairs)
    with pytest.raises(ValueError, match="finite values >= 0"):
        jain_index([1, -1])


def test_worst_ten_percent_and_client_accuracy_figures():
    acc = [0.9, 0.1, 0.5, 0.7, 0.3, 0.8, 0.6, 0.2, 0.4, 1.0, 0.55]  # 11 clients: ceil(1.1) = 2 worst: 0.1, 0.2
    assert worst_share_mean(acc) == pytest.approx(0.15)
    assert worst_share_mean(acc[:10]) == pytest.approx(0.1)  # 10 clients: the single worst
    figs = client_accuracy_figures(acc + [float("nan")])  # a client that could not be scored is left out
    assert figs["client_accuracy_mean"] == pytest.approx(np.mean(acc))
    assert figs["client_accuracy_worst10"] == pytest.approx(0.15)
    assert figs["client_accuracy_std"] == pytest.approx(np.std(acc))
    with pytest.raises(ValueError, match="share"):
        worst_share_mean(acc, 0)


def test_selection_counts_read_the_selected_column():
    rows = [{"round": "0", "selected": ""}, {"round": "1", "selected": "0;2"}, {"round": "2", "selected": "2"}]
    assert selection_counts(rows, 3).tolist() == [1, 0, 2]
    with pytest.raises(ValueError, match="outside 0..1"):
        selection_counts(rows, 2)


def test_every_rows_participation_columns_and_the_summary_by_hand(tmp_path):
    s = run_experiment(tiny_experiment("fedavg"), tmp_path / "r")
    rows = _rows(tmp_path / "r")
    assert rows[0]["participation_jain"] == "" and rows[0]["never_selected_share"] == ""  # round 0 selects nobody
    counts = np.zeros(8)
    for r in rows[1:]:
        counts[[int(k) for k in r["selected"].split(";")]] += 1
        assert float(r["participation_jain"]) == pytest.approx(counts.sum() ** 2 / (8 * (counts**2).sum()))
        assert float(r["never_selected_share"]) == pytest.approx(float((counts == 0).mean()))
        assert float(r["participation_gini"]) == pytest.approx(gini(counts))
    assert s["participation_counts"] == counts.astype(int).tolist() and sum(s["participation_counts"]) == 4 * 3
    assert s["participation_jain"] == pytest.approx(float(rows[-1]["participation_jain"]))
    saved = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert saved["never_selected_share"] == s["never_selected_share"]


def test_the_final_models_client_accuracy_is_the_per_client_evaluation_of_the_same_model(tmp_path):
    """FedAvg with evaluation: per_client trains the same model (evaluation changes nothing) and
    scores it on every client's held-out split in its last row: the global run's summary must
    report exactly those accuracies."""
    glob = run_experiment(tiny_experiment("fedavg"), tmp_path / "g")
    per = run_experiment(tiny_experiment("fedavg", method_options={"evaluation": "per_client"}), tmp_path / "p")
    assert (tmp_path / "g" / "model.pt").read_bytes() == (tmp_path / "p" / "model.pt").read_bytes()
    last = [float(a) for a in _rows(tmp_path / "p")[-1]["client_accuracy"].split(";")]
    assert glob["final_client_accuracy"] == pytest.approx(last, abs=1e-6)
    assert glob["client_accuracy_mean"] == pytest.approx(np.mean(last), abs=1e-6)
    assert glob["client_accuracy_worst10"] == pytest.approx(min(last), abs=1e-6)  # 8 clients: ceil(0.8) = 1
    assert glob["client_accuracy_std"] == pytest.approx(np.std(last), abs=1e-6)
    assert per["client_accuracy_mean"] == pytest.approx(per["final_accuracy"])  # per-client: the mean is the metric
    none = run_experiment(
        tiny_experiment("fedavg", data={**tiny_experiment().data.model_dump(), "holdout_fraction": 0.0}), tmp_path / "n"
    )
    assert "client_accuracy_mean" not in none and "final_client_accuracy" not in none  # no held-out splits


@pytest.mark.slow
def test_fairness_columns_in_the_tables_and_the_report(tmp_path):
    from fedselect.report.build import build_report
    from fedselect.study.compare import parse_compare, run_comparison

    doc = {
        "name": "fair",
        "seeds": [0],
        "baseline": "random",
        "base": {
            "rounds": 3,
            "clients_per_round": 2,
            "data": {"dataset": "mnist-embedded", "num_clients": 6, "partition": {"scheme": "iid"}},
            "model": {"name": "mlp", "options": {"hidden": [8]}},
            "train": {"local_epochs": 1, "batch_size": 50},
        },
        "methods": [{"label": "random", "method": "fedavg"}, {"label": "fastest", "method": "fastest"}],
    }
    run_comparison(parse_compare(doc), tmp_path / "c")
    rep = build_report(tmp_path / "c")
    by = {e["label"]: e for e in rep["table"]}
    # fastest: the same 2 of 6 clients in all 3 rounds: counts [3, 3, 0, 0, 0, 0]: J = 36 / (6 x 18) = 1/3
    assert by["fastest"]["participation_jain"] == pytest.approx(1 / 3)
    assert by["fastest"]["never_selected_share"] == pytest.approx(4 / 6)
    assert by["fastest"]["participation_gini"] == pytest.approx(gini([3, 3, 0, 0, 0, 0]))
    md = (tmp_path / "c" / "table.md").read_text()
    assert "Jain (participation)" in md and "client acc worst 10%" in md and "| 0.333 |" in md
    assert "participation_jain" in (tmp_path / "c" / "table.csv").read_text().splitlines()[0]
    html = (tmp_path / "c" / "report.html").read_text()
    assert "Jain (participation)" in html and "Participation by client" in html
    assert "participation_by_speed.png" in rep["plots"]
