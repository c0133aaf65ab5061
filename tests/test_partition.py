import time

import numpy as np
import pytest

from fedselect.data.partition import local_holdout, make_partitioner

LABELS = np.repeat(np.arange(10), 100)  # 1,000 samples, 100 per class


def _check_disjoint_cover(parts, n):
    allidx = np.concatenate(parts)
    assert len(allidx) == len(np.unique(allidx)), "partitions overlap"
    return set(allidx.tolist())


@pytest.mark.parametrize(
    "scheme,params", [("iid", {}), ("dirichlet", {"alpha": 0.5, "min_size": 10}), ("label_skew", {"labels_per_client": 2})]
)
def test_partitions_disjoint_cover_min_size(scheme, params):
    parts = make_partitioner(scheme, **params).split(LABELS, 20, np.random.default_rng(0))
    assert len(parts) == 20
    covered = _check_disjoint_cover(parts, len(LABELS))
    assert covered == set(range(len(LABELS)))
    assert min(len(p) for p in parts) >= params.get("min_size", 1)


def test_shards_two_labels_equal_sizes():
    parts = make_partitioner("shards", shards_per_client=2).split(LABELS, 20, np.random.default_rng(1))
    _check_disjoint_cover(parts, len(LABELS))
    assert {len(p) for p in parts} == {50}  # 1,000 / 40 shards = 25 per shard, 2 shards each
    assert max(len(np.unique(LABELS[p])) for p in parts) <= 2


def test_label_skew_k_labels_varying_sizes():
    parts = make_partitioner("label_skew", labels_per_client=2).split(LABELS, 20, np.random.default_rng(2))
    assert all(len(np.unique(LABELS[p])) == 2 for p in parts)
    assert len({len(p) for p in parts}) > 1


def test_same_seed_same_partition():
    a = make_partitioner("dirichlet", alpha=0.3).split(LABELS, 10, np.random.default_rng(5))
    b = make_partitioner("dirichlet", alpha=0.3).split(LABELS, 10, np.random.default_rng(5))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_impossible_requests_raise_quickly():
    labels = np.repeat(np.arange(10), 10)  # 100 samples
    t = time.monotonic()
    with pytest.raises(ValueError, match=r"50 clients x min_size 10 = 500 > 100"):
        make_partitioner("dirichlet", alpha=0.5, min_size=10).split(labels, 50, np.random.default_rng(0))
    with pytest.raises(ValueError, match="shards"):
        make_partitioner("shards", shards_per_client=2, shard_size=10).split(labels, 20, np.random.default_rng(0))
    with pytest.raises(ValueError, match="labels_per_client 11 > 10"):
        make_partitioner("label_skew", labels_per_client=11).split(labels, 5, np.random.default_rng(0))
    with pytest.raises(ValueError, match="alpha must be > 0"):
        make_partitioner("dirichlet", alpha=0)
    with pytest.raises(ValueError, match="unknown partition scheme"):
        make_partitioner("zipf")
    # a feasible-on-paper but practically impossible draw stops at the time bound with numbers
    with pytest.raises(ValueError, match="smallest client had"):
        make_partitioner("dirichlet", alpha=0.05, min_size=10, max_attempts=300, max_seconds=2).split(
            labels, 10, np.random.default_rng(0)
        )
    assert time.monotonic() - t < 10


def test_local_holdout():
    tr, ho = local_holdout(np.arange(10), 0.2, np.random.default_rng(0))
    assert len(tr) == 8 and len(ho) == 2 and set(tr) | set(ho) == set(range(10)) and not set(tr) & set(ho)
    tr, ho = local_holdout(np.arange(1), 0.5, np.random.default_rng(0))
    assert len(tr) == 1 and len(ho) == 0
    with pytest.raises(ValueError):
        local_holdout(np.arange(4), 1.0, np.random.default_rng(0))


# ---------------------------------------------------------------- client_dirichlet: the partition for large N
def test_client_dirichlet_disjoint_exact_sizes_where_dirichlet_cannot():
    # 1,000 samples over 400 clients: the per-class Dirichlet leaves clients empty at this N
    with pytest.raises(ValueError, match="client_dirichlet"):
        make_partitioner("dirichlet", alpha=0.5, min_size=1, max_seconds=1).split(LABELS, 400, np.random.default_rng(0))
    parts = make_partitioner("client_dirichlet", alpha=0.5).split(LABELS, 400, np.random.default_rng(0))
    assert len(parts) == 400 and {len(p) for p in parts} == {2}  # 1,000 // 400 = 2 each
    assert len(_check_disjoint_cover(parts, len(LABELS))) == 800  # disjoint; 200 samples unused
    assert all(np.all(np.diff(p) > 0) for p in parts)  # sorted, int64
    assert parts[0].dtype == np.int64


def test_client_dirichlet_alpha_controls_the_class_mix():
    def classes(alpha):
        parts = make_partitioner("client_dirichlet", alpha=alpha).split(LABELS, 10, np.random.default_rng(3))
        assert {len(p) for p in parts} == {100}
        return np.mean([len(np.unique(LABELS[p])) for p in parts])

    assert classes(0.05) < 3 < 8 < classes(100.0)  # skewed mixes vs nearly IID


def test_client_dirichlet_lognormal_sizes_keep_the_total_and_min_size():
    parts = make_partitioner("client_dirichlet", size_sigma=1.0, min_size=3).split(LABELS, 50, np.random.default_rng(4))
    sizes = np.array([len(p) for p in parts])
    assert sizes.min() >= 3 and sizes.max() > 3 * np.median(sizes)  # heavy-tailed
    assert sizes.sum() <= len(LABELS)
    _check_disjoint_cover(parts, len(LABELS))


def test_client_dirichlet_with_replacement_more_clients_than_samples():
    p = make_partitioner("client_dirichlet", samples_per_client=30, replacement=True)
    parts = p.split(LABELS, 5_000, np.random.default_rng(5))
    assert len(parts) == 5_000 and {len(x) for x in parts} == {30}
    assert all(len(np.unique(x)) == 30 for x in parts)  # distinct within a client (classes of 100 >= 30)
    assert all(0 <= x.min() and x.max() < len(LABELS) for x in parts)
    again = p.split(LABELS, 5_000, np.random.default_rng(5))
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))


@pytest.mark.parametrize(
    "params,n_clients,match",
    [
        ({}, 2_000, "samples_per_client and replacement: true"),
        ({"samples_per_client": 10}, 200, "replacement: true"),
        ({"min_size": 0}, 10, "min_size must be >= 1"),
        ({"alpha": 0}, 10, "alpha must be > 0"),
        ({"size_sigma": -1}, 10, "size_sigma must be >= 0"),
        ({"replacement": "yes"}, 10, "replacement must be true or false"),
    ],
)
def test_client_dirichlet_errors_name_the_fix(params, n_clients, match):
    with pytest.raises(ValueError, match=match):
        make_partitioner("client_dirichlet", **params).split(LABELS, n_clients, np.random.default_rng(0))


def test_dirichlet_min_size_error_names_client_dirichlet():
    with pytest.raises(ValueError, match="client_dirichlet"):
        make_partitioner("dirichlet", min_size=10).split(LABELS, 101, np.random.default_rng(0))


def test_a_bad_partition_value_is_a_config_error_naming_the_key():
    from fedselect.config import ConfigError
    from fedselect.resolve import parse_experiment, resolve

    d = {"rounds": 1, "data": {"num_clients": 10, "partition": {"scheme": "client_dirichlet", "size_sigma": -2}}}
    with pytest.raises(ConfigError, match=r"data\.partition: client_dirichlet size_sigma must be >= 0, got -2"):
        resolve(parse_experiment(d))
    d["data"]["partition"] = {"scheme": "shards", "shards_per_client": 0}
    with pytest.raises(ConfigError, match=r"data\.partition: shards_per_client must be >= 1"):
        resolve(parse_experiment(d))
