"""Input validation: every bad input fails with a message naming what is wrong and what is
allowed, before anything is written, and no run already on disk is damaged."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fedselect.cli import app
from fedselect.config.load import load_config
from fedselect.config.schema import ConfigError
from fedselect.experiment.resolve import parse_experiment, resolve_doc
from fedselect.experiment.run import run_experiment
from support.tiny import tiny_doc, with_keys

BASE = tiny_doc(seed=5, num_clients=6, hidden=8)


def with_(**kv) -> dict:
    """BASE with dotted keys (``a__b=1`` sets a.b) replaced."""
    return with_keys(BASE, **kv)


# (bad input, expected message fragment): config errors caught by parse_experiment (schema and resolve step)
CONFIG_CASES = [
    (with_(roundz=3), "roundz: unknown key (not allowed here)"),
    (with_(rounds=0), "rounds: Input should be greater than or equal to 1"),
    (with_(rounds="ten"), "rounds: Input should be a valid integer"),
    (with_(rounds=True), "rounds: expected int, got the boolean True"),
    (with_(rounds=2.5), "rounds: Input should be a valid integer"),
    (with_(rounds=3.0), "rounds: Input should be a valid integer"),  # counts are integers, not floats that happen to be whole
    (with_(data__num_clients="4"), "data.num_clients: Input should be a valid integer"),
    (with_(train__lr="0.1"), "train.lr: Input should be a valid number"),
    (with_(data__partition__min_size=10.0), "data.partition.min_size: Input should be a valid integer, got 10.0"),
    (with_(method="cefl", method_options={"clusters": 2.0}), "method_options.clusters: Input should be a valid integer"),
    (
        with_(participation=0.5, clients_per_round=2),
        "participation and clients_per_round are exclusive: participation 0.5 of N = 6 gives U = 3, clients_per_round says 2",
    ),
    (with_(participation=0), "participation: Input should be greater than 0"),
    (with_(seed=-1), "seed: Input should be greater than or equal to 0"),
    (with_(clients_per_round=7), "clients_per_round (U = 7) must be <= data.num_clients (N = 6)"),
    (with_(method="fedsgd"), "unknown method 'fedsgd'; allowed: ["),
    (with_(data__dataset="mnits"), "data.dataset: unknown dataset 'mnits'; allowed: ["),
    (with_(data__num_clients=0), "data.num_clients: Input should be greater than or equal to 1"),
    (with_(data__holdout_fraction=1.0), "data.holdout_fraction: Input should be less than 1"),
    (
        with_(data__partition__scheme="dirichlett"),
        "data.partition.scheme: unknown partition scheme 'dirichlett'; allowed: ['client_dirichlet', 'dirichlet'",
    ),
    (with_(data__partition__alpha=0), "data.partition.alpha must be a number > 0, got 0"),
    (
        with_(data__partition__alpah=0.5),
        "data.partition: unknown option(s) ['alpah'] for scheme 'dirichlet'; allowed: ['alpha', 'max_attempts', 'max_seconds', 'min_size']",
    ),
    (
        with_(data__options={"pth": "/tmp"}),
        "data.options: unknown option(s) ['pth'] for dataset 'mnist-embedded'; allowed: ['test_size']",
    ),
    (with_(data__options={"seed": 1}), "data.options: ['seed'] cannot be set here (the runner passes them)"),
    (with_(model__name="resnet"), "model.name: unknown model 'resnet'; allowed: ["),
    (with_(model__options={"hiden": [16]}), "model.options.hiden: unknown key (not allowed here); allowed: ['hidden']"),
    (with_(model__options={"hidden": "x"}), "model.options.hidden: Input should be a valid list"),
    (with_(model__options={"hidden": [0]}), "model.options.hidden.0: Input should be greater than or equal to 1"),
    (
        with_(method_options={"foo": 1}),
        "method_options.foo: unknown key (not allowed here); method 'fedavg' = selector 'random' "
        "(options none) + algorithm 'fedavg' (options ['evaluation'])",
    ),
    (with_(selector={"name": "nope"}), "selector.name: unknown selector 'nope'; allowed: ["),
    (with_(selector={"name": "flashrl"}, eval_every=2), "selector 'flashrl' needs the global metric every round"),
    (
        with_(method="cefl", method_options={"clusters": 7}),
        "selector 'cefl_leaders': clusters (K = 7) exceeds the number of clients N = 6",
    ),
    (
        with_(selector={"name": "random"}, algorithm={"name": "cefl"}),
        "algorithm 'cefl' trains cluster leaders and transfers their models "
        "to the members: it needs a selector that clusters the clients and names "
        "leaders ('cefl_leaders'), not 'random'",
    ),
    (
        with_(selector={"name": "flashrl"}, algorithm={"name": "individual"}),
        "selector 'flashrl' scores clients against the shared global model, which algorithm 'individual' does not have",
    ),
    (
        with_(method="fedper", algorithm={"name": "fedper", "options": {"evaluation": "global"}}),
        "algorithm.options.evaluation: Input should be 'per_client'",
    ),
    (with_(train__lr=0), "train.lr: Input should be greater than 0"),
    (with_(train__lr=float("inf")), "train.lr: Input should be a finite number"),
    (with_(train__lr=float("nan")), "train.lr: Input should be a finite number"),
    (with_(train__momentum=1.0), "train.momentum: Input should be less than 1"),
    (with_(train__optimizer="rmsprop"), "train.optimizer: Input should be 'sgd' or 'adam'"),
    (with_(train__batch_size=0), "train.batch_size: Input should be greater than or equal to 1"),
    (with_(train__local_epochs=-1), "train.local_epochs: Input should be greater than or equal to 0"),
    (with_(system__cycles_per_bit=0), "system.cycles_per_bit: Input should be greater than 0"),
    (
        with_(system__devices=[{"name": "x", "mean_mhz": 100}]),
        "system.devices[0] ('x'): missing ['std_mhz', 'cores']; a device row has exactly name, mean_mhz, std_mhz, cores",
    ),
    (
        with_(system__networks=[{"name": "n", "mean_mbps": 10, "std_mbps": 1, "cores": 2}]),
        "system.networks[0] ('n'): ['cores'] do not belong in a network row",
    ),
    (with_(system__round_deadline_s=0), "system.round_deadline_s: Input should be greater than 0"),
    (with_(metrics__metric="auc"), "metrics.metric: Input should be 'accuracy' or 'f1_macro'"),
    (with_(metrics__target=True), "metrics.target: expected float | None, got the boolean True"),
    (with_(eval_every=0), "eval_every: Input should be greater than or equal to 1"),
    (with_(checkpoint_every=-1), "checkpoint_every: Input should be greater than or equal to 0"),
    (with_(faults__dropout=1.5), "faults.dropout: Input should be less than or equal to 1"),
    (
        with_(faults__dropout_by_network={"wifi-1": -0.1}),
        "faults.dropout_by_network: wifi-1: dropout probability must be in [0, 1], got -0.1",
    ),
    (
        with_(faults__inject=[{"kind": "explode"}]),
        "faults.inject.0.kind: Input should be 'drop', 'raise', 'nan', 'inf' or 'timeout'",
    ),
    (with_(faults__inject=[{"kind": "nan", "rounds": [3]}]), "faults.inject[0].rounds: [3] outside the rounds 1..2 of this run"),
    (with_(faults__inject=[{"kind": "nan", "clients": 6}]), "faults.inject[0].clients: [6] are not client ids 0..5"),
    (with_(faults__inject=[{"kind": "timeout"}]), "faults.inject[0].kind 'timeout' needs system.round_deadline_s"),
    (with_(faults__oops=1), "faults.oops: unknown key (not allowed here)"),
]


@pytest.mark.parametrize("doc,message", CONFIG_CASES, ids=[m[:40] for _, m in CONFIG_CASES])
def test_bad_config_values_are_named(doc, message):
    with pytest.raises(ConfigError) as e:
        parse_experiment(doc, "cfg.yaml")
    assert str(e.value).startswith("invalid config cfg.yaml:")
    assert message in str(e.value)


@pytest.mark.parametrize(
    "content,message",
    [
        ("", "is empty (no settings); write at least one key"),
        ("- 1\n- 2\n", "the top level must be a mapping of keys to values, got list"),
        ("rounds: [1, 2\nseed: 0\n", "invalid YAML in"),
        (b"\x89PNG\r\n\x1a\n\x00\xff", "is not a UTF-8 text file"),
    ],
)
def test_bad_config_files(tmp_path, content, message):
    p = tmp_path / "c.yaml"
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        load_config(p)
    with pytest.raises(FileNotFoundError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="is a directory; give a YAML file"):
        load_config(tmp_path)


def invoke(*args):
    r = CliRunner().invoke(app, [str(a) for a in args])
    return r.exit_code, " ".join(r.output.split())


def write(tmp_path, doc, name="cfg.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc))
    return p


@pytest.mark.parametrize(
    "doc,message",
    [
        (with_(model__options={"hidden": "x"}), "model.options.hidden: Input should be a valid list"),
        (
            with_(faults__dropout_by_device={"iphone": 0.1}),
            "faults.dropout_by_device: unknown profile name(s) ['iphone']; profiles in this fleet: [",
        ),
        (
            with_(data__dataset="mnist", data__options={"path": "/nonexistent/mnist"}),
            "mnist: no data found; looked at ['/nonexistent/mnist/mnist_train.csv'",
        ),
        (with_(system__profiles_file="/nonexistent/p.yaml"), "profile file not found: /nonexistent/p.yaml"),
        (
            with_(data__partition__min_size=5000),
            "dirichlet: 6 clients x min_size 5000 = 30000 > 3600 samples",
        ),  # 400 of 4,000 kept for validation
        (
            with_(method_options={"foo": 1}),
            "method_options.foo: unknown key (not allowed here); method 'fedavg' = selector 'random'",
        ),
    ],
)
def test_cli_bad_input_fails_before_anything_is_written(tmp_path, doc, message):
    out = tmp_path / "run"
    code, text = invoke("run", write(tmp_path, doc), "-o", out, "-q")
    assert code == 2 and "error: " in text and message in text.split("error: ", 1)[1]
    assert not out.exists()


def test_existing_run_is_never_clobbered_without_overwrite(tmp_path):
    cfg = write(tmp_path, BASE)
    out = tmp_path / "run"
    assert invoke("run", cfg, "-o", out, "-q")[0] == 0
    (out / "notes.txt").write_text("mine")
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()}
    code, text = invoke("run", cfg, "-o", out, "-q", "--seed", "9")
    assert code == 2
    assert (
        f"run directory {out} already holds a run (config.yaml, metrics.csv, summary.json, checkpoint.pt, checkpoint.prev.pt); nothing was changed."
        in text
    )
    assert f"Continue it with `fedselect run --resume {out}`, replace it with --overwrite" in text
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()} == before
    with pytest.raises(FileExistsError, match="already holds a run"):
        run_experiment(resolve_doc(BASE), out)
    # --overwrite replaces the run files and leaves other files alone
    assert invoke("run", cfg, "-o", out, "-q", "--seed", "9", "--overwrite")[0] == 0
    assert yaml.safe_load((out / "config.yaml").read_text())["seed"] == 9
    assert (out / "notes.txt").read_text() == "mine"
    # a bad config with --overwrite still changes nothing
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    code, text = invoke("run", write(tmp_path, with_(rounds=0), "bad.yaml"), "-o", out, "-q", "--overwrite")
    assert code == 2 and "rounds: Input should be greater than or equal to 1" in text
    assert {p.name: p.read_bytes() for p in out.iterdir()} == after


def test_out_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    code, text = invoke("run", write(tmp_path, BASE), "-o", f, "-q")
    assert code == 2 and f"run directory {f} exists and is not a directory" in text
    assert f.read_text() == "x"


def test_bad_resume_requests_change_nothing(tmp_path):
    cfg = write(tmp_path, with_(rounds=3))
    out = tmp_path / "run"
    assert invoke("run", cfg, "-o", out, "-q")[0] == 0
    snapshot = lambda: {p.name: p.read_bytes() for p in out.iterdir()}  # noqa: E731
    before = snapshot()

    code, text = invoke("run", "--resume", tmp_path / "nope", "-q")
    assert code == 2 and f"--resume {tmp_path / 'nope'}: no such run directory" in text
    (tmp_path / "empty").mkdir()
    code, text = invoke("run", "--resume", tmp_path / "empty", "-q")
    assert code == 2 and "no config.yaml there (not a run directory)" in text
    code, text = invoke("run", cfg, "--resume", out, "--seed", "3", "-q")
    assert code == 2 and "it cannot be combined with CONFIG, --seed (only --rounds, to extend the budget)" in text
    code, text = invoke("run", "--resume", out, "--rounds", "2", "-q")
    assert (
        code == 2 and "cannot resume" in text and "rounds=2: the checkpoint already holds 3 rounds; rounds must be >= 3" in text
    )
    code, text = invoke("run", "--resume", out, "--rounds", "0", "-q")
    assert code == 2 and "(with rounds=0)" in text and "rounds: Input should be greater than or equal to 1" in text
    assert snapshot() == before

    doc = yaml.safe_load((out / "config.yaml").read_text())
    doc["train"]["lr"] = 0.5
    (out / "config.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    before = snapshot()
    code, text = invoke("run", "--resume", out, "-q")
    assert code == 2
    assert "the config differs from the one the checkpoint was written with at train.lr (0.05 in the saved run, 0.5 now)" in text
    assert snapshot() == before


def test_resume_of_a_run_written_before_its_metrics_were_checkpointed_is_refused(tmp_path):
    import torch

    out = tmp_path / "run"
    run_experiment(resolve_doc(BASE), out)
    ck = torch.load(out / "checkpoint.pt", weights_only=True)  # plain data: no code can run
    del ck["metrics_rows"]
    torch.save(ck, out / "checkpoint.pt")
    os.remove(out / "checkpoint.prev.pt")
    code, text = invoke("run", "--resume", out, "-q")
    assert code == 2 and "without the metrics rows; start the run again with --overwrite" in text


def test_participation_is_a_fraction_of_n():
    d = with_(participation=0.25)
    del d["clients_per_round"]
    cfg = parse_experiment(d)
    assert cfg.clients_per_round == 2 and cfg.participation == 0.25  # ceil(0.25 * 6)
    assert parse_experiment(cfg.model_dump(mode="json")).clients_per_round == 2  # the written config resolves to itself
    d["participation"] = 0.01
    assert parse_experiment(d).clients_per_round == 1  # at least one client


# -- every problem in one pass, each by its dotted path ----------------------------------------


def test_three_mistakes_of_a_comparison_are_reported_in_one_run(tmp_path):
    """A top-level key, a method name and a key misspelt inside `base:`: before, the first stopped
    the run and `base.trian` was reported as `trian` of "method 'FedAvg', seed 0"."""
    doc = {
        "name": "three",
        "roundz": 3,
        "base": {k: v for k, v in BASE.items() if k not in ("name", "seed")} | {"trian": {"lr": 0.1}},
        "methods": [{"label": "FedAvg", "method": "fedavg"}, {"label": "X", "method": "fedsgd"}],
    }
    out = tmp_path / "cmp"
    code, text = invoke("compare", write(tmp_path, doc), "-o", out, "-q")
    assert code == 2 and f"invalid comparison {tmp_path / 'cfg.yaml'}:" in text
    for line in (
        "roundz: unknown key (not allowed here)",
        "base.trian: unknown key (not allowed here)",
        "methods.1.method: unknown method 'fedsgd'; allowed: [",
    ):
        assert line in text, text
    assert text.count("base.trian") == 1  # once, though both methods' runs have it
    assert not out.exists()


def test_mistakes_of_an_experiment_are_reported_in_one_run(tmp_path):
    """Schema and registry problems together: an unknown key no longer hides an unknown name."""
    doc = with_(trian={"lr": 0.1}, method="fedsgd", model__name="resnet", train__lr="fast")
    code, text = invoke("run", write(tmp_path, doc), "-o", tmp_path / "run", "-q")
    assert code == 2
    for line in (
        "trian: unknown key (not allowed here)",
        "train.lr: Input should be a valid number",
        "method: unknown method 'fedsgd'",
        "model.name: unknown model 'resnet'",
    ):
        assert line in text, text
    assert not (tmp_path / "run").exists()
    # a cross-key check waits for its keys: N is in error, so U <= N is not judged on the default N
    with pytest.raises(ConfigError) as e:
        parse_experiment(with_(data__num_clients="6", clients_per_round=9), "cfg.yaml")
    assert "data.num_clients: Input should be a valid integer" in str(e.value) and "clients_per_round (U" not in str(e.value)
    # nor are options judged against a default standing in for their component or data set
    with pytest.raises(ConfigError) as e:
        parse_experiment(
            with_(selector="oort", method_options={"exploration_factor": 0.5}, data__dataset=5, data__options={"x": 1})
        )
    assert sorted(str(e.value).splitlines()[1:]) == [
        "  data.dataset: Input should be a valid string",
        "  selector: Input should be a valid dictionary or instance of ComponentConfig",
    ]


def test_a_sweep_names_each_problem_by_where_it_was_given():
    from fedselect.study.sweep import parse_sweep

    doc = {
        "name": "sw",
        "base": {k: v for k, v in BASE.items() if k not in ("name", "seed")},
        "methods": [
            {"label": "A", "method": "fedavg"},
            {"label": "B", "method": "fedprox", "overrides": {"train.momentm": 0.5}},
        ],
        "grid": {"clients_per_round": [2, 9], "method_options.mu": [0.1]},
        "set": {"train.lr": 0},
    }
    with pytest.raises(ConfigError) as e:
        parse_sweep(doc, "sw.yaml")
    text = str(e.value)
    assert text.startswith("invalid sweep sw.yaml:")
    assert "  methods.1.overrides.train.momentm: unknown key (not allowed here)" in text
    assert "  set.train.lr: Input should be greater than 0" in text
    assert "  grid.method_options.mu: unknown key (not allowed here); method 'fedavg'" in text  # FedAvg has no mu


# -- every shipped config is valid ------------------------------------------------------------

SHIPPED = sorted(p for p in (Path(__file__).resolve().parents[2] / "configs").rglob("*.yaml") if p.name != "reproduce.yaml")


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_config_resolves(path):
    """Each config under configs/ is accepted by the command its kind belongs to (the schema,
    every registry name, every component's options), before any data is loaded."""
    from fedselect.config.load import config_kind, read_yaml_file
    from fedselect.experiment.resolve import load_experiment
    from fedselect.study.compare import parse_compare
    from fedselect.study.sweep import parse_sweep

    root = path.parents[1] if path.parent.name != "configs" else path.parent
    manifest = read_yaml_file(root / "reproduce.yaml")["entries"]
    alpha = {e["config"] for e in manifest if e.get("kind") == "alpha"}
    doc = read_yaml_file(path)
    kind = config_kind(doc)
    if str(path.relative_to(root.parent)) in alpha:  # the optimal-stopping table (no experiment)
        from fedselect.repro.alpha import load_alpha_config

        assert load_alpha_config(path)
    elif kind == "compare":
        assert parse_compare(doc, str(path)).methods
    elif kind == "sweep":
        assert parse_sweep(doc, str(path)).methods
    else:
        assert load_experiment(path).rounds >= 1
