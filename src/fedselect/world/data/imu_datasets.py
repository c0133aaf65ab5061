"""From wearable-sensor recordings to a (train, test) pair of data sets: task views, held-out
subjects, windows and their representation (:func:`build_imu_datasets`).

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

The registered data sets that call it are in :mod:`fedselect.world.data.imu`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from fedselect.common.seeding import np_rng
from fedselect.world.data.bitmap import GYRO_SCALINGS, bitmap_side, encode_bitmaps
from fedselect.world.data.datasets import ArrayDataset
from fedselect.world.data.mobiact import ACTIVITIES, FALLS
from fedselect.world.data.windows import (
    CHANNELS,
    Recording,
    Windows,
    activity_durations,
    activity_stride,
    majority_label,
    sliding_windows,
)

log = logging.getLogger("fedselect.data.imu")

TASKS = ("activity", "fall", "cefl8")
REPRESENTATIONS = ("sequence", "bitmap")
WINDOW_LABELS = ("recording", "majority")
CEFL8_CLASSES = ("FOL", "FKL", "SDL", "BSC", "SCH", "CSI", "CSO", "DAILY")
CEFL8_DAILY = ("STD", "WAL", "JOG", "JUM", "STU", "STN")
FALL_CLASSES = ("ADL", "FALL")
MOBIACT_TEST_FRACTION = 17 / 67


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
    W, stride = _window_options(recordings, representation, window_label, gyro_scaling, window, stride)
    recs, class_names, mapping, excluded_recs = _task_recordings(recordings, task, window_label, class_order)
    train_subj, test_subj = split_subjects(
        [r.subject for r in recs], seed, test_subjects, num_test_subjects, test_subject_fraction
    )
    recs, kept_activities = _skew_activities(recs, train_subj, test_subj, seed, activities_per_subject)
    w = _labelled_windows(recs, W, stride, i0, t0_s, mapping, window_label, test_subj, name)
    meta = _imu_info(info, recs, w, task, representation, window_label, W, stride, train_subj, test_subj, excluded_recs)
    if kept_activities is not None:
        meta["activities_per_subject"] = {int(s): a for s, a in kept_activities.items()}
    x = _represent(w, representation, gyro_scaling, standardize, meta)
    return _train_test(x, w, class_names, meta, name, len(train_subj), len(test_subj), W)


def _window_options(
    recordings: Sequence[Recording],
    representation: str,
    window_label: str,
    gyro_scaling: str,
    window: int | None,
    stride: int | str | None,
) -> tuple[int, int | str]:
    """The checked options and the window W and stride S they give (defaults by representation).

    Raises:
        ValueError: a bad option (named, with allowed values).
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
    return W, stride


def _task_recordings(
    recordings: Sequence[Recording], task: str, window_label: str, class_order: Sequence[str] | None
) -> tuple[list[Recording], list[str], dict[str, int], list[str]]:
    """The task's classes and code mapping (:func:`task_classes`), and the recordings it keeps:
    ``(recordings, class_names, mapping, excluded)``; with ``window_label: recording`` a
    recording whose activity is outside the task is excluded (``"<code>_<subject>_<trial>"``)."""
    recs = list(recordings)
    codes = [r.activity for r in recs]
    if window_label == "majority":
        codes += [c for r in recs for c in np.unique(r.labels)]
    class_names, mapping = task_classes(task, codes, class_order)
    excluded_recs = []
    if window_label == "recording":
        excluded_recs = [f"{r.activity}_{r.subject}_{r.trial}" for r in recs if r.activity not in mapping]
        recs = [r for r in recs if r.activity in mapping]
    return recs, class_names, mapping, excluded_recs


def _skew_activities(
    recs: list[Recording], train_subj: list[int], test_subj: list[int], seed: int, activities_per_subject: int | None
) -> tuple[list[Recording], dict[int, list[str]] | None]:
    """FLASH-RL's "label skew k" on activities: each training subject keeps ``activities_per_subject``
    of its activity codes (generator ``np_rng(seed, "imu/activity-skew")``); test subjects keep all.
    Returns the kept recordings and each training subject's kept codes (None: no skew).

    Raises:
        ValueError: ``activities_per_subject < 1``.
    """
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
    return recs, kept_activities


@dataclass
class _Labelled:
    """The labelled windows of the kept recordings, before their representation."""

    x: np.ndarray  #: ``(n, W, 6)`` raw windows
    y: np.ndarray  #: ``(n,)`` int64 class of each window
    subj: np.ndarray  #: ``(n,)`` int64 subject of each window
    is_test: np.ndarray  #: ``(n,)`` bool, the window's subject is held out
    keep: np.ndarray  #: per window before filtering: its label is in the task
    dropped: list[str]  #: recordings shorter than W (``"<code>_<subject>_<trial>"``)
    strides: dict[str, int] | None  #: per-activity strides (``stride: activity``), else None
    durations: dict[str, float]  #: mean duration (s) per activity


def _labelled_windows(
    recs: list[Recording],
    W: int,
    stride: int | str,
    i0: int,
    t0_s: float,
    mapping: dict[str, int],
    window_label: str,
    test_subj: list[int],
    name: str,
) -> _Labelled:
    """Slide windows of W samples over the recordings (per-activity strides I_type with
    ``stride: activity``), label each (its recording's activity, or the majority per-sample
    label) and mark the held-out subjects' windows.

    Raises:
        ValueError: a side of the subject split with no window.
    """
    durations = activity_durations(recs)
    strides = {a: activity_stride(d, i0, t0_s) for a, d in durations.items()} if stride == "activity" else None
    stride_fn = (lambda r: strides[r.activity]) if strides is not None else stride  # validated by sliding_windows
    win: Windows = sliding_windows(recs, W, stride_fn, name=name)
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
    return _Labelled(x, y, subj, is_test, keep, dropped, strides, durations)


def _imu_info(
    info: dict[str, Any] | None,
    recs: list[Recording],
    w: _Labelled,
    task: str,
    representation: str,
    window_label: str,
    W: int,
    stride: int | str,
    train_subj: list[int],
    test_subj: list[int],
    excluded_recs: list[str],
) -> dict[str, Any]:
    """The data sets' ``info``: the caller's ``info``, then units, windows, strides, subjects,
    dropped and excluded recordings and windows."""
    meta: dict[str, Any] = dict(info or {})
    meta.update(
        {
            "units": {"acc": "m/s^2", "gyro": "rad/s"} if representation == "sequence" else "pixel/255",
            "channels": list(CHANNELS),
            "rate_hz": sorted({r.rate_hz for r in recs}),
            "task": task,
            "representation": representation,
            "window": W,
            "stride": w.strides if w.strides is not None else int(stride),
            "durations_s": {a: float(d) for a, d in w.durations.items()},
            "train_subjects": train_subj,
            "test_subjects": test_subj,
            "num_recordings": len(recs),
            "dropped_recordings": len(w.dropped),
            "dropped": w.dropped,
            "excluded_recordings": excluded_recs,
            "excluded_windows": int((~w.keep).sum()),
            "window_label": window_label,
        }
    )
    return meta


def _represent(w: _Labelled, representation: str, gyro_scaling: str, standardize: bool, meta: dict[str, Any]) -> np.ndarray:
    """The windows as the model sees them: CEFL's bitmaps in [0, 1], or sequences standardised
    with the training windows' per-channel mean and std (recorded in ``meta``)."""
    x = w.x
    if representation == "bitmap":
        x = encode_bitmaps(x, gyro_scaling).astype(np.float32) / 255.0
        meta["gyro_scaling"] = gyro_scaling
    elif standardize:
        mean = x[~w.is_test].reshape(-1, x.shape[2]).mean(axis=0)
        std = x[~w.is_test].reshape(-1, x.shape[2]).std(axis=0)
        std = np.where(std > 1e-6, std, 1.0)
        x = (x - mean) / std
        meta["standardize"] = {"mean": mean.tolist(), "std": std.tolist()}
    return x


def _train_test(
    x: np.ndarray,
    w: _Labelled,
    class_names: list[str],
    meta: dict[str, Any],
    name: str,
    n_train_subjects: int,
    n_test_subjects: int,
    W: int,
) -> tuple[ArrayDataset, ArrayDataset]:
    """The (train, test) :class:`ArrayDataset` pair split by subject, logged."""
    y, subj, is_test = w.y, w.subj, w.is_test
    log.info(
        "%s: %d train windows (%d subjects), %d test windows (%d subjects), %d recordings dropped (shorter than %d samples)",
        name,
        int((~is_test).sum()),
        n_train_subjects,
        int(is_test.sum()),
        n_test_subjects,
        len(w.dropped),
        W,
    )
    parts = []
    for sel, split in ((~is_test, "train"), (is_test, "test")):
        parts.append(ArrayDataset(x[sel], y[sel], len(class_names), name, list(class_names), subj[sel], {**meta, "split": split}))
    return parts[0], parts[1]
