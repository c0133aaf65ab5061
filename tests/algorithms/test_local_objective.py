"""Local objectives as hooks (docs/architecture.md, "Adding a local objective").

The worked example is a plug-in outside ``src/``: FedDyn in ``examples/local-objective``
(``myobjectives.feddyn:FedDyn``), which changes every client's objective with one
:class:`~fedselect.fl.local.objective.LocalObjective` and touches no file of fedselect. Here: its
term by hand, its run on the simulator (and that it changes training), in worker processes
(the same bytes), on the stacked path (allclose), through the Flower wire (the simulator's
bytes), resumed exactly; the hook's own rules (autograd default, declarations, fields on the
wire, errors)."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn

import fedselect
from fedselect.algorithms.fedprox import ProximalTerm
from fedselect.algorithms.scaffold import DriftCorrection
from fedselect.experiment.resolve import parse_experiment
from fedselect.experiment.run import run_experiment
from fedselect.fl.local.clients import TrainJob
from fedselect.fl.local.objective import LocalObjective, objective_bytes, objective_class, objective_fields, stack_key
from fedselect.fl.local.train import TrainConfig, train_steps
from support.tiny import tiny_doc, tiny_node_settings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "local-objective"
FEDDYN = "myobjectives.feddyn:FedDyn"


@pytest.fixture
def feddyn(monkeypatch):
    """The example's module, importable as PYTHONPATH=examples/local-objective would make it."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    import myobjectives.feddyn as module

    yield module
    for m in [m for m in sys.modules if m == "myobjectives" or m.startswith("myobjectives.")]:
        del sys.modules[m]


def doc(algorithm: str = FEDDYN, rounds: int = 4, **over) -> dict:
    d = tiny_doc(
        name="objective",
        seed=2,
        rounds=rounds,
        clients_per_round=3,
        checkpoint_every=1,
        num_clients=6,
        hidden=16,
        selector={"name": "random"},
        algorithm={"name": algorithm, "options": {"alpha": 0.1} if algorithm == FEDDYN else {}},
    )
    d.update(over)
    return d


def same_run(a: Path, b: Path) -> bool:
    return all((a / f).read_bytes() == (b / f).read_bytes() for f in ("metrics.csv", "model.pt"))


# ============================================================================ the term by hand
def _linear() -> nn.Module:
    m = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        m.weight.zero_()
    return m


def _steps(objective, epochs: int) -> torch.Tensor:
    model = _linear()
    x, y = torch.tensor([[2.0, 0.0]]), torch.tensor([0])
    cfg = TrainConfig(epochs=epochs, batch_size=1, lr=0.5, momentum=0.0)
    train_steps(model, x, y, None, cfg, torch.Generator().manual_seed(0), objective=objective)
    return model.weight.detach().clone()


def test_the_feddyn_term_by_hand(feddyn):
    # W0 = 0, one sample x = (2, 0) of class 0, lr 0.5, no momentum; alpha 0.4, g = ((0.1, 0.2), (0.3, 0.4)).
    # The term's gradient is -g + alpha (W - W0).
    # step 1: dCE(W0) = ((-1, 0), (1, 0)); dR = -g:  W1 = -0.5 ((-1.1, -0.2), (0.7, -0.4)) = ((0.55, 0.1), (-0.35, 0.2))
    # step 2: logits W1 x = (1.1, -0.7): p0 = 1 / (1 + e^-1.8) = 0.85814894;
    #         dCE = ((2 (p0 - 1), 0), (2 (1 - p0), 0)) = ((-0.28370213, 0), (0.28370213, 0));
    #         dR = -g + 0.4 W1 = ((0.12, -0.16), (-0.44, -0.32));
    #         W2 = W1 - 0.5 (dCE + dR) = ((0.63185106, 0.18), (-0.27185106, 0.36))
    obj = feddyn.DynamicRegularizer(0.4, {"weight": torch.tensor([[0.1, 0.2], [0.3, 0.4]])})
    torch.testing.assert_close(_steps(obj, 1), torch.tensor([[0.55, 0.1], [-0.35, 0.2]]))
    torch.testing.assert_close(_steps(obj, 2), torch.tensor([[0.63185106, 0.18], [-0.27185106, 0.36]]))


@pytest.mark.parametrize(
    "objective",
    [ProximalTerm(0.3), DriftCorrection({"weight": torch.tensor([[0.1, -0.2], [0.3, 0.05]])})],
    ids=["fedprox", "scaffold"],
)
def test_the_default_hook_is_the_gradient_of_the_term(objective):
    """FedProx and SCAFFOLD apply their closed forms; the base class's autograd of their
    ``term`` trains the same weights (to float32 rounding)."""

    class ByAutograd:
        def begin(self, params):
            return LocalObjective.begin(objective, params)

    closed, generic = _steps(objective, 3), _steps(ByAutograd(), 3)
    torch.testing.assert_close(generic, closed, rtol=1e-6, atol=1e-7)
    assert not torch.equal(closed, _steps(None, 3))


def test_a_term_that_does_not_depend_on_the_weights_changes_nothing():
    @dataclass(frozen=True)
    class Constant(LocalObjective):
        value: float

        def term(self, params, start):
            return torch.tensor(self.value)

    assert torch.equal(_steps(Constant(3.0), 2), _steps(None, 2))


def test_an_objective_without_a_term_says_so():
    @dataclass(frozen=True)
    class Nothing(LocalObjective):
        pass

    with pytest.raises(NotImplementedError, match=r"Nothing defines no term\(params, start\)"):
        _steps(Nothing(), 1)


# ============================================================================ the plug-in's runs
def test_feddyn_from_outside_src_runs_changes_training_and_learns(feddyn, tmp_path):
    res = fedselect.run(doc(), tmp_path / "feddyn", workers=0)
    ref = fedselect.run(doc("fedavg"), tmp_path / "fedavg", workers=0)
    assert res.summary["method"] == f"random+{FEDDYN}"
    assert [r["selected"] for r in res.metrics] == [r["selected"] for r in ref.metrics]  # the same clients ...
    a, b = (torch.load(d / "model.pt", weights_only=True) for d in (res.run_dir, ref.run_dir))
    assert any(not torch.equal(a[k], b[k]) for k in a)  # ... trained to other weights
    assert float(res.metrics[-1]["accuracy"]) > 0.3  # chance is 0.1
    from fedselect.experiment.checkpoint import load_checkpoint

    aux = load_checkpoint(res.run_dir)["snapshot"]["server"]["aux"]  # what a resume starts from
    trained = {int(k) for r in res.metrics[1:] for k in r["selected"].split(";")}
    assert sorted(aux) == sorted(["h"] + [f"g/{k}" for k in trained])


@pytest.mark.slow
def test_feddyn_trains_in_worker_processes_to_the_same_bytes(feddyn, tmp_path):
    """The objective is pickled to the workers, which import myobjectives themselves."""
    a = fedselect.run(doc(rounds=3), tmp_path / "w0", workers=0)
    b = fedselect.run(doc(rounds=3), tmp_path / "w2", workers=2)
    assert same_run(a.run_dir, b.run_dir)


def test_feddyn_resumes_exactly(feddyn, tmp_path):
    """``g_k`` and ``h`` live in the server state's aux: a run stopped after round 2 and resumed
    gives the uninterrupted run's bytes."""
    cfg = parse_experiment(doc())
    run_experiment(cfg, tmp_path / "whole", workers=0)
    run_experiment(cfg, tmp_path / "run", stop_after=2, workers=0)
    assert not (tmp_path / "run" / "summary.json").exists()
    fedselect.resume(tmp_path / "run", workers=0)
    assert same_run(tmp_path / "whole", tmp_path / "run")


@pytest.mark.skipif(importlib.util.find_spec("flwr") is None, reason="Flower is the optional extra fedselect[flower]")
def test_feddyn_through_the_flower_wire_gives_the_simulators_run(feddyn, tmp_path, monkeypatch):
    """Flower's ClientApp (tests/support/flower_grid.py, in this process) decodes each job's objective
    from the message, importing ``myobjectives.feddyn:DynamicRegularizer`` by its path, and
    answers with the simulator's bytes."""
    from fedselect.flower.client_app import make_client_app
    from fedselect.flower.grid_run import run_on_grid
    from fedselect.flower.nodes import FlowerOptions
    from fedselect.world.federation import build_federation
    from support.flower_grid import LocalGrid

    node = tiny_node_settings(seed=2, hidden=16)
    import fedselect.flower.client_app as client_app

    decoded = []
    real = client_app.decode_job

    def spy(msg):
        job, train_cfg = real(msg)
        decoded.append(type(getattr(job, "objective", None)))
        return job, train_cfg

    monkeypatch.setattr(client_app, "decode_job", spy)
    cfg = parse_experiment(doc(rounds=3))
    fed = build_federation(cfg)
    run_on_grid(LocalGrid(make_client_app(node), 6, {}), cfg, tmp_path / "flower", FlowerOptions(poll_s=0.01), federation=fed)
    run_experiment(cfg, tmp_path / "sim", federation=fed, workers=0)
    assert same_run(tmp_path / "flower", tmp_path / "sim")
    assert decoded.count(feddyn.DynamicRegularizer) == 3 * 3  # every training job of the 3 rounds


# ============================================================================ the stacked path
@dataclass(frozen=True)
class Tilt(LocalObjective):
    """A term that declares nothing: ``R(w) = <t, w>`` with a plain ``t`` (not ``stackable``)."""

    tilt: float

    def term(self, params, start):
        return sum(self.tilt * p.sum() for p in params.values())


def test_the_stacked_path_trains_stackable_objectives_and_leaves_the_others_sequential(feddyn, monkeypatch):
    from fedselect.experiment.resolve import resolve
    from fedselect.fl.local.pool import ClientTrainer
    from fedselect.world.federation import build_federation

    r = resolve(parse_experiment(doc()))
    fed = build_federation(r.config)
    model = fed.new_model()
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    grads = [
        {n: torch.randn(p.shape, generator=torch.Generator().manual_seed(k)) * 0.05 for n, p in model.named_parameters()}
        for k in range(3)
    ]
    dyn = [TrainJob(k, start, 1 + k % 2, 2, f"train/1/{k}", objective=feddyn.DynamicRegularizer(0.1, grads[k])) for k in range(3)]
    tilt = [TrainJob(3, start, 1, 2, "train/1/3", objective=Tilt(0.01))]
    with ClientTrainer.from_federation(fed, r.train_cfg, workers=0, channels_last=False) as here:
        ref = here.train(dyn + tilt)
    import fedselect.fl.local.batched as batched

    seen = []
    real = batched.train_batched
    monkeypatch.setattr(
        batched, "train_batched", lambda m, d, jobs, *a: seen.append([j.client_id for j in jobs]) or real(m, d, jobs, *a)
    )
    with ClientTrainer.from_federation(fed, r.train_cfg, workers=0, channels_last=False, batched=True) as stacked:
        got = stacked.train(dyn)
        sequential = stacked.train(dyn + tilt)  # Tilt is not stackable: the whole call trains one by one
    assert seen == [[0, 1, 2]]
    for a, b in zip(ref, got):  # vmap(grad(loss + term)): equal to float32 rounding
        for k in a.state:
            torch.testing.assert_close(b.state[k], a.state[k], rtol=1e-4, atol=1e-5)
    assert all(torch.equal(a.state[k], b.state[k]) for a, b in zip(ref, sequential) for k in a.state)
    with pytest.raises(ValueError, match=r"objectives \['Tilt'\] do not declare `stackable`"):
        real(model, here.data, tilt, r.train_cfg)
    keys = {stack_key(j.objective) for j in dyn}
    assert len(keys) == 1 and stack_key(feddyn.DynamicRegularizer(0.2, grads[0])) not in keys  # alpha splits stacks


# ============================================================================ the rules
def test_objective_fields_and_bytes(feddyn):
    g = {"w": torch.zeros(3, 2), "b": torch.zeros(2, dtype=torch.float64)}
    plain, tensors = objective_fields(feddyn.DynamicRegularizer(0.5, g))
    assert plain == {"alpha": 0.5} and set(tensors) == {"grad"} and tensors["grad"]["w"] is g["w"]
    assert objective_bytes(feddyn.DynamicRegularizer(0.5, g)) == 6 * 4 + 2 * 8
    assert objective_bytes(ProximalTerm(0.1)) == 0 and objective_bytes(None) == 0

    @dataclass(frozen=True)
    class Odd(LocalObjective):
        weights: list

    with pytest.raises(TypeError, match=r"Odd.weights is a list; a local objective's fields are bool, int, float, str"):
        objective_fields(Odd([1.0]))
    with pytest.raises(TypeError, match="objective must be a fedselect.fl.local.objective.LocalObjective or None, got dict"):
        TrainJob(0, {}, 1, 0, "s", objective={"mu": 0.1})


@pytest.mark.parametrize(
    "path, message",
    [
        ("no_such_module_xyz:Term", "cannot import module 'no_such_module_xyz'"),
        ("fedselect.algorithms.fedprox:Nope", "'fedselect.algorithms.fedprox' has no attribute 'Nope'"),
        ("fedselect.algorithms.fedprox:FedProx", "not a subclass of fedselect.fl.local.objective.LocalObjective"),
        ("ProximalTerm", "is named 'module:qualname'"),
        ("mod:f.<locals>.C", "is named 'module:qualname'"),
    ],
)
def test_an_objective_class_named_on_the_wire_is_checked(path, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        objective_class(path)
    assert objective_class("fedselect.algorithms.fedprox:ProximalTerm") is ProximalTerm


def test_an_objective_that_does_not_fit_the_model_is_refused_before_training(feddyn):
    from fedselect.experiment.resolve import resolve
    from fedselect.fl.local.pool import ClientTrainer
    from fedselect.world.federation import build_federation

    r = resolve(parse_experiment(doc()))
    fed = build_federation(r.config)
    start = {k: v.detach().clone() for k, v in fed.new_model().state_dict().items()}
    bad = feddyn.DynamicRegularizer(0.1, {"net.1.weight": torch.zeros(1)})
    with ClientTrainer.from_federation(fed, r.train_cfg, workers=0) as t:
        with pytest.raises(ValueError, match=r"client 4: DynamicRegularizer.grad needs one entry per parameter \(missing \["):
            t.train([TrainJob(4, start, 1, 2, "train/1/4", objective=bad)])
