"""The field's algorithms (issue 22 item 5): FedProx, FedAdam / FedYogi / FedAdagrad, SCAFFOLD.

Worked examples with numbers computed by hand (in the comments), the paths the local
objectives take (in this process, the worker pool, the stacked path, the Flower wire), FedProx with ``mu: 0``
byte-identical to FedAvg through the real run path, SCAFFOLD's bytes, option errors, and
end-to-end learning on the embedded MNIST."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from fedselect.algorithms import ALGORITHMS
from fedselect.algorithms._server_opt import AdagradOptions, AdaptiveOptions, server_step
from fedselect.algorithms.fedprox import ProximalTerm
from fedselect.algorithms.scaffold import DriftCorrection, Scaffold, ScaffoldOptions, momentum_steps
from fedselect.config.schema import ConfigError, parse_config
from fedselect.experiment.resolve import parse_experiment, resolve
from fedselect.experiment.run import run_experiment
from fedselect.fl.local.clients import TrainJob
from fedselect.fl.local.train import TrainConfig, train_steps
from fedselect.fl.types import ClientOutcome, ServerState
from support.tiny import tiny_doc

NEW = ("fedprox", "fedadam", "fedyogi", "fedadagrad", "scaffold")


def outcome(k: int, state: dict, n: int, epochs: int = 1) -> ClientOutcome:
    return ClientOutcome(k, 1, state, n, 0.0, epochs, 0.0, 0.0, 0.0, 0.0, 0, 0)


def doc(algorithm: str, options: dict | None = None, rounds: int = 5, **over) -> dict:
    d = tiny_doc(
        name="alg",
        seed=1,
        rounds=rounds,
        clients_per_round=3,
        checkpoint_every=0,
        selector={"name": "random"},
        algorithm={"name": algorithm, "options": options or {}},
        train={"local_epochs": 1, "batch_size": 32, "lr": 0.05, "workers": 0},
    )
    d.update(over)
    return d


def rows(path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


# ============================================================================ server optimisers
def _server_alg(cls_name: str, options) -> object:
    """An adaptive server optimiser over a 2-parameter "model" ``w`` plus an integer buffer."""
    alg = ALGORITHMS.get(cls_name).__new__(ALGORITHMS.get(cls_name))
    alg.options, alg.param_names = options, ["w"]
    alg.upload_keys = lambda: None
    return alg


def _two_clients(x: torch.Tensor, delta: torch.Tensor) -> list[ClientOutcome]:
    # n = 1 and 3: the weighted mean (w1 + 3 w2) / 4 = x + delta (the +-e parts cancel)
    e = torch.tensor([0.4, 0.4])
    return [
        outcome(0, {"w": x + delta + 3 * e, "steps": torch.tensor(5)}, 1),
        outcome(1, {"w": x + delta - e, "steps": torch.tensor(7)}, 3),
    ]


def test_fedadam_one_server_step_by_hand():
    # eta 1, beta1 0.5, beta2 0.5, tau 0.2: v_{-1} = tau^2 = 0.04, m_{-1} = 0; Delta = (0.2, -1.4)
    #   m = 0.5 * Delta                         = (0.1, -0.7)
    #   v = 0.5 * 0.04 + 0.5 * Delta^2          = (0.02 + 0.02, 0.02 + 0.98) = (0.04, 1.0)
    #   x + m / (sqrt(v) + tau) = (1 + 0.1 / 0.4, -2 - 0.7 / 1.2) = (1.25, -2.583333...)
    x = torch.tensor([1.0, -2.0])
    alg = _server_alg("fedadam", AdaptiveOptions(server_lr=1.0, beta1=0.5, beta2=0.5, tau=0.2))
    state = ServerState({"w": x, "steps": torch.tensor(3)}, aux={"m": {"w": torch.zeros(2)}, "v": {"w": torch.full((2,), 0.04)}})
    new = alg.aggregate(1, state, _two_clients(x, torch.tensor([0.2, -1.4])))
    torch.testing.assert_close(new.model["w"], torch.tensor([1.25, -2.0 - 0.7 / 1.2]))
    torch.testing.assert_close(new.aux["m"]["w"], torch.tensor([0.1, -0.7]))
    torch.testing.assert_close(new.aux["v"]["w"], torch.tensor([0.04, 1.0]))
    assert new.model["steps"].item() == 7 and new.model["steps"].dtype == torch.int64  # integer buffer: FedAvg's (max)
    assert state.model["w"].tolist() == [1.0, -2.0] and state.aux["m"]["w"].tolist() == [0.0, 0.0]  # not mutated


def test_fedyogi_one_server_step_by_hand():
    # eta 1, beta1 0.5, beta2 0.5, tau 0.2: v_{-1} = 0.04; Delta = (0.1, -1.4);
    # v = v - (1 - beta2) Delta^2 sign(v - Delta^2), m = 0.5 Delta = (0.05, -0.7)
    #   coordinate 1: Delta^2 = 0.01 < v: v = 0.04 - 0.5 * 0.01 = 0.035 (shrinks), sqrt = 0.1870829
    #                 x = 1 + 0.05 / (0.1870829 + 0.2) = 1 + 0.1291713 = 1.1291713
    #   coordinate 2: Delta^2 = 1.96 > v: v = 0.04 + 0.5 * 1.96 = 1.02 (grows), sqrt = 1.0099505
    #                 x = -2 - 0.7 / (1.0099505 + 0.2) = -2 - 0.5785361 = -2.5785361
    x = torch.tensor([1.0, -2.0])
    alg = _server_alg("fedyogi", AdaptiveOptions(server_lr=1.0, beta1=0.5, beta2=0.5, tau=0.2))
    state = ServerState({"w": x, "steps": torch.tensor(3)}, aux={"m": {"w": torch.zeros(2)}, "v": {"w": torch.full((2,), 0.04)}})
    new = alg.aggregate(1, state, _two_clients(x, torch.tensor([0.1, -1.4])))
    torch.testing.assert_close(new.aux["m"]["w"], torch.tensor([0.05, -0.7]))
    torch.testing.assert_close(new.aux["v"]["w"], torch.tensor([0.035, 1.02]))
    torch.testing.assert_close(new.model["w"], torch.tensor([1.1291713, -2.5785361]))
    # a second step with Delta = (0.1, 0):
    #   m = 0.5 (0.05, -0.7) + 0.5 (0.1, 0) = (0.075, -0.35); v = (0.035 - 0.005, 1.02 - 0) = (0.03, 1.02)
    #   x_1 = 1.1291713 + 0.075 / (sqrt(0.03) + 0.2) = 1.1291713 + 0.075 / 0.3732051 = 1.3301332
    x2, m2, v2 = server_step(
        "yogi", new.model["w"], torch.tensor([0.1, 0.0]), new.aux["m"]["w"], new.aux["v"]["w"], 1.0, 0.5, 0.5, 0.2
    )
    torch.testing.assert_close(m2, torch.tensor([0.075, -0.35]))
    torch.testing.assert_close(v2, torch.tensor([0.03, 1.02]))
    torch.testing.assert_close(x2[0], torch.tensor(1.3301332))


def test_fedadagrad_one_server_step_by_hand():
    # eta 1, beta1 0.5, tau 0.3: v_{-1} = 0.09; Delta = (0.4, -0.72)
    #   v = 0.09 + Delta^2 = (0.25, 0.6084): sqrt (0.5, 0.78);  m = (0.2, -0.36)
    #   x + m / (sqrt(v) + tau) = (1 + 0.2 / 0.8, -2 - 0.36 / 1.08) = (1.25, -2.333333...)
    x = torch.tensor([1.0, -2.0])
    alg = _server_alg("fedadagrad", AdagradOptions(server_lr=1.0, beta1=0.5, tau=0.3))
    state = ServerState({"w": x, "steps": torch.tensor(3)}, aux={"m": {"w": torch.zeros(2)}, "v": {"w": torch.full((2,), 0.09)}})
    new = alg.aggregate(1, state, _two_clients(x, torch.tensor([0.4, -0.72])))
    torch.testing.assert_close(new.aux["v"]["w"], torch.tensor([0.25, 0.6084]))
    torch.testing.assert_close(new.model["w"], torch.tensor([1.25, -2.0 - 1.0 / 3.0]))


def test_server_optimisers_initial_moments_live_in_the_server_state():
    r = resolve(parse_experiment(doc("fedyogi", {"tau": 0.01})))
    from fedselect.experiment.simulation import Simulation
    from fedselect.world.federation import build_federation

    sim = Simulation(r, build_federation(r.config), workers=0)
    try:
        st = sim.algorithm.initial_state()
        names = [n for n, _ in sim.fed.new_model().named_parameters()]
        assert sorted(st.aux) == ["m", "v"] and list(st.aux["m"]) == names
        assert all(float(t.abs().max()) == 0 for t in st.aux["m"].values())
        assert all(torch.allclose(t, torch.full_like(t, 1e-4)) for t in st.aux["v"].values())  # tau^2
        back = ServerState.from_dict(st.to_dict())  # what a checkpoint keeps
        assert all(torch.equal(back.aux["v"][n], st.aux["v"][n]) for n in names)
    finally:
        sim.close()


# ============================================================================ FedProx
def _linear() -> nn.Module:
    m = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        m.weight.zero_()
    return m


def _two_steps(mu: float, correction=None, epochs: int = 2) -> torch.Tensor:
    model = _linear()
    x, y = torch.tensor([[2.0, 0.0]]), torch.tensor([0])
    cfg = TrainConfig(epochs=epochs, batch_size=1, lr=0.5, momentum=0.0)
    objective = DriftCorrection(correction) if correction is not None else ProximalTerm(mu) if mu else None
    train_steps(model, x, y, None, cfg, torch.Generator().manual_seed(0), objective=objective)
    return model.weight.detach().clone()


def test_fedprox_gradient_of_the_prox_term_by_hand():
    # W0 = 0, one sample x = (2, 0) of class 0, lr 0.5, no momentum, two steps (two epochs).
    # step 1: logits 0, softmax (0.5, 0.5); dCE/dW = (p - onehot) x^T = ((-1, 0), (1, 0));
    #         the prox term mu (W - W0) is 0 at W0: W1 = -0.5 dCE = ((0.5, 0), (-0.5, 0)) either way.
    # step 2: logits W1 x = (1, -1): p = (e / (e + 1/e), ...) = (0.8807971, 0.1192029);
    #         dCE = ((-0.2384058, 0), (0.2384058, 0));  plain: W2 = W1 - 0.5 dCE = +-(0.6192029, 0)
    #         FedProx mu 0.4 adds mu (W1 - W0) = ((0.2, 0), (-0.2, 0)): W2 = +-(0.5192029, 0)
    plain, prox = _two_steps(0.0), _two_steps(0.4)
    torch.testing.assert_close(plain, torch.tensor([[0.6192029, 0.0], [-0.6192029, 0.0]]))
    torch.testing.assert_close(prox, torch.tensor([[0.5192029, 0.0], [-0.5192029, 0.0]]))
    torch.testing.assert_close(_two_steps(0.4, epochs=1), _two_steps(0.0, epochs=1))  # nothing at the anchor


def test_scaffold_correction_in_a_local_step_by_hand():
    # y <- y - lr (g(y) - c_k + c) with c - c_k = ((0.1, 0.2), (0.3, 0.4)); g(W0) = ((-1, 0), (1, 0))
    #   W1 = -0.5 ((-0.9, 0.2), (1.3, 0.4)) = ((0.45, -0.1), (-0.65, -0.2))
    corr = {"weight": torch.tensor([[0.1, 0.2], [0.3, 0.4]])}
    torch.testing.assert_close(_two_steps(0.0, corr, epochs=1), torch.tensor([[0.45, -0.1], [-0.65, -0.2]]))


@pytest.mark.parametrize("mu", [-1.0, math.inf, math.nan, "0.1", True])
def test_the_proximal_weight_must_be_a_finite_number_at_least_0(mu):
    with pytest.raises(ValueError, match="ProximalTerm: mu must be a finite number >= 0"):
        ProximalTerm(mu)


def test_a_correction_without_a_trained_parameter_is_refused_where_training_starts():
    with pytest.raises(ValueError, match=r"correction lacks parameters \['weight'\]"):
        _two_steps(0.0, {"bias": torch.zeros(2)})


# ============================================================================ SCAFFOLD
def test_scaffold_control_variate_update_by_hand():
    # N = 4 clients, lr 0.1, no momentum, B 10, eta_g 1; x = (1, 2), c = (0.5, -0.5), c_0 = (0.1, 0.1),
    # client 1 never trained (c_1 = 0). Client 0: 20 samples -> K = 2, y0 = (0.8, 2.2);
    # client 1: 10 samples -> K = 1, y1 = (1.1, 1.9).
    #   c_0+ = c_0 - c + (x - y0) / (K lr) = (0.1 - 0.5 + 0.2 / 0.2, 0.1 + 0.5 - 0.2 / 0.2) = (0.6, -0.4)
    #   c_1+ = 0 - c + (x - y1) / (1 * 0.1) = (-0.5 - 1, 0.5 + 1) = (-1.5, 1.5)
    #   x+ = x + mean(dy) = (1, 2) + ((-0.2, 0.2) + (0.1, -0.1)) / 2 = (0.95, 2.05)
    #   c+ = c + (1/N) sum dc = (0.5, -0.5) + ((0.5, -0.5) + (-1.5, 1.5)) / 4 = (0.25, -0.25)
    alg = Scaffold.__new__(Scaffold)
    alg.options, alg.param_names = ScaffoldOptions(), ["w"]
    alg.train_cfg = TrainConfig(epochs=1, batch_size=10, lr=0.1, momentum=0.0)
    alg.fed = type("Fed", (), {"num_clients": 4})()
    alg.upload_keys = lambda: None
    x = torch.tensor([1.0, 2.0])
    state = ServerState({"w": x}, aux={"c": {"w": torch.tensor([0.5, -0.5])}, "c/0": {"w": torch.tensor([0.1, 0.1])}})
    assert alg.local_objective(state, 0).correction["w"].tolist() == pytest.approx([0.4, -0.6])  # c - c_0
    assert alg.local_objective(state, 1).correction["w"].tolist() == pytest.approx([0.5, -0.5])  # c - 0
    new = alg.aggregate(
        1, state, [outcome(0, {"w": torch.tensor([0.8, 2.2])}, 20), outcome(1, {"w": torch.tensor([1.1, 1.9])}, 10)]
    )
    torch.testing.assert_close(new.model["w"], torch.tensor([0.95, 2.05]))
    torch.testing.assert_close(new.aux["c/0"]["w"], torch.tensor([0.6, -0.4]))
    torch.testing.assert_close(new.aux["c/1"]["w"], torch.tensor([-1.5, 1.5]))
    torch.testing.assert_close(new.aux["c"]["w"], torch.tensor([0.25, -0.25]))


def test_momentum_steps():
    # K steps of SGD with momentum rho under a constant gradient move by lr (1 + (1 + rho) + ...)
    assert momentum_steps(3, 0.0) == 3.0
    assert momentum_steps(1, 0.9) == pytest.approx(1.0)
    assert momentum_steps(2, 0.9) == pytest.approx(1 + 1.9)
    assert momentum_steps(3, 0.5) == pytest.approx(1 + 1.5 + 1.75)


def test_scaffold_bytes_are_twice_fedavgs_and_it_learns(tmp_path):
    ref = rows(_run(tmp_path / "fedavg", doc("fedavg")))
    got = rows(_run(tmp_path / "scaffold", doc("scaffold")))
    for a, b in zip(ref[1:], got[1:]):
        assert a["selected"] == b["selected"]
        assert int(b["upload_bytes"]) == 2 * int(a["upload_bytes"]) > 0  # y and dc (the MLP has no buffers)
        assert int(b["download_bytes"]) == 2 * int(a["download_bytes"]) > 0  # x and c
    assert float(got[-1]["accuracy"]) > 0.2  # chance is 0.1


def test_scaffold_needs_sgd():
    with pytest.raises(ConfigError, match="scaffold.*train.optimizer: sgd"):
        resolve(parse_experiment(doc("scaffold", train={"optimizer": "adam", "lr": 0.01})))


# ============================================================================ end to end
def _run(run_dir, d: dict):
    run_experiment(parse_config(d), run_dir)
    return run_dir / "metrics.csv"


def test_fedprox_mu_0_is_fedavg_byte_for_byte(tmp_path):
    a = _run(tmp_path / "fedavg", doc("fedavg", rounds=3))
    b = _run(tmp_path / "prox0", doc("fedprox", {"mu": 0}, rounds=3))
    assert a.read_bytes() == b.read_bytes()
    assert (tmp_path / "fedavg" / "model.pt").read_bytes() == (tmp_path / "prox0" / "model.pt").read_bytes()
    c = _run(tmp_path / "prox", doc("fedprox", {"mu": 0.5}, rounds=3))  # and a positive mu changes training
    assert (tmp_path / "prox" / "model.pt").read_bytes() != (tmp_path / "fedavg" / "model.pt").read_bytes()
    assert rows(c)[-1]["upload_bytes"] == rows(a)[-1]["upload_bytes"]  # FedProx's traffic is FedAvg's


def test_fedyogi_learns_in_5_rounds(tmp_path):
    r = rows(_run(tmp_path / "yogi", doc("fedyogi")))
    assert len(r) == 6 and float(r[-1]["accuracy"]) > 0.2  # chance is 0.1


# ============================================================================ the transports
def _jobs(fed_params: dict) -> list[TrainJob]:
    corr = {n: torch.full_like(p, 0.01) for n, p in fed_params.items()}
    return [
        TrainJob(0, START, 1, 3, "train/1/0", objective=ProximalTerm(0.5)),
        TrainJob(1, START, 1, 3, "train/1/1", objective=DriftCorrection(corr)),
        TrainJob(2, START, 1, 3, "train/1/2"),
        TrainJob(3, START, 2, 3, "train/1/3", objective=ProximalTerm(0.5)),
        TrainJob(4, START, 1, 3, "train/1/4", objective=DriftCorrection({n: -v for n, v in corr.items()})),
    ]


START: dict = {}


@pytest.mark.slow
def test_fedprox_and_scaffold_objectives_reach_worker_processes_and_the_stacked_path():
    from fedselect.fl.local.pool import ClientTrainer
    from fedselect.world.federation import build_federation

    r = resolve(parse_experiment(doc("fedavg")))
    fed = build_federation(r.config)
    model = fed.new_model()
    START.clear()
    START.update({k: v.detach().clone() for k, v in model.state_dict().items()})
    jobs = _jobs(dict(model.named_parameters()))
    with ClientTrainer.from_federation(fed, r.train_cfg, workers=0, channels_last=False) as here:
        ref = here.train(jobs)
        plain = here.train([TrainJob(k, START, j.epochs, 3, f"train/1/{k}") for k, j in enumerate(jobs)])
    for a, b, j in zip(ref, plain, jobs):  # the objectives changed training, and only theirs
        assert any(not torch.equal(a.state[k], b.state[k]) for k in a.state) == (j.objective is not None)
    with ClientTrainer.from_federation(fed, r.train_cfg, workers=0, channels_last=False, batched=True) as stacked:
        got = stacked.train(jobs)  # both declare `stackable`: vmap(grad) of loss + term, 3 stacks
    for a, b in zip(ref, got):  # the stacked path adds in another order: equal to float32 rounding
        for k in a.state:
            torch.testing.assert_close(b.state[k], a.state[k], rtol=1e-4, atol=1e-5)
        assert b.loss == pytest.approx(a.loss, rel=1e-5)

    @dataclass(frozen=True)
    class Local(ProximalTerm):
        pass

    with ClientTrainer.from_federation(fed, r.train_cfg, workers=1, channels_last=False) as pool:
        got = pool.train(jobs)
        with pytest.raises(ValueError, match=r"client 0: DriftCorrection.correction needs one entry per parameter"):
            pool.train([TrainJob(0, START, 1, 3, "train/1/0", objective=DriftCorrection({"nope": torch.zeros(1)}))])
        with pytest.raises(ValueError, match=r"client 2: objective class .*<locals>.Local is defined inside a function"):
            pool.train([TrainJob(2, START, 1, 3, "train/1/2", objective=Local(0.1))])
    for a, b in zip(ref, got):
        assert all(torch.equal(a.state[k], b.state[k]) for k in a.state), a.client_id


def test_fedprox_and_scaffold_objectives_cross_the_flower_wire():
    pytest.importorskip("flwr")
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    from fedselect.flower.wire import decode_job, encode_job

    # what a ServerApp process has: Message() reads the run and node id from it
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, SUPERLINK_NODE_ID, 1

    st = {"w": torch.arange(4.0).reshape(2, 2), "b": torch.zeros(2)}
    corr = {"w": torch.full((2, 2), 0.25), "b": torch.ones(2)}
    msg = encode_job(TrainJob(3, st, 1, 7, "train/2/3", objective=DriftCorrection(corr)), 11, TrainConfig())
    assert msg.content["config"]["objective"] == "fedselect.algorithms.scaffold:DriftCorrection"
    back, _ = decode_job(msg)
    assert type(back.objective) is DriftCorrection and all(torch.equal(back.objective.correction[k], corr[k]) for k in corr)
    back, _ = decode_job(encode_job(TrainJob(3, st, 1, 7, "train/2/3", objective=ProximalTerm(0.125)), 11, TrainConfig()))
    assert back.objective == ProximalTerm(0.125)
    plain, _ = decode_job(encode_job(TrainJob(3, st, 1, 7, "train/2/3"), 11, TrainConfig()))
    assert plain.objective is None


# ============================================================================ options and listing
@pytest.mark.parametrize(
    "algorithm, options, key, allowed",
    [
        ("fedprox", {"mu": -1}, "algorithm.options.mu", "greater than or equal to 0"),
        ("fedadam", {"server_lr": 0}, "algorithm.options.server_lr", "greater than 0"),
        ("fedyogi", {"beta1": 1.0}, "algorithm.options.beta1", "less than 1"),
        ("fedyogi", {"beta2": -0.1}, "algorithm.options.beta2", "greater than or equal to 0"),
        ("fedadam", {"tau": 0}, "algorithm.options.tau", "greater than 0"),
        ("fedadagrad", {"beta2": 0.9}, "algorithm.options.beta2", "unknown key"),
        ("scaffold", {"server_lr": -1}, "algorithm.options.server_lr", "greater than 0"),
    ],
)
def test_bad_options_name_the_key(algorithm, options, key, allowed):
    with pytest.raises(ConfigError) as e:
        resolve(parse_experiment(doc(algorithm, options)))
    assert key in str(e.value) and allowed in str(e.value)


def test_method_presets_and_defaults():
    for name in NEW:
        r = resolve(parse_experiment({**doc("fedavg"), "selector": None, "algorithm": None, "method": name}))
        assert (r.config.selector.name, r.config.algorithm.name) == ("random", name)
    o = {n: ALGORITHMS.get(n).Options() for n in NEW}
    assert o["fedprox"].mu == 0.01 and o["scaffold"].server_lr == 1.0
    assert (o["fedadam"].server_lr, o["fedadam"].beta1, o["fedadam"].beta2, o["fedadam"].tau) == (0.03, 0.9, 0.99, 1e-3)
    assert o["fedyogi"].server_lr == 0.03 and o["fedadagrad"].server_lr == 0.1 and not hasattr(o["fedadagrad"], "beta2")
    assert all(math.isfinite(o[n].model_dump().get("tau", 1.0)) for n in NEW)


def test_fedselect_list_shows_them():
    from typer.testing import CliRunner

    from fedselect.cli import app

    out = CliRunner().invoke(app, ["list"], env={"COLUMNS": "250"}).output
    for name in NEW:
        assert name in out
