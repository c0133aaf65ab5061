"""End-to-end runs on small real data (embedded MNIST): determinism, files, summaries."""

import json

import pytest

from fedselect.common.files import read_csv_rows
from fedselect.config.schema import ConfigError
from fedselect.experiment.metrics import summarize
from fedselect.experiment.resolve import parse_experiment, resolve_doc
from fedselect.experiment.run import run_experiment


def test_same_seed_gives_identical_metrics_csv(tmp_path, tiny_cfg_doc):
    cfg = resolve_doc(tiny_cfg_doc)
    s1 = run_experiment(cfg, tmp_path / "a")
    run_experiment(cfg, tmp_path / "b")
    a, b = (tmp_path / "a" / "metrics.csv").read_bytes(), (tmp_path / "b" / "metrics.csv").read_bytes()
    assert a == b
    rows = read_csv_rows(tmp_path / "a" / "metrics.csv")
    assert [r["round"] for r in rows] == ["0", "1", "2"]
    assert all(len(r["selected"].split(";")) == 2 for r in rows[1:])
    # end-to-end latency is the cumulative sum of round latencies
    assert float(rows[2]["e2e_latency_s"]) == pytest.approx(float(rows[1]["round_latency_s"]) + float(rows[2]["round_latency_s"]))
    # written files
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary == s1 and summary["complete"] is True and summary["rounds"] == 2
    assert (tmp_path / "a" / "config.yaml").read_text().startswith("name: tiny")
    assert 0.0 <= summary["final_accuracy"] <= 1.0
    # upload bytes: 2 clients x 4 bytes x (784*32 + 32 + 32*10 + 10) parameters
    assert int(rows[1]["upload_bytes"]) == 2 * 4 * (784 * 32 + 32 + 320 + 10)


def test_different_seed_changes_selection(tmp_path, tiny_cfg_doc):
    a = run_experiment(resolve_doc(tiny_cfg_doc), tmp_path / "a")
    tiny_cfg_doc["seed"] = 4
    run_experiment(resolve_doc(tiny_cfg_doc), tmp_path / "b")
    ra, rb = read_csv_rows(tmp_path / "a" / "metrics.csv"), read_csv_rows(tmp_path / "b" / "metrics.csv")
    assert [r["selected"] for r in ra] != [r["selected"] for r in rb]
    assert a["rounds"] == 2


def test_full_participation_selects_everyone(tmp_path, tiny_cfg_doc):
    tiny_cfg_doc.update(method="full", rounds=1)
    run_experiment(resolve_doc(tiny_cfg_doc), tmp_path / "f")
    rows = read_csv_rows(tmp_path / "f" / "metrics.csv")
    assert rows[1]["selected"] == ";".join(str(i) for i in range(8))


def test_rounds_to_target_none_when_never_reached():
    rows = [
        {
            "round": r,
            "accuracy": a,
            "f1_macro": a,
            "e2e_latency_s": 10.0 * r,
            "cum_upload_bytes": 1e6 * r,
            "cum_download_bytes": 0,
        }
        for r, a in [(0, 0.1), (1, 0.5), (2, 0.7), (3, 0.6)]
    ]
    s = summarize(rows, target=0.9)
    assert s["rounds_to_target"] is None and s["latency_to_target_s"] is None
    s = summarize(rows, target=0.65)
    assert s["rounds_to_target"] == 2 and s["latency_to_target_s"] == 20.0
    assert s["final_accuracy"] == 0.6 and s["best_accuracy"] == 0.7 and s["communication_mb"] == 3.0


@pytest.mark.parametrize(
    "patch,needle",
    [
        ({"clients_per_round": 30}, "clients_per_round (U = 30) must be <= data.num_clients (N = 20)"),
        ({"clients_per_round": 0}, "clients_per_round: Input should be greater than or equal to 1"),
        ({"rounds": 0}, "rounds: Input should be greater than or equal to 1"),
        ({"train": {"lr": 0}}, "train.lr: Input should be greater than 0"),
        ({"data": {"partition": {"scheme": "dirichlet", "alpha": 0}}}, "alpha must be a number > 0"),
        ({"data": {"dataset": "imagenet"}}, "unknown dataset 'imagenet'"),
        ({"method": "magic"}, "unknown method 'magic'"),
        ({"roundz": 3}, "roundz: unknown key"),
        ({"train": {"epochz": 3}}, "train.epochz: unknown key"),
    ],
)
def test_bad_config_names_the_key(patch, needle):
    with pytest.raises(ConfigError) as e:
        parse_experiment(patch)
    assert needle in str(e.value)
