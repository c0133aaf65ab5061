"""Results no one can misread: a report names the runs it lacks and compares only the seeds
both sides have; identical differences over few seeds are not shown as certainty; method labels
are refused with the character named, accept letters of any script, and never vanish from a
plot legend (docs/comparisons.md)."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
from typer.testing import CliRunner

from fedselect.cli import app
from fedselect.config.contenders import MethodSpec
from fedselect.config.schema import ConfigError
from fedselect.report.build import build_report
from fedselect.report.stats import format_interval, paired_interval
from fedselect.study.compare import parse_compare, run_comparison
from support.fake_runs import fake_run

# ------------------------------------------------------------------ 2. a report with a run missing


def _two_seed_comparison(tmp_path):
    doc = {
        "name": "miss",
        "seeds": [0, 1],
        "baseline": "A",
        "base": {
            "rounds": 2,
            "clients_per_round": 2,
            "data": {"dataset": "mnist-embedded", "num_clients": 4, "partition": {"scheme": "iid"}},
            "model": {"name": "mlp", "options": {"hidden": [8]}},
            "train": {"local_epochs": 1, "batch_size": 32},
        },
        "methods": [{"label": "A", "method": "fedavg"}, {"label": "B", "method": "fastest"}],
    }
    return run_comparison(parse_compare(doc), tmp_path / "cmp")


def test_report_names_a_missing_run_and_compares_only_the_seeds_both_have(tmp_path, caplog):
    """Issue input: compare over seeds 0 and 1, methods A (baseline) and B, then runs/B-s1
    deleted and `fedselect report DIR`. Before: exit 0, no word about B-s1, and "vs baseline"
    set B's 1-seed mean against A's 2-seed mean (-4.0 pts where seed 0 alone gives -3.55)."""
    c = _two_seed_comparison(tmp_path)
    full = build_report(c, plots=False)
    a_runs = {r.seed: r for r in full["results"] if r.label == "A"}
    b_runs = {r.seed: r for r in full["results"] if r.label == "B"}
    shutil.rmtree(c / "runs" / "B-s1")

    with caplog.at_level(logging.WARNING, logger="fedselect"):
        res = CliRunner().invoke(app, ["report", str(c), "--no-plots"])
    assert res.exit_code == 0, res.output
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("1 run missing" in m and "B-s1 (runs/B-s1)" in m for m in warned), warned
    md = (c / "table.md").read_text()
    assert "Caution: 1 run missing (no run directory or no metrics.csv), left out of the table; every difference vs A " in md
    assert "B-s1 (runs/B-s1)" in md and f"fedselect compare --resume {c}" in md
    assert "Mean over 2 seed(s) ± sample standard deviation (fewer where runs are missing: B: 1)." in md
    assert "Caution: 1 run missing" in res.output  # the console shows the note too

    rep = build_report(c, plots=False)
    a, b = rep["table"]
    assert (a["seeds"], b["seeds"]) == (2, 1) and b["vs_seeds"] == [0] and b["vs_partial"]
    # every change vs the baseline is over seed 0 only, on both sides
    for key in ("last_k_accuracy", "final_accuracy", "final_f1_macro"):
        want = 100.0 * (b_runs[0].summary[key] - a_runs[0].summary[key])
        assert b[key + "_vs"] == pytest.approx(want), key
        two_seed_mean = (a_runs[0].summary[key] + a_runs[1].summary[key]) / 2
        assert a[key] == pytest.approx(two_seed_mean)  # the baseline's own row keeps both seeds
    lat = 100.0 * (b_runs[0].summary["e2e_latency_s"] - a_runs[0].summary["e2e_latency_s"]) / a_runs[0].summary["e2e_latency_s"]
    assert b["e2e_latency_s_vs"] == pytest.approx(lat)
    assert "all over the 1 seed both ran (0; runs are missing)" in rep["markdown"]
    # the paired cell over seed 0 and the "vs" line now say the same
    paired = rep["paired"][0]["cells"]["last_k_accuracy"]
    assert paired["diffs"][0] == pytest.approx(b["last_k_accuracy_vs"])
    assert "Caution: 1 run missing" in (c / "report.html").read_text()


def test_nothing_missing_nothing_said(tmp_path):
    from support.fake_runs import fabricated_comparison

    rep = build_report(fabricated_comparison(tmp_path), plots=False)
    assert rep["missing"] == [] and "missing" not in rep["markdown"]
    assert all(not e["vs_partial"] for e in rep["table"])


# ------------------------------------------------------------------ 3. intervals over too few seeds


def test_identical_differences_of_a_seed_varying_quantity_give_no_interval():
    """Before: "-33.3 [-33.3, -33.3] *" and "+5.00 [+5.00, +5.00] *"."""
    iv = paired_interval([-100 / 3, -100 / 3])
    assert iv.spread == "none" and not iv.has_interval and iv.significant is None and iv.sd == 0.0
    assert format_interval(iv, "%", 1) == "-33.3 (2 seeds: no spread to judge)"
    # +5 points twice, as floating point gives them (100 x (0.55 - 0.50), 100 x (0.60 - 0.55))
    d = [100 * (0.55 - 0.50), 100 * (0.60 - 0.55)]
    assert d[0] != d[1]  # 5.000000000000004 and 4.999999999999993
    assert format_interval(paired_interval(d), "pts", 2) == "+5.00 (2 seeds: no spread to judge)"
    # declared exact (bytes under the same selections): zero width, and it says so
    ex = paired_interval([13.3, 13.3], exact=True)
    assert ex.spread == "exact" and ex.low == ex.high == 13.3 and ex.significant
    assert format_interval(ex, "%", 1) == "+13.3 [+13.3, +13.3] * (exact)"
    # a real spread is untouched
    assert format_interval(paired_interval([2.0, 2.1, 1.9]), "pts", 2) == "+2.00 [+1.75, +2.25] *"


def _coinciding(tmp_path):
    """Two seeds where B beats A by exactly 5 accuracy points and reaches the target 0.8 in round 2
    against A's round 3 (-33.3%) in both seeds; each side moves the same bytes in both seeds."""
    c = tmp_path / "cmp"
    # (round, accuracy, e2e latency, cumulative MB)
    fake_run(c / "runs/A-s0", [(0, 0.1, 0, 0), (1, 0.5, 10, 2), (2, 0.6, 20, 4), (3, 0.80, 30, 6)], 3)
    fake_run(c / "runs/A-s1", [(0, 0.1, 0, 0), (1, 0.55, 12, 2), (2, 0.65, 25, 4), (3, 0.85, 40, 6)], 3)
    fake_run(c / "runs/B-s0", [(0, 0.1, 0, 0), (1, 0.6, 8, 1), (2, 0.8, 15, 2), (3, 0.85, 22, 3)], 3)
    fake_run(c / "runs/B-s1", [(0, 0.1, 0, 0), (1, 0.65, 9, 1), (2, 0.85, 17, 2), (3, 0.90, 30, 3)], 3)
    runs = [{"label": lab, "method": lab.lower(), "seed": s, "dir": f"runs/{lab}-s{s}"} for lab in "AB" for s in (0, 1)]
    (c / "compare.json").write_text(
        json.dumps({"name": "few", "baseline": "A", "methods": [{"label": "A"}, {"label": "B"}], "runs": runs})
    )
    return c


def test_report_shows_no_star_for_coinciding_seeds(tmp_path):
    rep = build_report(_coinciding(tmp_path), plots=False)
    cells = rep["paired"][0]["cells"]
    assert cells["final_accuracy"]["diffs"] == pytest.approx({0: 5.0, 1: 5.0})
    assert cells["rounds_to_target"]["diffs"] == pytest.approx({0: -100 / 3, 1: -100 / 3})
    md = rep["markdown"]
    row = next(line for line in md.splitlines() if line.startswith("| B | ") and "seeds" in line)
    assert "+5.00 (2 seeds: no spread to judge)" in row
    assert "-33.3 (2 seeds: no spread to judge)" in row
    assert "[-33.3, -33.3]" not in md and "[+5.00, +5.00]" not in md
    # communication 3 MB vs 6 MB in both seeds, 2 clients every round, no failure: exact
    assert row.rstrip().endswith("| -50.0 [-50.0, -50.0] * (exact) |")
    csv = (tmp_path / "cmp" / "paired.csv").read_text().splitlines()
    fin = next(line for line in csv if line.startswith("B,final_accuracy,"))
    assert fin.endswith(",no spread to judge") and ",,," in fin  # no low, high, excludes_zero
    page = (tmp_path / "cmp" / "report.html").read_text()
    assert 'class="num sig">+5.00' not in page


def test_bytes_with_failures_are_not_exact(tmp_path):
    c = _coinciding(tmp_path)
    p = c / "runs/B-s1/metrics.csv"
    text = p.read_text().splitlines()
    header = text[0].split(",")
    cells = text[2].split(",")
    cells[header.index("failed")] = "1:dropout"
    text[2] = ",".join(cells)
    p.write_text("\n".join(text) + "\n")
    cell = build_report(c, plots=False)["paired"][0]["cells"]["communication_mb"]
    assert cell["interval"].spread == "none" and not cell["interval"].has_interval


# ------------------------------------------------------------------ 4. method labels


@pytest.mark.parametrize("label", ["Ø", "FedAvg-β", "été", "Oort (α 2)", "FLASH-RL_v2.1+fedper"])
def test_letters_of_any_script_are_accepted(label):
    """Before: 'Ø' and 'β' were refused with "use letters, digits, ..." (they are letters)."""
    assert MethodSpec(label=label, method="fedavg").label == label


@pytest.mark.parametrize(
    "label,named",
    [
        ("a/b", "'/' (U+002F SOLIDUS)"),
        ("x:y|z", "':' (U+003A COLON), '|' (U+007C VERTICAL LINE)"),
        ("A\tB", "'\\t' (U+0009 a control character)"),
        ("lr=0.1", "'=' (U+003D EQUALS SIGN)"),
    ],
)
def test_a_refused_label_names_the_character(label, named):
    with pytest.raises(ValueError) as e:
        MethodSpec(label=label, method="fedavg")
    assert named in str(e.value) and "letters and digits (any script, e.g. Ø or β)" in str(e.value)


def test_a_label_starting_with_underscore_is_refused():
    """Before: '_hidden' was accepted, and matplotlib leaves such labels out of every legend."""
    with pytest.raises(ValueError, match="starts with '_': matplotlib leaves such labels out of every plot legend"):
        MethodSpec(label="_hidden", method="fedavg")
    with pytest.raises(ConfigError, match=r"methods\.1.*starts with '_'"):
        parse_compare({"base": {}, "methods": [{"label": "A", "method": "fedavg"}, {"label": "_B", "method": "fedavg"}]})


def test_non_ascii_labels_reach_the_plot_legends(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedselect.report.plots import make_plots
    from fedselect.report.runs import collect

    c = _coinciding(tmp_path)
    spec = json.loads((c / "compare.json").read_text())
    ren = {"A": "Ø", "B": "β-Oort"}
    spec["methods"] = [{"label": ren[m["label"]]} for m in spec["methods"]]
    spec["baseline"] = "Ø"
    for r in spec["runs"]:
        r["label"] = ren[r["label"]]
    (c / "compare.json").write_text(json.dumps(spec))
    _, results, labels, *_ = collect(c)
    seen = []
    real = plt.Figure.savefig

    def spy(fig, *a, **kw):
        for ax in fig.axes:
            if ax.get_legend() is not None:
                seen.append([t.get_text() for t in ax.get_legend().get_texts()])
        return real(fig, *a, **kw)

    plt.Figure.savefig = spy
    try:
        make_plots(c / "plots", results, labels, [])
    finally:
        plt.Figure.savefig = real
    assert seen and all(set(ren.values()) <= set(texts) for texts in seen[:2]), seen
