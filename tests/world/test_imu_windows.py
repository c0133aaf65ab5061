"""Sliding windows, CEFL's I_type, resampling and CEFL's bitmap encoding."""

import logging

import numpy as np
import pytest

from fedselect.world.data.bitmap import bitmap_side, encode_bitmaps
from fedselect.world.data.imu_datasets import build_imu_datasets
from fedselect.world.data.windows import (
    Recording,
    activity_stride,
    num_windows,
    resample_uniform,
    sliding_windows,
    window_starts,
)


def _rec(T, subject=1, activity="WAL", trial=1, offset=0.0):
    data = np.arange(T * 6, dtype=np.float32).reshape(T, 6) + offset
    return Recording(subject, activity, trial, 50.0, data)


def test_window_count_and_starts():
    assert window_starts(10, 4, 2).tolist() == [0, 2, 4, 6]
    assert num_windows(10, 4, 2) == 4 == (10 - 4) // 2 + 1
    assert num_windows(3, 4, 2) == 0 and window_starts(3, 4, 2).size == 0
    assert num_windows(4, 4, 3) == 1 and num_windows(11, 4, 3) == 3  # starts 0, 3, 6 (9+4 > 11)
    with pytest.raises(ValueError, match="stride"):
        num_windows(10, 4, 0)


def test_sliding_windows_contents_and_dropped(caplog):
    recs = [_rec(10), _rec(3, subject=2)]
    with caplog.at_level(logging.WARNING, logger="fedselect.data.imu"):
        w = sliding_windows(recs, 4, 2)
    assert w.x.shape == (4, 4, 6)
    assert w.start.tolist() == [0, 2, 4, 6] and w.recording.tolist() == [0, 0, 0, 0]
    np.testing.assert_array_equal(w.x[1], recs[0].data[2:6])
    assert w.dropped == [1]
    assert "1 of 2 recordings" in caplog.text


def test_dropped_recordings_reported_in_dataset_info(caplog):
    recs = [_rec(10, subject=1), _rec(10, subject=2), _rec(3, subject=2, trial=2)]
    with caplog.at_level(logging.WARNING, logger="fedselect.data.imu"):
        train, test = build_imu_datasets(recs, name="hand", seed=0, window=4, stride=2, test_subjects=[2], standardize=False)
    assert len(train) == 4 and len(test) == 4
    assert train.info["dropped_recordings"] == 1 and train.info["dropped"] == ["WAL_2_2"]
    assert train.groups.tolist() == [1] * 4 and test.groups.tolist() == [2] * 4
    assert "dropped" in caplog.text


def test_activity_stride_itype():
    assert activity_stride(10.0) == 40  # falls: I_0
    assert activity_stride(300.0) == 1200  # 5-min walking
    assert activity_stride(6.0) == 24
    assert activity_stride(0.1) == 1  # never below 1
    assert activity_stride(20.0, i0=10, t0_s=10.0) == 20


def test_resample_uneven_timestamps_linear_signal():
    t = np.array([0.0, 0.013, 0.020, 0.041, 0.060, 0.079, 0.100, 0.107])
    v = np.stack([3 * t + 1, -2 * t, np.ones_like(t)], axis=1)
    labels = np.array(["A", "A", "B", "B", "B", "C", "C", "C"])
    out, lab = resample_uniform(t + 5.0, v, 50.0, labels)  # origin does not matter
    grid = np.arange(6) * 0.02  # floor(0.107 * 50) + 1 = 6 samples
    assert out.shape == (6, 3)
    np.testing.assert_allclose(out[:, 0], 3 * grid + 1, atol=1e-6)
    np.testing.assert_allclose(out[:, 1], -2 * grid, atol=1e-6)
    # zero-order hold: grid 0.00 -> A, 0.02 -> B (exact hit), 0.04 -> B, 0.06 -> B, 0.08 -> C, 0.10 -> C
    assert lab.tolist() == ["A", "B", "B", "B", "C", "C"]


def test_bitmap_hand_computed_small():
    # W = 8 -> 16 triples -> 4x4 image
    acc_x = [-20, -19.9, 0, 1.5, 22.5, 100, -25, 5]
    gyro_x = [0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5]
    w = np.zeros((1, 8, 6))
    w[0, :, 0] = acc_x
    w[0, :, 1] = 9.81
    w[0, :, 2] = -9.81
    w[0, :, 3] = gyro_x
    w[0, :, 4] = 0.0
    w[0, :, 5] = -1.0
    img = encode_bitmaps(w)
    assert img.shape == (1, 3, 4, 4) and img.dtype == np.uint8
    # R: acc_x pixels floor((a + 20) * 6) clipped, then gyro_x joint min-max (min -1, max 3.5)
    expected_r = [[0, 0, 120, 129], [255, 255, 0, 150], [55, 83, 111, 138], [166, 194, 222, 250]]
    np.testing.assert_array_equal(img[0, 0], expected_r)
    # G: acc_y = 9.81 -> floor(29.81 * 6) = 178; gyro_y = 0 -> floor(250 * 1 / 4.5) = 55
    np.testing.assert_array_equal(img[0, 1], [[178] * 4] * 2 + [[55] * 4] * 2)
    # B: acc_z = -9.81 -> floor(10.19 * 6) = 61; gyro_z = -1 (the minimum) -> 0
    np.testing.assert_array_equal(img[0, 2], [[61] * 4] * 2 + [[0] * 4] * 2)
    per_axis = encode_bitmaps(w, gyro_scaling="per_axis")
    np.testing.assert_array_equal(per_axis[0, 0, 2:].ravel(), [0, 35, 71, 107, 142, 178, 214, 250])
    assert (per_axis[0, 1, 2:] == 0).all() and (per_axis[0, 2, 2:] == 0).all()  # constant axes


def test_bitmap_full_size_layout():
    w = np.zeros((1, 200, 6))
    w[0, 37, :3] = [1.0, -1.0, 2.0]  # acc sample 37 -> pixel (1, 17)
    w[0, 0, 3:] = [1.0, 0.0, 0.0]  # gyro sample 0 -> pixel (10, 0): joint max
    w[0, 199, 3:] = [-1.0, 0.0, 0.0]  # gyro sample 199 -> pixel (19, 19): joint min
    img = encode_bitmaps(w)
    assert img.shape == (1, 3, 20, 20) and bitmap_side(200) == 20
    assert (img[0, 0, 1, 17], img[0, 1, 1, 17], img[0, 2, 1, 17]) == (126, 114, 132)
    assert img[0, 0, 0, 0] == 120  # zero acceleration
    assert img[0, 0, 10, 0] == 250 and img[0, 0, 19, 19] == 0 and img[0, 1, 10, 0] == 125
    with pytest.raises(ValueError, match="perfect square"):
        bitmap_side(100)
