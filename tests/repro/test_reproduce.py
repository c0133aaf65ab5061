"""`fedselect reproduce` (issue 21 item 5): verdicts by hand, the manifest, and the quick variant end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedselect.config.schema import ConfigError
from fedselect.repro.reproduce import Job, _sweep_config, load_manifest, reproduce, verdict
from fedselect.study.compare import load_compare

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "configs" / "reproduce.yaml"


@pytest.mark.parametrize(
    "value,mean,low,high,relative,substitute,expected",
    [
        (-7.87, -9.0, -12.0, -6.0, True, False, "reproduced"),  # inside, excludes 0
        (-7.87, -25.7, -35.1, -16.4, True, False, "direction only"),  # same sign, not the size
        (-7.87, 2.0, -13.8, 17.8, True, False, "inconclusive"),  # holds the paper's value and 0
        (-24.0, 2.0, -3.0, 7.0, True, False, "not reproduced"),  # holds 0, not the paper's value
        (-7.87, 5.0, 2.0, 8.0, True, False, "not reproduced"),  # opposite direction
        (-0.2, 0.3, -1.5, 1.2, True, False, "reproduced"),  # negligible change, tight interval
        (-0.2, 0.3, -5.0, 5.6, True, False, "inconclusive"),  # negligible, but a wide interval
        (0.05, -0.08, -0.21, 0.049, True, False, "reproduced"),  # negligible, holds 0 but not the paper's +0.05
        (0.05, -0.30, -0.45, -0.15, True, False, "not reproduced"),  # negligible, but ours excludes 0 and it
        (-0.9, -1.6, -2.7, -0.5, True, False, "reproduced"),  # negligible and inside an interval excluding 0
        (0.9899, 0.9870, 0.9850, 0.9890, False, False, "reproduced"),  # within the 0.01 tolerance
        (0.95, 0.80, 0.78, 0.82, False, False, "not reproduced"),
        (0.95, 0.80, 0.60, 1.00, False, False, "inconclusive"),  # holds it, but +-0.2 wide
        (0.882, 0.64, 0.60, 0.68, False, True, "reference only"),
        ("> 0", 9.4, 2.3, 16.5, True, False, "reproduced"),
        ("> 0", 0.8, -1.0, 2.6, True, False, "not reproduced"),
        ("> -2", -0.5, -1.5, 0.5, True, False, "reproduced"),  # within 2 points of the other method
        ("> -2", -1.5, -3.0, 0.0, True, False, "inconclusive"),  # the interval holds the bound
        ("> -2", -4.0, -5.0, -3.0, True, False, "not reproduced"),  # wholly below the bound
        ("< 1.5", 0.2, -0.3, 0.7, True, False, "reproduced"),
        ("< 0", 0.8, 0.2, 1.4, True, False, "not reproduced"),
        ("<= -98", -99.31, -99.31, -99.31, True, False, "reproduced"),  # CEFL's exact communication change
        ("<= -98", -97.0, -97.5, -96.5, True, False, "not reproduced"),  # wholly above the bound
        ("<= -98", -98.0, -99.0, -97.0, True, False, "inconclusive"),  # holds the bound
        (">= 5", 6.0, 5.0, 7.0, True, False, "reproduced"),
        ("> 0.9", 0.95, 0.91, 0.99, False, True, "reproduced"),  # a bound is judged on substitute data too
        ("up to +2.82", 1.0, 0.0, 2.0, True, False, "not judged"),
        (-7.87, None, None, None, True, False, "not judged"),
        (-7.87, -5.0, None, None, True, False, "not judged"),  # one seed: no interval
    ],
)
def test_verdicts(value, mean, low, high, relative, substitute, expected):
    assert verdict(value, mean, low, high, relative, substitute, 0.01)[0] == expected


@pytest.mark.parametrize(
    "value,mean,low,high,pct,expected,why",
    [
        # FedAvg's e2e latency (s) against Table V's 674.13: (679.3 - 674.13) / 674.13 = +0.8%
        (674.13, 679.3, 660.3, 698.3, 15.0, "reproduced", "+0.8% from the paper's value (within 15%)"),
        # 503.4 s is -25.3% off: outside 15%, and 674.13 is outside [480, 527]
        (674.13, 503.4, 480.0, 527.0, 15.0, "not reproduced", "ours 503.4 [480, 527], -25.3% from the paper's 674.13"),
        (674.13, 620.0, 560.0, 680.0, None, "reproduced", "inside our 95% interval"),  # no tolerance: the interval
        (674.13, 620.0, 600.0, 640.0, 5.0, "not reproduced", "-8.0% from the paper's 674.13"),
    ],
)
def test_verdicts_of_absolute_figures_in_their_own_units(value, mean, low, high, pct, expected, why):
    """Seconds, MB or rounds are not fractions: the +-0.05 width rule of accuracies does not apply;
    a claim's tolerance_pct (percent of the paper's value) or our interval decides."""
    got = verdict(value, mean, low, high, False, False, 0.01, fraction=False, tolerance_pct=pct)
    assert got[0] == expected and why in got[1]
    # as a fraction the same numbers would be "inconclusive" (an interval far wider than +-0.05)
    assert verdict(value, mean, 560.0, 680.0, False, False, 0.01)[0] == "inconclusive"


def test_the_manifest_and_every_quick_variant_validate():
    m, root = load_manifest(MANIFEST)
    assert root == ROOT and {e.paper for e in m.entries} == {"flashrl", "cefl", "budgeted"}
    for e in m.entries:
        if e.kind == "sweep":  # a grid: one seed per cell; the quick grid is smaller
            full, quick = _sweep_config(e, Job(root, root)), _sweep_config(e, Job(root, root, quick=True))
            assert len(quick.points()) < len(full.points()) and full.seeds == e.seeds
            continue
        if e.kind == "alpha":  # computed, not run over seeds: the quick variant simulates fewer orders
            from fedselect.repro.alpha import load_alpha_config

            full, quick = load_alpha_config(root / e.config), load_alpha_config(root / e.config, e.quick)
            assert quick.trials < full.trials and set(full.paper) == set(full.r2)
            continue
        assert len(e.seeds) >= 5, e.id  # the full variant: at least 5 seeds
        full = load_compare(root / e.config)
        quick = load_compare(root / e.config, e.quick)
        labels = {x.label for x in full.methods}
        assert set(e.quick_methods or labels) <= labels
        assert quick.set_ != full.set_ or not e.quick  # the quick overrides: set in every run
        for c in e.claims or []:
            assert c.method in labels and (c.vs is None or c.vs in labels), (e.id, c.method, c.vs)
        assert set(e.quick_method_options) <= labels
        if "rounds" in e.quick:  # the quick variant's rounds are every method's, their own included
            assert set(quick.with_rounds(e.quick["rounds"]).rounds_of().values()) == {e.quick["rounds"]}


def test_paper_schedule_and_data_poor_entries():
    """CEFL at the paper's schedule (100 vs 350 rounds) and the data-poor federation judged against Individual."""
    m, root = load_manifest(MANIFEST)
    by = {e.id: e for e in m.entries}
    sched = load_compare(root / by["cefl-table1-paper-schedule-imu-watch"].config)
    assert sched.rounds_of() == {"CEFL": 100, "Regular FL": 350, "FedPer": 350, "Individual": 350}
    assert ("CEFL", "communication_mb_vs", "<= -98") in {(c.method, c.figure, c.value) for c in by[sched_id()].claims}
    poor = load_compare(root / by["cefl-mnist-data-poor"].config)
    assert poor.baseline == "Individual" and poor.base["data"]["num_clients"] == 20
    cefl = poor.experiment(poor.methods[0], 0)
    assert cefl.method == "cefl" and cefl.algorithm.options["validation_fraction"] == 0.0
    assert cefl.algorithm.options["base_layers"] == 3 and cefl.selector.options["clusters"] == 2


def sched_id() -> str:
    return "cefl-table1-paper-schedule-imu-watch"


def test_cefl_communication_by_hand_is_under_two_percent():
    """The header's arithmetic: FD-CNN (7 classes) 876,999 floats, conv layers 53,696; N 8, K 2."""
    from fedselect.algorithms.cefl import cefl_communication, regular_fl_communication
    from fedselect.world.models import FDCNN

    model = FDCNN(7)
    full = sum(v.numel() for v in model.state_dict().values()) * 4
    base = sum(v.numel() for k, v in model.state_dict().items() if k.startswith(("conv1.", "conv2."))) * 4
    assert (full, base) == (3_507_996, 214_784)
    cefl = cefl_communication(full, base, 8, [4, 4], 100)["total_mb"]
    regular = regular_fl_communication(full, 8, 350)
    assert cefl == pytest.approx(135.025544) and regular == pytest.approx(19_644.78, abs=0.01)
    assert 100 * (cefl - regular) / regular == pytest.approx(-99.313, abs=1e-3)


def test_claims_against_another_label_and_quick_method_options(tmp_path):
    from fedselect.report.runs import RunSummary
    from fedselect.repro.reproduce import Claim, Entry, judge_entry, with_method_options

    def run(label, seed, acc, mb):
        return RunSummary(label, seed, tmp_path, [], {"final_accuracy": acc, "communication_mb": mb}, True, 1)

    results = [run("A", s, 0.80 + 0.01 * s, 10.0) for s in (0, 1, 2)]
    results += [run("B", s, 0.70 + 0.02 * s, 100.0) for s in (0, 1, 2)]
    results += [run("C", s, 0.60, 0.0) for s in (0, 1, 2)]
    from fedselect.report.aggregate import paired_table

    rep = {"results": results, "baseline": "C", "labels": ["A", "B", "C"], "quantities": None}
    rep["paired"] = paired_table(results, rep["labels"], "C")  # what build_report gives
    entry = Entry(
        id="x",
        paper="cefl",
        title="t",
        config="c.yaml",
        claims=[
            Claim(method="A", figure="final_accuracy_vs", value="> 0"),  # vs the baseline C
            Claim(method="A", figure="communication_mb_vs", value="<= -80", vs="B"),
            Claim(method="A", figure="final_accuracy_vs", value="> 0", vs="Z"),  # Z did not run: skipped
        ],
    )
    j = judge_entry(entry, rep)
    assert len(j) == 2
    # A - C: 20, 21, 22 points; A vs B: -90% every seed (exact bytes)
    assert j[0].mean == pytest.approx(21.0) and j[0].verdict == "reproduced"
    assert j[1].mean == pytest.approx(-90.0) and j[1].low == j[1].high == pytest.approx(-90.0) and j[1].verdict == "reproduced"
    cc = load_compare(ROOT / "configs" / "repro" / "cefl-mnist-data-poor.yaml")
    short = with_method_options(cc, {"CEFL": {"transfer_epochs": 2}}, "quick_method_options")
    assert short.experiment(short.methods[0], 0).algorithm.options["transfer_epochs"] == 2
    with pytest.raises(ConfigError, match=r"unknown method label\(s\) \['Nope'\]"):
        with_method_options(cc, {"Nope": {}}, "quick_method_options")
    with pytest.raises(ConfigError, match="transfer_epochs"):
        with_method_options(cc, {"CEFL": {"transfer_epochs": -1}}, "quick_method_options")


def test_a_bad_manifest_names_the_key(tmp_path):
    p = tmp_path / "configs" / "m.yaml"
    p.parent.mkdir()
    p.write_text(yaml.safe_dump({"entries": [{"id": "x", "paper": "oort", "title": "t", "config": "c.yaml"}]}))
    with pytest.raises(ConfigError, match=r"entries\.0\.paper"):
        load_manifest(p)
    p.write_text(yaml.safe_dump({"entries": [{"id": "x", "paper": "cefl", "title": "t", "config": "c.yaml", "seedz": [1]}]}))
    with pytest.raises(ConfigError, match="seedz"):
        load_manifest(p)
    with pytest.raises(ValueError, match="unknown paper 'oort'"):
        reproduce(MANIFEST, tmp_path / "out", papers=["oort"])


@pytest.mark.slow
def test_quick_reproduction_end_to_end(tmp_path):
    doc = tmp_path / "docs" / "reproduction.md"
    target, results = reproduce(MANIFEST, tmp_path / "runs", quick=True, doc=doc, workers=0)
    text = doc.read_text()
    assert target == doc and (tmp_path / "runs" / "reproduction.md").is_file()
    m, _ = load_manifest(MANIFEST)
    for e in m.entries:
        d = tmp_path / "runs" / e.id
        if e.kind == "sweep":
            assert f"### {e.title}" in text and (d / "sweep.json").is_file() and (d / "table.md").is_file()
            continue
        if e.kind == "alpha":
            assert f"### {e.title}" in text and (d / "alpha.json").is_file() and "Verdict: 5 reproduced." in text
            continue
        assert f"### {e.title}" in text and f"fedselect report {d}" in text
        assert (d / "compare.json").is_file()
    assert "**Quick variant**" in text
    # every entry names the machine its runs were made on, from the record in its directory
    from fedselect.repro.reproduce import _machine, read_sessions

    for e in m.entries:
        sessions = read_sessions(tmp_path / "runs" / e.id)
        assert [x["machine"] for x in sessions] == [_machine()] and sessions[0]["wall_s"] > 0
    assert text.count(f"on {_machine()} (runs' own wall time") == len(m.entries)
    by_id = {r.entry.id: r for r in results}
    # an entry with `table: true` carries the comparison's whole table, its sections under the entry's heading
    fl = by_id["flashrl-mnist-dir05"]
    assert fl.entry.table and fl.markdown == (tmp_path / "runs" / fl.entry.id / "table.md").read_text()
    section = text.split(f"### {fl.entry.title}", 1)[1].split("\n### ", 1)[0]
    assert "The comparison's whole table" in section and "#### Paired differences vs FedAvg (2 seeds, 95% CI)" in section
    assert all(f"| {label} |" in section for label in fl.entry.quick_methods)
    assert not any(r.markdown for r in results if not r.entry.table)
    # a direction that holds with margin on the quick setting: CEFL's leaders move a fraction of
    # Regular FL's bytes (the same bytes every seed, an exact difference)
    cefl = {(j.claim.method, j.claim.figure): j for j in by_id["cefl-table1-imu-watch"].judged}
    comm = cefl[("CEFL", "communication_mb_vs")]
    assert comm.mean < -30 and comm.low == comm.high == comm.mean and comm.verdict == "direction only"
    assert all(j.verdict == "reference only" for (_, f), j in cefl.items() if not f.endswith("_vs"))
    for r in results:  # every plot the document names was copied next to it
        for p in r.plots:
            assert (doc.parent / "img" / "reproduction" / f"{r.entry.id}-{p.name}").is_file()
    # run again: the finished comparisons are kept, the document is the same
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*/runs/*/metrics.csv")}
    reproduce(MANIFEST, tmp_path / "runs", quick=True, workers=0)
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*/runs/*/metrics.csv")} == before


def test_no_run_lists_what_has_not_run(tmp_path):
    target, results = reproduce(MANIFEST, tmp_path / "runs", papers=["cefl"], run=False, doc=tmp_path / "r.md")
    assert [r.entry.id for r in results] == [
        "cefl-table1-imu-watch",
        "cefl-table1-paper-schedule-imu-watch",
        "cefl-mnist-data-poor",
    ]
    assert [r.ran for r in results] == [False] * 3 and not (tmp_path / "runs" / "cefl-table1-imu-watch").exists()
    text = target.read_text()
    assert "**Not run yet**" in text and "fedselect reproduce cefl" in text


def test_saved_runs_made_before_an_option_was_added_are_accepted_at_its_default():
    from fedselect.experiment.resolve import parse_experiment
    from fedselect.experiment.resume import config_differences

    now = parse_experiment({"selector": {"name": "flashrl"}}).model_dump(mode="json")
    saved = {**now, "selector": {**now["selector"], "options": dict(now["selector"]["options"])}}
    del saved["selector"]["options"]["q_network"], saved["mode"]  # options this run predates
    assert config_differences(saved, now) == []
    # set to other than its default now: a real difference
    shared = {**now, "selector": {**now["selector"], "options": {**now["selector"]["options"], "q_network": "shared"}}}
    assert config_differences(saved, shared) == ["selector.options.q_network ('auto' in the saved run, 'shared' now)"]
    # a key this version does not know: the saved config is compared as it is
    assert config_differences({"a": 1, "b": 2}, {"a": 1}) == ["b (2 in the saved run, absent now)"]


def test_the_sweep_entry_on_its_quick_grid_summarises_the_runs(tmp_path):
    """The Table VI entry (kind: sweep) on its tiny quick grid: every number of the document
    recomputed here from the runs' summary.json files."""
    import json

    import numpy as np

    from fedselect.common.seeding import np_rng
    from fedselect.repro.reproduce import render, run_entry
    from fedselect.world.data.partition import make_partitioner

    m, root = load_manifest(MANIFEST)
    e = next(x for x in m.entries if x.kind == "sweep")
    r = run_entry(e, root, tmp_path, quick=True, workers=0)
    d = tmp_path / e.id
    runs = {p.name: json.loads((p / "summary.json").read_text()) for p in (d / "runs").iterdir()}
    assert len(runs) == 8  # secretary at 2 N x 2 r2, each baseline at 2 N (R = 4 only)

    def s(label, n, r2=None):
        tail = f"_r2={r2}" if r2 is not None else ""
        return runs[f"{label.replace(' ', '_')}-num_clients={n}_clients_per_round=4{tail}-s0"]

    def acc(label, n, r2=None):
        return s(label, n, r2)["final_accuracy"]

    for label, n, r2 in [("secretary", 20, 1), ("secretary", 40, 3), ("online random", 40, None), ("offline best", 20, None)]:
        run = s(label, n, r2)
        fat = set(make_partitioner("fat_thin", preset="authors").fat_clients(n, np_rng(0, "partition")).tolist())
        assert len(fat) == round(0.2 * n) and len(run["accepted_clients"]) == 4
        assert run["fat_selected_share"] == sum(k in fat for k in run["accepted_clients"]) / 4
    g = r.grid
    assert g["cells"] == 4 and g["runs"] == 8 and r.incomplete == []
    sec = [acc("secretary", n, r2) for n in (20, 40) for r2 in (1, 3)]
    rnd = [acc("online random", n) for n in (20, 40) for _ in (1, 3)]
    assert g["methods"]["secretary"]["mean"]["final_accuracy"] == pytest.approx(np.mean(sec))
    assert g["methods"]["online random"]["mean"]["final_accuracy"] == pytest.approx(np.mean(rnd))
    best = g["methods"]["secretary"]["best"]
    assert best["final_accuracy"] == max(sec) and acc(
        "secretary", best["point"]["data.num_clients"], best["point"]["method_options.r2"]
    ) == max(sec)
    assert g["methods"]["offline best"]["best"]["point"] == {
        "data.num_clients": 20 if acc("offline best", 20) >= acc("offline best", 40) else 40,
        "clients_per_round": 4,
    }
    diff = [100 * (a - b) for a, b in zip(sec, rnd)]
    x = g["differences"]["secretary"]
    assert x["mean"] == pytest.approx(np.mean(diff)) and x["best"]["points"] == pytest.approx(max(diff))
    assert x["above"] == sum(v > 0 for v in diff) and x["cells"] == 4
    # accuracy vs N and vs r2, each averaged over the other axis; the baselines are flat in r2
    axes = g["axes"]
    assert set(axes) == {"data.num_clients", "method_options.r2"}  # R has one value: no plot
    assert axes["data.num_clients"]["methods"]["secretary"]["final_accuracy"] == pytest.approx(
        [np.mean(sec[:2]), np.mean(sec[2:])]
    )
    assert axes["method_options.r2"]["methods"]["secretary"]["final_accuracy"] == pytest.approx(
        [np.mean(sec[::2]), np.mean(sec[1::2])]
    )
    flat = axes["method_options.r2"]["methods"]["online random"]["final_accuracy"]
    assert flat[0] == pytest.approx(flat[1]) == pytest.approx(np.mean(rnd))
    shares = [s("offline best", n)["fat_selected_share"] for n in (20, 40)]
    assert g["methods"]["offline best"]["mean"]["fat_selected_share"] == pytest.approx(np.mean(shares))
    assert sorted(p.name for p in r.plots) == ["accuracy_vs_num_clients.png", "accuracy_vs_r2.png", "fat_selected_share.png"]
    assert all(p.stat().st_size > 1000 for p in r.plots)
    text = render("t", [r], quick=True)
    assert f"| secretary | 4 | {np.mean(sec):.4f} | {max(sec):.4f} (" in text
    assert f"| secretary - online random | {np.mean(diff):+.2f} | {max(diff):+.2f} (" in text
    assert f"| online random | 2 | {np.mean(rnd):.4f} |" in text  # a baseline: one cell per N
    assert "fedselect reproduce budgeted --quick" in text and "--table-only" not in text  # the quick grid is not the config's
    full = render("t", [r], quick=False)
    assert f"fedselect sweep {e.config} --table-only --out {d}" in full
    from fedselect.repro.record import _duration

    assert f"runs' own wall time {_duration(r.runs_wall_s)}" in text and "![budgeted-table6-class-skew accuracy vs r2]" in text


def test_duration_is_minutes_or_seconds():
    from fedselect.repro.record import _duration

    assert _duration(42.4) == "42 s" and _duration(60) == "1.0 min" and _duration(754) == "12.6 min"


def test_records_in_window_matches_every_order_of_five():
    """Monte Carlo over random orders against the exact share over all 5! = 120 orders."""
    import itertools

    from fedselect.common.seeding import np_rng
    from fedselect.repro.alpha import records_in_window

    def records_after(order, alpha):
        best, count = -1, 0
        for i, x in enumerate(order):
            if x > best:
                best = x
                count += i >= alpha
        return count

    cases = [(2, (1, 1)), (2, (1, 2)), (0, (2, 3)), (4, (0, 0))]
    exact = [sum(lo <= records_after(p, a) <= hi for p in itertools.permutations(range(5))) / 120 for a, (lo, hi) in cases]
    # by hand: no record at the last position (alpha 4, window [0, 0]): the maximum is not last, 4/5; all
    # records (alpha 0) number 2 or 3 in c(5,2) + c(5,3) = 50 + 35 of the 120 orders (Stirling numbers of the
    # first kind)
    assert exact[3] == pytest.approx(4 / 5) and exact[2] == pytest.approx(85 / 120)
    hits = records_in_window(5, [a for a, _ in cases], [w for _, w in cases], 20_000, np_rng(0, "t"))
    for h, e in zip(hits, exact):
        assert abs(h / 20_000 - e) < 0.015
    with pytest.raises(ValueError, match="alpha"):
        records_in_window(5, [5], [(1, 1)], 10, np_rng(0, "t"))


def test_wilson_interval_by_hand():
    from fedselect.repro.alpha import wilson

    low, high = wilson(50, 100)  # p = 0.5, z = 1.96: 0.5 -+ 1.96 sqrt(0.0025 + 0.000096) / 1.038416
    assert low == pytest.approx(0.40383, abs=1e-4) and high == pytest.approx(0.59617, abs=1e-4)
    assert wilson(0, 10)[0] == pytest.approx(0.0, abs=1e-12) and wilson(10, 10)[1] == pytest.approx(1.0)


def test_the_alpha_entry_computes_keeps_and_reads_back_table_ii(tmp_path):
    import json

    from fedselect.repro.reproduce import render, run_entry

    m, root = load_manifest(MANIFEST)
    e = next(x for x in m.entries if x.kind == "alpha")
    r = run_entry(e, root, tmp_path, quick=True)
    rows = r.alpha["rows"]
    assert [x["alpha_star"] for x in rows] == [367, 243, 162, 109, 73] == [x["paper_alpha_star"] for x in rows]
    assert all(abs(x["argmax_alpha"] - x["alpha_star"]) <= 1 for x in rows)
    assert rows[0]["probability"] == pytest.approx(0.36788, abs=1e-4)  # r2 = 1: (367/1000) ln(1000/367)
    assert r.alpha["trials"] == 1000 and r.alpha["grid"]["100"] == [36, 24, 16, 10, 7]
    assert [(j.claim.method, j.mean, j.verdict) for j in r.judged][:2] == [
        ("r2 = 1", 367.0, "reproduced"),
        ("r2 = 2", 243.0, "reproduced"),
    ] and len(r.judged) == 5
    from fedselect.repro.alpha import judge_alpha

    other = {"rows": [{**rows[0], "paper_alpha_star": 368}, {**rows[1], "paper_alpha_star": None}]}
    assert [(j.verdict, j.why) for j in judge_alpha(other)] == [
        ("not reproduced", "ours 367, the paper's 368"),
        ("not judged", "the paper gives no value"),
    ]
    saved = tmp_path / e.id / "alpha.json"
    before = saved.stat().st_mtime_ns
    again = run_entry(e, root, tmp_path, quick=True)  # the same config: kept
    assert saved.stat().st_mtime_ns == before and again.alpha == r.alpha
    read = run_entry(e, root, tmp_path, quick=True, run=False)
    assert read.ran and read.alpha == r.alpha and read.machines == r.machines != []
    text = render("t", [r], quick=True)
    assert "| 5 | 73 | 73 | 0.0730 |" in text and "Verdict: 5 reproduced." in text
    full = run_entry(e, root, tmp_path, quick=False, run=False)  # another config (20,000 orders): not this table
    assert not full.ran
    assert json.loads(saved.read_text())["config"]["trials"] == 1000


def test_a_bad_alpha_config_names_the_key(tmp_path):
    from fedselect.config.schema import ConfigError
    from fedselect.repro.alpha import load_alpha_config

    p = tmp_path / "a.yaml"
    p.write_text("name: a\nn: 100\nr1: 3\nr2: [2, 4]\n")
    with pytest.raises(ConfigError, match=r"r2: \[2\] below r1 = 3"):
        load_alpha_config(p)
    p.write_text("name: a\nn: 100\nr2: [2]\ntrails: 5\n")
    with pytest.raises(ConfigError, match="trails"):
        load_alpha_config(p)


def test_a_session_is_recorded_before_the_work_and_timed_after_it_even_when_killed(tmp_path):
    from fedselect.repro.record import recorded_wall, session
    from fedselect.repro.reproduce import _machine, read_sessions

    d = tmp_path / "entry"
    with session(d):
        inside = read_sessions(d)
    assert [x["machine"] for x in inside] == [_machine()] and inside[0]["wall_s"] is None  # open while it runs
    assert read_sessions(d)[0]["wall_s"] >= 0
    with pytest.raises(KeyboardInterrupt):  # a run interrupted half-way still names its machine, timed
        with session(d):
            raise KeyboardInterrupt
    assert len(read_sessions(d)) == 2 and read_sessions(d)[1]["wall_s"] is not None
    with session(d, worked=lambda: False):  # nothing was there to do: no session
        pass
    assert len(read_sessions(d)) == 2
    assert recorded_wall(d) == pytest.approx(sum(x["wall_s"] for x in read_sessions(d)))


def test_where_says_when_sessions_stopped_before_recording_their_time(tmp_path):
    from types import SimpleNamespace

    from fedselect.repro.record import _write, where

    d = tmp_path / "entry"
    d.mkdir()
    m = "Linux x86_64, 2 CPUs"
    r = SimpleNamespace(directory=d, machines=[m], wall_s=2467.0, runs_wall_s=32904.0)
    _write(d, [{"machine": m, "started": "t0", "wall_s": 2467.0}])
    assert where(r) == f"41.1 min on {m} (runs' own wall time 548.4 min)"
    _write(
        d,
        [{"machine": m, "started": f"t{i}", "wall_s": None} for i in range(3)]
        + [{"machine": m, "started": "t3", "wall_s": 2467.0}],
    )
    assert where(r) == (
        f"41.1 min in the 1 of 4 sessions that recorded their time (the other 3 stopped before they could) on {m} "
        "(runs' own wall time 548.4 min)"
    )
    _write(d, [{"machine": m, "started": "t0", "wall_s": None}])
    r.wall_s = r.runs_wall_s  # the fallback when no session recorded a time
    assert where(r) == f"time not recorded (1 session stopped before recording it) on {m} (runs' own wall time 548.4 min)"


def test_verdicts_are_counted_in_one_fixed_order():
    from fedselect.repro.manifest import count_verdicts

    got = ["not reproduced", "reproduced", "inconclusive", "reproduced", "direction only", "not reproduced", "reproduced"]
    assert count_verdicts(got) == "3 reproduced, 1 direction only, 1 inconclusive, 2 not reproduced"
    assert count_verdicts([]) == ""


def test_a_quick_document_says_the_finding_is_the_full_runs():
    from types import SimpleNamespace

    from fedselect.repro.record import finding_text

    e = SimpleNamespace(finding="FedAvg 679.3 s over 5 seeds.\n")
    assert finding_text(e, quick=False) == "FedAvg 679.3 s over 5 seeds."
    assert finding_text(e, quick=True) == (
        "The full run's finding (its own settings and seeds, not this quick variant's): FedAvg 679.3 s over 5 seeds."
    )
    assert finding_text(SimpleNamespace(finding=None), quick=True) == ""
