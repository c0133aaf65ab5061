"""Users' own selectors, algorithms, models and data sets, defined in modules outside the
package: usable by ``package.module:Name``, by the registration decorators and by entry points,
through the CLI and through the Python API (runs and comparisons), in worker processes and on
Flower's nodes, and resumed exactly. The own-model-and-data example is
``examples/own-model-data`` (docs/architecture.md), imported here by path."""

from __future__ import annotations

import importlib.metadata
import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

import fedselect
from fedselect.cli import app
from fedselect.experiment.resolve import parse_experiment
from fedselect.experiment.run import run_experiment
from support.tiny import tiny_doc

USER_MODULE = textwrap.dedent('''
    """A user's selectors and algorithms (lives outside fedselect)."""
    import numpy as np
    import torch
    from pydantic import BaseModel, ConfigDict, Field

    import fedselect
    from fedselect.algorithms.fedavg import FedAvg


    class HighestLoss(fedselect.Selector):
        """The U clients with the highest last training loss (never-seen clients first), ties by noise."""

        name = "highest_loss"
        wants_sample_losses = False

        class Options(BaseModel):
            model_config = ConfigDict(extra="forbid")
            noise: float = Field(0.01, ge=0)

        extra_columns = ("mean_known_loss",)

        def __init__(self, ctx, options=None):
            super().__init__(ctx, options)
            self.loss = np.full(self.settings.num_clients, np.inf)

        def select(self, view):
            s = self.settings
            score = np.where(np.isinf(self.loss), 1e9, self.loss) + self.options.noise * self.rng.random(s.num_clients)
            return fedselect.Selection(sorted(int(k) for k in np.argsort(-score, kind="stable")[: s.clients_per_round]))

        def observe(self, t, outcomes, feedback):
            for o in outcomes:
                if o.ok:
                    self.loss[o.client_id] = o.train_loss
            known = self.loss[np.isfinite(self.loss)]
            return {"mean_known_loss": float(known.mean()) if known.size else float("nan")}

        def state_dict(self):
            return {**super().state_dict(), "loss": torch.tensor(self.loss)}

        def load_state_dict(self, state):
            super().load_state_dict(state)
            self.loss = state["loss"].numpy().copy()


    class Median(FedAvg):
        """Coordinate-wise median of the surviving updates instead of the weighted mean."""

        name = "median"

        def aggregate(self, t, state, outcomes):
            new = {k: torch.stack([o.state[k] for o in outcomes]).median(dim=0).values for k in state.model}
            return type(state)(new, state.clients, state.aggregated)


    @fedselect.register_selector
    class EveryOther(fedselect.Selector):
        """Even clients in odd rounds, odd clients in even rounds (U of them, in order)."""

        name = "every_other"

        def select(self, view):
            ids = [k for k in range(self.settings.num_clients) if k % 2 == view.round % 2]
            return fedselect.Selection(ids[: self.settings.clients_per_round])


    @fedselect.register_model("linear_probe")
    def linear_probe(input_shape, num_classes, bias: bool = True):
        """One linear layer on the flattened input."""
        n = int(np.prod(input_shape))
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(n, num_classes, bias=bias))


    @fedselect.register_dataset("two_blobs")
    def two_blobs(seed=0, n: int = 400, dims: int = 6):
        """Two Gaussian blobs, 80 % train / 20 % test, the same for every seed."""
        rng = np.random.default_rng(0)
        y = rng.integers(0, 2, n)
        x = rng.normal(0, 1, (n, dims)) + 2.0 * y[:, None]
        cut = int(0.8 * n)
        train = fedselect.ArrayDataset(x[:cut], y[:cut], 2, "two_blobs")
        return train, fedselect.ArrayDataset(x[cut:], y[cut:], 2, "two_blobs")


    @fedselect.register_partitioner
    class RoundRobin(fedselect.Partitioner):
        """Rows sorted by label, dealt out one by one: client k gets sorted rows k + offset, k + offset + N, ..."""

        name = "round_robin"

        def __init__(self, offset: int = 0):
            if offset < 0:
                raise ValueError(f"offset must be >= 0, got {offset}")
            self.offset = offset

        def split(self, labels, num_clients, rng, groups=None):
            order = np.argsort(labels, kind="stable")
            return [np.sort(order[(k + self.offset) % num_clients :: num_clients]) for k in range(num_clients)]


    def not_a_pair(seed=0):
        return {"train": None}


    def one_arg_model(input_shape):
        return torch.nn.Flatten()
''')


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    d = tmp_path / "userpkg"
    d.mkdir()
    (d / "my_fl_plugins.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(d))
    yield "my_fl_plugins"
    sys.modules.pop("my_fl_plugins", None)


def doc(**over) -> dict:
    d = tiny_doc(name="plugin", seed=3, rounds=4, clients_per_round=3, checkpoint_every=1, num_clients=6, hidden=16)
    d.update(over)
    return d


def cli(*args) -> str:
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output + repr(r.exception)
    return r.output


def test_user_selector_and_algorithm_by_module_path_through_the_cli_and_the_api(tmp_path, user_module):
    d = doc(
        selector={"name": f"{user_module}:HighestLoss", "options": {"noise": 0.05}}, algorithm={"name": f"{user_module}:Median"}
    )
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(d))
    cli("run", path, "-o", tmp_path / "cli", "-q")
    res = fedselect.run(d, tmp_path / "api")
    assert (tmp_path / "cli" / "metrics.csv").read_bytes() == (tmp_path / "api" / "metrics.csv").read_bytes()
    assert res.summary["method"] == f"{user_module}:HighestLoss+{user_module}:Median"
    assert res.config.selector.options == {"noise": 0.05}
    rows = res.metrics
    assert "mean_known_loss" in rows[0]
    # round 1: every client unseen, picks by noise; round 2: the 3 never-seen clients go first
    r1 = {int(k) for k in rows[1]["selected"].split(";")}
    r2 = {int(k) for k in rows[2]["selected"].split(";")}
    assert len(r1) == len(r2) == 3 and r1.isdisjoint(r2)
    # the median aggregate: the model holds the coordinate-wise median of round 4's updates (checked on its size)
    model = torch.load(tmp_path / "api" / "model.pt", weights_only=True)
    assert set(model) == {"net.1.weight", "net.1.bias", "net.3.weight", "net.3.bias"}


def test_user_selector_resumes_exactly(tmp_path, user_module):
    cfg = parse_experiment(doc(selector={"name": f"{user_module}:HighestLoss"}))
    run_experiment(cfg, tmp_path / "ref")
    run_experiment(cfg, tmp_path / "run", stop_after=2)
    assert not (tmp_path / "run" / "summary.json").exists()
    cli("run", "--resume", tmp_path / "run", "-q")
    assert (tmp_path / "ref" / "metrics.csv").read_bytes() == (tmp_path / "run" / "metrics.csv").read_bytes()
    a, b = (torch.load(tmp_path / x / "model.pt", weights_only=True) for x in ("ref", "run"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    # and through the Python API
    run_experiment(cfg, tmp_path / "run2", stop_after=3)
    res = fedselect.resume(tmp_path / "run2")
    assert (tmp_path / "ref" / "metrics.csv").read_bytes() == (res.run_dir / "metrics.csv").read_bytes()


def test_registration_decorator_after_import(tmp_path, user_module):
    __import__(user_module)
    res = fedselect.run(doc(selector={"name": "every_other"}, rounds=2), tmp_path / "r")
    assert [r["selected"] for r in res.metrics[1:]] == ["1;3;5", "0;2;4"]


def test_entry_point_selector(tmp_path, user_module, monkeypatch):
    ep = importlib.metadata.EntryPoint("hl", f"{user_module}:HighestLoss", "fedselect.selectors")
    real = importlib.metadata.entry_points
    monkeypatch.setattr(
        importlib.metadata,
        "entry_points",
        lambda group=None, **kw: [ep] if group == "fedselect.selectors" else real(group=group, **kw),
    )
    cfg = parse_experiment(doc(selector={"name": "hl"}, rounds=1))
    assert cfg.selector.name == "hl"
    from fedselect.selectors import SELECTORS

    assert "hl" in SELECTORS.names() and SELECTORS.get("hl").__name__ == "HighestLoss"


@pytest.mark.parametrize(
    "name,message",
    [
        ("no_such_module_xyz:Sel", "cannot import module 'no_such_module_xyz'"),
        ("fedselect.selectors.random:Nope", "module 'fedselect.selectors.random' has no attribute 'Nope'"),
        ("fedselect.algorithms.fedavg:FedAvg", "FedAvg'>, not a subclass of fedselect.selectors.base.Selector"),
        ("nope", "unknown selector 'nope'; allowed: ["),
    ],
)
def test_bad_user_component_names_are_named(name, message):
    from fedselect.config.schema import ConfigError

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_experiment(doc(selector={"name": name}))


# ------------------------------------------------------------------ models and data sets
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own-model-data"
#: the UCI digits scikit-learn ships: rows per class, and the stratified 20 % test split of each
DIGITS_PER_CLASS = [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
DIGITS_TEST = sum(round(0.2 * n) for n in DIGITS_PER_CLASS)  # 359


@pytest.fixture
def own_example(tmp_path, monkeypatch):
    """examples/own-model-data importable (as PYTHONPATH would make it), its CSV written, and
    its comparison made small: 6 clients, 5 rounds of 3, FedAvg and Oort, one seed."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    from mydigits.data import write_digits_csv

    csv_path = write_digits_csv(tmp_path / "data" / "digits.csv")
    cc = yaml.safe_load((EXAMPLE / "compare.yaml").read_text())
    cc["seeds"] = [0]
    cc["methods"] = cc["methods"][:2]
    cc["base"].update(rounds=5, clients_per_round=3)
    cc["base"]["data"].update(num_clients=6, options={"path": str(csv_path)})
    cc["base"]["train"].update(local_epochs=2, batch_size=8)
    yield cc
    for m in [m for m in sys.modules if m == "mydigits" or m.startswith("mydigits.")]:
        del sys.modules[m]


@pytest.mark.slow
def test_the_own_model_and_data_example_runs_in_a_comparison_from_outside_src(own_example, tmp_path, capsys):
    """The worked example of docs/architecture.md: the user's CNN and CSV data set, named by
    module path, compared through the Python API (with the CLI's progress bars) and the CLI
    (the same bytes), with every option and file recorded."""
    res = fedselect.compare(own_example, out=tmp_path / "api", workers=0)
    shown = " ".join(capsys.readouterr().out.split())  # the terminal's width wraps lines
    assert f"own-digits: FedAvg, Oort; seeds [0]; output {tmp_path / 'api'}" in shown
    assert "FedAvg seed 0" in shown and "Oort seed 0" in shown and "5/5 done acc" in shown
    assert list(res.table.index) == ["FedAvg", "Oort"] and res.table.loc["FedAvg", "seeds"] == 1
    assert sorted(res.run_dirs) == [("FedAvg", 0), ("Oort", 0)]
    assert res.paired["method"].unique().tolist() == ["Oort"]
    run = res.run("FedAvg")
    assert run.config.model.name == "mydigits.models:SmallCNN" and run.config.model.options == {"channels": 8, "hidden": 32}
    assert run.config.data.dataset == "mydigits.data:load_digits_csv"
    assert run.config.data.options == {
        "path": own_example["base"]["data"]["options"]["path"],
        "test_fraction": 0.2,
        "drop_invalid": False,
    }
    # the model is the user's: conv1 8 x 1 x 3 x 3, 3,658 parameters in all
    state = torch.load(run.run_dir / "model.pt", weights_only=True)
    assert tuple(state["conv1.weight"].shape) == (8, 1, 3, 3) and sum(v.numel() for v in state.values()) == 3658
    # the data set is the user's: 1,797 digits, 359 (20 % of each class) the server's test set,
    # the other 1,438 over the 6 clients, the file recorded with its digest
    inputs = json.loads((run.run_dir / "inputs.json").read_text())
    assert (inputs["train_size"], inputs["test_size"]) == (sum(DIGITS_PER_CLASS) - DIGITS_TEST, DIGITS_TEST) == (1438, 359)
    assert [Path(f["path"]).name for f in inputs["files"]] == ["digits.csv"] and len(inputs["client_samples"]) == 6
    fed = json.loads((res.directory / "federation-s0.json").read_text())
    assert fed["num_classes"] == 10 and fed["dataset"] == "mydigits.data:load_digits_csv"
    assert 0.3 < run.summary["final_accuracy"] <= 1.0  # 5 rounds of 3 non-iid clients: well above chance (0.1)

    path = tmp_path / "own.yaml"
    path.write_text(yaml.safe_dump(own_example))
    out = cli("compare", path, "-o", tmp_path / "cli", "-q", "-w", "0")
    assert "FedAvg" in out and "Oort" in out
    for r in ("FedAvg-s0", "Oort-s0"):
        a, b = (tmp_path / d / "runs" / r for d in ("api", "cli"))
        assert (a / "metrics.csv").read_bytes() == (b / "metrics.csv").read_bytes()
        assert (a / "model.pt").read_bytes() == (b / "model.pt").read_bytes()


def _bad_csv(tmp_path) -> Path:
    from mydigits.data import write_digits_csv

    p = write_digits_csv(tmp_path / "bad.csv")
    lines = p.read_text().splitlines()
    lines[3] = lines[3].replace(",", ",17,", 1).rsplit(",", 1)[0]  # line 4: p0 = 17, outside 0..16
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize(
    "over,message",
    [
        (
            {"model": {"name": "mydigits.models:SmallCNN", "options": {"channels": 0}}},
            "model.options.channels: Input should be greater than or equal to 1",
        ),
        (
            {"model": {"name": "mydigits.models:SmallCNN", "options": {"chanels": 4}}},
            "model.options.chanels: unknown key (not allowed here); allowed: ['channels', 'hidden']",
        ),
        (
            {"model": {"name": "mydigits.models:BigCNN"}},
            "model.name: model 'mydigits.models:BigCNN': module 'mydigits.models' has no attribute 'BigCNN'",
        ),
        (
            {"model": {"name": "my_fl_plugins:one_arg_model"}},
            "model.name: cannot be called as (input_shape, num_classes, **options) with options {}: too many positional arguments",
        ),
        (
            {"model": {"name": "linear_probe", "options": {"num_classes": 3}}},
            "model.options: ['num_classes'] cannot be set here (the runner passes them)",
        ),
        (
            {
                "model": {"name": "mnist_cnn"},
                "data": {"dataset": "mydigits.data:load_digits_csv", "options": {"test_fractoin": 0.1}},
            },
            "data.options: unknown option(s) ['test_fractoin'] for dataset 'mydigits.data:load_digits_csv'; allowed: ['drop_invalid', 'path', 'test_fraction']",
        ),
        (
            {"data": {"dataset": "two_blobs", "options": {"n": "many"}}},
            "data.options.n: Input should be a valid integer, got 'many'",
        ),
        (
            {"data": {"dataset": "nowhere.data:load"}},
            "data.dataset: dataset 'nowhere.data:load': cannot import module 'nowhere.data' (ModuleNotFoundError: No module named 'nowhere')",
        ),
        ({"data": {"dataset": "mydigits.data:PIXELS"}}, "data.dataset: dataset 'mydigits.data:PIXELS' is ['p0', "),
        ({"data": {"dataset": "two_blob"}}, "data.dataset: unknown dataset 'two_blob'; allowed: ["),
    ],
)
def test_own_model_and_data_set_mistakes_are_named_before_anything_runs(over, message, own_example, user_module):
    from fedselect.config.schema import ConfigError

    __import__(user_module)
    d = doc(**{k: {**doc()[k], **v} if k == "data" else v for k, v in over.items()})
    with pytest.raises(ConfigError) as e:
        parse_experiment(d)
    assert message in str(e.value), str(e.value)


def test_own_data_set_problems_found_at_load_name_the_loader_or_the_file(own_example, user_module, tmp_path):
    from fedselect.world.data.catalog import load_dataset
    from fedselect.world.data.datasets import DatasetNotFoundError
    from fedselect.world.data.file_errors import DataFileError

    __import__(user_module)
    with pytest.raises(
        ValueError,
        match=r"dataset 'my_fl_plugins:not_a_pair': the loader must return \(train, test\), two ArrayDataset; got a dict",
    ):
        load_dataset(f"{user_module}:not_a_pair")
    with pytest.raises(
        DatasetNotFoundError, match="no data.options.path given; `python examples/own-model-data/make_csv.py` writes"
    ):
        load_dataset("mydigits.data:load_digits_csv")
    bad = _bad_csv(tmp_path)
    with pytest.raises(DataFileError, match=r"bad.csv: line 4, column 2 \(p0\): value 17 outside \[0, 16\]"):
        load_dataset("mydigits.data:load_digits_csv", path=str(bad))
    train, test = load_dataset("mydigits.data:load_digits_csv", path=str(bad), drop_invalid=True)
    assert (len(train) + len(test), train.info["dropped_rows"]) == (sum(DIGITS_PER_CLASS) - 1, {str(bad): 1})
    assert (train.input_shape, train.x.dtype, train.y.dtype, float(train.x.max())) == ((1, 8, 8), np.float32, np.int64, 1.0)


def test_registered_model_and_data_set_run_and_carry_an_importable_path(tmp_path, user_module):
    """``@fedselect.register_model`` / ``@fedselect.register_dataset`` in a user's module: the
    names work once it is imported, their options are validated and recorded, and a worker
    process is given ``module:name`` to import (it never imported the user's module)."""
    from fedselect.world.data.datasets import DATASETS
    from fedselect.world.models import MODELS

    __import__(user_module)
    d = doc(
        data={**doc()["data"], "dataset": "two_blobs", "options": {"n": 300}, "validation": 0},
        model={"name": "linear_probe"},
        rounds=3,
    )
    d["train"].update(local_epochs=3, lr=0.2)
    res = fedselect.run(d, tmp_path / "r", workers=0)
    assert res.config.data.options == {"n": 300, "dims": 6} and res.config.model.options == {"bias": True}
    assert json.loads((tmp_path / "r" / "inputs.json").read_text())["train_size"] == 240
    state = torch.load(tmp_path / "r" / "model.pt", weights_only=True)
    assert {k: tuple(v.shape) for k, v in state.items()} == {"1.weight": (2, 6), "1.bias": (2,)}
    assert float(res.summary["final_accuracy"]) > 0.9  # two blobs 2 sigma apart
    assert MODELS.path_of("linear_probe") == f"{user_module}:linear_probe"
    assert DATASETS.path_of("two_blobs") == f"{user_module}:two_blobs"
    assert MODELS.path_of("mlp") == "mlp" and MODELS.path_of(f"{user_module}:one_arg_model") == f"{user_module}:one_arg_model"
    assert "two_blobs" not in DATASETS.builtin_names() and "mnist-embedded" in DATASETS.builtin_names()
    with pytest.raises(ValueError, match="model name 'linear_probe' is already taken by my_fl_plugins.linear_probe"):
        fedselect.register_model("linear_probe")(lambda input_shape, num_classes: None)


@pytest.mark.slow
def test_own_models_train_in_worker_processes_exactly_as_in_process(own_example, user_module, tmp_path, monkeypatch):
    """The worker pool builds the user's model itself: by module path (the example's CNN) and
    by the importable path of a decorator-registered one; two workers give the bytes of none."""
    import fedselect.fl.local.pool as pool

    started = []

    class Pool(pool.WorkerPool):
        def __init__(self, inits, *args):
            started.append(inits[0].spec.name)
            super().__init__(inits, *args)

    monkeypatch.setattr(pool, "WorkerPool", Pool)
    __import__(user_module)
    by_path = {**own_example["base"], "name": "w", "rounds": 2}
    registered = doc(data={**doc()["data"], "dataset": "two_blobs"}, model={"name": "linear_probe"}, rounds=2)
    for i, d in enumerate((by_path, registered)):
        a = fedselect.run(d, tmp_path / f"{i}-w0", workers=0)
        b = fedselect.run(d, tmp_path / f"{i}-w2", workers=2)
        assert (a.run_dir / "metrics.csv").read_bytes() == (b.run_dir / "metrics.csv").read_bytes()
        assert (a.run_dir / "model.pt").read_bytes() == (b.run_dir / "model.pt").read_bytes()
    assert started == ["mydigits.models:SmallCNN", f"{user_module}:linear_probe"]  # what the workers imported


def test_own_model_and_data_on_flower_nodes_give_the_simulators_run(own_example, tmp_path):
    """``engine: flower``: each node rebuilds the federation from the experiment file the engine
    writes for it (:func:`fedselect.flower.engine.node_settings`), which carries the module
    paths; nodes (here Flower's ClientApp in this process, tests/support/flower_grid.py) import the
    user's loader and model and answer with the simulator's bytes."""
    pytest.importorskip("flwr")
    from fedselect.flower.client_app import make_client_app
    from fedselect.flower.engine import node_settings
    from fedselect.flower.grid_run import run_on_grid
    from fedselect.flower.nodes import FlowerOptions
    from support.flower_grid import LocalGrid

    cfg = parse_experiment({**own_example["base"], "name": "own-on-flower", "rounds": 2, "method": "oort"})
    settings = node_settings(cfg, tmp_path / "experiment.yaml")
    node_doc = yaml.safe_load((tmp_path / "experiment.yaml").read_text())
    assert (node_doc["model"]["name"], node_doc["data"]["dataset"]) == (
        "mydigits.models:SmallCNN",
        "mydigits.data:load_digits_csv",
    )
    run_on_grid(LocalGrid(make_client_app(settings), 6, {}), cfg, tmp_path / "flower", FlowerOptions(poll_s=0.01))
    run_experiment(cfg, tmp_path / "sim", workers=0)
    for f in ("metrics.csv", "model.pt"):
        assert (tmp_path / "flower" / f).read_bytes() == (tmp_path / "sim" / f).read_bytes(), f


def test_compare_api_refuses_before_running(tmp_path):
    """``fedselect.compare``'s arguments are checked before anything is built or written."""
    from fedselect.config.schema import ConfigError
    from fedselect.study.backends import LocalBackend

    base = {k: v for k, v in doc().items() if k not in ("name", "seed")}  # a comparison names and seeds its runs
    cc = {"name": "c", "base": base, "methods": [{"label": "FedAvg", "method": "fedavg"}]}
    with pytest.raises(
        ValueError,
        match="resume='x' finishes the comparison saved there with its own config; it cannot be combined with config, seeds",
    ):
        fedselect.compare(cc, resume="x", seeds=[1])
    with pytest.raises(ValueError, match="workers: a backend object has its own"):
        fedselect.compare(cc, out=tmp_path / "b", backend=LocalBackend(), workers=2)
    with pytest.raises(ConfigError, match=r"seeds must be distinct and >= 0, got \[1, 1\]"):
        fedselect.compare(cc, out=tmp_path / "s", seeds=[1, 1])
    with pytest.raises(ConfigError, match="methods"):
        fedselect.compare(doc(), out=tmp_path / "m")  # an experiment, not a comparison: fedselect.run
    with pytest.raises(ConfigError, match="train.lrr"):
        fedselect.compare(cc, out=tmp_path / "o", train__lrr=0.1)
    assert not any(tmp_path.iterdir())


def test_fedselect_compare_and_run_are_the_api_functions():
    """``fedselect.compare`` and ``fedselect.run`` are the API functions, before and after the
    modules of the comparison (:mod:`fedselect.study.compare`) and of a run
    (:mod:`fedselect.experiment.run`) are imported: no module of the package shadows them."""
    import subprocess

    code = (
        "import fedselect; f = fedselect.compare; g = fedselect.run; "
        "import fedselect.study.compare as m; import fedselect.experiment.run; from fedselect.api import compare, run; "
        "print(f is compare, g is run, fedselect.compare is compare, fedselect.run is run, "
        "m.run_comparison.__module__ == 'fedselect.study.compare')"
    )
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(fedselect.__file__).resolve().parents[1])}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.stdout.split() == ["True"] * 5, r.stderr


def test_fedselect_list_shows_data_sets_and_models_with_their_options():
    out = cli("list")
    assert "data sets (data: {dataset, options})" in out and "models (model: {name, options})" in out
    for row in (
        "mnist-embedded",
        "test_size=1000",
        "path=None, header='auto', drop_invalid=False",
        "hidden=[25, 25]",
        "hidden=256, layers=2",
    ):
        assert row in out, row
    assert "fedselect.register_dataset" in out and "fedselect.register_model" in out
    assert "fedselect.register_partitioner" in out and "the entry-point group fedselect.partitioners" in out
    assert "engines (engine: NAME, --engine NAME)" in out and "this process and its worker pool" in out


@pytest.mark.parametrize("group,key", [("fedselect.models", "model"), ("fedselect.datasets", "data")])
def test_entry_point_model_and_data_set(group, key, user_module, monkeypatch):
    target = f"{user_module}:linear_probe" if key == "model" else f"{user_module}:two_blobs"
    ep = importlib.metadata.EntryPoint("from_a_plugin", target, group)
    real = importlib.metadata.entry_points
    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda group=None, **kw: [ep] if group == ep.group else real(group=group, **kw)
    )
    section = {"name": "from_a_plugin"} if key == "model" else {**doc()["data"], "dataset": "from_a_plugin"}
    cfg = parse_experiment(doc(**{key: section}))
    assert (cfg.model.options if key == "model" else cfg.data.options) == (
        {"bias": True} if key == "model" else {"n": 400, "dims": 6}
    )


# ------------------------------------------------------------------ one registry for every kind
def test_every_kind_is_one_registry_with_its_entry_point_group_and_decorator():
    from fedselect.cli.console import KIND_TABLES
    from fedselect.registry import REGISTRIES, Registry

    assert list(REGISTRIES) == ["selectors", "algorithms", "datasets", "partitioners", "models", "engines"]
    for key, reg in REGISTRIES.items():
        assert type(reg) is Registry and reg.group == f"fedselect.{key}"
        register = KIND_TABLES[key][1]
        assert register is None or callable(getattr(fedselect, register)), key
    from fedselect.algorithms import ALGORITHMS
    from fedselect.selectors import SELECTORS
    from fedselect.world.data.datasets import DATASETS
    from fedselect.world.data.partition import PARTITIONERS
    from fedselect.world.models import MODELS

    assert [SELECTORS, ALGORITHMS, DATASETS, PARTITIONERS, MODELS] == [REGISTRIES[k] for k in list(REGISTRIES)[:5]]


@pytest.mark.parametrize(
    "key,name,message",
    [
        ("selectors", "nope", "unknown selector 'nope'; allowed: ['"),
        ("algorithms", "nope", "unknown algorithm 'nope'; allowed: ['"),
        ("datasets", "nope", "unknown dataset 'nope'; allowed: ['"),
        ("partitioners", "nope", "unknown partition scheme 'nope'; allowed: ['"),
        ("models", "nope", "unknown model 'nope'; allowed: ['"),
        (
            "engines",
            "nope",
            "unknown engine 'nope'; allowed: ['flower', 'simulator'] (or 'package.module:ClassName' for your own)",
        ),
        (
            "partitioners",
            "fedselect.world.models:MLP",
            "partition scheme 'fedselect.world.models:MLP' is <class 'fedselect.world.models.MLP'>, not a",
        ),
        (
            "models",
            "fedselect.world.models:nothing",
            "model 'fedselect.world.models:nothing': module 'fedselect.world.models' has no attribute",
        ),
    ],
)
def test_every_kind_names_the_kind_the_name_and_what_is_allowed(key, name, message):
    from fedselect.registry import REGISTRIES

    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace("[", r"\[").replace(")", r"\)")) as e:
        REGISTRIES[key].get(name)
    if name == "nope":  # every built-in is allowed (other tests may have registered more)
        assert all(repr(n) in str(e.value) for n in REGISTRIES[key].builtin_names())


def test_own_partition_scheme_by_name_path_and_entry_point(tmp_path, user_module, monkeypatch):
    """A partition scheme of the user's (``@fedselect.register_partitioner``, ``module:Class``
    or the entry-point group ``fedselect.partitioners``): its parameters are validated and
    recorded, and the federation holds exactly the rows it deals out."""
    from fedselect.config.schema import ConfigError
    from fedselect.world.federation import build_federation

    data = {"dataset": f"{user_module}:two_blobs", "num_clients": 4, "validation": 0, "holdout_fraction": 0.0}
    d = doc(data={**data, "partition": {"scheme": f"{user_module}:RoundRobin", "offset": 1}}, model={"name": "mlp"})
    cfg = parse_experiment(d)
    assert cfg.data.partition.scheme == f"{user_module}:RoundRobin" and cfg.data.partition.params() == {"offset": 1}
    fed = build_federation(cfg)
    order = np.argsort(fed.train_set.y, kind="stable")  # 320 rows: client k gets sorted rows k+1, k+5, ... (mod 4)
    for k, c in enumerate(fed.clients):
        assert c.train_indices.tolist() == sorted(order[(k + 1) % 4 :: 4].tolist()) and len(c.train_indices) == 80
    # by the decorator's name, once the module is imported; defaults written out
    cfg = parse_experiment(doc(data={**data, "partition": {"scheme": "round_robin"}}, model={"name": "mlp"}))
    assert cfg.data.partition.params() == {"offset": 0}
    # by entry point
    ep = importlib.metadata.EntryPoint("dealt", f"{user_module}:RoundRobin", "fedselect.partitioners")
    real = importlib.metadata.entry_points
    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda group=None, **kw: [ep] if group == ep.group else real(group=group, **kw)
    )
    assert parse_experiment(doc(data={**data, "partition": {"scheme": "dealt"}})).data.partition.params() == {"offset": 0}
    for partition, problem in (
        ({"scheme": "round_robin", "offset": -1}, "data.partition: offset must be >= 0, got -1"),
        ({"scheme": "round_robin", "ofset": 1}, "data.partition: unknown option(s) ['ofset'] for scheme 'round_robin'"),
        (
            {"scheme": f"{user_module}:two_blobs"},
            f"data.partition.scheme: partition scheme '{user_module}:two_blobs' is <function",
        ),
    ):
        with pytest.raises(ConfigError) as e:
            parse_experiment(doc(data={**data, "partition": partition}))
        assert problem in str(e.value), str(e.value)


def test_engines_are_listed_without_importing_them():
    """The engine kind declares its built-ins by module path: listing their names (the CLI's
    choices) imports neither Flower's engine nor the engines and experiment layers; a lookup
    imports one."""
    import subprocess

    code = (
        "import sys; from fedselect.registry import ENGINES; names = ENGINES.names(); "
        "print(names, ENGINES.builtin_names() == names, 'fedselect.flower' in sys.modules, "
        "'fedselect.engines' in sys.modules or 'fedselect.experiment.run' in sys.modules)"
    )
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(fedselect.__file__).resolve().parents[1])}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.stdout.split() == ["['flower',", "'simulator']", "True", "False", "False"], r.stderr
    from fedselect.engines.simulator import SimulatorEngine
    from fedselect.registry import ENGINES

    assert ENGINES.get("simulator") is SimulatorEngine and "fedselect.engines" in sys.modules


def test_a_declared_builtin_whose_extra_is_missing_says_what_to_install():
    from fedselect.registry import Registry

    reg = Registry(
        "engine",
        None,
        "fedselect.test-engines",
        builtin="no_such_engine_pkg_xyz",
        declared={"ghost": "no_such_engine_pkg_xyz.engine:run", "local": "fedselect.registry:Registry"},
        needs={"ghost": "Ghost: pip install ghost"},
    )
    assert reg.names() == ["ghost", "local"] and reg.builtin_names() == ["ghost"]  # declared, nothing imported
    with pytest.raises(
        ValueError,
        match=r"^engine 'ghost' needs Ghost: pip install ghost \(engine 'no_such_engine_pkg_xyz.engine:run': cannot import",
    ):
        reg.get("ghost")
    assert reg.get("local") is Registry and reg.path_of("local") == "fedselect.registry:Registry"
