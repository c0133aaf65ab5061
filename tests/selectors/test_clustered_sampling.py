"""Clustered sampling (Fraboni et al., ICML 2021): Algorithms 1 and 2 by hand, the unbiased
aggregation weights (Monte Carlo over the selector's own selections), the weights reaching the
aggregate, and the pairs it refuses."""

from __future__ import annotations

import math
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedselect.config.schema import ConfigError
from fedselect.fl.aggregate import fedavg
from fedselect.fl.types import RunSettings
from fedselect.kernels.clustered import aggregation_weights, cluster_distributions, cut_clusters, size_distributions
from fedselect.selectors.base import RoundView
from fedselect.selectors.clustered_sampling import ClusteredSampling, ClusteredSamplingOptions
from support.tiny import tiny_experiment


def test_algorithm_1_worked_example():
    # sizes 50, 30, 20 and m = 2: units 100, 60, 40 into two distributions of M = 100 units
    table = size_distributions([50, 30, 20], 2)
    assert table.tolist() == [[100, 0, 0], [0, 60, 40]]  # W_1 = {0: 1}, W_2 = {1: 0.6, 2: 0.4}
    # a client spills over: sizes 30, 50, 20 with m = 3 (M = 100): units 90, 150, 60; client 1 (largest)
    # fills W_1 and half of W_2, client 0 the rest of W_2 and 40 of W_3, client 2 the last 60
    assert size_distributions([30, 50, 20], 3).tolist() == [[0, 100, 0], [50, 50, 0], [40, 0, 60]]


@pytest.mark.parametrize("seed", range(6))
def test_every_distribution_sums_to_one_and_every_client_to_m_p_i(seed):
    rng = np.random.default_rng(seed)
    n = rng.integers(0, 400, size=int(rng.integers(2, 30)))
    n[0] = max(n[0], 1)
    m = int(rng.integers(1, n.size + 1))
    trees = [size_distributions(n, m)]
    pts = rng.normal(size=(n.size, 3))
    from scipy.cluster.hierarchy import linkage

    z = linkage(pts, method="ward")
    trees.append(cluster_distributions(cut_clusters(z, m * n, int(n.sum())), n, m))
    for table in trees:
        assert (table >= 0).all()
        assert table.sum(axis=1).tolist() == [int(n.sum())] * m  # r_{k,.} sums to exactly 1
        assert table.sum(axis=0).tolist() == (m * n).tolist()  # sum_k r_{k,i} = m p_i exactly


def test_algorithm_2_worked_example():
    # sizes 40, 40, 10, 10 (M = 100), m = 2: units 80, 80, 20, 20. The tree joins the similar clients
    # 0 and 1 first (160 units > 100: not one cluster), then 2 and 3 (40: one cluster), then all.
    z = np.array([[0, 1, 0.1, 2], [2, 3, 0.2, 2], [4, 5, 1.0, 4]])
    units = np.array([80, 80, 20, 20])
    clusters = cut_clusters(z, units, 100)
    assert clusters == [[0], [1], [2, 3]]
    table = cluster_distributions(clusters, [40, 40, 10, 10], 2)
    # the two largest clusters {0} and {1} seed W_1 and W_2; 2 and 3 fill the room left in each
    assert table.tolist() == [[80, 0, 20, 0], [0, 80, 0, 20]]  # W_1 = {0: .8, 2: .2}, W_2 = {1: .8, 3: .2}
    # so the two similar clients 0 and 1 are never drawn together by chance: each has its own distribution


def test_aggregation_weights_merge_repeated_draws():
    assert aggregation_weights([3, 1, 3, 2]) == ([3, 1, 2], [0.5, 0.25, 0.25])


class _Ctx:
    """The little of a selector context clustered sampling reads (no federation)."""

    def __init__(self, sizes, dim=4):
        self.num_samples = np.asarray(sizes)
        self.settings = RunSettings(seed=5, rounds=10, num_clients=len(sizes), clients_per_round=4, local_epochs=1)
        self.parameter_names = ["w"]
        self.upload_keys = None
        self.dim = dim

    def initial_state(self):
        return {"w": torch.zeros(self.dim)}


def _selector(sizes, clustering="similarity", vectors=None):
    sel = ClusteredSampling(_Ctx(sizes), ClusteredSamplingOptions(clustering=clustering))
    if vectors is not None and sel.updates is not None:
        sel.updates.set_all(vectors)
    return sel


@pytest.mark.parametrize("clustering", ["sample_size", "similarity"])
def test_monte_carlo_expected_aggregation_weight_is_the_data_share(clustering):
    """E[omega_i] = p_i over the selector's own draws (Selection.weights). For each client the
    weight is (1/m) x its number of draws, a sum of m independent Bernoulli(r_{k,i}): its variance
    is sum_k r_{k,i} (1 - r_{k,i}) / m^2, and the mean of R selections is within 5 standard errors."""
    rng = np.random.default_rng(11)
    sizes = rng.integers(5, 120, size=12)
    sizes[3] = 700  # one client with p_i > 1/m: it spans several distributions
    vectors = rng.normal(size=(12, 4)).astype(np.float32)
    sel = _selector(sizes, clustering, vectors)
    m, pool = 4, np.arange(12)
    r = sel.distributions(pool, m)[0] / sizes.sum()
    var = (r * (1 - r)).sum(axis=0) / m**2
    p = sizes / sizes.sum()
    reps = 3000
    total = np.zeros(12)
    view = RoundView(1, None, global_state={"w": torch.zeros(4)})
    for _ in range(reps):
        s = sel.select(view)
        assert math.isclose(sum(s.weights), 1.0) and len(set(s.clients)) == len(s.clients) <= m
        for k, w in zip(s.clients, s.weights):
            total[k] += w
    mean = total / reps
    assert np.all(np.abs(mean - p) <= 5 * np.sqrt(var / reps) + 1e-12), (mean, p)
    assert r.sum(axis=0) / m == pytest.approx(p)  # the distributions themselves: exactly p_i


def test_exact_unbiasedness_with_fractions():
    sizes = [7, 3, 11, 2, 9]
    for m in (1, 2, 3, 5):
        t = size_distributions(sizes, m)
        for i, n_i in enumerate(sizes):
            assert sum(Fraction(int(t[k, i]), sum(sizes)) for k in range(m)) / m == Fraction(n_i, sum(sizes))


def test_similar_updates_are_spread_over_distributions():
    # clients 0-2 sent nearly the same update, 3-5 another: with m = 2 and equal sizes each group
    # fills one distribution, so a round never trains two clients of the same group
    v = np.array([[1, 0, 0, 0]] * 3 + [[0, 1, 0, 0]] * 3, dtype=np.float32) + 1e-3 * np.arange(24).reshape(6, 4)
    sel = _selector([10] * 6, "similarity", v)
    table, groups = sel.distributions(np.arange(6), 2)
    assert groups == 2 and sorted(map(sorted, [np.flatnonzero(row).tolist() for row in table])) == [[0, 1, 2], [3, 4, 5]]


def test_the_selections_weights_reach_the_aggregate(tmp_path):
    """One round run by hand: the committed model is the average of the participants' updates with
    the selection's weights (1/m per draw), not with n_k."""
    from fedselect.experiment.run import make_simulation
    from fedselect.fl.round import play_round, prepare, updates

    cfg = tiny_experiment("clustered_sampling", method_options={"clustering": "sample_size"})
    sim = make_simulation(cfg)
    _, state, before = prepare(sim)
    new, result = play_round(sim, 1, state, before)
    weights = result.selection.weights
    assert weights is not None and math.isclose(sum(weights), 1.0)
    outs = updates(sim, 1, result.selection.clients, state)
    want = fedavg([o.state for o in outs], list(weights))
    for name, t in want.items():
        assert torch.equal(new.model[name], t)
    n_k = fedavg([o.state for o in outs], [o.num_samples for o in outs])
    assert any(not torch.equal(new.model[k], n_k[k]) for k in n_k)  # n_k weights give another model
    assert [o.aggregation_weight for o in result.outcomes] == list(weights)
    sim.close()


def test_an_unweighted_selector_keeps_fedavgs_sample_weights():
    from fedselect.experiment.run import make_simulation
    from fedselect.fl.round import play_round, prepare

    sim = make_simulation(tiny_experiment("fedavg"))
    _, state, before = prepare(sim)
    _, result = play_round(sim, 1, state, before)
    assert result.selection.weights is None
    assert all(o.aggregation_weight is None and o.weight == o.num_samples for o in result.outcomes)
    sim.close()


@pytest.mark.slow
def test_clustered_sampling_runs_with_fedper(tmp_path):
    from fedselect.experiment.run import run_experiment

    cfg = tiny_experiment(
        None, selector={"name": "clustered_sampling"}, algorithm={"name": "fedper", "options": {"base_layers": 1}}
    )
    s = run_experiment(cfg, tmp_path / "r")
    rows = (tmp_path / "r" / "metrics.csv").read_text().splitlines()
    head = rows[0].split(",")
    assert "aggregation_weights" in head and "groups" in head
    assert s["rounds"] == 4 and 0 < s["final_accuracy"] <= 1


def test_pairs_that_cannot_use_the_weights_are_refused():
    with pytest.raises(ConfigError, match="does not use"):
        tiny_experiment(None, selector={"name": "clustered_sampling"}, algorithm={"name": "scaffold"})
    with pytest.raises(ConfigError, match="mode: async"):
        tiny_experiment("clustered_sampling", mode="async")
    with pytest.raises(ConfigError, match="similarity"):
        tiny_experiment("clustered_sampling", method_options={"similarity": "cosine"})


def test_a_round_with_offline_clients_draws_only_online_ones():
    sizes = np.array([10, 20, 30, 40, 50, 60])
    sel = _selector(sizes, "sample_size")
    view = RoundView(1, SimpleNamespace(), available=np.array([1, 3, 4]), count=2)
    for _ in range(50):
        s = sel.select(view)
        assert set(s.clients) <= {1, 3, 4} and math.isclose(sum(s.weights), 1.0)
