"""Subject-based client divisions (FLASH-RL IV-A) and the embedded real IMU data set."""

import numpy as np
import pytest
from seglearn.datasets import load_watch

from fedselect.world.data.catalog import load_dataset
from fedselect.world.data.imu import watch_recordings
from fedselect.world.data.partition import make_partitioner


@pytest.fixture(scope="module")
def watch():
    return load_dataset("imu-watch", seed=0)


def test_watch_dataset_real_units_and_split(watch):
    train, test = watch
    assert train.num_classes == 7 and train.class_names == ["PEN", "ABD", "FEL", "IR", "ER", "TRAP", "ROW"]
    assert len(set(train.groups.tolist())) == 8 and len(set(test.groups.tolist())) == 2
    assert not set(train.groups.tolist()) & set(test.groups.tolist())
    assert train.x.shape[1:] == (100, 6) and "real" in train.info["source"]
    # standardised with the training windows' statistics
    np.testing.assert_allclose(train.x.reshape(-1, 6).mean(0), 0, atol=1e-3)
    np.testing.assert_allclose(train.x.reshape(-1, 6).std(0), 1, atol=1e-3)
    # acc converted from g to m/s^2 (x 9.81), gyro kept in rad/s
    raw = load_watch()
    rec = watch_recordings()[5]
    np.testing.assert_allclose(rec.data[:, :3], raw["X"][5][:, :3] * 9.81, rtol=1e-6)
    np.testing.assert_allclose(rec.data[:, 3:], raw["X"][5][:, 3:], rtol=1e-6)
    # windows: floor((T - 100) / 50) + 1 per recording, none dropped (shortest recording 947)
    n_expected = sum((len(x) - 100) // 50 + 1 for x in raw["X"])
    assert len(train) + len(test) == n_expected and train.info["dropped_recordings"] == 0
    with pytest.raises(ValueError, match="no falls"):
        load_dataset("imu-watch", seed=0, task="fall")


def test_volunteer_division_one_client_per_subject(watch):
    train, _ = watch
    rng = np.random.default_rng(0)
    parts = make_partitioner("volunteer").split(train.y, 8, rng, groups=train.groups)
    allidx = np.concatenate(parts)
    assert len(allidx) == len(train) and len(np.unique(allidx)) == len(train)  # disjoint, covering
    owners = [set(train.groups[p].tolist()) for p in parts]
    assert all(len(o) == 1 for o in owners)  # each client one subject ...
    assert sorted(o.pop() for o in owners) == sorted(set(train.groups.tolist()))  # ... each subject one client
    with pytest.raises(ValueError, match=r"num_clients \(10\).*\(8\)"):
        make_partitioner("volunteer").split(train.y, 10, rng, groups=train.groups)
    with pytest.raises(ValueError, match="groups"):
        make_partitioner("volunteer").split(train.y, 8, rng, groups=None)


@pytest.mark.parametrize("k", [1, 4, 8])
def test_volunteer_label_skew_at_most_k(k):
    rng = np.random.default_rng(1)
    groups = np.repeat([3, 5, 7, 9], 60)
    labels = np.tile(np.arange(12), 20)  # every subject has all 12 classes
    labels[groups == 9] = labels[groups == 9] % 3  # subject 9 has only 3 classes
    parts = make_partitioner("volunteer_label_skew", labels_per_client=k).split(labels, 4, rng, groups=groups)
    for subject, p in zip([3, 5, 7, 9], parts):
        assert set(groups[p].tolist()) == {subject}
        n_labels = len(np.unique(labels[p]))
        assert n_labels == min(k, 3 if subject == 9 else 12)
        # a kept class keeps all of that subject's samples of it
        for c in np.unique(labels[p]):
            assert (labels[p] == c).sum() == ((labels == c) & (groups == subject)).sum()
    with pytest.raises(ValueError, match="labels_per_client"):
        make_partitioner("volunteer_label_skew", labels_per_client=0)


def test_activities_per_subject_loader_option():
    tr, te = load_dataset(
        "mobiact-synthetic",
        seed=2,
        num_subjects=5,
        trials=1,
        duration_scale=0.5,
        task="activity",
        activities_per_subject=4,
        num_test_subjects=1,
    )
    for s in set(tr.groups.tolist()):
        assert len(np.unique(tr.y[tr.groups == s])) <= 4
        assert len(tr.info["activities_per_subject"][s]) == 4
    assert len(np.unique(te.y)) > 4  # the held-out subjects keep everything
