"""A user's own algorithm from outside ``src/``: FedAvgM (server momentum, Hsu et al. 2019) in
``examples/own-algorithm``, named by module path (docs/architecture.md, "Adding an algorithm")."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import fedselect
from fedselect.config.schema import ConfigError
from fedselect.experiment.resolve import parse_experiment
from fedselect.experiment.run import run_experiment
from support.tiny import tiny_doc

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own-algorithm"
FEDAVGM = "myalgorithms.fedavgm:FedAvgM"


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    """The example importable as PYTHONPATH=examples/own-algorithm makes it."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    yield
    for m in [m for m in sys.modules if m == "myalgorithms" or m.startswith("myalgorithms.")]:
        del sys.modules[m]


def doc(algorithm: str = FEDAVGM, rounds: int = 3, **options) -> dict:
    return tiny_doc(
        name="own-algorithm",
        seed=5,
        rounds=rounds,
        clients_per_round=3,
        checkpoint_every=1,
        num_clients=6,
        hidden=16,
        selector={"name": "random"},
        algorithm={"name": algorithm, "options": options},
    )


def model(run_dir: Path) -> dict:
    return torch.load(run_dir / "model.pt", weights_only=True)


def test_without_momentum_and_at_server_lr_1_it_is_fedavg_bit_for_bit(tmp_path):
    """beta = 0, server_lr = 1: x - (x - avg) = avg exactly, so every round is FedAvg's."""
    mine = fedselect.run(doc(beta=0.0, server_lr=1.0), tmp_path / "m", workers=0)
    ref = fedselect.run(doc("fedavg"), tmp_path / "f", workers=0)
    assert mine.summary["method"] == f"random+{FEDAVGM}"
    a, b = model(mine.run_dir), model(ref.run_dir)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [r["accuracy"] for r in mine.metrics] == [r["accuracy"] for r in ref.metrics]


def test_one_round_is_linear_in_the_server_learning_rate(tmp_path):
    """After round 1 (v_0 = 0): x_1 = x_0 - lr (x_0 - avg_1), so the model at lr 0.5 is the mean of
    those at lr 0.25 and 0.75 (the same clients, the same local training: only the step differs)."""
    runs = {
        lr: model(fedselect.run(doc(rounds=1, beta=0.9, server_lr=lr), tmp_path / str(lr), workers=0).run_dir)
        for lr in (0.25, 0.5, 0.75)
    }
    for k, w in runs[0.5].items():
        torch.testing.assert_close(w, (runs[0.25][k] + runs[0.75][k]) / 2, rtol=0, atol=1e-6)
    assert any(not torch.equal(runs[0.25][k], runs[0.75][k]) for k in runs[0.5])


def test_with_momentum_it_learns_other_weights_and_resumes_exactly(tmp_path):
    """The momentum lives in the server state's aux: a run stopped after round 2 and resumed
    gives the uninterrupted run's bytes."""
    cfg = parse_experiment(doc(rounds=4, beta=0.7))
    run_experiment(cfg, tmp_path / "whole", workers=0)
    run_experiment(cfg, tmp_path / "run", stop_after=2, workers=0)
    fedselect.resume(tmp_path / "run", workers=0)
    for f in ("metrics.csv", "model.pt"):
        assert (tmp_path / "whole" / f).read_bytes() == (tmp_path / "run" / f).read_bytes()
    ref = fedselect.run(doc("fedavg", rounds=4), tmp_path / "fedavg", workers=0)
    a, b = model(tmp_path / "whole"), model(ref.run_dir)
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_a_bad_option_is_refused_naming_its_key():
    with pytest.raises(ConfigError, match="beta"):
        parse_experiment(doc(beta=1.0))
