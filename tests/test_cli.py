"""The command line: --set overrides, --threads, help texts."""

import pytest
from typer.testing import CliRunner

from fedselect.cli import _parse_sets, app

runner = CliRunner()


def test_parse_sets_reads_yaml_values():
    assert _parse_sets(["train.lr=0.1", "data.options.path=/data/x", "system.count_download=true"]) == {
        "train.lr": 0.1,
        "data.options.path": "/data/x",
        "system.count_download": True,
    }
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        _parse_sets(["train.lr"])


def test_bad_set_value_names_the_key(tmp_path):
    res = runner.invoke(app, ["run", "--set", "train.momentum=1.5", "-o", str(tmp_path / "r")])
    assert res.exit_code == 2 and "train.momentum" in res.output
    assert not (tmp_path / "r").exists()


def test_help_documents_every_command():
    res = runner.invoke(app, ["--help"])
    for cmd in ("run", "compare", "report", "sweep", "list"):
        assert cmd in res.output
    res = runner.invoke(app, ["run", "--help"])
    for opt in (
        "--rounds",
        "--seed",
        "--method",
        "--selector",
        "--algorithm",
        "--out",
        "--resume",
        "--set",
        "--workers",
        "--device",
    ):
        assert opt in res.output
    assert "--threads" not in res.output  # still accepted (old scripts), ignored with a note


def test_old_threads_option_is_accepted_and_ignored(tmp_path):
    res = runner.invoke(
        app,
        [
            "run",
            "--rounds",
            "1",
            "--set",
            "data.num_clients=4",
            "--set",
            "clients_per_round=2",
            "--set",
            "model.name=mlp",
            "--threads",
            "2",
            "-o",
            str(tmp_path / "r"),
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "--threads is no longer needed and is ignored" in " ".join(res.output.split())
