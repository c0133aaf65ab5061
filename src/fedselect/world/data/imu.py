"""Wearable-sensor data sets and task views.

Data sets (registered with :func:`fedselect.world.data.datasets.register_dataset`):

- ``"imu-watch"``: the real 6-axis smartwatch data embedded in seglearn
  (``seglearn.datasets.load_watch()``: 10 subjects, 50 Hz, 7 shoulder-exercise classes, 140
  recordings). It has **no falls**: only ``task="activity"`` is possible. Units are not
  documented; we assume acceleration in g (std 0.5-0.9, range about +-5, gravity apparently
  removed) and angular velocity in rad/s (docs/data-imu.md), and convert acceleration to m/s^2 (x 9.81).
- ``"mobiact"``: MobiAct v2 read from the user's copy (option ``path``), see
  :mod:`fedselect.world.data.mobiact`.
- ``"mobiact-synthetic"``: synthetic recordings in MobiAct's format (for tests and demos).

Task views (option ``task``):

- ``"activity"``: one class per activity code;
- ``"fall"``: binary ADL (0) vs fall (1, codes FOL, FKL, BSC, SDL) — FLASH-RL's fall
  detection, scored with macro-F1;
- ``"cefl8"``: CEFL's 8 classes FOL, FKL, SDL, BSC, SCH, CSI, CSO and DAILY (STD, WAL, JOG,
  JUM, STU, STN); other codes (SIT, CHU, LYI) are left out (CEFL's MobiAct paragraph).

Representations (option ``representation``):

- ``"sequence"``: windows ``(n, W, 6)`` for the GRU (default W = 100 samples, S = W // 2),
  standardised per channel with the training windows' mean and std (``standardize: true``;
  the statistics are in ``info``);
- ``"bitmap"``: CEFL's 20x20 RGB images ``(n, 3, 20, 20)`` scaled to [0, 1] (pixel / 255), from
  windows of 200 samples slid by the per-activity interval ``I_type`` unless an
  integer ``stride`` is given.

The global test set is a held-out group of subjects (FLASH-RL IV-A: 17 of 67 for MobiAct; 2
of 10 for the embedded set), chosen with a generator derived from the seed; ``groups`` holds
the subject id of every window. Recordings shorter than the window give no window: they are
counted in ``info["dropped_recordings"]`` and logged.

The subject-based client divisions ``"volunteer"`` (one client per subject) and
``"volunteer_label_skew"`` use ``groups`` and live with the other partitioners
(:mod:`fedselect.world.data.partition`).
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import numpy as np

from fedselect.common.seeding import np_rng
from fedselect.world.data.bitmap import GYRO_SCALINGS, bitmap_side, encode_bitmaps
from fedselect.world.data.datasets import ArrayDataset, register_dataset
from fedselect.world.data.mobiact import (
    ACTIVITIES,
    DOWNLOAD_HINT,
    FALLS,
    frame_to_recording,
    read_mobiact,
    synthetic_mobiact_frames,
)
from fedselect.world.data.windows import (
    CHANNELS,
    Recording,
    activity_durations,
    activity_stride,
    majority_label,
    resample_uniform,
    sliding_windows,
)

log = logging.getLogger("fedselect.data.imu")

G = 9.81  # m/s^2 per g
TASKS = ("activity", "fall", "cefl8")
REPRESENTATIONS = ("sequence", "bitmap")
WINDOW_LABELS = ("recording", "majority")
CEFL8_CLASSES = ("FOL", "FKL", "SDL", "BSC", "SCH", "CSI", "CSO", "DAILY")
CEFL8_DAILY = ("STD", "WAL", "JOG", "JUM", "STU", "STN")
FALL_CLASSES = ("ADL", "FALL")
WATCH_RATE_HZ = 50.0
MOBIACT_TEST_FRACTION = 17 / 67


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


# --------------------------------------------------------------------------- task views


def task_classes(task: str, codes: Sequence[str], order: Sequence[str] | None = None) -> tuple[list[str], dict[str, int]]:
    """Class names and the activity-code -> class mapping of a task view.

    Args:
        task: ``"activity"``, ``"fall"`` or ``"cefl8"``.
        codes: the activity codes present (used for ``"activity"``: in ``order`` if given, else
            MobiAct codes in MobiAct's order, others sorted, after them).
        order: optional preferred class order for ``"activity"`` (e.g. seglearn's ``y_labels``).

    Returns:
        ``(class_names, mapping)``; codes absent from ``mapping`` are left out of the task.

    Raises:
        ValueError: unknown task; ``fall``/``cefl8`` without any fall code present (the
        embedded watch data has no falls).
    """
    codes = list(dict.fromkeys(codes))
    if task == "activity":
        ref = list(order) if order is not None else list(ACTIVITIES)
        names = [c for c in ref if c in codes] + sorted(c for c in codes if c not in ref)
        return names, {c: i for i, c in enumerate(names)}
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; allowed: {list(TASKS)}")
    if not any(c in FALLS for c in codes):
        raise ValueError(
            f"task {task!r} needs fall recordings (codes {list(FALLS)}), but the data has only {sorted(codes)}; "
            f"the embedded watch data has no falls, use task 'activity' or MobiAct"
        )
    if task == "fall":
        return list(FALL_CLASSES), {c: int(c in FALLS) for c in codes}
    mapping = {c: CEFL8_CLASSES.index(c) for c in codes if c in CEFL8_CLASSES}
    mapping.update({c: CEFL8_CLASSES.index("DAILY") for c in codes if c in CEFL8_DAILY})
    return list(CEFL8_CLASSES), mapping


# --------------------------------------------------------------------------- assembly


def split_subjects(
    subjects: Sequence[int],
    seed: int,
    test_subjects: Sequence[int] | None = None,
    num_test_subjects: int | None = None,
    test_subject_fraction: float | None = None,
) -> tuple[list[int], list[int]]:
    """Choose the held-out test subjects (FLASH-RL IV-A).

    Priority: an explicit ``test_subjects`` list; else ``num_test_subjects``; else
    ``floor(test_subject_fraction * n)`` (at least 1). The choice is a seeded draw (generator
    ``np_rng(seed, "imu/test-subjects")``).

    Returns:
        ``(train_subjects, test_subjects)``, both sorted.

    Raises:
        ValueError: unknown subjects in ``test_subjects``, or a count leaving no training or
        no test subject.
    """
    subs = sorted({int(s) for s in subjects})
    n = len(subs)
    if test_subjects is not None:
        test = sorted({int(s) for s in test_subjects})
        unknown = [s for s in test if s not in subs]
        if unknown:
            raise ValueError(f"test_subjects {unknown} are not in the data; subjects present: {subs}")
    else:
        if num_test_subjects is None:
            frac = MOBIACT_TEST_FRACTION if test_subject_fraction is None else float(test_subject_fraction)
            if not 0 < frac < 1:
                raise ValueError(f"test_subject_fraction must be in (0, 1), got {frac}")
            num_test_subjects = max(1, int(np.floor(frac * n + 1e-9)))
        k = int(num_test_subjects)
        if not 1 <= k < n:
            raise ValueError(f"num_test_subjects must be in [1, {n - 1}] for {n} subjects, got {k}")
        rng = np_rng(seed, "imu/test-subjects")
        test = sorted(int(s) for s in rng.choice(subs, size=k, replace=False))
    train = [s for s in subs if s not in test]
    if not train or not test:
        raise ValueError(f"the subject split leaves {len(train)} training and {len(test)} test subjects; need >= 1 each")
    return train, test


def build_imu_datasets(
    recordings: Sequence[Recording],
    *,
    name: str,
    seed: int,
    task: str = "activity",
    representation: str = "sequence",
    window: int | None = None,
    stride: int | str | None = None,
    i0: int = 40,
    t0_s: float = 10.0,
    gyro_scaling: str = "joint",
    standardize: bool = True,
    window_label: str = "recording",
    activities_per_subject: int | None = None,
    test_subjects: Sequence[int] | None = None,
    num_test_subjects: int | None = None,
    test_subject_fraction: float | None = None,
    info: dict[str, Any] | None = None,
    class_order: Sequence[str] | None = None,
) -> tuple[ArrayDataset, ArrayDataset]:
    """Window recordings into a (train, test) pair split by subject.

    Args:
        recordings: the recordings (fixed rate each).
        name: data set name stored in the ArrayDatasets.
        seed: experiment seed (test-subject draw, activity skew draw).
        task: ``activity`` | ``fall`` | ``cefl8`` (see the module docstring).
        representation: ``sequence`` -> x ``(n, W, 6)``; ``bitmap`` -> x ``(n, 3, s, s)`` in [0, 1].
        window: W in samples (default 100 for sequences, 200 for bitmaps; bitmaps need 2W square).
        stride: S in samples; default W // 2 for sequences and ``"activity"`` (CEFL's I_type)
            for bitmaps; ``"activity"`` is allowed for sequences too.
        i0, t0_s: I_0 (samples) and t_0 (s) of I_type = max(1, round(I_0 * t_type / t_0)).
        gyro_scaling: bitmap gyro min-max over ``joint`` axes or ``per_axis``.
        standardize: sequences only: per-channel (x - mean) / std with the training windows'
            statistics.
        window_label: ``recording`` (the recording's activity) or ``majority`` (the most
            frequent per-sample label in the window; needs per-sample labels).
        activities_per_subject: if set, each *training* subject keeps only this many of its
            activity codes (seeded draw): FLASH-RL's "label skew k" on activities, usable with
            the binary fall task where labels cannot express it.
        test_subjects, num_test_subjects, test_subject_fraction: see :func:`split_subjects`.
        info: extra provenance merged into ``info``.
        class_order: class order of the ``activity`` task (see :func:`task_classes`).

    Returns:
        ``(train, test)`` ArrayDatasets with ``groups`` = subject id of each window and
        ``info`` giving units, windows, strides, subjects, dropped / excluded recordings.

    Raises:
        ValueError: a bad option (named, with allowed values); a split leaving a side with no
        windows.
    """
    if representation not in REPRESENTATIONS:
        raise ValueError(f"unknown representation {representation!r}; allowed: {list(REPRESENTATIONS)}")
    if window_label not in WINDOW_LABELS:
        raise ValueError(f"unknown window_label {window_label!r}; allowed: {list(WINDOW_LABELS)}")
    if gyro_scaling not in GYRO_SCALINGS:
        raise ValueError(f"unknown gyro_scaling {gyro_scaling!r}; allowed: {list(GYRO_SCALINGS)}")
    if window_label == "majority" and any(r.labels is None for r in recordings):
        raise ValueError("window_label 'majority' needs per-sample labels; this data has none (use 'recording')")
    W = int(window if window is not None else (200 if representation == "bitmap" else 100))
    if representation == "bitmap":
        bitmap_side(W)
    if stride is None:
        stride = "activity" if representation == "bitmap" else max(1, W // 2)
    if isinstance(stride, str) and stride != "activity":
        raise ValueError(f"stride must be a positive integer (samples) or 'activity', got {stride!r}")

    recs = list(recordings)
    codes = [r.activity for r in recs]
    if window_label == "majority":
        codes += [c for r in recs for c in np.unique(r.labels)]
    class_names, mapping = task_classes(task, codes, class_order)
    excluded_recs = []
    if window_label == "recording":
        excluded_recs = [f"{r.activity}_{r.subject}_{r.trial}" for r in recs if r.activity not in mapping]
        recs = [r for r in recs if r.activity in mapping]

    train_subj, test_subj = split_subjects(
        [r.subject for r in recs], seed, test_subjects, num_test_subjects, test_subject_fraction
    )
    kept_activities = None
    if activities_per_subject is not None:
        k = int(activities_per_subject)
        if k < 1:
            raise ValueError(f"activities_per_subject must be >= 1, got {activities_per_subject}")
        rng = np_rng(seed, "imu/activity-skew")
        kept_activities = {}
        for s in train_subj:
            acts = sorted({r.activity for r in recs if r.subject == s})
            kept_activities[s] = sorted(rng.choice(acts, size=min(k, len(acts)), replace=False).tolist())
        recs = [r for r in recs if r.subject in test_subj or r.activity in kept_activities[r.subject]]

    durations = activity_durations(recs)
    strides = {a: activity_stride(d, i0, t0_s) for a, d in durations.items()} if stride == "activity" else None
    stride_fn = (lambda r: strides[r.activity]) if strides is not None else stride  # validated by sliding_windows
    win = sliding_windows(recs, W, stride_fn, name=name)
    dropped = [f"{recs[i].activity}_{recs[i].subject}_{recs[i].trial}" for i in win.dropped]

    if window_label == "recording":
        y = np.array([mapping[recs[i].activity] for i in win.recording], dtype=np.int64)
        keep = np.ones(len(y), dtype=bool)
    else:
        codes_w = [majority_label(recs[i].labels, s, W) for i, s in zip(win.recording, win.start)]
        keep = np.array([c in mapping for c in codes_w], dtype=bool)
        y = np.array([mapping.get(c, -1) for c in codes_w], dtype=np.int64)
    subj = np.array([recs[i].subject for i in win.recording], dtype=np.int64)
    x, y, subj = win.x[keep], y[keep], subj[keep]
    is_test = np.isin(subj, test_subj)
    if not (~is_test).any() or not is_test.any():
        raise ValueError(
            f"{name}: the subject split gives {int((~is_test).sum())} training and {int(is_test.sum())} test "
            f"windows (window {W} samples); lower the window or change the test subjects"
        )

    meta: dict[str, Any] = dict(info or {})
    meta.update(
        {
            "units": {"acc": "m/s^2", "gyro": "rad/s"} if representation == "sequence" else "pixel/255",
            "channels": list(CHANNELS),
            "rate_hz": sorted({r.rate_hz for r in recs}),
            "task": task,
            "representation": representation,
            "window": W,
            "stride": strides if strides is not None else int(stride),
            "durations_s": {a: float(d) for a, d in durations.items()},
            "train_subjects": train_subj,
            "test_subjects": test_subj,
            "num_recordings": len(recs),
            "dropped_recordings": len(dropped),
            "dropped": dropped,
            "excluded_recordings": excluded_recs,
            "excluded_windows": int((~keep).sum()),
            "window_label": window_label,
        }
    )
    if kept_activities is not None:
        meta["activities_per_subject"] = {int(s): a for s, a in kept_activities.items()}
    if representation == "bitmap":
        x = encode_bitmaps(x, gyro_scaling).astype(np.float32) / 255.0
        meta["gyro_scaling"] = gyro_scaling
    elif standardize:
        mean = x[~is_test].reshape(-1, x.shape[2]).mean(axis=0)
        std = x[~is_test].reshape(-1, x.shape[2]).std(axis=0)
        std = np.where(std > 1e-6, std, 1.0)
        x = (x - mean) / std
        meta["standardize"] = {"mean": mean.tolist(), "std": std.tolist()}
    log.info(
        "%s: %d train windows (%d subjects), %d test windows (%d subjects), %d recordings dropped (shorter than %d samples)",
        name,
        int((~is_test).sum()),
        len(train_subj),
        int(is_test.sum()),
        len(test_subj),
        len(dropped),
        W,
    )
    parts = []
    for sel, split in ((~is_test, "train"), (is_test, "test")):
        parts.append(ArrayDataset(x[sel], y[sel], len(class_names), name, list(class_names), subj[sel], {**meta, "split": split}))
    return parts[0], parts[1]


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
