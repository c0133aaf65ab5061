"""MobiAct v2 loader on fixtures written in the official layout, task views and the
synthetic MobiAct-format generator."""

import numpy as np
import pandas as pd
import pytest

from fedselect.common.seeding import np_rng
from fedselect.world.data.catalog import load_dataset
from fedselect.world.data.mobiact import COLUMNS, read_mobiact, synthetic_mobiact_frames, write_synthetic_mobiact


def _write_trial(root, act, subject, trial, times_s, label=None):
    """One annotated CSV with MobiAct's exact columns; acc_x = 2 t + 1 (linear in time)."""
    t = np.asarray(times_s, dtype=float)
    n = t.size
    ts = (1_500_000_000_000 + np.round(t * 1e9)).astype(np.int64)
    frame = pd.DataFrame(
        {
            "timestamp": ts,
            "rel_time": t - t[0],
            "acc_x": 2 * t + 1,
            "acc_y": np.full(n, 9.81),
            "acc_z": np.zeros(n),
            "gyro_x": np.zeros(n),
            "gyro_y": 0.1 * t,
            "gyro_z": np.zeros(n),
            "azimuth": np.zeros(n),
            "pitch": np.zeros(n),
            "roll": np.zeros(n),
            "label": label if label is not None else [act] * n,
        }
    )
    assert tuple(frame.columns) == COLUMNS
    folder = root / "Annotated Data" / act
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_csv(folder / f"{act}_{subject}_{trial}_annotated.csv", index=False)


def _uneven(duration_s, rate_hz, rng):
    steps = rng.uniform(0.5, 1.5, size=int(duration_s * rate_hz * 2)) / rate_hz
    t = np.concatenate([[0.0], np.cumsum(steps)])
    t = t[t <= duration_s]
    return np.append(t, duration_s) if t[-1] < duration_s else t


@pytest.fixture()
def mobiact_dir(tmp_path):
    rng = np.random.default_rng(0)
    # subjects 1..4; WAL 6 s, FOL 4.98 s (uneven timestamps around 87 Hz), STD 3.0 s
    for s in (1, 2, 3, 4):
        _write_trial(tmp_path, "WAL", s, 1, _uneven(6.0, 87, rng))
        labels_t = _uneven(4.98, 87, rng)
        lab = np.where(labels_t < 0.5, "STD", np.where(labels_t < 2.5, "FOL", "LYI"))
        _write_trial(tmp_path, "FOL", s, 1, labels_t, lab)
        _write_trial(tmp_path, "FOL", s, 2, _uneven(4.98, 87, rng), None)
    _write_trial(tmp_path, "STD", 1, 1, _uneven(3.0, 87, rng))
    (tmp_path / "Annotated Data" / "SLH").mkdir()  # a scenario folder: skipped by default
    return tmp_path


def test_reader_subjects_activities_lengths(mobiact_dir):
    recs, info = read_mobiact(mobiact_dir, rate_hz=50.0)
    assert info["files_read"] == 13 and info["skipped_folders"] == ["SLH"]
    assert sorted({r.subject for r in recs}) == [1, 2, 3, 4]
    assert sorted({r.activity for r in recs}) == ["FOL", "STD", "WAL"]
    lengths = {(r.activity, r.subject, r.trial): len(r) for r in recs}
    assert lengths[("WAL", 2, 1)] == 301  # floor(6.0 * 50) + 1
    assert lengths[("FOL", 3, 2)] == 250  # floor(4.98 * 50) + 1
    assert lengths[("STD", 1, 1)] == 151
    rec = next(r for r in recs if (r.activity, r.subject, r.trial) == ("FOL", 1, 1))
    grid = np.arange(len(rec)) / 50.0
    np.testing.assert_allclose(rec.data[:, 0], 2 * grid + 1, atol=1e-4)  # resampled exactly on the line
    np.testing.assert_allclose(rec.data[:, 4], 0.1 * grid, atol=1e-5)
    assert rec.rate_hz == 50.0
    assert rec.labels[0] == "STD" and rec.labels[75] == "FOL" and rec.labels[-1] == "LYI"
    only = read_mobiact(mobiact_dir / "Annotated Data", activities=["WAL"], subjects=[2, 3])[0]
    assert [(r.activity, r.subject) for r in only] == [("WAL", 2), ("WAL", 3)]


def test_missing_folder_names_expected_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="Annotated Data"):
        load_dataset("mobiact", path=str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError) as e:
        read_mobiact(tmp_path)
    assert str(tmp_path / "Annotated Data") in str(e.value)
    with pytest.raises(ValueError, match="path"):
        load_dataset("mobiact")


def test_mobiact_dataset_fall_task_and_test_subjects(mobiact_dir):
    train, test = load_dataset("mobiact", path=str(mobiact_dir), window=100, stride=50, test_subjects=[4])
    assert train.class_names == ["ADL", "FALL"] and train.num_classes == 2
    assert sorted(set(train.groups.tolist())) == [1, 2, 3] and set(test.groups.tolist()) == {4}
    # windows per recording: WAL 301 -> 5, FOL 250 -> 4, STD 151 -> 2
    assert len(train) == 3 * (5 + 4 + 4) + 2 and len(test) == 5 + 4 + 4
    assert np.bincount(test.y).tolist() == [5, 8]
    assert train.x.shape[1:] == (100, 6)
    # majority per-sample labels: FOL_4_1 is STD (samples 0-25), FOL (26-125), LYI (126-249), so of its
    # windows starting at 0, 50, 100, 150 the first two are falls and the last two ADL (LYI)
    tr_m, te_m = load_dataset("mobiact", path=str(mobiact_dir), window=100, stride=50, test_subjects=[4], window_label="majority")
    assert np.bincount(te_m.y, minlength=2).tolist() == [5 + 2, 4 + 2]


def test_mobiact_bitmap_uses_activity_stride(mobiact_dir):
    # I_type = round(40 * t_type / 10): FOL 250 samples = 5.0 s -> 20; WAL 301 = 6.02 s -> 24; STD 3.02 s -> 12
    tr, te = load_dataset("mobiact", path=str(mobiact_dir), task="activity", representation="bitmap", test_subjects=[4])
    assert tr.info["stride"] == {"FOL": 20, "WAL": 24, "STD": 12}
    # W = 200: FOL floor(50 / 20) + 1 = 3 windows per trial, WAL floor(101 / 24) + 1 = 5, STD (151) dropped
    assert len(te) == 2 * 3 + 5 and len(tr) == 3 * (2 * 3 + 5)
    assert tr.info["dropped"] == ["STD_1_1"] and tr.info["dropped_recordings"] == 1
    assert tr.x.shape[1:] == (3, 20, 20) and tr.class_names == ["STD", "WAL", "FOL"]


def test_mobiact_default_split_is_seeded_fraction(mobiact_dir):
    a = load_dataset("mobiact", seed=3, path=str(mobiact_dir), window=100)
    b = load_dataset("mobiact", seed=3, path=str(mobiact_dir), window=100)
    assert a[1].info["test_subjects"] == b[1].info["test_subjects"]
    assert len(a[1].info["test_subjects"]) == 1  # floor(4 * 17 / 67) = 1, at least 1
    np.testing.assert_array_equal(a[0].x, b[0].x)


def test_task_views_on_synthetic_and_options():
    tr, te = load_dataset(
        "mobiact-synthetic", seed=0, num_subjects=4, trials=1, task="cefl8", representation="bitmap", num_test_subjects=1
    )
    assert tr.class_names == ["FOL", "FKL", "SDL", "BSC", "SCH", "CSI", "CSO", "DAILY"]
    assert tr.x.shape[1:] == (3, 20, 20) and 0.0 <= tr.x.min() and tr.x.max() <= 1.0
    assert set(np.unique(tr.y).tolist()) == set(range(8)) and tr.info["dropped_recordings"] == 0
    assert tr.info["stride"]["SCH"] == round(40 * tr.info["durations_s"]["SCH"] / 10)
    # SIT, CHU and LYI are not among CEFL's 8 classes
    assert {e.split("_")[0] for e in tr.info["excluded_recordings"]} == {"SIT", "CHU", "LYI"}
    tr2, _ = load_dataset("mobiact-synthetic", seed=0, num_subjects=4, trials=1, duration_scale=0.5, task="activity")
    assert tr2.num_classes == 16
    with pytest.raises(ValueError, match="unknown options"):
        load_dataset("mobiact-synthetic", seed=0, windw=10)
    with pytest.raises(ValueError, match="representation"):
        load_dataset("mobiact-synthetic", seed=0, num_subjects=4, trials=1, representation="image")


def test_synthetic_generator_writes_official_layout(tmp_path):
    frames = synthetic_mobiact_frames(np_rng(0, "test"), num_subjects=2, activities=["FOL", "WAL"], trials=1, duration_scale=0.3)
    write_synthetic_mobiact(tmp_path, frames)
    assert (tmp_path / "Annotated Data" / "FOL" / "FOL_2_1_annotated.csv").is_file()
    head = pd.read_csv(tmp_path / "Annotated Data" / "WAL" / "WAL_1_1_annotated.csv", nrows=2)
    assert tuple(head.columns) == COLUMNS
    recs, _ = read_mobiact(tmp_path, rate_hz=50.0)
    assert sorted((r.activity, r.subject) for r in recs) == [("FOL", 1), ("FOL", 2), ("WAL", 1), ("WAL", 2)]
    fol = next(r for r in recs if r.activity == "FOL")
    peak = np.linalg.norm(fol.data[:, :3], axis=1).max()
    assert peak > 2 * 9.81  # the impact spike
    assert set(fol.labels.tolist()) == {"STD", "FOL", "LYI"}
