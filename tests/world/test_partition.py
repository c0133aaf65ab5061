import time

import numpy as np
import pytest

from fedselect.world.data.partition import local_holdout, make_partitioner

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
    from fedselect.config.schema import ConfigError
    from fedselect.experiment.resolve import parse_experiment, resolve

    d = {"rounds": 1, "data": {"num_clients": 10, "partition": {"scheme": "client_dirichlet", "size_sigma": -2}}}
    with pytest.raises(ConfigError, match=r"data\.partition: client_dirichlet size_sigma must be >= 0, got -2"):
        resolve(parse_experiment(d))
    d["data"]["partition"] = {"scheme": "shards", "shards_per_client": 0}
    with pytest.raises(ConfigError, match=r"data\.partition: shards_per_client must be >= 1"):
        resolve(parse_experiment(d))


# ---------------------------------------------------------------- fat_thin class skew (issue 21 item 1)
LABELS19 = np.repeat(np.arange(19), 100)  # 1,900 samples, 100 per class


def test_fat_thin_default_is_unchanged_by_the_class_options():
    """Pinned before thin_classes / fat_classes existed: same indices, same generator state after."""
    import hashlib

    labels = np.repeat(np.arange(10), 50)
    rng = np.random.default_rng(7)
    parts = make_partitioner("fat_thin", fat_share=0.1, thin_share=0.02).split(labels, 12, rng)
    assert [len(p) for p in parts] == [11, 9, 9, 11, 8, 11, 11, 49, 9, 9, 45, 10]
    assert parts[0].tolist() == [234, 248, 252, 273, 287, 311, 349, 394, 401, 439, 493]
    assert hashlib.sha256(np.concatenate(parts).tobytes()).hexdigest() == (
        "ae4c619d246b82b046f0be92ab85c7fa25bff805920a0c94c48ab095b5fa0402"
    )
    rng = np.random.default_rng(7)
    make_partitioner("fat_thin", thin_classes=None, fat_classes=None).split(labels, 12, rng)
    assert rng.random() == 0.6296221828402035  # the default path consumes the generator exactly as before


@pytest.mark.parametrize(
    "thin,fat,want_thin,want_fat", [(3, 15, 3, 15), (3 / 19, 15 / 19, 3, 15), (0.1, 0.5, 2, 10), (1, 1.0, 1, 19)]
)
def test_fat_thin_clients_draw_from_their_own_class_subset(thin, fat, want_thin, want_fat):
    # shares: 0.1 * 19 = 1.9 -> 2 classes, 0.5 * 19 = 9.5 -> 10 (half up); 1 = one class, 1.0 = all
    p = make_partitioner("fat_thin", fat_share=0.2, thin_share=0.05, size_jitter=0.0, thin_classes=thin, fat_classes=fat)
    parts = p.split(LABELS19, 50, np.random.default_rng(3))
    fat_ids = set(p.fat_clients(50, np.random.default_rng(3)).tolist())
    assert len(fat_ids) == 10
    subsets = set()
    for k, idx in enumerate(parts):
        classes = np.unique(LABELS19[idx])
        assert len(np.unique(idx)) == len(idx)  # distinct inside a client
        if k in fat_ids:  # 380 of the 1,900 samples (size_jitter 0)
            assert len(classes) == want_fat and len(idx) == min(380, 100 * want_fat)
        else:  # 95 samples from 100 * want_thin: every class shows up (P(miss) < (2/3)^95)
            assert len(classes) == want_thin and len(idx) == 95
            subsets.add(tuple(classes))
    assert len(subsets) > 1 or want_thin == 19  # each client draws its own subset
    # the same seed, the same partition; the sizes are those of the default path (same draws)
    again = make_partitioner("fat_thin", fat_share=0.2, thin_share=0.05, size_jitter=0.0, thin_classes=thin, fat_classes=fat)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again.split(LABELS19, 50, np.random.default_rng(3))))


def test_fat_thin_authors_preset_is_3_and_15_of_19_and_2_and_8_of_10():
    p = make_partitioner("fat_thin", preset="authors")
    assert (p.thin_classes, p.fat_classes) == (3 / 19, 15 / 19)
    assert (p.fat_fraction, p.fat_share, p.thin_share) == (0.2, 0.1, 0.01)
    labels10 = np.repeat(np.arange(10), 1000)  # thin: 100 samples, fat: 1,000
    fat = set(p.fat_clients(20, np.random.default_rng(0)).tolist())
    for k, idx in enumerate(make_partitioner("fat_thin", preset="authors").split(labels10, 20, np.random.default_rng(0))):
        assert len(np.unique(labels10[idx])) == (8 if k in fat else 2)


def test_fat_thin_a_client_whose_classes_are_short_takes_what_is_there():
    labels = np.array([0] * 5 + [1] * 995)  # class 0 has 5 samples, a thin client asks for 100
    parts = make_partitioner("fat_thin", fat_fraction=0.0, thin_share=0.1, size_jitter=0.0, thin_classes=1).split(
        labels, 20, np.random.default_rng(0)
    )
    small = [p for p in parts if labels[p[0]] == 0]
    assert small and all(p.tolist() == [0, 1, 2, 3, 4] for p in small)
    assert all(len(p) == 100 and set(labels[p]) == {1} for p in parts if labels[p[0]] == 1)


@pytest.mark.parametrize(
    "params,match",
    [
        ({"thin_classes": 0}, r"thin_classes as a number of classes must be >= 1, got 0"),
        ({"fat_classes": 1.5}, r"fat_classes as a share of the classes must be a float in \(0, 1\], got 1.5"),
        ({"fat_classes": 0.0}, r"fat_classes as a share"),
        ({"thin_classes": True}, r"thin_classes must be a number of classes .* got True"),
        ({"thin_classes": "3"}, r"thin_classes must be a number of classes .* got '3'"),
        ({"preset": "paper"}, r"preset must be one of \['authors'\] or null, got 'paper'"),
        ({"preset": "authors", "fat_classes": 5}, r"give either the preset or those two"),
    ],
)
def test_fat_thin_class_option_errors(params, match):
    with pytest.raises(ValueError, match=match):
        make_partitioner("fat_thin", **params)


def test_fat_thin_more_classes_than_the_data_has_is_refused_before_any_draw():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"fat_thin fat_classes = 20, but the training set has only 19 classes; allowed 1..19"):
        make_partitioner("fat_thin", fat_classes=20).split(LABELS19, 10, rng)
    assert rng.random() == np.random.default_rng(0).random()  # nothing drawn


def test_fat_thin_class_option_is_a_config_error_naming_the_key():
    from fedselect.config.schema import ConfigError
    from fedselect.experiment.resolve import parse_experiment, resolve

    d = {"rounds": 1, "data": {"num_clients": 10, "partition": {"scheme": "fat_thin", "thin_classes": -1}}}
    with pytest.raises(ConfigError, match=r"data\.partition: fat_thin thin_classes as a number of classes must be >= 1"):
        resolve(parse_experiment(d))
    d["data"]["partition"] = {"scheme": "fat_thin", "preset": "authors"}
    part = resolve(parse_experiment(d)).config.data.partition.params()
    assert part["preset"] == "authors" and part["thin_classes"] is None and part["fat_classes"] is None
