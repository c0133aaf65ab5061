"""DDQN selectors at large N (issue 22 item 6): the shared Q network, the sampled PCA fit, the
replay memory and the memory-bound error (docs/flash-rl.md, "At 10,000 clients")."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from fedselect.common.seeding import np_rng, torch_rng
from fedselect.config.schema import ConfigError
from fedselect.experiment.resolve import parse_experiment
from fedselect.experiment.run import make_simulation, run_experiment
from fedselect.kernels.ddqn import DDQNAgent, DDQNConfig, double_q_targets
from fedselect.kernels.q_networks import SharedQNetwork, shared_q_parameters
from fedselect.kernels.replay_memory import ReplayMemory
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

    from fedselect.config.load import load_config
    from fedselect.study.compare import load_compare

    root = Path(__file__).resolve().parents[2] / "configs"
    cfg = load_config(root / "flashrl-mnist-10k.yaml")
    assert cfg.data.num_clients == 10_000
    assert FlashRL.resolve_q_network(FlashRLOptions(**cfg.method_options), 10_000) == "shared"
    cc = load_compare(root / "flashrl-scale-compare.yaml")
    assert len(cc.methods) == 5


# ---------------------------------------------------------------- the PCA fit bounded in memory (issue 39)
from fedselect.selectors._ddqn_options import DDQNOptions, pca_fit_size  # noqa: E402


def test_pca_fit_size_bounds_the_fitted_matrix():
    o = DDQNOptions()  # pca_fit_clients 1000, pca_fit_max_mb 256
    cnn, mlp64, authors_cnn = 431_080, 50_890, 582_026
    assert pca_fit_size(10_000, cnn, o) == 155  # floor(256 MiB / (4 x 431,080 bytes))
    assert 155 * cnn * 4 <= 256 * 2**20 < 156 * cnn * 4
    assert pca_fit_size(10_000, mlp64, o) == 1000  # 1,318 fit in 256 MiB: pca_fit_clients binds
    assert pca_fit_size(100, cnn, o) == 100 and pca_fit_size(100, authors_cnn, o) == 100  # the paper's N: all
    assert pca_fit_size(500, cnn, o) == 155
    assert pca_fit_size(10_000, cnn, DDQNOptions(pca_fit_max_mb=None)) == 1000  # the bound before issue 39
    assert pca_fit_size(10_000, cnn, DDQNOptions(pca_fit_max_mb=None, pca_fit_clients=None)) == 10_000
    assert pca_fit_size(10, 10**9, o) == 1  # at least one model
    with pytest.raises(ValueError, match="num_clients and num_weights must be >= 1"):
        pca_fit_size(0, cnn, o)
    with pytest.raises(ValidationError, match="pca_fit_max_mb"):
        DDQNOptions(pca_fit_max_mb=0)


def _shipped_ddqn_runs():
    """(config file, resolved run config) of every shipped run whose selector is FLASH-RL or FAVOR."""
    from pathlib import Path

    from fedselect.config.load import config_kind, read_yaml_file
    from fedselect.experiment.resolve import load_experiment, resolve
    from fedselect.study.compare import parse_compare
    from fedselect.study.sweep import parse_sweep

    root = Path(__file__).resolve().parents[2] / "configs"
    for path in sorted(p for p in root.rglob("*.yaml") if p.name != "reproduce.yaml"):
        doc = read_yaml_file(path)
        kind = config_kind(doc)
        if "flashrl" not in path.read_text() and "favor" not in path.read_text():
            continue
        if kind == "compare":
            cc = parse_compare(doc, str(path))
            cfgs = [cc.experiment(e, 0) for e in cc.methods]
        elif kind == "sweep":
            sc = parse_sweep(doc, str(path))
            cfgs = [sc.experiment(m, p, 0) for m in sc.methods for p in sc.points()]
        else:
            cfgs = [load_experiment(path)]
        for cfg in cfgs:
            r = resolve(cfg)
            if r.selector.name in ("flashrl", "favor"):
                yield path.relative_to(root), r


def test_every_shipped_config_fits_its_pca_as_before():
    """The memory bound of the PCA fit (pca_fit_max_mb) changes no shipped config: each one fits
    on every client, or on its explicit pca_fit_clients sample, as before issue 39 (P is the
    model's parameter count, at least the uploaded weights, so k at this P is a lower bound)."""
    from fedselect.world.models import build_model

    shapes = {"mnist": (1, 28, 28), "mnist-embedded": (1, 28, 28), "fashion-mnist": (1, 28, 28), "cifar10": (3, 32, 32)}
    seen = set()
    for path, r in _shipped_ddqn_runs():
        cfg = r.config
        n, o = cfg.data.num_clients, r.selector_options
        # the GRU's weights do not depend on the sequence length: 64 channels bound the IMU data sets' 6
        shape = shapes.get(cfg.data.dataset, (50, 64))
        p = sum(x.numel() for x in build_model(cfg.model.name, shape, 20, **cfg.model.options).parameters())
        before = n if o.pca_fit_clients is None else min(n, o.pca_fit_clients)
        assert pca_fit_size(n, p, o) == before, (str(path), cfg.model.name, n, p)
        seen.add(str(path))
    assert {"paper/flashrl-table5-mnist-dir05.yaml", "repro/flashrl-code-latency.yaml", "flashrl-mnist-10k.yaml"} <= seen
    assert len(seen) >= 30


def test_pca_fit_bounded_in_memory_end_to_end(tmp_path):
    """A bound that bites: the sample's size is pca_fit_max_mb's, recorded in the summary, and the
    bound is in config.yaml; the default bound leaves this run (N 24, the MLP) fitting on everyone."""
    import json

    import yaml

    p = 784 * 16 + 16 + 16 * 10 + 10  # the MLP [16] on 28 x 28
    k = 7
    mb = (k * 4 * p + 1) / 2**20
    run_experiment(_embedded("flashrl", pca_fit_clients=1000, pca_fit_max_mb=mb), tmp_path / "bounded")
    summary = json.loads((tmp_path / "bounded" / "summary.json").read_text())
    assert summary["prepare"]["pca_fit_clients"] == k
    saved = yaml.safe_load((tmp_path / "bounded" / "config.yaml").read_text())["selector"]["options"]
    assert saved["pca_fit_max_mb"] == pytest.approx(mb) and saved["pca_fit_clients"] == 1000
    run_experiment(_embedded("flashrl", pca_fit_clients=1000), tmp_path / "default")
    summary = json.loads((tmp_path / "default" / "summary.json").read_text())
    assert "pca_fit_clients" not in summary["prepare"]  # k = N = 24: no sample
    saved = yaml.safe_load((tmp_path / "default" / "config.yaml").read_text())["selector"]["options"]
    assert saved["pca_fit_max_mb"] == 256.0
