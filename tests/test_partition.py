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
