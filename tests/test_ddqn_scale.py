"""DDQN selectors at large N (issue 22 item 6): the shared Q network, the sampled PCA fit, the
replay memory and the memory-bound error (docs/flash-rl.md, "At 10,000 clients")."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

from fedselect.common.seeding import np_rng, torch_rng
from fedselect.config.schema import ConfigError
from fedselect.experiment.resolve import parse_experiment
from fedselect.experiment.run import make_simulation, run_experiment
from fedselect.kernels.ddqn import (
    DDQNAgent,
    DDQNConfig,
    ReplayMemory,
    SharedQNetwork,
    double_q_targets,
    shared_q_parameters,
)
from fedselect.selectors.favor import Favor
from fedselect.selectors.flashrl import FlashRL, FlashRLOptions
from fedselect.world.federation import build_federation

torch.set_num_threads(1)


def _shared_agent(n, d=6, c=0, **kw):
    cfg = DDQNConfig(q_network="shared", shared_hidden=8, batch_size=2, memory_capacity=10, **kw)
    return DDQNAgent(c + n * d, n, cfg, 5, np_rng(0, "t"), torch_rng(0, "t-init"), feature_dim=d, context_dim=c)


@pytest.mark.parametrize("c,pool", [(0, True), (0, False), (5, True)])
def test_shared_network_parameters_do_not_depend_on_n(c, pool):
    counts = []
    for n in (3, 50, 2000):
        net = SharedQNetwork(n, 6, c, 8, pool)
        counts.append(sum(p.numel() for p in net.parameters()))
        out = net(torch.zeros(4, c + n * 6))
        assert out.shape == (4, n)
    assert counts[0] == counts[1] == counts[2] == shared_q_parameters(6, c, 8, pool)


def test_shared_network_scores_a_client_by_its_features_not_its_index():
    net = SharedQNetwork(4, 3, 2, 8, True)
    s = torch.randn(1, 2 + 4 * 3)
    perm = [2, 0, 3, 1]
    x = s[:, 2:].reshape(1, 4, 3)
    s2 = torch.cat([s[:, :2], x[:, perm].reshape(1, -1)], dim=1)  # clients permuted, same pooled mean
    assert torch.allclose(net(s2), net(s)[:, perm], atol=1e-6)


def test_shared_agent_selects_learns_and_targets():
    a = _shared_agent(7, eps_init=0.0, eps_end=0.0)
    rng = np.random.default_rng(1)
    for t in range(1, 5):
        s = rng.normal(size=42).astype(np.float32)
        sel = a.select(s, 3, t)
        assert len(set(sel)) == 3
        a.remember(s, sel, rng.random(3), rng.normal(size=42), t == 4)
        a.learn(t)
    assert a.learn_steps >= 2 and np.isfinite(a.last_loss)
    s2 = torch.randn(2, 42)
    y = double_q_targets(a.main, a.target, torch.zeros(2, 3), s2, torch.zeros(2), 0.9)
    assert y.shape == (2, 3)
    with pytest.raises(ValueError, match="feature_dim"):
        DDQNAgent(40, 7, DDQNConfig(q_network="shared"), 5, np_rng(0, "t"), torch_rng(0, "t"), feature_dim=6)


def test_replay_memory_grows_with_pushes_and_shares_consecutive_states():
    m = ReplayMemory(1000, 4)
    s = [np.full(4, i, np.float32) for i in range(4)]
    for i in range(3):
        m.push(s[i], [0], [1.0], s[i + 1], False)
    assert len(m) == 3 and sum(x is not None for x in m.s) == 3
    assert m.s[1] is m.s2[0] and m.s[2] is m.s2[1]  # s_{t+1} stored once
    sb, _, _, s2b, _ = m.sample(3, np.random.default_rng(0))
    assert sb.shape == (3, 4) and s2b.shape == (3, 4) and torch.all(s2b - sb == 1)
    st = m.state_dict()
    m2 = ReplayMemory(1000, 4)
    m2.load_state_dict(st)
    for k in ("s", "s2", "a", "r", "done"):
        assert np.array_equal(m2.state_dict()[k], st[k])
    assert m2.s[1] is m2.s2[0]


# ---------------------------------------------------------------- selectors
from test_flashrl import _cfg, _rows  # noqa: E402  (registers the synthetic data set)


@pytest.fixture(scope="module")
def fed():
    return build_federation(_cfg("flashrl"))


def _fit(fed, **opts):
    m = make_simulation(_cfg("flashrl", **opts), fed).selector
    m.prepare()
    return m


def test_pca_fit_on_everyone_equals_todays_pca(fed):
    from sklearn.decomposition import PCA

    ref = _fit(fed)  # default pca_fit_clients 1000 >= N = 8: today's path
    for k in (None, 8, 50):
        m = _fit(fed, pca_fit_clients=k)
        assert m.pca_fit_sample() is None
        assert np.array_equal(m.client_rows, ref.client_rows) and torch.equal(m.pca_components, ref.pca_components)
    w = ref._warmup()
    pca = PCA(n_components=5, svd_solver="full").fit(w)
    assert np.allclose(ref.pca_components.numpy(), pca.components_, atol=1e-6)


def test_pca_fit_sample_is_seeded_and_projects_everyone(fed):
    a, b = _fit(fed, pca_fit_clients=4), _fit(fed, pca_fit_clients=4)
    sample = a.pca_fit_sample()
    assert sample.size == 4 and np.array_equal(sample, b.pca_fit_sample()) and np.all(np.diff(sample) > 0)
    assert np.array_equal(a.client_rows, b.client_rows)
    # every client's row is the projection of its warm-up model with the sample's PCA
    w = a._warmup()
    expect = ((torch.from_numpy(w) - a.pca_mean) @ a.pca_components.T / a.pca_scale).numpy()
    assert np.allclose(a.client_rows, expect, atol=1e-5)
    # the fit itself used only the sample's models
    from sklearn.decomposition import PCA

    pca = PCA(n_components=4, svd_solver="full").fit(w[sample])
    assert np.allclose(a.pca_mean.numpy(), pca.mean_, atol=1e-6)


def test_auto_picks_full_below_the_bound_and_shared_above():
    o = FlashRLOptions()
    assert FlashRL.resolve_q_network(o, 1000) == "full"  # today's largest configs
    assert Favor.resolve_q_network(Favor.Options(), 1000) == "full"
    assert FlashRL.resolve_q_network(o, 10_000) == "shared"
    # N = 10,000, m = 100: 1.04M state values x 512 hidden
    assert FlashRL.full_q_parameters(o, 10_000) == 10_000 * 104 * 512 + 512 + 512 * 10_000 + 10_000
    assert FlashRL.resolve_q_network(FlashRLOptions(q_network="full"), 10_000) is None


def test_full_network_above_the_bound_is_refused_from_the_config():
    with pytest.raises(
        ConfigError,
        match="selector 'flashrl': q_network: full would have 2,600 parameters at 8 clients .* above "
        "q_network_max_params = 1,000; set method_options.q_network: shared",
    ):
        _cfg("flashrl", q_network="full", q_network_max_params=1000)
    _cfg("flashrl", q_network="auto", q_network_max_params=1000)  # auto: shared, accepted


def test_bad_new_options_name_the_key():
    for bad, key in (
        ({"pca_fit_clients": 0}, "pca_fit_clients"),
        ({"q_network": "tiny"}, "q_network"),
        ({"shared_hidden": 0}, "shared_hidden"),
    ):
        with pytest.raises(ConfigError, match=key):
            parse_experiment(
                {
                    "name": "t",
                    "method": "flashrl",
                    "data": {"dataset": "flashrl-test-synthetic", "num_clients": 8},
                    "method_options": bad,
                }
            )


def _embedded(method, **opts):
    return parse_experiment(
        {
            "name": "t",
            "method": method,
            "rounds": 3,
            "clients_per_round": 4,
            "seed": 1,
            "data": {"dataset": "mnist-embedded", "num_clients": 24, "partition": {"scheme": "iid"}},
            "model": {"name": "mlp", "options": {"hidden": [16]}},
            "train": {"local_epochs": 1, "batch_size": 32, "lr": 0.05},
            "method_options": {"rl_batch_size": 2, "pca_components": 8, "q_network": "shared", "pca_fit_clients": 10, **opts},
        }
    )


@pytest.mark.parametrize("method", ["flashrl", "favor"])
def test_shared_network_and_sampled_pca_end_to_end(tmp_path, method):
    summary = run_experiment(_embedded(method), tmp_path)
    rows = _rows(tmp_path)
    assert [int(r["round"]) for r in rows] == [0, 1, 2, 3]
    assert np.isfinite(float(rows[3]["td_loss"])) and float(rows[3]["accuracy"]) > 0.3
    assert summary["e2e_latency_s"] > 0
    with open(tmp_path / "metrics.csv") as f:
        assert len(list(csv.reader(f))) == 5


def test_shipped_scale_configs_parse():
    from pathlib import Path

    from fedselect.config.schema import load_config
    from fedselect.study.compare import load_compare

    root = Path(__file__).resolve().parents[1] / "configs"
    cfg = load_config(root / "flashrl-mnist-10k.yaml")
    assert cfg.data.num_clients == 10_000
    assert FlashRL.resolve_q_network(FlashRLOptions(**cfg.method_options), 10_000) == "shared"
    cc = load_compare(root / "flashrl-scale-compare.yaml")
    assert len(cc.methods) == 5
