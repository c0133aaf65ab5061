"""Comparisons share one federation; tables and reports are exact and reproducible."""

import json
import shutil

import numpy as np
import pytest

from fedselect.config.schema import ConfigError, parse_config
from fedselect.experiment.metrics import CORE_COLUMNS
from fedselect.report.build import build_report
from fedselect.report.runs import load_run_summary
from fedselect.study import backends as backends_mod
from fedselect.study.compare import load_compare, parse_compare, run_comparison
from fedselect.world.federation import build_federation
from support.fake_runs import fabricated_comparison, fake_run


def _doc(tiny_cfg_doc, seeds=(0,)):
    return {
        "name": "t",
        "seeds": list(seeds),
        "base": {k: v for k, v in tiny_cfg_doc.items() if k not in ("name", "seed")},  # a run's are the comparison's
        "baseline": "FedAvg",
        "methods": [{"label": "FedAvg", "method": "fedavg"}, {"label": "Full", "method": "full"}],
    }


def test_same_config_same_federation(tiny_cfg_doc):
    a, b = build_federation(parse_config(tiny_cfg_doc)), build_federation(parse_config(tiny_cfg_doc))
    for ca, cb in zip(a.clients, b.clients):
        np.testing.assert_array_equal(ca.train_indices, cb.train_indices)
        np.testing.assert_array_equal(ca.holdout_indices, cb.holdout_indices)
    for t in (1, 2, 5):
        np.testing.assert_array_equal(a.fleet.draw(t).freq_mhz, b.fleet.draw(t).freq_mhz)
        np.testing.assert_array_equal(a.fleet.draw(t).bandwidth_mbps, b.fleet.draw(t).bandwidth_mbps)


def test_every_method_gets_the_same_federation(tmp_path, tiny_cfg_doc, monkeypatch):
    seen, built = [], []
    # the local backend (fedselect.study.backends) builds the federations and runs the experiments
    real_build, real_run = backends_mod.build_federation, backends_mod.run_experiment
    monkeypatch.setattr(backends_mod, "build_federation", lambda cfg: built.append(real_build(cfg)) or built[-1])

    def spy(plan, run_dir, on_round=None, federation=None, **kw):  # the run's Resolved
        seen.append((plan.config.method, plan.config.seed, federation))
        return real_run(plan, run_dir, on_round=on_round, federation=federation, **kw)

    monkeypatch.setattr(backends_mod, "run_experiment", spy)
    tiny_cfg_doc["rounds"] = 1
    run_comparison(parse_compare(_doc(tiny_cfg_doc, seeds=(0, 1))), tmp_path / "c")
    assert len(built) == 2  # one federation per seed
    assert [(m, s) for m, s, _ in seen] == [("fedavg", 0), ("full", 0), ("fedavg", 1), ("full", 1)]
    assert seen[0][2] is seen[1][2] is built[0] and seen[2][2] is seen[3][2] is built[1]
    info = json.loads((tmp_path / "c" / "federation-s0.json").read_text())
    assert info["num_clients"] == 8 and sum(info["num_samples"]) == sum(len(c.train) for c in built[0].clients)
    # the written table is what `report` rebuilds, byte for byte
    first = (tmp_path / "c" / "table.md").read_bytes(), (tmp_path / "c" / "table.csv").read_bytes()
    rep = build_report(tmp_path / "c")
    assert ((tmp_path / "c" / "table.md").read_bytes(), (tmp_path / "c" / "table.csv").read_bytes()) == first
    assert {
        "metric_vs_round.png",
        "latency_vs_round.png",
        "metric_vs_latency.png",
        "selection_vs_latency.png",
        "label_distribution.png",
    } <= set(rep["plots"])
    assert all((tmp_path / "c" / "plots" / p).stat().st_size > 5000 for p in rep["plots"])


def test_relative_changes_match_hand_computed(tmp_path):
    rep = build_report(fabricated_comparison(tmp_path), plots=False)
    a, b = rep["table"]
    assert a["final_accuracy"] == pytest.approx(0.85) and b["final_accuracy"] == pytest.approx(0.87)
    assert b["final_accuracy_vs"] == pytest.approx(2.0)  # +2.0 points
    assert b["e2e_latency_s_vs"] == pytest.approx(-25.0)
    assert b["communication_mb_vs"] == pytest.approx(-50.0)
    # rounds to 0.8: A 2 and 2 (mean 2); B 1 and 2 (mean 1.5) -> -25%
    assert b["rounds_to_target"] == pytest.approx(1.5) and b["rounds_to_target_vs"] == pytest.approx(-25.0)
    assert a["e2e_latency_s_std"] == pytest.approx(np.std([100, 300], ddof=1))
    assert "latency -25.0% vs A" in rep["markdown"] and "accuracy +2.0 pts vs A" in rep["markdown"]


def test_latency_sum_total_and_runs_saved_before_the_column(tmp_path):
    """The table's latency sum is the total of a run's latency_sum_s (rows 0..T); runs whose
    metrics.csv predates the column (no latency_sum_s) are still reported, without that figure."""
    c = fabricated_comparison(tmp_path)
    old = [col for col in CORE_COLUMNS if col != "latency_sum_s"]
    for s, rows in (
        (0, [(0, 0.1, 0, 0), (1, 0.82, 75, 2.5), (2, 0.86, 150, 5)]),
        (1, [(0, 0.1, 0, 0), (1, 0.7, 75, 2.5), (2, 0.88, 150, 5)]),
    ):
        shutil.rmtree(c / f"runs/B-s{s}")
        fake_run(c / f"runs/B-s{s}", rows, 2, columns=old)
    rep = build_report(c, plots=False)
    a, b = rep["table"]
    assert a["latency_sum_s"] == pytest.approx(30.0) and a["latency_sum_s_std"] == pytest.approx(0.0)
    assert b.get("latency_sum_s") is None  # no figure for the old runs, the others as before
    assert b["final_accuracy"] == pytest.approx(0.87) and b["e2e_latency_s_vs"] == pytest.approx(-25.0)
    assert "latency sum (s)" in rep["markdown"]
    assert load_run_summary(c / "runs/B-s0", "B", 0).summary["latency_sum_s"] is None
    # one of B's seeds with the column: its mean is marked, and no change vs A is given
    shutil.rmtree(c / "runs/B-s1")
    fake_run(c / "runs/B-s1", [(0, 0.1, 0, 0), (1, 0.7, 75, 2.5), (2, 0.88, 150, 5)], 2)
    rep = build_report(c, plots=False)
    b = rep["table"][1]
    assert b["latency_sum_s"] == pytest.approx(30.0) and b["latency_sum_s_n"] == 1 and b["latency_sum_s_vs"] is None
    assert "30.0 ± " in rep["markdown"] and "(1/2 runs have it)" in rep["markdown"]


def test_report_on_interrupted_run_uses_existing_rounds(tmp_path):
    rep = build_report(fabricated_comparison(tmp_path, interrupted=True), plots=True)
    b = rep["table"][1]
    assert b["incomplete"] == ["B-s1 (1 of 2 rounds)"]
    assert b["final_accuracy"] == pytest.approx((0.86 + 0.81) / 2)
    assert "Incomplete runs (their existing rounds are used): B-s1 (1 of 2 rounds)" in rep["markdown"]
    assert "metric_vs_round.png" in rep["plots"]


def test_compare_config_errors(tiny_cfg_doc, tmp_path):
    bad = _doc(tiny_cfg_doc)
    bad["methods"][1]["overrides"] = {"data.num_clients": 4}
    with pytest.raises(ConfigError, match="would change the shared federation"):
        parse_compare(bad)
    bad = _doc(tiny_cfg_doc)
    bad["baseline"] = "Nope"
    with pytest.raises(ConfigError, match="baseline 'Nope' is not one of the method labels"):
        parse_compare(bad)
    bad = _doc(tiny_cfg_doc)
    bad["methods"][1]["label"] = "FedAvg"
    with pytest.raises(ConfigError, match=r"methods\.1\.label: duplicate label 'FedAvg' \(the label of methods\.0 too\)"):
        parse_compare(bad)
    bad = _doc(tiny_cfg_doc)
    bad["methods"][1]["method"] = "magic"
    with pytest.raises(ConfigError, match="unknown method 'magic'"):
        parse_compare(bad)
    with pytest.raises(FileNotFoundError):
        load_compare(tmp_path / "missing.yaml")


def test_compare_checks_method_options_before_running(tiny_cfg_doc):
    bad = _doc(tiny_cfg_doc)
    bad["methods"][0]["method_options"] = {"warp": 9}
    with pytest.raises(ConfigError, match="invalid comparison <dict>:\n  methods.0.method_options.warp: unknown key"):
        parse_compare(bad)


def test_optional_columns_appear_only_when_reported(tmp_path):
    c = fabricated_comparison(tmp_path)
    assert "competitive ratio" not in build_report(c, plots=False)["markdown"]
    for lab, ratio in (("A", 1.0), ("B", 0.5)):
        for s in (0, 1):
            (c / f"runs/{lab}-s{s}/summary.json").write_text(
                json.dumps({"competitive_ratio": ratio, "candidates_evaluated": 100})
            )
    rep = build_report(c, plots=False)
    b = rep["table"][1]
    assert b["competitive_ratio"] == 0.5 and b["competitive_ratio_vs"] == pytest.approx(-50.0)
    assert "| competitive ratio |" in rep["markdown"].replace("candidates evaluated | competitive ratio", "| competitive ratio")
    assert "competitive_ratio_vs_baseline" in (c / "table.csv").read_text()


def test_default_comparison_is_its_config_file():
    """`fedselect compare` with no argument reads the packaged file, which configs/ shows."""
    from pathlib import Path

    from fedselect.study.compare import DEFAULT_COMPARE

    shown = Path(__file__).parents[2] / "configs" / "compare-default.yaml"
    assert shown.resolve() == DEFAULT_COMPARE.resolve() and DEFAULT_COMPARE.is_file()
    assert load_compare(None) == load_compare(shown)
    assert [m.label for m in load_compare(None).methods] == ["FedAvg", "FLASH-RL", "FAVOR"]


def test_interrupted_comparison_is_finished_by_resume(tmp_path, tiny_cfg_doc):
    import shutil

    from typer.testing import CliRunner

    from fedselect.cli import app

    cc = parse_compare(_doc(tiny_cfg_doc))
    d = tmp_path / "c"
    run_comparison(cc, d)
    before = {p.name: (p / "metrics.csv").read_bytes() for p in (d / "runs").iterdir()}
    keys = ("final_accuracy", "e2e_latency_s", "communication_mb", "rounds_to_target")
    table = [[e[k] for k in keys] for e in build_report(d, plots=False)["table"]]
    # FedAvg stopped after its last checkpoint but before its summary; Full never started
    (d / "runs/FedAvg-s0/summary.json").unlink()
    shutil.rmtree(d / "runs/Full-s0")
    assert "incomplete" in build_report(d, plots=False)["markdown"].lower()
    res = CliRunner().invoke(app, ["compare", "--resume", str(d), "-q"])
    assert res.exit_code == 0, res.output
    assert {p.name: (p / "metrics.csv").read_bytes() for p in (d / "runs").iterdir()} == before
    assert [[e[k] for k in keys] for e in build_report(d, plots=False)["table"]] == table  # wall time differs
    # refused combinations and targets name the problem
    res = CliRunner().invoke(app, ["compare", "--resume", str(d), "--seeds", "1"])
    assert res.exit_code == 2 and "cannot be combined with --seeds" in res.output
    res = CliRunner().invoke(app, ["compare", "--resume", str(tmp_path)])
    assert res.exit_code == 2 and "no compare.json there" in res.output


def _last(run_dir, key):
    from fedselect.common.files import read_csv_rows

    return float(read_csv_rows(run_dir / "metrics.csv")[-1][key])


def test_methods_with_their_own_rounds_are_tabled_paired_and_resumed_each_at_its_own(tmp_path, tiny_cfg_doc):
    """FedAvg 1 round, Full 3 (the base's), FedAvg-2 2 (as ``overrides: {rounds: 2}``), seeds 0, 1."""
    from fedselect.experiment.run import run_experiment

    doc = _doc({**tiny_cfg_doc, "rounds": 3, "checkpoint_every": 1}, seeds=(0, 1))
    doc["methods"] = [
        {"label": "FedAvg", "method": "fedavg", "rounds": 1},
        {"label": "Full", "method": "full"},
        {"label": "FedAvg-2", "method": "fedavg", "overrides": {"rounds": 2}},
    ]
    cc = parse_compare(doc)
    assert cc.rounds_of() == {"FedAvg": 1, "Full": 3, "FedAvg-2": 2} and cc.methods[2].overrides == {}
    d = tmp_path / "c"
    run_comparison(cc, d)
    rounds = {"FedAvg": 1, "Full": 3, "FedAvg-2": 2}
    for lab, t in rounds.items():
        for s in (0, 1):
            rows = (d / f"runs/{lab}-s{s}/metrics.csv").read_text().splitlines()
            assert len(rows) == 1 + 1 + t  # header, round 0, its own rounds
    rep = build_report(d, plots=True)
    by = {e["label"]: e for e in rep["table"]}
    for lab in rounds:
        runs = [d / f"runs/{lab}-s{s}" for s in (0, 1)]
        assert by[lab]["final_accuracy"] == pytest.approx(np.mean([_last(r, "accuracy") for r in runs]))
        comm = [(_last(r, "cum_upload_bytes") + _last(r, "cum_download_bytes")) / 1e6 for r in runs]
        assert by[lab]["communication_mb"] == pytest.approx(np.mean(comm))
        assert by[lab]["rounds_planned"] == [rounds[lab]] and by[lab]["incomplete"] == []
    # each its own total: FedAvg 2 clients x 1 round, Full 8 clients x 3 rounds (the same model up and down)
    assert by["FedAvg"]["communication_mb"] == pytest.approx(2 * 2 * 101_800 / 1e6)  # MLP 784-32-10: 25,450 floats
    assert by["Full"]["communication_mb"] == pytest.approx(2 * 8 * 3 * 101_800 / 1e6)
    # the paired final difference pairs each seed's own last rounds
    cell = {p["label"]: p for p in rep["paired"]}["Full"]["cells"]["final_accuracy"]
    for s in (0, 1):
        want = 100 * (_last(d / f"runs/Full-s{s}", "accuracy") - _last(d / f"runs/FedAvg-s{s}", "accuracy"))
        assert cell["diffs"][s] == pytest.approx(want)
    assert "Methods ran different numbers of rounds (FedAvg 1, Full 3, FedAvg-2 2)" in rep["markdown"]
    assert "Methods ran different numbers of rounds" in (d / "report.html").read_text()
    # FedAvg-2 seed 0 interrupted after its round 1: incomplete against its own 2 rounds, not the base's 3
    before = (d / "runs/FedAvg-2-s0/metrics.csv").read_bytes()
    run_experiment(cc.experiment(cc.methods[2], 0), d / "runs/FedAvg-2-s0", stop_after=1, overwrite=True)
    rep = build_report(d, plots=False)
    assert {e["label"]: e["incomplete"] for e in rep["table"]} == {
        "FedAvg": [],
        "Full": [],
        "FedAvg-2": ["FedAvg-2-s0 (1 of 2 rounds)"],
    }
    run_comparison(saved_compare_of(d), d, resume=True)  # continued to its own 2 rounds, the rest kept
    assert (d / "runs/FedAvg-2-s0/metrics.csv").read_bytes() == before
    assert all(e["incomplete"] == [] for e in build_report(d, plots=False)["table"])


def saved_compare_of(d):
    from fedselect.study.compare import saved_compare

    return saved_compare(d)


def test_method_rounds_are_validated_and_compare_rounds_sets_every_method(tiny_cfg_doc, tmp_path):
    def entry(**kw):
        doc = _doc(tiny_cfg_doc)
        doc["methods"][1].update(kw)
        return doc

    for bad, msg in (
        ({"rounds": 0}, r"methods\.1\.rounds: expected an integer >= 1"),
        ({"rounds": True}, r"methods\.1\.rounds: Input should be a valid integer"),
        ({"rounds": 2.5}, r"methods\.1\.rounds: Input should be a valid integer"),
        ({"rounds": 4, "overrides": {"rounds": 5}}, r"rounds: given twice \(rounds: 4 and overrides.rounds: 5\)"),
        ({"overrides": {"rounds": 0}}, r"methods\.1\.rounds: expected an integer >= 1"),
    ):
        with pytest.raises(ConfigError, match=msg):
            parse_compare(entry(**bad))
    cc = parse_compare(entry(rounds=7))
    assert cc.rounds_of() == {"FedAvg": 2, "Full": 7}
    assert cc.with_rounds(1).rounds_of() == {"FedAvg": 1, "Full": 1}
    with pytest.raises(ConfigError, match="rounds"):
        cc.with_rounds(0)
    # --set rounds=N (load_compare's overrides, the comparison's `set`) is every method's, as --rounds N is
    import yaml

    (tmp_path / "c.yaml").write_text(yaml.safe_dump(entry(rounds=7)))
    assert load_compare(tmp_path / "c.yaml", {"rounds": 3}).rounds_of() == {"FedAvg": 3, "Full": 3}
    assert load_compare(tmp_path / "c.yaml").rounds_of() == {"FedAvg": 2, "Full": 7}
    from typer.testing import CliRunner

    from fedselect.cli import app

    res = CliRunner().invoke(app, ["compare", str(tmp_path / "c.yaml"), "--rounds", "1", "--out", str(tmp_path / "o"), "-q"])
    assert res.exit_code == 0, res.output
    assert [len((tmp_path / f"o/runs/{lab}-s0/metrics.csv").read_text().splitlines()) for lab in ("FedAvg", "Full")] == [3, 3]


# -- --set in a comparison; labels that would share a directory ------------------------------


def test_set_lands_in_every_method_over_its_own_and_is_kept_for_resume(tiny_cfg_doc, tmp_path):
    """`fedselect compare --set KEY=VALUE`: the comparison's `set`, applied to every run last
    (before: to the base only, so a method's own value silently won)."""
    import yaml

    doc = _doc(tiny_cfg_doc)
    doc["methods"][1]["overrides"] = {"train.lr": 0.2}
    doc["methods"].append({"label": "Prox", "method": "fedprox", "method_options": {"mu": 0.5}})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
    cc = load_compare(tmp_path / "c.yaml", {"train.lr": 0.1, "rounds": 1})
    assert cc.set_ == {"train.lr": 0.1, "rounds": 1}
    assert {m.label: (cc.experiment(m, 0).train.lr, cc.experiment(m, 0).rounds) for m in cc.methods} == {
        "FedAvg": (0.1, 1),
        "Full": (0.1, 1),
        "Prox": (0.1, 1),
    }
    assert cc.experiment(cc.methods[2], 0).algorithm.options["mu"] == 0.5  # the entry's own option is kept
    assert "set" in cc.model_dump(mode="json")  # compare.json records it; --resume finishes the same comparison
    assert parse_compare(cc.model_dump(mode="json")) == cc
    with pytest.raises(ConfigError) as e:
        load_compare(tmp_path / "c.yaml", {"seed": 1, "selector.name": "oort", "method": "full", "algorithm.options.mu": 1})
    text = str(e.value)
    assert "set.seed: not used: every run takes its seed from `seeds:` (or --seeds)" in text
    assert "set.selector.name: the methods say what runs" in text and "set.method: the methods say what runs" in text
    assert "set.algorithm.options.mu" in text and "unknown key" in text  # allowed as a key, refused by FedAvg's options
    assert "set: --set (and `set:`) applies to every method; to change one method only, edit its entry" in text
    with pytest.raises(ConfigError) as e:  # a key every method takes: no such hint
        load_compare(tmp_path / "c.yaml", {"seed": 1})
    assert "applies to every method" not in str(e.value)
    doc["set"] = {"train.lr": 0.3}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"\['train.lr'\] given twice \(in the config's `set:` and on the command line\)"):
        load_compare(tmp_path / "c.yaml", {"train.lr": 0.1})
    doc["base"]["seed"] = 4
    with pytest.raises(ConfigError, match="base.seed: not used: every run takes its seed from `seeds:`"):
        parse_compare(doc)


@pytest.mark.parametrize(
    "a,b,said",
    [
        ("FLASH RL", "FLASH_RL", "'FLASH_RL' and the label 'FLASH RL' of methods.0 both become 'FLASH_RL'"),
        ("FedAvg", "fedavg", "'fedavg' and the label 'FedAvg' of methods.0 become 'FedAvg' and 'fedavg'"),
    ],
)
def test_labels_that_become_one_directory_are_refused_before_anything_runs(tmp_path, tiny_cfg_doc, a, b, said):
    import yaml
    from typer.testing import CliRunner

    from fedselect.cli import app

    doc = _doc(tiny_cfg_doc)
    doc["methods"] = [{"label": a, "method": "fedavg"}, {"label": b, "method": "full"}]
    doc["baseline"] = a
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
    res = CliRunner().invoke(app, ["compare", str(tmp_path / "c.yaml"), "-o", str(tmp_path / "o"), "-q"])
    text = " ".join(res.output.split())
    assert res.exit_code == 2 and f"methods.1.label: {said}" in text, text
    assert not (tmp_path / "o").exists()


def test_a_method_entry_refines_the_base_part_it_names_and_replaces_another(tiny_cfg_doc):
    from fedselect.config.contenders import MethodSpec

    base = {"selector": {"name": "oort", "options": {"exploration_factor": 0.5}}, "method_options": {"a": 1}}
    same = MethodSpec(selector={"name": "oort", "options": {"pacer_step": 5}}).apply(base)
    assert same["selector"] == {"name": "oort", "options": {"exploration_factor": 0.5, "pacer_step": 5}}
    assert MethodSpec(selector={"name": "fastest"}).apply(base)["selector"] == {"name": "fastest"}
    assert "selector" in MethodSpec(method="oort").apply(base)  # the preset's selector is oort: its options stay
    assert "selector" not in MethodSpec(method="fedavg").apply(base)
    assert MethodSpec(method="fedavg", method_options={"b": 2}).apply(base)["method_options"] == {"a": 1, "b": 2}
    # a base preset keeps naming the part an entry does not replace
    doc = _doc(tiny_cfg_doc)
    doc["base"]["method"] = "fedprox"
    doc["methods"] = [{"label": "FedProx", "method": "fedprox"}, {"label": "Oort+FedProx", "selector": {"name": "oort"}}]
    doc["baseline"] = "FedProx"
    cc = parse_compare(doc)
    cfg = cc.experiment(cc.methods[1], 0)
    assert (cfg.selector.name, cfg.algorithm.name, cfg.algorithm.options["mu"]) == ("oort", "fedprox", 0.01)
