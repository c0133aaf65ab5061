"""Stable summaries, paired intervals over seeds, report.html and the selection-profile plot."""

import json
import math
import re
import shutil

import pytest

from fedselect.config.schema import ConfigError, parse_config
from fedselect.experiment.metrics import last_k_mean, summarize
from fedselect.report.build import build_report
from fedselect.report.stats import format_interval, paired_differences, paired_interval
from fedselect.report.tables import paired_cell
from support.fake_runs import fabricated_comparison

# -- paired intervals (hand-computed) -----------------------------------------------------


def test_interval_of_1_2_3_points_contains_zero():
    iv = paired_interval([1.0, 2.0, 3.0])
    # mean 2.0, sd 1.0, t_{0.975, 2} = 4.3027: 2.0 ± 4.3027 / sqrt(3) = 2.0 ± 2.484
    assert iv.n == 3 and iv.mean == pytest.approx(2.0) and iv.sd == pytest.approx(1.0)
    assert iv.half_width == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert (round(iv.low, 2), round(iv.high, 2)) == (-0.48, 4.48)
    assert iv.significant is False
    assert format_interval(iv, "pts", 2) == "+2.00 [-0.48, +4.48]"


def test_interval_of_tight_differences_excludes_zero():
    iv = paired_interval([2.0, 2.1, 1.9])
    # sd 0.1: 2.0 ± 4.3027 * 0.1 / sqrt(3) = 2.0 ± 0.2484
    assert (round(iv.low, 2), round(iv.high, 2)) == (1.75, 2.25)
    assert iv.significant is True
    assert format_interval(iv, "pts", 2) == "+2.00 [+1.75, +2.25] *"


def test_one_or_no_pair_gives_no_interval():
    one = paired_interval([3.5])
    assert one.mean == 3.5 and not one.has_interval and one.significant is None and one.low is None
    assert format_interval(one, "%") == "+3.5 (1 seed: no interval)"
    none = paired_interval([])
    assert none.n == 0 and none.mean is None and format_interval(none, "%") == "-"
    with pytest.raises(ValueError, match="finite"):
        paired_interval([1.0, float("nan")])
    with pytest.raises(ValueError, match="confidence"):
        paired_interval([1.0, 2.0], confidence=95)


def test_paired_differences_units_and_missing_seeds():
    ours, base = {0: 0.86, 1: 0.88, 2: None}, {0: 0.80, 1: 0.90, 2: 0.7, 3: 0.5}
    assert paired_differences(ours, base, "pts") == pytest.approx({0: 6.0, 1: -2.0})
    assert paired_differences({0: 150.0, 1: 150.0}, {0: 100.0, 1: 300.0}, "%") == pytest.approx({0: 50.0, 1: -50.0})
    assert paired_differences({0: 1.0}, {0: 0.0}, "%") == {}  # no percent of 0
    assert paired_differences({0: 3.0}, {0: 1.0}, "abs") == {0: 2.0}
    with pytest.raises(ValueError, match="unit"):
        paired_differences({}, {}, "bananas")


def test_paired_cell_says_how_many_seeds_paired():
    cell = {"diffs": {0: -10.0}, "interval": paired_interval([-10.0]), "unit": "%"}
    assert paired_cell(cell, 3) == "-10.0 (1 pair: no interval) (1/3 seeds)"
    assert paired_cell(cell, 1) == "-10.0"
    cell = {"diffs": {0: 1.0, 1: 2.0, 2: 3.0}, "interval": paired_interval([1.0, 2.0, 3.0]), "unit": "pts"}
    assert paired_cell(cell, 3) == "+2.00 [-0.48, +4.48]"


# -- stable summary ---------------------------------------------------------------------------


def _rows(accs):
    return [
        {"round": t, "accuracy": a, "f1_macro": a, "e2e_latency_s": t, "cum_upload_bytes": 0, "cum_download_bytes": 0}
        for t, a in enumerate(accs, start=1)
    ]


def test_last_10_mean_over_20_rounds():
    accs = [0.05 * i for i in range(1, 21)]  # 0.05, 0.10, ..., 1.00
    s = summarize(_rows(accs), window=10)
    assert s["last_k_accuracy"] == pytest.approx(0.775)  # mean of 0.55 .. 1.00
    assert s["summary_window"] == 10 and s["summary_window_rounds"] == 10
    assert s["final_accuracy"] == pytest.approx(1.0) and s["best_accuracy"] == pytest.approx(1.0)
    # fewer evaluated rounds than k: all of them
    assert summarize(_rows(accs[:4]), window=10)["last_k_accuracy"] == pytest.approx(0.125)
    # rounds not evaluated (eval_every > 1: NaN) are not counted
    assert last_k_mean([0.1, math.nan, 0.3, math.nan, 0.5], 2) == (pytest.approx(0.4), 2)
    assert last_k_mean([math.nan], 3) == (None, 0)
    with pytest.raises(ValueError, match="k must be >= 1"):
        last_k_mean([0.1], 0)


def test_summary_window_is_validated():
    assert parse_config({"metrics": {"summary_window": 5}}).metrics.summary_window == 5
    assert parse_config({}).metrics.summary_window == 10
    with pytest.raises(ConfigError, match="summary_window"):
        parse_config({"metrics": {"summary_window": 0}})


# -- the comparison table: paired section (fabricated runs, hand-computed) ---------------------


def test_paired_section_of_fabricated_comparison(tmp_path):
    c = fabricated_comparison(tmp_path)
    rep = build_report(c, plots=False)
    (p,) = rep["paired"]
    assert p["label"] == "B" and p["seeds"] == [0, 1]
    cells = p["cells"]
    # final accuracy: B - A = +6, -2 points; mean 2, sd 5.657, t_{0.975,1} = 12.706
    fin = cells["final_accuracy"]["interval"]
    assert fin.mean == pytest.approx(2.0) and fin.half_width == pytest.approx(12.7062 * math.sqrt(32) / math.sqrt(2), rel=1e-4)
    assert not fin.significant
    # last-10 mean (both rounds): A 0.65 / 0.80, B 0.84 / 0.79 -> +19, -1 points
    assert cells["last_k_accuracy"]["diffs"] == pytest.approx({0: 19.0, 1: -1.0})
    # latency +50%, -50% per seed: mean 0 (the change of the seed means is -25%)
    assert cells["e2e_latency_s"]["diffs"] == pytest.approx({0: 50.0, 1: -50.0})
    # communication 5 MB vs 10 MB in both seeds, no failures, 2 clients every round: bytes are
    # exactly deterministic, so -50% with no spread is exact (zero width, marked so)
    comm = cells["communication_mb"]["interval"]
    assert (comm.mean, comm.low, comm.high, comm.significant, comm.spread) == (
        pytest.approx(-50.0),
        pytest.approx(-50.0),
        pytest.approx(-50.0),
        True,
        "exact",
    )
    md = rep["markdown"]
    assert "| acc mean last 10 |" in md.replace("best acc | acc mean", "| acc mean")
    assert "accuracy (mean last 10) +9.0 pts vs A" in md and "final accuracy +2.0 pts vs A" in md
    assert "## Paired differences vs A (2 seeds, 95% CI)" in md
    assert "| B | +9.00 [-118.06, +136.06] | +2.00 [-48.82, +52.82] | +0.0 [-635.3, +635.3] |" in md
    assert md.rstrip().endswith("-50.0 [-50.0, -50.0] * (exact) |")
    lines = (c / "paired.csv").read_text().splitlines()
    assert lines[0] == "method,quantity,unit,n,mean,sd,low,high,excludes_zero,per_seed,note"
    assert lines[-1] == "B,communication_mb,%,2,-50.0,0.0,-50.0,-50.0,1,0:-50.0;1:-50.0,exact"
    # table.csv keeps its earlier columns in place; the last-k mean comes last
    head = (c / "table.csv").read_text().splitlines()[0].split(",")
    assert head[:5] == ["method", "seeds", "final_accuracy", "final_accuracy_std", "final_accuracy_vs_baseline"]
    assert head[-3:] == ["last_k_accuracy", "last_k_accuracy_std", "last_k_accuracy_vs_baseline"]


def test_one_seed_says_no_interval_is_possible(tmp_path):
    c = fabricated_comparison(tmp_path)
    spec = json.loads((c / "compare.json").read_text())
    spec["runs"] = [r for r in spec["runs"] if r["seed"] == 0]
    (c / "compare.json").write_text(json.dumps(spec))
    md = build_report(c, plots=False)["markdown"]
    assert "## Paired differences vs A (1 seed)" in md
    assert "One seed: no interval is possible" in md
    assert "| B | +19.00 | +6.00 | +50.0 | -50.0 | -25.0 | -50.0 |" in md


def test_report_html_of_fabricated_comparison_is_self_contained_and_escaped(tmp_path):
    c = fabricated_comparison(tmp_path)
    spec = json.loads((c / "compare.json").read_text())
    spec["name"] = "fab <script>alert(1)</script> & co"
    (c / "compare.json").write_text(json.dumps(spec))
    rep = build_report(c, plots=True)
    page = (c / "report.html").read_text()
    assert rep["html"] == c / "report.html"
    assert "<script" not in page and "fab &lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in page
    assert not re.search(r'(src|href)="(?!data:image/png;base64,|#)', page)  # nothing external
    imgs = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(imgs) == len(list((c / "plots").glob("*.png"))) == len(rep["plots"]) >= 3
    for sec in ("results", "paired", "plots", "config", "federation", "wall"):
        assert f'<section id="{sec}">' in page
    assert 'class="num sig">-50.0 [-50.0, -50.0] * (exact)</td>' in page


# -- selection profile plot -------------------------------------------------------------------


def test_selection_profile_counts_and_order():
    from fedselect.report.plots import class_order, selection_profile_counts

    feds = [{"device": ["pi", "nano", "pi", "tx2"], "expected_latency_s": [3.0, 0.5, 2.0, 1.0]}]
    classes = class_order(feds, "device")
    assert classes == ["nano", "tx2", "pi"]  # fastest first (median latency 0.5, 1.0, 2.5)
    rows = [
        {"round": "0", "selected": "0;1;2;3"},
        {"round": "1", "selected": "0;2"},
        {"round": "2", "selected": "1;3"},
        {"round": "3", "selected": ""},
    ]
    rounds, counts = selection_profile_counts(rows, feds[0]["device"], classes)
    assert rounds.tolist() == [1, 2, 3]  # the warm-up row 0 is not a selection
    assert counts.tolist() == [[0, 0, 2], [1, 1, 0], [0, 0, 0]]
    # with the compute part saved (federation-s<seed>.json of this version) devices are ranked by
    # compute seconds per sample, networks by upload seconds: the device alone, not its data size
    fed = {
        "device": ["pi", "nano"],
        "network": ["wifi-1", "wifi-4"],
        "num_samples": [10, 1000],
        "expected_compute_s": [1.0, 10.0],
        "expected_upload_s": [0.5, 0.01],
        "expected_latency_s": [1.5, 10.01],
    }
    assert class_order([fed], "device") == ["nano", "pi"]  # 0.01 s vs 0.1 s per sample
    assert class_order([fed], "network") == ["wifi-4", "wifi-1"]
    with pytest.raises(ValueError, match="selected client 7"):
        selection_profile_counts([{"round": "1", "selected": "7"}], feds[0]["device"], classes)


# -- sweeps: paired per grid point --------------------------------------------------------------


def test_sweep_paired_differences_per_grid_point(tmp_path):
    from fedselect.study.sweep import parse_sweep, restrict, run_dir_for

    base = {"rounds": 1, "data": {"dataset": "mnist-embedded", "num_clients": 8}, "model": {"name": "mlp"}}
    sc = parse_sweep(
        {
            "name": "sw",
            "base": base,
            "seeds": [0, 1, 2],
            "baseline": "random",
            "methods": [{"label": "smart", "method": "fedavg"}, {"label": "random", "method": "fedavg", "grid_keys": []}],
            "grid": {"clients_per_round": [2, 4]},
            "columns": ["final_accuracy", "e2e_latency_s"],
        }
    )
    acc = {("random", None): [0.80, 0.82, 0.81], ("smart", 2): [0.81, 0.84, 0.82], ("smart", 4): [0.90, 0.92, 0.91]}
    lat = {("random", None): [100.0, 100.0, 100.0], ("smart", 2): [90.0, 80.0, 70.0], ("smart", 4): [100.0, 110.0, 90.0]}
    for p in sc.points():
        for m in sc.methods:
            key = (m.label, None if m.label == "random" else p["clients_per_round"])
            for s in sc.seeds:
                d = run_dir_for(tmp_path, m.label, restrict(p, m), s)
                d.mkdir(parents=True, exist_ok=True)
                (d / "summary.json").write_text(
                    json.dumps({"final_accuracy": acc[key][s], "e2e_latency_s": lat[key][s], "wall_s": 1.0})
                )
    (tmp_path / "sweep.json").write_text(json.dumps({**sc.model_dump(mode="json"), "runs": 9}))
    rep = build_report(tmp_path)  # a sweep directory is handed to the sweep table
    assert rep["kind"] == "sweep"
    p2, p4 = rep["paired"]
    assert p2["point"] == {"clients_per_round": 2} and p4["point"] == {"clients_per_round": 4}
    # R = 2: +1, +2, +1 points (mean 1.333, sd 0.577); latency -10, -20, -30 % (mean -20, sd 10)
    assert p2["cells"]["final_accuracy"]["diffs"] == pytest.approx({0: 1.0, 1: 2.0, 2: 1.0})
    iv = p2["cells"]["e2e_latency_s"]["interval"]
    assert iv.mean == pytest.approx(-20.0) and iv.half_width == pytest.approx(4.302653 * 10 / math.sqrt(3), rel=1e-6)
    assert (round(iv.low, 2), round(iv.high, 2)) == (-44.84, 4.84) and iv.significant is False
    md = rep["markdown"]
    assert "## Paired differences vs random (3 seeds, 95% CI)" in md
    # R = 4: +10 points every seed: accuracy varies by seed, so identical differences are no
    # evidence of certainty (no zero-width interval, no star); latency 0, +10, -10 %
    assert "| 4 | smart | +10.00 (3 seeds: no spread to judge) | +0.0 [-24.8, +24.8] |" in md
    assert p2["same_federation"] and "†" not in md  # clients_per_round does not change the federation
    page = (tmp_path / "report.html").read_text()
    assert '<section id="paired">' in page and '<section id="config">' in page and "<script" not in page


def test_sweep_baseline_must_be_a_label():
    from fedselect.study.sweep import parse_sweep

    with pytest.raises(ConfigError, match="baseline 'nobody' is not one of the method labels"):
        parse_sweep({"base": {}, "methods": [{"method": "fedavg"}], "baseline": "nobody"})


def test_window_override_and_caveat(tmp_path):
    c = fabricated_comparison(tmp_path)
    md = build_report(c, plots=False)["markdown"]
    assert "Caution: in 4 of 4 runs the window covers more than half of the evaluated rounds (up to 2 of 2)" in md
    rep = build_report(c, plots=False, window=1)  # the last round only: the final accuracy
    a, b = rep["table"]
    assert a["last_k_accuracy"] == pytest.approx(a["final_accuracy"]) and b["last_k_accuracy"] == pytest.approx(0.87)
    assert "| acc mean last 1 |" in rep["markdown"].replace("best acc | acc mean", "| acc mean")
    assert "Caution" not in rep["markdown"]  # 1 of 2 rounds is not more than half
    with pytest.raises(ValueError, match="summary window must be >= 1"):
        build_report(c, plots=False, window=0)


def test_sweep_pair_across_federations_is_flagged(tmp_path):
    from fedselect.study.sweep import parse_sweep
    from fedselect.study.sweep_table import sweep_paired

    base = {
        "rounds": 1,
        "clients_per_round": 2,
        "data": {"dataset": "mnist-embedded", "num_clients": 8},
        "model": {"name": "mlp"},
    }
    sc = parse_sweep(
        {
            "name": "sw",
            "base": base,
            "seeds": [0, 1],
            "baseline": "random",
            "methods": [{"label": "smart", "method": "fedavg"}, {"label": "random", "method": "fedavg", "grid_keys": []}],
            "grid": {"data.num_clients": [8, 16]},
            "columns": ["final_accuracy"],
        }
    )
    same = [p["same_federation"] for p in sweep_paired(tmp_path, sc)]
    assert same == [True, False]  # N = 16 is compared with the baseline at the base N = 8


# -- mean ± std over seeds: one helper for the comparison and the sweep tables -----------------


def test_mean_std_leaves_nan_out_and_counts_the_values_used():
    from fedselect.report.stats import mean_std

    # 0.8 and 0.9 are used: mean 0.85, sample std sqrt(2 * 0.05^2 / 1) = 0.0707107
    mean, std, n = mean_std([0.8, math.nan, 0.9, None])
    assert (mean, std, n) == (pytest.approx(0.85), pytest.approx(0.0707107, rel=1e-6), 2)
    # 1, 2, 3, 4: mean 2.5, sample std sqrt(5 / 3) = 1.2909944
    assert mean_std([1, 2, 3, 4]) == (2.5, pytest.approx(1.2909944, rel=1e-7), 4)
    assert mean_std([7.0, math.nan]) == (7.0, 0.0, 1)  # one value: no spread
    assert mean_std([math.nan, math.nan]) == (None, None, 0)  # all NaN: no value (printed "-")
    assert mean_std([]) == (None, None, 0)
    assert mean_std(["x", True, 2.0, 4.0]) == (3.0, pytest.approx(math.sqrt(2)), 2)  # not numbers: missing
    mean, std, n = mean_std([math.inf, 1.0])  # an infinity is a value
    assert mean == math.inf and math.isnan(std) and n == 2


def test_mean_std_without_nan_is_numpys_mean_and_sample_std_bit_for_bit():
    """The formula both tables used before the helper (NaN-free data: identical numbers)."""
    import numpy as np

    from fedselect.report.stats import mean_std

    rng = np.random.default_rng(0)
    for size in (1, 2, 3, 5, 10):
        xs = [float(x) for x in rng.uniform(-1e3, 1e3, size)]
        std = float(np.std(xs, ddof=1)) if size > 1 else 0.0
        assert mean_std(xs) == (float(np.mean(xs)), std, size)


def test_comparison_and_sweep_tables_leave_a_missing_seed_out_alike(tmp_path):
    from fedselect.study.sweep import parse_sweep, run_dir_for
    from support.fake_runs import fake_run

    # comparison: B's seed-1 run stopped after a round that was not evaluated (accuracy nan)
    c = fabricated_comparison(tmp_path / "c")
    shutil.rmtree(c / "runs/B-s1")
    fake_run(c / "runs/B-s1", [(0, 0.1, 0, 0), (1, 0.81, 70, 2.5), (2, math.nan, 140, 5)], 2, complete=False)
    rep = build_report(c, plots=False)
    b = rep["table"][1]
    assert (b["final_accuracy"], b["final_accuracy_std"], b["final_accuracy_n"]) == (pytest.approx(0.86), 0.0, 1)
    assert b["best_accuracy"] == pytest.approx((0.86 + 0.81) / 2) and b["best_accuracy_n"] == 2
    # sweep: one seed's summary has no value (NaN is written as null): mean and std of the other two
    methods = [{"label": "m", "method": "fedavg"}]
    sc = parse_sweep({"name": "sw", "base": {"rounds": 1}, "seeds": [0, 1, 2], "methods": methods, "columns": ["final_accuracy"]})
    for s, acc in zip(sc.seeds, [0.8, None, 0.9]):
        d = run_dir_for(tmp_path / "s", "m", {}, s)
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({"final_accuracy": acc}))
    (tmp_path / "s" / "sweep.json").write_text(json.dumps({**sc.model_dump(mode="json"), "runs": 3}))
    (row,) = build_report(tmp_path / "s")["rows"]
    assert (row["final_accuracy"], row["final_accuracy_std"]) == (pytest.approx(0.85), pytest.approx(0.0707107, rel=1e-6))
    assert "| m | 3 | 0.8500 ± 0.0707 |" in (tmp_path / "s" / "table.md").read_text()
