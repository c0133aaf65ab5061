"""`fedselect reproduce` (issue 21 item 5): verdicts by hand, the manifest, and the quick variant end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedselect.compare import load_compare
from fedselect.config import ConfigError
from fedselect.reproduce import load_manifest, reproduce, verdict

ROOT = Path(__file__).resolve().parent.parent
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
        (0.9899, 0.9870, 0.9850, 0.9890, False, False, "reproduced"),  # within the 0.01 tolerance
        (0.95, 0.80, 0.78, 0.82, False, False, "not reproduced"),
        (0.95, 0.80, 0.60, 1.00, False, False, "inconclusive"),  # holds it, but +-0.2 wide
        (0.882, 0.64, 0.60, 0.68, False, True, "reference only"),
        ("> 0", 9.4, 2.3, 16.5, True, False, "reproduced"),
        ("> 0", 0.8, -1.0, 2.6, True, False, "not reproduced"),
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


def test_the_manifest_and_every_quick_variant_validate():
    m, root = load_manifest(MANIFEST)
    assert root == ROOT and {e.paper for e in m.entries} == {"flashrl", "cefl", "budgeted"}
    for e in m.entries:
        assert len(e.seeds) >= 5, e.id  # the full variant: at least 5 seeds
        full = load_compare(root / e.config)
        quick = load_compare(root / e.config, e.quick)
        labels = {x.label for x in full.methods}
        assert set(e.quick_methods or labels) <= labels
        assert quick.base != full.base or not e.quick
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
    from fedselect.models import FDCNN

    model = FDCNN(7)
    full = sum(v.numel() for v in model.state_dict().values()) * 4
    base = sum(v.numel() for k, v in model.state_dict().items() if k.startswith(("conv1.", "conv2."))) * 4
    assert (full, base) == (3_507_996, 214_784)
    cefl = cefl_communication(full, base, 8, [4, 4], 100)["total_mb"]
    regular = regular_fl_communication(full, 8, 350)
    assert cefl == pytest.approx(135.025544) and regular == pytest.approx(19_644.78, abs=0.01)
    assert 100 * (cefl - regular) / regular == pytest.approx(-99.313, abs=1e-3)


def test_claims_against_another_label_and_quick_method_options(tmp_path):
    from fedselect.reproduce import Claim, Entry, judge_entry, with_method_options
    from fedselect.tables import RunResult

    def run(label, seed, acc, mb):
        return RunResult(label, seed, tmp_path, [], {"final_accuracy": acc, "communication_mb": mb}, True, 1)

    results = [run("A", s, 0.80 + 0.01 * s, 10.0) for s in (0, 1, 2)]
    results += [run("B", s, 0.70 + 0.02 * s, 100.0) for s in (0, 1, 2)]
    results += [run("C", s, 0.60, 0.0) for s in (0, 1, 2)]
    from fedselect.tables import paired_table

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


def test_quick_reproduction_end_to_end(tmp_path):
    doc = tmp_path / "docs" / "reproduction.md"
    target, results = reproduce(MANIFEST, tmp_path / "runs", quick=True, doc=doc, workers=0)
    text = doc.read_text()
    assert target == doc and (tmp_path / "runs" / "reproduction.md").is_file()
    m, _ = load_manifest(MANIFEST)
    for e in m.entries:
        assert f"### {e.title}" in text and f"fedselect report {tmp_path / 'runs' / e.id}" in text
        assert (tmp_path / "runs" / e.id / "compare.json").is_file()
    assert "**Quick variant**" in text and "Machine:" in text
    by_id = {r.entry.id: r for r in results}
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
    from fedselect.experiment import config_differences
    from fedselect.resolve import parse_experiment

    now = parse_experiment({"selector": {"name": "flashrl"}}).model_dump(mode="json")
    saved = {**now, "selector": {**now["selector"], "options": dict(now["selector"]["options"])}}
    del saved["selector"]["options"]["q_network"], saved["mode"]  # options this run predates
    assert config_differences(saved, now) == []
    # set to other than its default now: a real difference
    shared = {**now, "selector": {**now["selector"], "options": {**now["selector"]["options"], "q_network": "shared"}}}
    assert config_differences(saved, shared) == ["selector.options.q_network ('auto' in the saved run, 'shared' now)"]
    # a key this version does not know: the saved config is compared as it is
    assert config_differences({"a": 1, "b": 2}, {"a": 1}) == ["b (2 in the saved run, absent now)"]
