"""Wearable-sensor data sets: where the recordings come from, and the registered loaders.

Data sets (registered with :func:`fedselect.world.data.datasets.register_dataset`):

- ``"imu-watch"``: the real 6-axis smartwatch data embedded in seglearn
  (``seglearn.datasets.load_watch()``: 10 subjects, 50 Hz, 7 shoulder-exercise classes, 140
  recordings). It has **no falls**: only ``task="activity"`` is possible. Units are not
  documented; we assume acceleration in g (std 0.5-0.9, range about +-5, gravity apparently
  removed) and angular velocity in rad/s (docs/data-imu.md), and convert acceleration to m/s^2 (x 9.81).
- ``"mobiact"``: MobiAct v2 read from the user's copy (option ``path``), see
  :mod:`fedselect.world.data.mobiact`.
- ``"mobiact-synthetic"``: synthetic recordings in MobiAct's format (for tests and demos).

Task views (option ``task``: ``activity``, ``fall``, ``cefl8``), representations (option
``representation``: ``sequence``, ``bitmap``), the held-out test subjects and the windows are
made from the recordings by :func:`fedselect.world.data.imu_datasets.build_imu_datasets`, whose
options every data set here accepts.

The subject-based client divisions ``"volunteer"`` (one client per subject) and
``"volunteer_label_skew"`` use ``groups`` and live with the other partition schemes
(:mod:`fedselect.world.data.partition_schemes.volunteer`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fedselect.common.seeding import np_rng
from fedselect.world.data.datasets import ArrayDataset, register_dataset
from fedselect.world.data.imu_datasets import build_imu_datasets
from fedselect.world.data.mobiact import (
    ACTIVITIES,
    DOWNLOAD_HINT,
    frame_to_recording,
    read_mobiact,
    synthetic_mobiact_frames,
)
from fedselect.world.data.windows import Recording, resample_uniform

G = 9.81  # m/s^2 per g
WATCH_RATE_HZ = 50.0


# --------------------------------------------------------------------------- recordings

WATCH_CLASSES = ("PEN", "ABD", "FEL", "IR", "ER", "TRAP", "ROW")  # seglearn's y_labels order


def watch_recordings(rate_hz: float = WATCH_RATE_HZ) -> list[Recording]:
    """The 140 recordings of ``seglearn.datasets.load_watch()`` as :class:`Recording` objects.

    Units (undocumented upstream): ``ax, ay, az`` are taken to be in g and multiplied
    by 9.81 to give m/s^2; ``wx, wy, wz`` are taken to be rad/s and kept. Rate 50 Hz. Activity
    codes are seglearn's ``y_labels`` (PEN, ABD, FEL, IR, ER, TRAP, ROW); ``trial`` counts a
    subject's recordings of one exercise (1-based, in file order); ``meta["side"]`` is 1 for
    the right arm, 0 for the left. ``rate_hz`` other than 50 resamples every recording by
    linear interpolation (:func:`fedselect.world.data.windows.resample_uniform`; the exercises'
    movements are slow, so 25 Hz keeps them while halving the GRU's sequence length).
    """
    from seglearn.datasets import load_watch

    d = load_watch()
    if list(d["X_labels"]) != ["ax", "ay", "az", "wx", "wy", "wz"]:
        raise ValueError(f"seglearn watch data: unexpected channels {d['X_labels']}")
    names = list(d["y_labels"])
    recs, seen = [], {}
    for x, y, subj, side in zip(d["X"], d["y"], d["subject"], d["side"]):
        x = np.asarray(x, dtype=np.float64)
        data = np.concatenate([x[:, :3] * G, x[:, 3:]], axis=1)
        if rate_hz != WATCH_RATE_HZ:
            data, _ = resample_uniform(np.arange(len(data)) / WATCH_RATE_HZ, data, rate_hz)
        key = (int(subj), names[int(y)])
        seen[key] = seen.get(key, 0) + 1
        recs.append(
            Recording(
                int(subj),
                names[int(y)],
                seen[key],
                float(rate_hz),
                data,
                None,
                {"side": int(side), "source": "seglearn.datasets.load_watch"},
            )
        )
    return recs


_COMMON = {
    "task",
    "representation",
    "window",
    "stride",
    "i0",
    "t0_s",
    "gyro_scaling",
    "standardize",
    "window_label",
    "activities_per_subject",
    "test_subjects",
    "num_test_subjects",
    "test_subject_fraction",
}


def _check_options(dataset: str, options: dict, extra: set[str] = frozenset()) -> None:
    bad = sorted(set(options) - _COMMON - set(extra))
    if bad:
        raise ValueError(f"dataset {dataset!r}: unknown options {bad}; allowed: {sorted(_COMMON | set(extra))}")


@register_dataset("imu-watch")
def load_imu_watch(seed: int = 0, rate_hz: float = WATCH_RATE_HZ, **options: Any) -> tuple[ArrayDataset, ArrayDataset]:
    """Real smartwatch IMU data embedded in seglearn (10 subjects, 7 exercises, no falls).

    Options: ``rate_hz`` (default 50, the native rate; other values resample) and those of
    :func:`build_imu_datasets` (default ``task="activity"``, 2 of the 10 subjects held out).
    Acceleration assumed in g and converted to m/s^2 (module docstring).

    Raises:
        ValueError: unknown options; ``task`` fall/cefl8 (no falls in this data).
    """
    _check_options("imu-watch", options)
    if options.get("test_subjects") is None and options.get("test_subject_fraction") is None:
        options.setdefault("num_test_subjects", 2)
    if options.get("window_label", "recording") != "recording":
        raise ValueError("imu-watch has no per-sample labels: window_label must be 'recording'")
    return build_imu_datasets(
        watch_recordings(rate_hz),
        name="imu-watch",
        seed=seed,
        class_order=WATCH_CLASSES,
        info={
            "source": "seglearn.datasets.load_watch (real)",
            "acc_unit_assumption": "g, converted x 9.81 to m/s^2",
            "gyro_unit_assumption": "rad/s",
        },
        **options,
    )


@register_dataset("mobiact")
def load_mobiact(
    seed: int = 0,
    path: str | None = None,
    rate_hz: float = 50.0,
    activities: Sequence[str] | None = None,
    drop_invalid: bool = False,
    **options: Any,
) -> tuple[ArrayDataset, ArrayDataset]:
    """MobiAct v2 from the user's copy (FLASH-RL IV-A; CEFL IV).

    Options: ``path`` (required: the folder holding ``Annotated Data``), ``rate_hz``
    (resampling rate, default 50 Hz), ``activities`` (codes to read, default the 16 ADL + fall
    codes), ``drop_invalid`` (drop defective rows instead of refusing the file; counted in
    ``info["dropped_rows"]``), plus those of :func:`build_imu_datasets` (default
    ``task="fall"``, 17 of the 67 subjects held out, i.e. the fraction 17/67).

    Raises:
        ValueError: ``path`` missing, unknown options.
        DataFileError: a defective annotated CSV (names the file, the line and the column).
        DatasetNotFoundError: ``<path>/Annotated Data`` does not exist (names it).
    """
    _check_options("mobiact", options)
    if path is None:
        raise ValueError(f"dataset 'mobiact' needs the option 'path'. {DOWNLOAD_HINT}")
    options.setdefault("task", "fall")
    from fedselect.world.data.file_errors import flag_option

    recs, info = read_mobiact(
        path, rate_hz=rate_hz, activities=activities, drop_invalid=flag_option("mobiact", "drop_invalid", drop_invalid)
    )
    info = {**info, "source": f"MobiAct v2 (real) at {info['source']}", "resampled_hz": rate_hz}
    return build_imu_datasets(recs, name="mobiact", seed=seed, info=info, **options)


@register_dataset("mobiact-synthetic")
def load_mobiact_synthetic(
    seed: int = 0,
    num_subjects: int = 12,
    trials: int = 2,
    rate_hz: float = 50.0,
    activities: Sequence[str] | None = None,
    duration_scale: float = 1.0,
    **options: Any,
) -> tuple[ArrayDataset, ArrayDataset]:
    """Synthetic recordings in MobiAct's format (made-up signals; for tests and demos only).

    Tables from :func:`fedselect.world.data.mobiact.synthetic_mobiact_frames` (generator
    ``np_rng(seed, "imu/synthetic-mobiact")``) go through the same parser and resampling as
    the real files. Options: ``num_subjects``, ``trials``, ``rate_hz``, ``activities``,
    ``duration_scale``, plus those of :func:`build_imu_datasets` (default ``task="fall"``).
    """
    _check_options("mobiact-synthetic", options)
    options.setdefault("task", "fall")
    frames = synthetic_mobiact_frames(
        np_rng(seed, "imu/synthetic-mobiact"),
        num_subjects=num_subjects,
        activities=ACTIVITIES if activities is None else activities,
        trials=trials,
        duration_scale=duration_scale,
    )
    recs = [frame_to_recording(f, s, a, t, rate_hz, f"synthetic:{a}_{s}_{t}") for s, a, t, f in frames]
    return build_imu_datasets(
        recs,
        name="mobiact-synthetic",
        seed=seed,
        info={"source": "synthetic MobiAct-format generator (not real data)"},
        **options,
    )
