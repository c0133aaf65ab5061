"""configs/paper/: every file validates (without its data), carries the paper's figures and their
source in the units `fedselect report` uses, and the report prints ours beside them."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pytest
import yaml

from fedselect.config.schema import ConfigError
from fedselect.experiment.options import option_names
from fedselect.report.aggregate import COLUMNS, POINT_KEYS, aggregate_table
from fedselect.report.runs import RunSummary
from fedselect.report.tables import render_markdown
from fedselect.study.compare import CompareConfig, load_compare, parse_compare
from fedselect.study.sweep import SweepConfig, load_sweep, parse_sweep, point_slug, restrict
from fedselect.study.sweep_table import build_sweep_table
from fedselect.world.data import imu
from fedselect.world.data.catalog import DATASETS

PAPER_DIR = Path(__file__).resolve().parents[2] / "configs" / "paper"
FILES = sorted(PAPER_DIR.glob("*.yaml"))
TABLE_KEYS = {k for k, *_ in COLUMNS}
#: keys a `paper:` entry of a comparison may use: the table's columns and their change vs the
#: baseline (``<key>_vs``: points for accuracy/F1, percent otherwise), both printed by the report
PAPER_KEYS = TABLE_KEYS | {k + "_vs" for k in TABLE_KEYS}
FRACTION_KEYS = {"final_accuracy", "best_accuracy", "final_f1_macro"}
#: data sets that cannot be had on these machines: the config must point at the user's copy
USER_DATA = {"cifar10", "mobiact", "iot-flows", "iot-features"}
#: available data sets standing in for a paper's data: the file name must say so
SUBSTITUTES = {"fashion-mnist", "imu-watch", "iot-synthetic"}


def _doc(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _is_sweep(doc: dict) -> bool:
    return "grid" in doc


def _load(path: Path) -> CompareConfig | SweepConfig:
    return load_sweep(path) if _is_sweep(_doc(path)) else load_compare(path)


def _experiments(cfg):
    if isinstance(cfg, SweepConfig):
        return [cfg.experiment(m, restrict(p, m), cfg.seeds[0]) for m in cfg.methods for p in cfg.points()]
    return [cfg.experiment(m, cfg.seeds[0]) for m in cfg.methods]


def test_the_directory_holds_the_expected_experiments():
    names = {p.stem for p in FILES}
    expected = {
        *(
            f"flashrl-table5-{d}"
            for d in ("cifar10-dir08", "cifar10-dir05", "cifar10-shards", "mnist-dir08", "mnist-dir05", "mnist-label2")
        ),
        *(f"flashrl-table5-cifar10-{d}-fashion-mnist-substitute" for d in ("dir08", "dir05", "shards")),
        *(f"flashrl-mobiact-{d}{s}" for d in ("volunteer", "skew8", "skew4") for s in ("", "-imu-watch-substitute")),
        "cefl-table1-mobiact",
        "cefl-table1-imu-watch-substitute",
        "cefl-table1-paper-schedule-imu-watch-substitute",
        "cefl-fig3-clusters-mobiact",
        "budgeted-grid-unsw",
        "budgeted-grid-iot-synthetic-substitute",
        "budgeted-table2-alpha-unsw",
        "budgeted-table2-alpha-iot-synthetic-substitute",
    }
    assert names == expected


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_config_validates_with_method_and_data_options(path):
    doc = _doc(path)
    assert "methods" in doc, "a paper config compares methods (not a plain experiment)"
    cfg = _load(path)
    assert cfg.name == path.stem, "name must match the file name (run directories are named after it)"
    for exp in _experiments(cfg):  # every experiment is resolved: selector, algorithm and their options checked
        assert exp.selector is not None and exp.algorithm is not None and exp.method_options == {}
        ds, opts = exp.data.dataset, exp.data.options
        named, _ = option_names(DATASETS.get(ds), ("seed",))
        allowed = set(named) | (imu._COMMON if ds in ("imu-watch", "mobiact", "mobiact-synthetic") else set())
        assert set(opts) <= allowed, f"{ds}: unknown data options {sorted(set(opts) - allowed)}"
        if exp.method in ("flashrl", "favor"):
            assert exp.eval_every == 1
        if ds in USER_DATA:
            assert str(opts.get("path", "")).startswith("data/"), "user data goes under the git-ignored data/"
        if ds in SUBSTITUTES:
            assert "substitute" in path.stem
        if "synthetic" in ds:
            assert "synthetic" in path.stem


@pytest.mark.parametrize("path", [p for p in FILES if not _is_sweep(_doc(p))], ids=lambda p: p.stem)
def test_comparison_has_paper_figures_in_report_units(path):
    cc = load_compare(path)
    assert cc.paper_source and cc.paper_source.strip()
    assert cc.paper, "paper figures are required"
    labels = [m.label for m in cc.methods]
    numeric = 0
    for lab, figs in cc.paper.items():
        assert lab in labels
        assert figs and set(figs) <= PAPER_KEYS, sorted(set(figs) - PAPER_KEYS)
        for key, val in figs.items():
            assert isinstance(val, (int, float, str)) and not isinstance(val, bool)
            if key.endswith("_vs"):
                assert lab != cc.baseline, "a change vs the baseline cannot be given for the baseline"
            if isinstance(val, str):
                assert key.endswith("_vs") and "up to" in val, "text figures only for the papers' 'up to' claims"
                continue
            numeric += 1
            if key in FRACTION_KEYS:
                assert 0 <= val <= 1, f"{lab}.{key} = {val}: accuracies are fractions, not percent"
            # a stated change must agree with the stated values (report semantics, rounding 0.01)
            base_key = key.removesuffix("_vs")
            if key.endswith("_vs") and base_key in figs and base_key in cc.paper.get(cc.baseline, {}):
                x, b = figs[base_key], cc.paper[cc.baseline][base_key]
                want = 100 * (x - b) if base_key in POINT_KEYS else 100 * (x - b) / b
                assert math.isclose(val, want, abs_tol=0.01), (lab, key, val, want)
    # the volunteer division has no figure of its own in the paper, only the abstract's "up to" ones
    assert numeric >= 1 or path.stem.startswith("flashrl-mobiact-volunteer")
    if "substitute" in path.stem:
        assert "REFERENCE ONLY" in cc.paper_source and "substitute" in (cc.comment or "")


def test_table5_figures_match_the_paper():
    """Spot checks against FLASH-RL Table V and Sec. IV-B / IV-C, CEFL Table I."""
    p = load_compare(PAPER_DIR / "flashrl-table5-cifar10-dir05.yaml").paper
    assert p["FedAvg"] == {"final_accuracy": 0.5099, "e2e_latency_s": 383.92}
    assert p["FLASH-RL"]["e2e_latency_s_vs"] == -24.83 and p["FLASH-RL"]["rounds_to_target_vs"] == -28.97
    sub = load_compare(PAPER_DIR / "flashrl-table5-cifar10-dir05-fashion-mnist-substitute.yaml")
    assert sub.paper == p and sub.base["data"]["dataset"] == "fashion-mnist"
    mn = load_compare(PAPER_DIR / "flashrl-table5-mnist-label2.yaml")
    assert mn.base["rounds"] == 150 and mn.base["data"]["partition"] == {"scheme": "label_skew", "labels_per_client": 2}
    assert mn.paper["FAVOR"]["final_accuracy"] == 0.9902
    s8 = load_compare(PAPER_DIR / "flashrl-mobiact-skew8.yaml")
    assert s8.paper["FedAvg"]["rounds_to_target"] == 417 and s8.paper["FLASH-RL"]["rounds_to_target"] == 228
    assert s8.base["metrics"] == {"target": 0.95, "metric": "f1_macro"}
    assert s8.base["data"]["options"]["activities_per_subject"] == 8
    ce = load_compare(PAPER_DIR / "cefl-table1-mobiact.yaml").paper
    assert ce["Regular FL"] == {"final_accuracy": 0.9107, "communication_mb": 79730}
    assert ce["CEFL"]["communication_mb"] == 1231


@pytest.mark.parametrize("path", [p for p in FILES if _is_sweep(_doc(p))], ids=lambda p: p.stem)
def test_sweep_has_paper_source_and_figures_or_says_there_are_none(path):
    sc = load_sweep(path)
    assert sc.paper_source and sc.paper_source.strip()
    if "no numeric results" in sc.paper_source:
        assert not sc.paper
    else:
        assert sc.paper and all(f.figures for f in sc.paper)


@pytest.mark.parametrize("path", [p for p in FILES if _doc(p)["base"]["data"]["dataset"] in USER_DATA], ids=lambda p: p.stem)
def test_missing_user_data_does_not_stop_validation(path, tmp_path):
    doc = _doc(path)
    doc["base"]["data"]["options"]["path"] = str(tmp_path / "not-here")
    (parse_sweep if _is_sweep(doc) else parse_compare)(doc, str(path))


def _result(label: str, **summary) -> RunSummary:
    return RunSummary(label, 0, Path(label), [], summary, True, 1)


def test_report_prints_ours_beside_the_papers_changes():
    results = [
        _result("FedAvg", final_accuracy=0.50, e2e_latency_s=400.0, rounds_to_target=100),
        _result("FLASH-RL", final_accuracy=0.52, e2e_latency_s=300.0, rounds_to_target=40),
    ]
    table = aggregate_table(results, ["FedAvg", "FLASH-RL"], "FedAvg")
    paper = {
        "FedAvg": {"e2e_latency_s": 383.92},
        "FLASH-RL": {"e2e_latency_s_vs": -24.83, "final_accuracy_vs": 1.26, "rounds_to_target_vs": -28.97},
    }
    md = render_markdown("t", table, "FedAvg", paper, "FLASH-RL Table V")
    assert "## Ours vs the paper (FLASH-RL Table V)" in md
    assert "| FedAvg | e2e_latency_s | 400 | 383.92 |" in md
    assert "| FLASH-RL | e2e_latency_s_vs | -25 | -24.83 |" in md
    assert "| FLASH-RL | final_accuracy_vs | 2 | 1.26 |" in md
    assert "| FLASH-RL | rounds_to_target_vs | -60 | -28.97 |" in md


def test_sweep_table_prints_ours_beside_the_paper(tmp_path):
    sc = load_sweep(PAPER_DIR / "budgeted-table2-alpha-iot-synthetic-substitute.yaml")
    sec = sc.methods[0]
    run = tmp_path / "runs" / f"secretary-{point_slug(restrict(sc.points()[0], sec))}-s0"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"alpha": 367, "final_accuracy": 0.9, "candidates_evaluated": 500}))
    md = build_sweep_table(tmp_path, sc)["markdown"]
    assert "## Ours vs the paper (Budgeted online selection Table II" in md
    assert "| secretary | r2=1 | alpha | 367.0 | 367 |" in md
    assert "| secretary | r2=2 | alpha | - | 243 |" in md  # not run yet


def test_sweep_paper_entries_are_checked():
    doc = _doc(PAPER_DIR / "budgeted-table2-alpha-iot-synthetic-substitute.yaml")
    for bad, msg in (
        ({"method": "nobody"}, "not one of the method labels"),
        ({"point": {"train.lr": 1}}, "not grid keys"),
        ({"figures": {"accuracy": 1}}, "not table columns"),
    ):
        d = copy.deepcopy(doc)
        d["paper"][0].update(bad)
        with pytest.raises(ConfigError, match=msg):
            parse_sweep(d)


def test_readme_lists_every_config():
    text = (PAPER_DIR / "README.md").read_text()
    listed = set(re.findall(r"`([a-z0-9-]+\.yaml)`", text))
    assert {p.name for p in FILES} <= listed
    assert listed <= {p.name for p in FILES} | {p.name for p in PAPER_DIR.parent.glob("*.yaml")}
