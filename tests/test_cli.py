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


def test_version_is_the_package_version():
    import tomllib
    from pathlib import Path

    import fedselect

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output == f"fedselect {project['version']}\n"
    assert fedselect.__version__ == project["version"]


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


# -- one policy for the command line and the Python API -----------------------------------------

TINY = ["--rounds", "1", "--set", "data.num_clients=4", "--set", "clients_per_round=2", "--set", "model.name=mlp"]
TINY_DOC = {"rounds": 1, "data": {"num_clients": 4}, "clients_per_round": 2, "model": {"name": "mlp"}}


def test_cli_and_api_name_a_run_directory_alike(tmp_path, monkeypatch):
    """runs/<name>-<method>-s<seed>-<time>, the method being the resolved display name: a preset
    whose selector is replaced is named selector+algorithm by both (the API used to say the preset)."""
    import re

    import fedselect
    from fedselect import api

    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["run", *TINY, "--method", "fedavg", "--selector", "fastest", "--seed", "3", "-q"])
    assert res.exit_code == 0, res.output
    (cli_dir,) = (tmp_path / "runs").iterdir()
    assert re.fullmatch(r"default-fastest\+fedavg-s3-\d{8}-\d{6}", cli_dir.name), cli_dir.name
    plan = api.plan_run({**TINY_DOC, "method": "fedavg", "selector": {"name": "fastest"}}, seed=3)
    assert plan.config.method == "fedavg" and plan.method == "fastest+fedavg"
    assert re.fullmatch(r"runs/experiment-fastest\+fedavg-s3-\d{8}-\d{6}", plan.run_dir.as_posix())
    api_dir = fedselect.run(None, rounds=1, data__num_clients=4, clients_per_round=2, model__name="mlp", seed=3).run_dir
    assert re.fullmatch(r"runs/default-fedavg-s3-\d{8}-\d{6}", api_dir.as_posix())


def test_cli_and_api_refuse_an_out_that_holds_a_run_alike(tmp_path):
    import fedselect

    out = tmp_path / "r"
    assert runner.invoke(app, ["run", *TINY, "-o", str(out), "-q"]).exit_code == 0
    res = runner.invoke(app, ["run", *TINY, "-o", str(out), "-q"])
    cli_msg = " ".join(res.output.split())
    assert res.exit_code == 2 and "already holds a run" in cli_msg
    with pytest.raises(FileExistsError) as e:
        fedselect.run(TINY_DOC, out)
    assert " ".join(str(e.value).split()) in cli_msg  # the same message
    assert fedselect.run(TINY_DOC, out, overwrite=True).summary["rounds"] == 1


def test_comparison_directory_policy(tmp_path, monkeypatch):
    import re

    from fedselect import api

    monkeypatch.chdir(tmp_path)
    assert re.fullmatch(r"runs/c-\d{8}-\d{6}", api.output_dir("comparison", "c").as_posix())
    (tmp_path / "cmp").mkdir()
    (tmp_path / "cmp" / "compare.json").write_text("{}")
    with pytest.raises(FileExistsError, match="already holds a comparison; finish it with --resume"):
        api.output_dir("comparison", "c", tmp_path / "cmp")
    assert api.output_dir("comparison", "c", tmp_path / "x", resume=tmp_path / "cmp") == tmp_path / "cmp"
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "sweep.json").write_text("{}")
    assert api.output_dir("sweep", "s", tmp_path / "sw") == tmp_path / "sw"  # a sweep given again continues


# -- --engine ----------------------------------------------------------------------------------


def test_engine_option_is_a_config_override(tmp_path):
    import yaml

    from fedselect.cli import _overrides
    from fedselect.compare import load_compare

    for cmd in ("run", "compare"):
        text = " ".join(runner.invoke(app, [cmd, "--help"]).output.split())
        assert "--engine [simulator|flower]" in text and "Flower's simulation engine, one node per client" in text
    assert _overrides(None, None, None, engine="flower") == {"engine": "flower"}
    assert _overrides(None, None, None, ["engine=simulator"]) == {"engine": "simulator"}  # the same as --set
    cc = load_compare(None, _overrides(None, None, None, engine="flower"))
    assert {cc.experiment(m, 0).engine for m in cc.methods} == {"flower"}
    res = runner.invoke(app, ["run", *TINY, "--engine", "sim", "-o", str(tmp_path / "bad")])
    assert res.exit_code == 2 and "'sim' is not one of 'simulator', 'flower'" in res.output
    assert not (tmp_path / "bad").exists()
    out = tmp_path / "r"
    assert runner.invoke(app, ["run", *TINY, "--engine", "simulator", "-o", str(out), "-q"]).exit_code == 0
    assert yaml.safe_load((out / "config.yaml").read_text())["engine"] == "simulator"
    # --resume continues on the engine saved in config.yaml
    res = runner.invoke(app, ["run", "--resume", str(out), "--engine", "flower", "-q"])
    assert res.exit_code == 2 and "it cannot be combined with --engine" in " ".join(res.output.split())
    res = runner.invoke(app, ["compare", "--resume", str(out), "--engine", "flower", "-q"])
    assert res.exit_code == 2 and "it cannot be combined with --engine" in " ".join(res.output.split())


def test_list_shows_every_fleet_key_with_its_default():
    from fedselect.config_fleet import AVAILABILITY_KEYS, CAPACITY_KEYS
    from fedselect.console import fleet_table

    t = fleet_table()
    rows = dict(zip(t.columns[0]._cells, t.columns[1]._cells))
    applies = dict(zip(t.columns[0]._cells, t.columns[2]._cells))
    assert rows["overselect"] == "1.0" and rows["straggler"] == "'drop'" and rows["availability.model"] == "'always'"
    assert rows["availability.mean_on_s"] == "3600.0" and applies["availability.mean_on_s"] == "markov"
    assert rows["system.adaptive_deadline.percentile"] == "required"
    for k in {k for ks in AVAILABILITY_KEYS.values() for k in ks}:
        assert f"availability.{k}" in rows
    for k in {k for ks in CAPACITY_KEYS.values() for k in ks}:
        assert f"system.capacity.{k}" in rows
    assert applies["system.capacity.compute_mhz"] == "lognormal, pareto"
    res = runner.invoke(app, ["list"])
    assert res.exit_code == 0 and "fleet settings" in res.output


def test_list_shows_every_partition_scheme_with_its_parameters():
    from fedselect.console import partition_table
    from fedselect.data.partition import PARTITIONERS

    t = partition_table()
    rows = dict(zip(t.columns[0]._cells, t.columns[1]._cells))
    assert set(rows) == set(PARTITIONERS)
    assert rows["client_dirichlet"] == "alpha=0.5, samples_per_client=None, size_sigma=0.0, min_size=1, replacement=False"
    assert rows["dirichlet"] == "alpha=0.5, min_size=10" and rows["iid"] == "-"
    res = runner.invoke(app, ["list"])
    assert res.exit_code == 0 and "partition schemes" in res.output
