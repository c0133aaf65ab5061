"""Non-finite scores never win (issue 12, item 6): the DDQN agent, the secretary rule, offline
best and CEFL's leaders rank NaN / infinite scores below every finite one; a DDQN learning step
with a non-finite TD loss (or weights) is discarded, warned about once with its round, and the
run goes on with the last finite weights."""

from __future__ import annotations

import copy
import logging
import math

import numpy as np
import pytest
import torch
from torch import nn

from fedselect.common.files import read_csv_rows
from fedselect.experiment.resolve import resolve_doc
from fedselect.experiment.run import run_experiment
from fedselect.kernels.ddqn import DDQNAgent, DDQNConfig, double_q_targets, rank_scores
from fedselect.kernels.secretary import competitive_ratio, offline_best_rule, secretary_rule
from fedselect.kernels.similarity import edge_weights, select_leaders

NAN, INF = float("nan"), float("inf")


def agent(n=5, state_dim=3, **cfg) -> DDQNAgent:
    c = DDQNConfig(hidden=8, batch_size=4, memory_capacity=20, eps_init=0.0, eps_end=0.0, **cfg)
    return DDQNAgent(
        state_dim, n, c, total_rounds=10, rng=np.random.default_rng(0), torch_generator=torch.Generator().manual_seed(0)
    )


@pytest.mark.parametrize(
    "q,k,expected",
    [
        ([NAN, 0.1, NAN, 0.5, 0.2], 2, [3, 4]),  # issue example: {3, 4}
        ([INF, 0.1, -INF, 0.5, NAN], 2, [3, 1]),  # +inf is not a winner either
        ([NAN, NAN, NAN, NAN, NAN], 3, [0, 1, 2]),  # all non-finite: lowest ids
        ([NAN, 0.1, NAN, 0.5, 0.2], 4, [3, 4, 1, 0]),  # finite first, then non-finite by id
    ],
)
def test_ddqn_never_prefers_non_finite_q(q, k, expected, monkeypatch, caplog):
    a = agent()
    monkeypatch.setattr(a, "q_values", lambda state: np.asarray(q, dtype=np.float64))
    with caplog.at_level(logging.WARNING, logger="fedselect.ddqn"):
        assert a.select(np.zeros(3), k, round_=2) == expected
    assert "round 2: Q values of clients" in caplog.text and "not finite" in caplog.text
    np.testing.assert_array_equal(rank_scores(q), [v if math.isfinite(v) else -math.inf for v in q])


class _Fixed(nn.Module):
    def __init__(self, out):
        super().__init__()
        self.out = torch.tensor(out, dtype=torch.float32)

    def forward(self, x):
        return self.out.expand(x.shape[0], -1)


def test_double_q_argmax_ignores_nan():
    # main: NaN for action 0 -> the best is action 2 (value 2), valued by the target at 20
    y = double_q_targets(
        _Fixed([NAN, 1.0, 2.0]), _Fixed([10.0, 11.0, 20.0]), torch.zeros(1, 1), torch.zeros(1, 3), torch.zeros(1), gamma=0.5
    )
    assert y.item() == pytest.approx(10.0)


def fill(a: DDQNAgent, n=6, reward=1.0):
    rng = np.random.default_rng(1)
    for _ in range(n):
        a.remember(rng.random(3), [0, 1], [reward, reward], rng.random(3), False)


def test_non_finite_td_loss_step_is_discarded_and_warned_once(caplog):
    a = agent()
    fill(a)
    assert math.isfinite(a.learn(1))  # a normal step first: Adam has state
    with torch.no_grad():  # the target net went bad: targets NaN
        for p in a.target.parameters():
            p.fill_(NAN)
    main = copy.deepcopy(a.main.state_dict())
    opt = copy.deepcopy(a.optimizer.state_dict())
    steps = a.learn_steps
    with caplog.at_level(logging.INFO, logger="fedselect.ddqn"):
        assert a.learn(7) is None
        assert a.learn(8) is None
    for k, v in a.main.state_dict().items():
        assert torch.equal(v, main[k]), k  # the main network kept its weights
    assert torch.equal(a.optimizer.state_dict()["state"][0]["exp_avg"], opt["state"][0]["exp_avg"])
    assert a.learn_steps == steps and a.discarded_steps == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].getMessage().startswith("round 7: DDQN learning step discarded: TD loss nan")
    assert any(
        r.levelno == logging.INFO and r.getMessage().startswith("round 8: DDQN learning step discarded") for r in caplog.records
    )
    # the run goes on: once the target is finite again, learning resumes
    a.sync_target()
    assert math.isfinite(a.learn(9)) and a.learn_steps == steps + 1
    # the count survives a checkpoint
    b = agent()
    b.load_state_dict(a.state_dict())
    assert b.discarded_steps == 2


def test_huge_learning_rate_never_leaves_non_finite_weights(caplog):
    a = agent(lr=1e30)
    fill(a, 10, reward=5.0)
    with caplog.at_level(logging.WARNING, logger="fedselect.ddqn"):
        for t in range(1, 8):
            a.learn(t)
            assert all(bool(torch.isfinite(p).all()) for p in a.main.parameters())
            for s in a.optimizer.state_dict()["state"].values():
                assert bool(torch.isfinite(s["exp_avg"]).all()) and bool(torch.isfinite(s["exp_avg_sq"]).all())
    assert a.discarded_steps >= 1
    assert sum("DDQN learning step discarded" in r.getMessage() for r in caplog.records) == 1


def test_flashrl_run_with_diverging_q_network_goes_on(tmp_path):
    cfg = resolve_doc(
        {
            "name": "diverge",
            "method": "flashrl",
            "seed": 0,
            "rounds": 5,
            "clients_per_round": 2,
            "data": {"dataset": "mnist-embedded", "num_clients": 4, "partition": {"scheme": "iid"}},
            "model": {"name": "mlp", "options": {"hidden": [8]}},
            "train": {"local_epochs": 1, "batch_size": 64, "lr": 0.05},
            "method_options": {"rl_batch_size": 1, "pca_components": 3, "hidden": 16, "rl_lr": 1e30, "warmup_epochs": 1},
        }
    )
    summary = run_experiment(cfg, tmp_path / "run")
    assert summary["complete"] and summary["rounds"] == 5
    rows = read_csv_rows(tmp_path / "run" / "metrics.csv")
    losses = [float(r["td_loss"]) for r in rows[1:]]
    assert not any(math.isinf(v) for v in losses)  # was: inf, then nan
    assert any(math.isnan(v) for v in losses[1:])  # a discarded round has no loss
    lines = (tmp_path / "run" / "run.log").read_text().splitlines()
    discarded = [ln for ln in lines if "DDQN learning step discarded" in ln]
    assert len(discarded) >= 2 and "WARNING" in discarded[0] and all("INFO" in ln for ln in discarded[1:])
    assert sum("WARNING" in ln and "Q values of clients" in ln for ln in lines) <= 1


def test_secretary_and_offline_best_rank_nan_last(caplog):
    scores = [NAN, 0.1, NAN, 0.5, 0.2]
    assert offline_best_rule(scores, 2).accepted == [3, 4]
    assert offline_best_rule(scores, 4).accepted == [0, 1, 3, 4]  # NaN only when needed, earliest first
    # observation phase: a NaN neither raises the threshold nor is accepted later
    sel = secretary_rule([0.3, NAN, 0.2, NAN, 0.4, 0.1], 1, 2)
    assert sel.threshold == 0.3 and sel.accepted == [4]
    sel = secretary_rule([NAN, 0.2, 0.1], 1, 1)
    assert sel.accepted == [1] and sel.threshold == -math.inf
    # a NaN candidate is taken only by the tail-fill
    assert secretary_rule([0.5, NAN, NAN], 2, 1).accepted == [1, 2]
    # in the competitive ratio a NaN counts 0: (0.5 + 0) / (0.5 + 0.2)
    assert competitive_ratio([0.5, NAN, 0.2], [0, 1], 2) == pytest.approx(0.5 / 0.7)
    assert "non-finite score" in caplog.text


def test_cefl_leader_is_never_a_nan_client():
    # client 0's sum is NaN (was: max() over a NaN first value, then no tied client: a crash)
    s = np.array([[0, NAN, 5.0], [1.0, 0, 1.0], [5.0, 1.0, 0]])
    assert select_leaders(s, [[0, 1, 2]], sizes=[100, 10, 10]) == [2]
    assert select_leaders(np.full((2, 2), NAN), [[0, 1]], sizes=[5, 9]) == [1]  # all NaN: the usual tie rule
    # the similarity factors themselves are checked upstream, naming the clients
    with pytest.raises(ValueError, match=r"clients \[0, 2\] have non-finite or negative similarity factors"):
        edge_weights(np.array([[0, 1.0, NAN], [1.0, 0, 1.0], [NAN, 1.0, 0]]))
