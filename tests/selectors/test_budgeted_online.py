"""Budgeted online selection on the round loop: the three methods on one shared federation
(small synthetic IoT data), re-runs over a stream, determinism and resume (Algorithm 1)."""

import numpy as np
import pytest

from fedselect.common.files import read_csv_rows
from fedselect.config.schema import ConfigError
from fedselect.experiment.resolve import parse_experiment, resolve_doc
from fedselect.experiment.run import make_simulation, resume_experiment, run_experiment
from fedselect.kernels.secretary import alpha_star, offline_best_rule, secretary_rule
from fedselect.world.federation import build_federation

METHODS = ("budgeted_online", "online_random", "offline_best")


def doc(**kw):
    d = {
        "name": "bo-tiny",
        "seed": 1,
        "method": "budgeted_online",
        "rounds": 2,
        "clients_per_round": 3,
        "data": {
            "dataset": "iot-synthetic",
            "options": {"windows": 120, "min_records": 50},
            "num_clients": 12,
            "partition": {"scheme": "fat_thin"},
            "holdout_fraction": 0.0,
        },
        "model": {"name": "mlp"},
        "train": {"local_epochs": 1, "batch_size": 8, "optimizer": "adam", "lr": 0.003},
        "method_options": {"r2": 2},
        "checkpoint_every": 0,
    }
    d.update(kw)
    return d


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """The three methods on one federation."""
    cfg = parse_experiment(doc())
    fed = build_federation(cfg)
    out = {}
    for m in METHODS:
        d = tmp_path_factory.mktemp(m)
        out[m] = (run_experiment(resolve_doc(doc(method=m)), d, federation=fed), d)
    return out


def test_three_methods_share_arrivals_and_evaluations(shared):
    sums = {m: s for m, (s, _) in shared.items()}
    runs = {m: s["selection_runs"][0] for m, s in sums.items()}
    # the same candidate accuracies for everyone (all 12 computed for the competitive ratio)
    acc = sums["offline_best"]["candidate_accuracy"]
    assert len(acc) == 12 and all(sums[m]["candidate_accuracy"] == acc for m in METHODS)
    # offline best: the top 3 by accuracy (94 validation rows: scores tie, any of the tied may be taken), ratio 1,
    # everyone contacted
    scores = np.array([acc[str(k)] for k in range(12)])
    best = sorted(scores[sums["offline_best"]["accepted_clients"]].tolist())
    assert best == sorted(scores.tolist())[-3:]
    assert sums["offline_best"]["competitive_ratio"] == pytest.approx(1.0)
    assert sums["offline_best"]["candidates_evaluated"] == 12
    for m in METHODS:
        assert len(sums[m]["accepted_clients"]) == 3
        assert 0 < sums[m]["competitive_ratio"] <= 1.0 + 1e-12
        assert sums[m]["accepted_scores"] == [acc[str(k)] for k in sums[m]["accepted_clients"]]
    # the secretary rule replayed on the arrival order gives the same choice
    sec = sums["budgeted_online"]
    assert sec["alpha"] == alpha_star(12, 1, 2, budget=3) == 2
    summary_run = runs["budgeted_online"]
    assert summary_run["available"] == 12


def test_rounds_use_the_accepted_clients(shared):
    for _m, (s, d) in shared.items():
        rows = read_csv_rows(d / "metrics.csv")
        assert [r["round"] for r in rows] == ["0", "1", "2"]
        for r in rows[1:]:
            assert sorted(int(x) for x in r["selected"].split(";")) == sorted(s["accepted_clients"])
            assert float(r["competitive_ratio"]) == pytest.approx(s["competitive_ratio"])
        # evaluation traffic before round 1: every contacted candidate downloads and uploads the model
        model_bytes = 4 * (10 * 25 + 25 + 25 * 25 + 25 + 25 * 10 + 10)
        assert int(rows[0]["upload_bytes"]) == s["candidates_evaluated"] * model_bytes
        assert int(rows[0]["download_bytes"]) == s["candidates_evaluated"] * model_bytes


def test_arrival_order_replays_with_the_pure_rules(tmp_path):
    r = resolve_doc(doc(rounds=1))
    fed = build_federation(r.config)
    m = make_simulation(r, fed).selector
    assert m.name == "secretary"
    m.prepare()
    run = m.runs[0]
    order = run["arrival_order"]
    assert sorted(order) == list(range(12)) and order != list(range(12))  # a seeded shuffle
    scores = [m.candidate_accuracy(k) for k in order]
    sel = secretary_rule(scores, 3, 2)
    assert run["accepted_clients"] == [order[i] for i in sel.accepted]
    assert run["candidates_evaluated"] == sel.evaluated
    ob = make_simulation(resolve_doc(doc(rounds=1, method="offline_best")), fed).selector
    ob.prepare()
    assert ob.runs[0]["arrival_order"] == order
    assert ob.runs[0]["accepted_clients"] == [order[i] for i in offline_best_rule(scores, 3).accepted]


def test_same_seed_identical_and_resume_matches(tmp_path):
    cfg = resolve_doc(doc(rounds=3, checkpoint_every=1, method_options={"r2": 1, "rerun_every": 2}))
    run_experiment(cfg, tmp_path / "a")
    run_experiment(cfg, tmp_path / "b", stop_after=1)
    resume_experiment(tmp_path / "b")
    a, b = (tmp_path / "a" / "metrics.csv").read_bytes(), (tmp_path / "b" / "metrics.csv").read_bytes()
    assert a == b


def test_stream_reruns_follow_availability(tmp_path):
    opts = {"r2": 2, "rerun_every": 2, "initial_available": 0.5, "mean_stay": 3.0, "arrival_rate": 0.5}
    s = run_experiment(
        parse_experiment(doc(rounds=6, data={**doc()["data"], "num_clients": 20}, method_options=opts)), tmp_path / "s"
    )
    runs = s["selection_runs"]
    assert [r["start_round"] for r in runs] == [1, 3, 5] and s["selection_runs_count"] == 3
    assert s["candidates_evaluated"] == sum(r["candidates_evaluated"] for r in runs)
    assert s["selection_time_s"] > 0
    pools = [r["available"] for r in runs]
    assert pools[0] < 20  # only about half are there at time 0
    rows = read_csv_rows(tmp_path / "s" / "metrics.csv")
    for r in rows[1:]:
        t = int(r["round"])
        run = runs[(t - 1) // 2]
        chosen = [int(x) for x in r["selected"].split(";")] if r["selected"] else []
        assert set(chosen) <= set(run["accepted_clients"])  # accepted clients still available
        assert int(r["selection_run"]) == run["run"]


def test_bad_options_are_reported_before_any_data_is_loaded():
    with pytest.raises(ConfigError, match=r"method_options: need r1 <= r2, got r1=3, r2=2"):
        parse_experiment(doc(method_options={"r1": 3, "r2": 2}))


@pytest.mark.slow
def test_sweep_grid_table_and_continuation(tmp_path):
    from fedselect.study.sweep import parse_sweep
    from fedselect.study.sweep_run import run_sweep
    from fedselect.study.sweep_table import build_sweep_table

    base = doc(rounds=1)
    for k in ("name", "method", "seed"):
        base.pop(k)
    sc = parse_sweep(
        {
            "name": "tiny-grid",
            "base": base,
            "seeds": [0],
            "methods": [
                {"label": "secretary", "method": "budgeted_online"},
                {"label": "online random", "method": "online_random", "grid_keys": ["clients_per_round"]},
                {"label": "offline best", "method": "offline_best", "grid_keys": ["clients_per_round"]},
            ],
            "grid": {"clients_per_round": [2, 3], "method_options.r2": [1, 2]},
        }
    )
    calls = []
    rep = run_sweep(sc, tmp_path / "sw", on_run=lambda i, n, d: calls.append(d))
    assert len(calls) == 8 and len(list((tmp_path / "sw" / "runs").iterdir())) == 8
    rows = rep["rows"]
    assert [(r["clients_per_round"], r["method_options.r2"], r["method"]) for r in rows] == [
        (2, 1, "secretary"),
        (2, "-", "online random"),
        (2, "-", "offline best"),
        (2, 2, "secretary"),
        (3, 1, "secretary"),
        (3, "-", "online random"),
        (3, "-", "offline best"),
        (3, 2, "secretary"),
    ]
    assert all(r["seeds"] == 1 for r in rows)
    assert all(r["competitive_ratio"] == pytest.approx(1.0) for r in rows if r["method"] == "offline best")
    assert all(r["candidates_evaluated"] == 12 for r in rows if r["method"] == "offline best")
    # alpha* differs with r2 (N = 12: r2 = 1 -> 4, r2 = 2 -> 2), so the secretary runs differ
    table = (tmp_path / "sw" / "table.csv").read_text().splitlines()
    assert table[0].startswith("clients_per_round,method_options.r2,method,seeds,final_accuracy,final_accuracy_std")
    assert len(table) == 9
    # a second call finds every summary and runs nothing; the table is rebuilt identically
    calls.clear()
    run_sweep(sc, tmp_path / "sw", on_run=lambda i, n, d: calls.append(d))
    assert calls == []
    assert build_sweep_table(tmp_path / "sw")["rows"] == rows
    with pytest.raises(ConfigError, match="grid_keys"):
        parse_sweep(
            {"base": base, "methods": [{"method": "online_random", "grid_keys": ["rounds"]}], "grid": {"clients_per_round": [2]}}
        )


def test_summary_counts_the_fat_clients_accepted(shared):
    from fedselect.common.seeding import np_rng
    from fedselect.experiment.runfiles import fat_selection
    from fedselect.world.data.partition import make_partitioner

    fed = build_federation(parse_experiment(doc()))
    # 12 clients, fat_fraction 0.2: round(2.4) = 2 fat clients, the partition's first draw
    fat = make_partitioner("fat_thin").fat_clients(12, np_rng(1, "partition"))
    assert fed.fat_clients.tolist() == fat.tolist() and len(fat) == 2
    sizes = np.array([len(c.train_indices) for c in fed.clients])
    assert set(np.argsort(-sizes)[:2].tolist()) == set(fat.tolist())  # the fat ones are the two biggest
    for m, (s, _) in shared.items():
        n = sum(k in set(fat.tolist()) for k in s["accepted_clients"])
        assert s["fat_selected"] == n and s["fat_selected_share"] == n / 3, m
    assert fat_selection(None, [1, 2]) == {} and fat_selection(np.array([1]), None) == {}
    assert fat_selection(np.array([0, 5]), [5, 1, 0, 7]) == {"fat_selected": 2, "fat_selected_share": 0.5}
    assert fat_selection(np.array([0]), []) == {"fat_selected": 0, "fat_selected_share": None}
