"""Bad input found by trying fedselect as a new user: every case ends in one clear error naming
the file, key or value (exit code 2, no traceback) and writes nothing."""

import json
import logging
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedselect.cli import app
from fedselect.cli.options import parse_seeds
from fedselect.common.files import read_json
from fedselect.config.load import load_config
from fedselect.config.schema import ConfigError
from fedselect.experiment.metrics import CORE_COLUMNS, read_metrics
from fedselect.experiment.output_dir import check_output_dir

runner = CliRunner()
TINY = ["--rounds", "1", "--set", "data.num_clients=4", "--set", "clients_per_round=2", "--set", "model.name=mlp"]


def _files(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


#: the metrics.csv header before the fleet columns (clock_s, available) and latency_sum_s were
#: added: files written by earlier versions must still read
EARLIER_COLUMNS = [c for c in CORE_COLUMNS[: CORE_COLUMNS.index("failed") + 1] if c != "latency_sum_s"]
assert len(EARLIER_COLUMNS) == 13


def _fake_run(d: Path, rows: list[list[str]] | None = None, columns=EARLIER_COLUMNS) -> Path:
    """A run directory written by hand, in an earlier version's columns: metrics.csv with two
    rounds (accuracy 0.5, 0.75)."""
    d.mkdir(parents=True)
    rows = rows or [
        ["1", "0;1", "0.5", "0.4", "1.0", "1.0", "2.0", "2.0", "10", "10", "10", "10", "0"],
        ["2", "0;1", "0.75", "0.7", "0.9", "0.9", "3.0", "5.0", "10", "10", "20", "20", "0"],
    ]
    (d / "metrics.csv").write_text(",".join(columns) + "\n" + "".join(",".join(r) + "\n" for r in rows))
    return d


def _error(res) -> str:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and "error:" in res.output, res.output
    return " ".join(res.output.split())


def test_report_of_a_hand_made_run_gives_its_figures(tmp_path):
    d = _fake_run(tmp_path / "r")
    res = runner.invoke(app, ["report", str(d), "--no-plots"])
    assert res.exit_code == 0, res.output
    table = (d / "table.csv").read_text()
    assert "0.75" in table and "5.0" in table  # final accuracy and end-to-end latency of round 2


def test_report_names_missing_columns_of_metrics_csv(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    (d / "metrics.csv").write_text("round,accuracy\n1,abc\n2,\n")
    out = _error(runner.invoke(app, ["report", str(d), "--no-plots"]))
    assert "metrics.csv: missing column(s) f1_macro, e2e_latency_s, cum_upload_bytes, cum_download_bytes" in out
    assert _files(d) == {"metrics.csv"}


def test_report_names_the_line_and_column_of_a_bad_value(tmp_path):
    rows = [
        ["1", "0;1", "0.5", "0.4", "1.0", "1.0", "2.0", "2.0", "10", "10", "10", "10", "0"],
        ["2", "0;1", "garbage", "0.7", "0.9", "0.9", "3.0", "5.0", "10", "10", "20", "20", "0"],
    ]
    d = _fake_run(tmp_path / "r", rows)
    with pytest.raises(ValueError, match=r"metrics.csv, line 3, column accuracy: 'garbage' is not a number"):
        read_metrics(d / "metrics.csv")
    out = _error(runner.invoke(app, ["report", str(d), "--no-plots"]))
    assert "line 3, column accuracy" in out


def test_not_evaluated_rounds_and_a_cut_off_last_line_are_fine(tmp_path):
    rows = [
        ["1", "0;1", "nan", "nan", "", "1.0", "2.0", "2.0", "10", "10", "10", "10", "0"],
        ["2", "0;1", "0.75", "0.7", "0.9", "0.9", "3.0", "5.0", "10", "10", "20", "20", "0"],
    ]
    d = _fake_run(tmp_path / "r", rows)
    with open(d / "metrics.csv", "a") as fh:
        fh.write("3,0;1,0.8")  # a run killed mid-write
    assert [r["round"] for r in read_metrics(d / "metrics.csv")] == ["1", "2"]


@pytest.mark.parametrize("name", ["summary.json", "compare.json"])
def test_corrupt_json_is_named(tmp_path, name):
    d = _fake_run(tmp_path / "r")
    (d / name).write_text('{"final_accuracy": ')
    with pytest.raises(ValueError, match=rf"{name}: not valid JSON \(Expecting value at line 1 column 20\)"):
        read_json(d / name)
    out = _error(runner.invoke(app, ["report", str(d), "--no-plots"]))
    assert f"{d / name}: not valid JSON" in out


def test_metrics_csv_that_is_not_text_is_named(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    (d / "metrics.csv").write_bytes(b"\xff\xfe\x00r\x00o")
    out = _error(runner.invoke(app, ["report", str(d), "--no-plots"]))
    assert "metrics.csv: not a UTF-8 text file" in out


def test_report_of_a_file_says_so(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    out = _error(runner.invoke(app, ["report", str(f)]))
    assert "is a file" in out


@pytest.mark.parametrize("command", ["run", "compare"])
def test_empty_or_dot_out_is_refused(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    for out in ("", "."):
        msg = _error(runner.invoke(app, [command, *TINY, "--out", out]))
        assert "give a directory of its own" in msg
    assert _files(tmp_path) == set()


def test_one_directory_holds_one_kind_of_output(tmp_path):
    run_dir = _fake_run(tmp_path / "run")
    (tmp_path / "cmp").mkdir()
    (tmp_path / "cmp" / "compare.json").write_text("{}")
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "sweep.json").write_text("{}")
    with pytest.raises(FileExistsError, match=r"already holds a comparison \(compare.json\); a run needs"):
        check_output_dir(tmp_path / "cmp", "run")
    with pytest.raises(FileExistsError, match=r"already holds a run \(metrics.csv\); a comparison needs"):
        check_output_dir(run_dir, "comparison")
    with pytest.raises(FileExistsError, match=r"already holds a sweep \(sweep.json\); a comparison needs"):
        check_output_dir(tmp_path / "sw", "comparison")
    check_output_dir(tmp_path / "cmp", "comparison")  # its own kind: compare's own check decides
    before = _files(tmp_path)
    assert "already holds a comparison" in _error(runner.invoke(app, ["run", *TINY, "--out", str(tmp_path / "cmp")]))
    assert "already holds a run" in _error(runner.invoke(app, ["compare", *TINY, "--out", str(run_dir)]))
    assert _files(tmp_path) == before


def test_out_that_cannot_be_created_is_refused_before_anything_runs(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    assert "exists and is not a directory" in _error(runner.invoke(app, ["compare", *TINY, "--out", str(f)]))
    msg = _error(runner.invoke(app, ["run", *TINY, "--out", str(f / "x")]))
    assert f"{f} is not a directory, so {f / 'x'} cannot be created" in msg
    if os.geteuid() != 0:  # root may write anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        assert "is not writable" in _error(runner.invoke(app, ["run", *TINY, "--out", str(ro / "x")]))


def test_sweep_of_an_experiment_config_points_to_run(tmp_path):
    cfg = tmp_path / "e.yaml"
    cfg.write_text("name: e\nrounds: 2\n")
    msg = _error(runner.invoke(app, ["sweep", str(cfg)]))
    assert f"{cfg} is an experiment config" in msg and f"fedselect run {cfg}" in msg


def test_sweep_table_only_needs_an_existing_sweep(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = Path(__file__).resolve().parents[2] / "configs" / "budgeted-sweep-small.yaml"
    assert "(none given)" in _error(runner.invoke(app, ["sweep", str(cfg), "--table-only"]))
    (tmp_path / "empty").mkdir()
    assert "holds no sweep.json" in _error(runner.invoke(app, ["sweep", str(cfg), "--table-only", "--out", "empty"]))
    assert _files(tmp_path) == {"empty"}


@pytest.mark.parametrize("text", ["0,,1", "0,1,", ",0"])
def test_seeds_with_empty_items_are_refused(text):
    with pytest.raises(ValueError, match="distinct comma-separated integers"):
        parse_seeds(text)
    assert parse_seeds("0, 1,2") == [0, 1, 2]


def test_a_key_given_twice_in_a_config_is_refused(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("name: x\nrounds: 2\ntrain:\n  lr: 0.1\nrounds: 5\n")
    with pytest.raises(ConfigError, match=r"key 'rounds' is given twice \(line 2 and line 5\)"):
        load_config(p)
    p.write_text("name: x\ntrain:\n  lr: 0.1\n  lr: 0.2\n")
    with pytest.raises(ConfigError, match=r"key 'lr' is given twice \(line 3 and line 4\)"):
        load_config(p)
    p.write_text("name: x\nrounds: 2\ntrain: {lr: 0.1}\n")
    assert load_config(p).rounds == 2


def test_more_workers_than_cores_start_only_the_cores(caplog):
    import numpy as np

    from fedselect.fl.local.placement import usable_cores
    from fedselect.fl.local.pool import ClientTrainer
    from fedselect.fl.local.train import TrainConfig
    from fedselect.world.data.datasets import ArrayDataset

    data = [ArrayDataset(np.zeros((4, 3), np.float32), np.zeros(4, np.int64), 2) for _ in range(2)]
    with caplog.at_level(logging.WARNING, logger="fedselect"):
        cfg = TrainConfig(epochs=1, batch_size=2, lr=0.1)
        with ClientTrainer(("mlp", (3,), 2, {"hidden": [4]}), data, cfg, workers=usable_cores() + 3, start_timeout_s=120) as tr:
            assert tr.workers == usable_cores() and len(tr.worker_pids()) == usable_cores()
    assert f"{usable_cores() + 3} workers asked for" in caplog.text


def test_list_describes_every_component_in_one_plain_line():
    res = runner.invoke(app, ["list"], env={"COLUMNS": "400"})
    assert res.exit_code == 0
    from fedselect.algorithms import ALGORITHMS
    from fedselect.selectors import SELECTORS

    for reg in (SELECTORS, ALGORITHMS):
        for name in reg.builtin_names():
            summary = reg.get(name).summary
            assert summary and "``" not in summary and "docstring" not in summary, name
            assert summary in " ".join(res.output.split()), name


def test_summary_json_written_by_a_run_still_reads(tmp_path):
    d = _fake_run(tmp_path / "r")
    (d / "summary.json").write_text(json.dumps({"final_accuracy": 0.75, "wall_s": 1.5}))
    assert read_json(d / "summary.json")["wall_s"] == 1.5
    res = runner.invoke(app, ["report", str(d), "--no-plots"])
    assert res.exit_code == 0, res.output
