"""The command line: --set overrides, --threads, help texts."""

import pytest
from typer.testing import CliRunner

from fedselect.cli import _parse_sets, app

runner = CliRunner()


def test_parse_sets_reads_yaml_values():
    assert _parse_sets(["train.lr=0.1", "data.options.path=/data/x", "system.count_download=true"]) == {
        "train.lr": 0.1, "data.options.path": "/data/x", "system.count_download": True}
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        _parse_sets(["train.lr"])


def test_bad_set_value_names_the_key(tmp_path):
    res = runner.invoke(app, ["run", "--set", "train.momentum=1.5", "-o", str(tmp_path / "r")])
    assert res.exit_code == 2 and "train.momentum" in res.output
    assert not (tmp_path / "r").exists()


def test_help_documents_every_command():
    res = runner.invoke(app, ["--help"])
    for cmd in ("run", "compare", "report", "sweep"):
        assert cmd in res.output
    res = runner.invoke(app, ["run", "--help"])
    for opt in ("--rounds", "--seed", "--method", "--out", "--resume", "--set", "--threads"):
        assert opt in res.output
