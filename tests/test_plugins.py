"""Users' own selectors and algorithms, defined in a module outside the package: usable by
``package.module:Class`` name, by the registration decorator and by an entry point, through the
CLI and through the Python API, and resumed exactly."""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap

import pytest
import torch
import yaml
from typer.testing import CliRunner

import fedselect
from fedselect.cli import app
from fedselect.experiment import run_experiment
from fedselect.resolve import parse_experiment

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
    d = {
        "name": "plugin",
        "seed": 3,
        "rounds": 4,
        "clients_per_round": 3,
        "checkpoint_every": 1,
        "data": {
            "dataset": "mnist-embedded",
            "num_clients": 6,
            "partition": {"scheme": "dirichlet", "alpha": 0.5, "min_size": 10},
        },
        "model": {"name": "mlp", "options": {"hidden": [16]}},
        "train": {"local_epochs": 1, "batch_size": 32, "lr": 0.05},
    }
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
    from fedselect.config import ConfigError

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_experiment(doc(selector={"name": name}))
