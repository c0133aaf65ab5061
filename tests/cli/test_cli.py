"""The command line: --set overrides, help texts."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedselect.cli import app
from fedselect.cli.options import parse_sets

runner = CliRunner()


def test_parse_sets_reads_yaml_values():
    assert parse_sets(["train.lr=0.1", "data.options.path=/data/x", "system.count_download=true"]) == {
        "train.lr": 0.1,
        "data.options.path": "/data/x",
        "system.count_download": True,
    }
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_sets(["train.lr"])


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


def test_version_is_the_package_version():
    import tomllib
    from pathlib import Path

    import fedselect

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output == f"fedselect {project['version']}\n"
    assert fedselect.__version__ == project["version"]


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

    from fedselect.cli.options import option_overrides
    from fedselect.study.compare import load_compare

    for cmd in ("run", "compare"):
        text = " ".join(runner.invoke(app, [cmd, "--help"]).output.split())
        assert "--engine [simulator|flower|package.module:ClassName]" in text
        assert "Flower's simulation engine, one node per client" in text and "your own as package.module:ClassName" in text
    assert option_overrides(None, None, None, engine="flower") == {"engine": "flower"}
    assert option_overrides(None, None, None, ["engine=simulator"]) == {"engine": "simulator"}  # the same as --set
    cc = load_compare(None, option_overrides(None, None, None, engine="flower"))
    assert {cc.experiment(m, 0).engine for m in cc.methods} == {"flower"}
    res = runner.invoke(app, ["run", *TINY, "--engine", "sim", "-o", str(tmp_path / "bad")])
    assert res.exit_code == 2 and "'sim' is not an engine; allowed: simulator, flower, or package.module:ClassName" in " ".join(
        res.output.split()
    )
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
    from fedselect.cli.console import fleet_table
    from fedselect.config.fleet import AVAILABILITY_KEYS, CAPACITY_KEYS

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
    assert rows["system.latency_model"] == "'paper'" and rows["system.profiles"] == "'paper'"  # the FLASH-RL code's switches
    assert rows["system.cycles_per_bit"] == "20.0"
    res = runner.invoke(app, ["list"])
    assert res.exit_code == 0 and "fleet settings" in res.output


def test_list_gives_the_values_a_literal_option_allows():
    from fedselect.cli.console import _choices
    from fedselect.experiment.options import options_model
    from fedselect.registry import SELECTORS

    flashrl = options_model(SELECTORS.get("flashrl"))
    assert _choices(flashrl, "schedule") == " (paper|tuned|code)"  # Optional[Literal[...]]
    assert _choices(flashrl, "divergence") == " (paper|code)"
    assert _choices(flashrl, "hidden") == "" and _choices(None, "schedule") == ""


def test_list_shows_every_partition_scheme_with_its_parameters():
    from fedselect.cli.console import kind_table
    from fedselect.registry import PARTITIONERS

    t = kind_table("partitioners")
    rows = dict(zip(t.columns[0]._cells, t.columns[1]._cells))
    assert set(rows) == set(PARTITIONERS.builtin_names())
    assert rows["client_dirichlet"] == "alpha=0.5, samples_per_client=None, size_sigma=0.0, min_size=1, replacement=False"
    assert rows["dirichlet"] == "alpha=0.5, min_size=10" and rows["iid"] == "-"
    res = runner.invoke(app, ["list"])
    assert res.exit_code == 0 and "partition schemes" in res.output


# -- no value dropped: every named option with every kind of --set lands in config.yaml or fails naming the key


def _config_yaml_only(monkeypatch):
    """``fedselect run`` up to config.yaml: the run itself is replaced by writing the resolved
    config as a run writes it (one real run below checks the real writer)."""
    from fedselect import api
    from fedselect.config.load import dump_config

    def write(plan, **kw):
        plan.run_dir.mkdir(parents=True)
        (plan.run_dir / "config.yaml").write_text(dump_config(plan.config))

    monkeypatch.setattr(api, "play", write)


#: the component options: (command-line options, the selector and algorithm they give on the
#: embedded default, which is method fedavg = random + fedavg)
COMPONENTS = [
    ([], "random", "fedavg"),
    (["--method", "fedprox"], "random", "fedprox"),
    (["--algorithm", "fedprox"], "random", "fedprox"),
    (["--selector", "oort"], "oort", "fedavg"),
    (["--method", "oort"], "oort", "fedavg"),
    (["--selector", "oort", "--algorithm", "fedprox"], "oort", "fedprox"),
    (["--method", "oort", "--algorithm", "fedprox"], "oort", "fedprox"),
    (["--method", "fedprox", "--selector", "oort"], "oort", "fedprox"),
]
#: --set items: (item, dotted key, the component it needs, or None)
SETS = [
    ("algorithm.options.mu=0.5", "algorithm.options.mu", "fedprox"),
    ("selector.options.exploration_factor=0.5", "selector.options.exploration_factor", "oort"),
    ("method_options.exploration_factor=0.4", "selector.options.exploration_factor", "oort"),
    ("train.lr=0.1", "train.lr", None),
]


def _at(doc, key):
    for part in key.split("."):
        doc = doc[part]
    return doc


@pytest.mark.parametrize("opts,sel,alg", COMPONENTS, ids=lambda x: " ".join(x) if isinstance(x, list) else x)
@pytest.mark.parametrize("n_sets", [0, 1, 2])
def test_every_component_option_with_every_set_lands_or_fails_naming_the_key(tmp_path, monkeypatch, opts, sel, alg, n_sets):
    """Before: `--algorithm fedprox --set algorithm.options.mu=0.5` wrote mu: 0.01, and
    `--selector oort --set selector.options.exploration_factor=7` was accepted without a word."""
    import itertools

    import yaml

    _config_yaml_only(monkeypatch)
    for i, combo in enumerate(itertools.combinations(SETS, n_sets)):
        if sum(item.startswith(("selector.options.exploration", "method_options.exploration")) for item, _, _ in combo) > 1:
            continue  # the same option twice: refused (test_values_that_cannot_land_are_refused_naming_the_key)
        out = tmp_path / f"r{i}"
        args = ["run", *TINY, *opts, *[a for item, _, _ in combo for a in ("--set", item)], "-o", str(out), "-q"]
        res = runner.invoke(app, args)
        text = " ".join(res.output.split())
        misfit = [(item, key) for item, key, needs in combo if needs not in (None, sel, alg)]
        if misfit:
            assert res.exit_code == 2 and not out.exists(), (args, text)
            for item, key in misfit:
                named = "method_options.exploration_factor" if item.startswith("method_options") else key
                assert f"{named}: unknown key (not allowed here)" in text, (args, text)
            continue
        assert res.exit_code == 0, (args, res.output)
        doc = yaml.safe_load((out / "config.yaml").read_text())
        assert (doc["selector"]["name"], doc["algorithm"]["name"]) == (sel, alg), args
        want = {"algorithm.options.mu": 0.01, "selector.options.exploration_factor": 0.9, "train.lr": 0.05}
        want.update({key: yaml.safe_load(item.split("=")[1]) for item, key, _ in combo})
        for key, value in want.items():
            if key.split(".")[0] != "algorithm" or alg == "fedprox":
                if key.split(".")[0] != "selector" or sel == "oort":
                    assert _at(doc, key) == value, (args, key)
        assert doc["rounds"] == 1 and doc["data"]["num_clients"] == 4 and doc["model"]["name"] == "mlp"  # TINY's --set too


#: the scalar options: (option, value, the key it sets, the value in config.yaml)
SCALARS = [
    ("--rounds", "2", "rounds", 2),
    ("--seed", "5", "seed", 5),
    ("--device", "cpu", "train.device", "cpu"),
    ("--engine", "simulator", "engine", "simulator"),
    ("--log", "tensorboard", "log.tensorboard", True),
]


@pytest.mark.parametrize("flag,value,key,written", SCALARS, ids=[s[0] for s in SCALARS])
def test_every_scalar_option_lands_beside_set_and_is_refused_with_its_own_key(tmp_path, monkeypatch, flag, value, key, written):
    import importlib.util

    import yaml

    if flag == "--log" and importlib.util.find_spec("tensorboard") is None:
        pytest.skip("log.tensorboard needs the extra fedselect[tensorboard]")
    _config_yaml_only(monkeypatch)
    base = ["run", "--set", "data.num_clients=4", "--set", "clients_per_round=2", "--set", "model.name=mlp"]
    out = tmp_path / "r"
    res = runner.invoke(
        app, [*base, flag, value, "--set", "train.lr=0.1", "--set", "selector.name=fastest", "-o", str(out), "-q"]
    )
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load((out / "config.yaml").read_text())
    assert _at(doc, key) == written and doc["train"]["lr"] == 0.1 and doc["selector"]["name"] == "fastest"
    assert doc["method"] == "fedavg" and doc["algorithm"]["name"] == "fedavg"  # the file's preset names the other part
    res = runner.invoke(app, [*base, flag, value, "--set", f"{key}={value}", "-o", str(tmp_path / "twice"), "-q"])
    assert res.exit_code == 2 and f"{flag} and --set {key}=" in res.output and "give it once" in res.output
    assert not (tmp_path / "twice").exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--selector", "oort", "--set", "selector.options.exploration_factor=7"],
            "selector.options.exploration_factor: Input should be less than or equal to 1",
        ),
        (
            ["--selector", "oort", "--set", "selector.name=fastest"],
            "--selector and --set selector.name='fastest' both set selector.name",
        ),
        (["--set", "train.lr=0.1", "--set", "train.lr=0.2"], "--set train.lr: given twice (train.lr=0.1 and 'train.lr=0.2')"),
        (["--set", "train={lr: 0.2}", "--set", "train.lr=0.1"], "train.lr: given twice: train = {'lr': 0.2} sets it too"),
        (["--set", "rounds.x=1"], "rounds.x: rounds is 1, a value, not a section with keys"),
        (
            ["--algorithm", "fedprox", "--set", "algorithm.options.mu=-1"],
            "algorithm.options.mu: Input should be greater than or equal to 0",
        ),
        (
            ["--method", "oort", "--set", "selector.name=random", "--set", "algorithm.name=fedprox"],
            "method: 'oort' has no effect",
        ),
        (
            [
                "--selector",
                "oort",
                "--set",
                "selector.options.exploration_factor=0.5",
                "--set",
                "method_options.exploration_factor=0.4",
            ],
            "selector.options and method_options both set ['exploration_factor']; set each option once",
        ),
    ],
)
def test_values_that_cannot_land_are_refused_naming_the_key(tmp_path, args, message):
    res = runner.invoke(app, ["run", *TINY, *args, "-o", str(tmp_path / "r")])
    assert res.exit_code == 2 and message in " ".join(res.output.split()), res.output
    assert not (tmp_path / "r").exists()


def test_the_api_takes_the_same_overrides_as_the_command_line():
    from fedselect import api
    from fedselect.config.schema import ConfigError

    cfg = api.experiment_config(TINY_DOC, method="fedprox", algorithm__options__mu=0.5)
    assert (cfg.selector.name, cfg.algorithm.name, cfg.algorithm.options["mu"]) == ("random", "fedprox", 0.5)
    # a resolved config given back with another method: the method's parts replace its selector and algorithm
    oort = api.experiment_config(cfg, method="oort", selector__options__exploration_factor=0.5)
    assert (oort.selector.name, oort.algorithm.name, oort.selector.options["exploration_factor"]) == ("oort", "fedavg", 0.5)
    # the same component named again keeps its options; another one starts from its own defaults
    again = api.experiment_config(oort, selector__name="oort")
    assert again.selector.options["exploration_factor"] == 0.5
    assert api.experiment_config(oort, selector__name="fastest").selector.options == {"latency": "expected"}
    with pytest.raises(ConfigError, match="train.lr given twice"):
        api.plan_run(TINY_DOC, sets={"train.lr": 0.1}, train__lr=0.2)
    with pytest.raises(ConfigError, match="selector.options.exploration_factor: Input should be less than or equal to 1"):
        api.experiment_config(TINY_DOC, selector={"name": "oort", "options": {"exploration_factor": 7}})


@pytest.mark.slow
def test_options_and_sets_reach_the_config_yaml_a_run_writes_and_resume_extends_it(tmp_path):
    import yaml

    out = tmp_path / "r"
    args = ["run", *TINY, "--algorithm", "fedprox", "--set", "algorithm.options.mu=0.5", "--selector", "oort"]
    res = runner.invoke(app, [*args, "--set", "selector.options.exploration_factor=0.5", "--seed", "2", "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load((out / "config.yaml").read_text())
    assert doc["algorithm"] == {"name": "fedprox", "options": {"evaluation": "global", "mu": 0.5}}
    assert doc["selector"]["name"] == "oort" and doc["selector"]["options"]["exploration_factor"] == 0.5
    assert (doc["seed"], doc["rounds"]) == (2, 1)
    res = runner.invoke(app, ["run", "--resume", str(out), "--rounds", "2", "-q"])
    assert res.exit_code == 0, res.output
    assert yaml.safe_load((out / "config.yaml").read_text()) == {**doc, "rounds": 2}
    assert len((out / "metrics.csv").read_text().splitlines()) == 1 + 1 + 2  # header, round 0, rounds 1-2


# -- one set of defaults -----------------------------------------------------------------------


def test_the_embedded_default_is_a_config_file_like_any_other(tmp_path, monkeypatch):
    """`fedselect run` with no CONFIG, `fedselect run configs/default.yaml` and `fedselect.run()`
    resolve to one config; `{}` (or a YAML file holding only a default) is the schema's defaults,
    with no target, whatever the entry point."""
    import yaml

    from fedselect import api
    from fedselect.config.load import dump_config

    shown = Path(__file__).resolve().parents[2] / "configs" / "default.yaml"
    assert shown.resolve() == api.DEFAULT_EXPERIMENT.resolve()
    _config_yaml_only(monkeypatch)
    assert runner.invoke(app, ["run", "-o", str(tmp_path / "none"), "-q"]).exit_code == 0
    assert runner.invoke(app, ["run", str(shown), "-o", str(tmp_path / "file"), "-q"]).exit_code == 0
    embedded = (tmp_path / "none" / "config.yaml").read_text()
    assert embedded == (tmp_path / "file" / "config.yaml").read_text() == dump_config(api.experiment_config())
    assert yaml.safe_load(embedded)["metrics"]["target"] == 0.9 and yaml.safe_load(embedded)["name"] == "default"
    (tmp_path / "seed.yaml").write_text("seed: 0\n")
    assert runner.invoke(app, ["run", str(tmp_path / "seed.yaml"), "-o", str(tmp_path / "seed"), "-q"]).exit_code == 0
    plain = (tmp_path / "seed" / "config.yaml").read_text()
    assert plain == dump_config(api.experiment_config({})) == dump_config(api.experiment_config({"seed": 0}))
    assert yaml.safe_load(plain)["metrics"]["target"] is None and yaml.safe_load(plain)["name"] == "experiment"


# -- sweep takes --rounds, --set, --device, -q like run ------------------------------------------

SWEEP_DOC = {
    "name": "sw",
    "base": {k: v for k, v in TINY_DOC.items() if k != "rounds"} | {"rounds": 5, "train": {"local_epochs": 1, "batch_size": 32}},
    "methods": [{"label": "avg", "method": "fedavg"}],
    "grid": {"train.lr": [0.05, 0.1]},
    "columns": ["final_accuracy"],
}


@pytest.mark.slow
def test_sweep_options_reach_every_run_and_a_rerun_with_other_values_is_refused(tmp_path):
    import yaml

    cfg = tmp_path / "sw.yaml"
    cfg.write_text(yaml.safe_dump(SWEEP_DOC))
    out = tmp_path / "s"
    args = ["sweep", str(cfg), "--rounds", "1", "--set", "train.momentum=0.5", "--device", "cpu", "-o", str(out)]
    res = runner.invoke(app, [*args, "-q"])
    assert res.exit_code == 0, res.output
    assert "[1/2]" not in res.output  # -q: no progress lines
    runs = sorted((out / "runs").iterdir())
    assert [r.name for r in runs] == ["avg-lr=0.05-s0", "avg-lr=0.1-s0"]
    for run, lr in zip(runs, (0.05, 0.1)):
        doc = yaml.safe_load((run / "config.yaml").read_text())
        assert (doc["rounds"], doc["train"]["momentum"], doc["train"]["device"], doc["train"]["lr"]) == (1, 0.5, "cpu", lr)
    # the same --out with other values: refused, naming the key, the finished runs kept as they are
    before = {r.name: (r / "metrics.csv").read_bytes() for r in runs}
    res = runner.invoke(app, ["sweep", str(cfg), "--rounds", "1", "--set", "train.momentum=0.6", "-o", str(out), "-q"])
    text = " ".join(res.output.split())
    assert res.exit_code == 2 and "train.momentum (0.5 in the saved run, 0.6 now)" in text, text
    assert {r.name: (r / "metrics.csv").read_bytes() for r in runs} == before
    res = runner.invoke(app, [*args])  # without -q: a line per run (both finished: nothing to run, the table)
    assert res.exit_code == 0 and "sweep directory:" in res.output  # (the console's table: tests/common/test_outputs.py)
    assert "| lr | method | seeds | final_accuracy |" in (out / "table.md").read_text()


def test_sweep_refuses_a_set_of_a_grid_key_and_points_that_share_a_directory(tmp_path):
    import yaml

    cfg = tmp_path / "sw.yaml"
    cfg.write_text(yaml.safe_dump(SWEEP_DOC))
    res = runner.invoke(app, ["sweep", str(cfg), "--set", "train.lr=0.2", "-o", str(tmp_path / "s")])
    assert res.exit_code == 2 and "set.train.lr: a grid key of this sweep (grid.train.lr)" in " ".join(res.output.split())
    # two paths that differ only in a character a directory name cannot hold (nothing is loaded to find out)
    doc = {**SWEEP_DOC, "grid": {"data.options.path": ["/data/a b", "/data/a_b"]}}
    doc["base"] = {**doc["base"], "data": {"num_clients": 4, "dataset": "fashion-mnist"}}
    cfg.write_text(yaml.safe_dump(doc))
    res = runner.invoke(app, ["sweep", str(cfg), "-o", str(tmp_path / "s")])
    text = " ".join(res.output.split())
    assert res.exit_code == 2, text
    assert (
        "grid: methods.0 ('avg') at {'data.options.path': '/data/a b'} and methods.0 ('avg') at "
        "{'data.options.path': '/data/a_b'} both become 'avg-path=_data_a_b-s0' as run directories in runs/" in text
    )
    assert not (tmp_path / "s").exists()
