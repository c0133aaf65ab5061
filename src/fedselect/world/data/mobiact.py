"""MobiAct v2 reader and a synthetic generator in the same on-disk format.

MobiAct v2 (Vavoulas et al., ICT4AgeingWell 2016; 67 volunteers, Samsung Galaxy S3 in a
trouser pocket) ships its annotated recordings as

    <root>/Annotated Data/<ACT>/<ACT>_<subject>_<trial>_annotated.csv

with the columns ``timestamp`` (ns), ``rel_time`` (s), ``acc_x, acc_y, acc_z`` (m/s^2,
gravity included), ``gyro_x, gyro_y, gyro_z`` (rad/s), ``azimuth, pitch, roll`` (degrees) and
``label`` (per-sample activity code). Phone sensor timestamps are uneven, so every recording
is resampled to a fixed rate (linear interpolation; labels by zero-order hold), see
:func:`fedselect.world.data.windows.resample_uniform`.

Activity codes: 12 ADLs (STD, WAL, JOG, JUM, STU, STN, SCH, SIT, CHU, CSI, CSO, LYI) and 4
falls (FOL, FKL, BSC, SDL). The five scenario folders (SLH, SBW, SLW, SBE, SRH) are mixed
sequences; they are skipped unless asked for by name.

The data set is not downloadable here: get it from
https://bmi.hmu.gr/the-mobifall-and-mobiact-datasets-2/ (free registration) and unzip it;
pass the folder that contains ``Annotated Data``.

Anything produced by :func:`synthetic_mobiact_frames` is synthetic (made-up signals, not
measurements) and is named so wherever it is used.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np

if TYPE_CHECKING:  # imported where used: pandas is slow to import
    import pandas as pd

from fedselect.world.data.checked_csv import Col, read_csv_checked
from fedselect.world.data.datasets import DatasetNotFoundError
from fedselect.world.data.file_errors import naming_file
from fedselect.world.data.windows import CHANNELS, Recording, resample_uniform

log = logging.getLogger("fedselect.data.imu")

FALLS = ("FOL", "FKL", "BSC", "SDL")
ADLS = ("STD", "WAL", "JOG", "JUM", "STU", "STN", "SCH", "SIT", "CHU", "CSI", "CSO", "LYI")
ACTIVITIES = ADLS + FALLS
SCENARIOS = ("SLH", "SBW", "SLW", "SBE", "SRH")
COLUMNS = (
    "timestamp",
    "rel_time",
    "acc_x",
    "acc_y",
    "acc_z",
    "gyro_x",
    "gyro_y",
    "gyro_z",
    "azimuth",
    "pitch",
    "roll",
    "label",
)
ANNOTATED_DIR = "Annotated Data"
DOWNLOAD_HINT = (
    "MobiAct v2 cannot be downloaded here: get 'MobiAct_Dataset_v2.0' from "
    "https://bmi.hmu.gr/the-mobifall-and-mobiact-datasets-2/ , unzip it and pass the folder "
    "that contains 'Annotated Data' as `data.options.path` (or `--set data.options.path=DIR`)"
)
#: the checks of an annotated CSV: the columns used must hold finite numbers, the others
#: (when present) numbers or nothing, and the per-sample label a known activity code
ANNOTATED_CSV_COLUMNS: tuple[Col, ...] = (
    Col("timestamp", "float"),
    Col("rel_time", "float", required=False, present=False),
    *(Col(c, "float") for c in CHANNELS),
    *(Col(c, "float", required=False, present=False) for c in ("azimuth", "pitch", "roll")),
    Col("label", "str", choices=ACTIVITIES + SCENARIOS, present=False, is_label=True),
)
_FILE_RE = re.compile(r"^(?P<act>[A-Z]{3})_(?P<subject>\d+)_(?P<trial>\d+)_annotated\.csv$")


def annotated_dir(path: str | Path) -> Path:
    """The ``Annotated Data`` folder under ``path`` (``path`` itself if it is that folder).

    Raises:
        DatasetNotFoundError (a FileNotFoundError): neither exists; the message names
        ``<path>/Annotated Data`` and how to get the data.
    """
    p = Path(path).expanduser()
    if p.name == ANNOTATED_DIR and p.is_dir():
        return p
    expected = p / ANNOTATED_DIR
    if not expected.is_dir():
        raise DatasetNotFoundError(f"MobiAct: expected folder {expected} does not exist. {DOWNLOAD_HINT}")
    return expected


def frame_to_recording(
    frame: pd.DataFrame, subject: int, activity: str, trial: int, rate_hz: float, source: str = ""
) -> Recording:
    """Turn one annotated MobiAct table into a :class:`Recording` resampled to ``rate_hz``.

    Times come from ``timestamp`` (ns). Output length ``floor((t_last - t_first) * rate_hz) + 1``.

    Raises:
        ValueError: missing columns (named), non-numeric sensor values.
    """
    missing = [c for c in ("timestamp", *CHANNELS) if c not in frame.columns]
    if missing:
        raise ValueError(f"MobiAct {source or activity}: missing columns {missing}; expected {list(COLUMNS)}")
    t = frame["timestamp"].to_numpy(dtype=np.float64) * 1e-9
    values = frame[list(CHANNELS)].to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(values)):
        raise ValueError(f"MobiAct {source or activity}: non-finite sensor values")
    labels = frame["label"].astype(str).to_numpy() if "label" in frame.columns else None
    data, lab = resample_uniform(t, values, rate_hz, labels)
    return Recording(subject, activity, trial, float(rate_hz), data, lab, {"source": source or "memory"})


def read_mobiact(
    path: str | Path,
    rate_hz: float = 50.0,
    activities: Sequence[str] | None = None,
    subjects: Iterable[int] | None = None,
    drop_invalid: bool = False,
) -> tuple[list[Recording], dict]:
    """Read MobiAct v2 annotated recordings from ``path``.

    Args:
        path: folder containing ``Annotated Data`` (or that folder itself).
        rate_hz: resampling rate in Hz.
        activities: activity codes to read (default: the 16 ADL + fall codes, no scenarios).
        subjects: subject ids to read (default: all).
        drop_invalid: drop rows with a missing, non-numeric or non-finite value, an unknown
            label or the wrong number of fields (counted per file in ``info["dropped_rows"]``)
            instead of refusing the file.

    Returns:
        ``(recordings, info)``; recordings sorted by (activity, subject, trial); info lists the
        folders skipped, the number of files read and the rows dropped per file.

    Raises:
        DatasetNotFoundError: the ``Annotated Data`` folder is missing (names the path).
        DataFileError: a defective file (names the file, the line and the column; see
            :data:`ANNOTATED_CSV_COLUMNS`).
        ValueError: an unknown activity code was asked for, or no recording matched.
    """
    root = annotated_dir(path)
    wanted = tuple(ACTIVITIES if activities is None else activities)
    unknown = [a for a in wanted if a not in ACTIVITIES + SCENARIOS]
    if unknown:
        raise ValueError(f"MobiAct: unknown activity codes {unknown}; known: {list(ACTIVITIES + SCENARIOS)}")
    keep_subjects = None if subjects is None else {int(s) for s in subjects}
    recs: list[Recording] = []
    dropped: dict[str, int] = {}
    skipped = sorted(d.name for d in root.iterdir() if d.is_dir() and d.name not in wanted)
    for act in wanted:
        folder = root / act
        if not folder.is_dir():
            continue
        for f in sorted(folder.iterdir()):
            m = _FILE_RE.match(f.name)
            if m is None or m["act"] != act:
                log.warning("MobiAct: ignoring %s (not named %s_<subject>_<trial>_annotated.csv)", f, act)
                continue
            subject, trial = int(m["subject"]), int(m["trial"])
            if keep_subjects is not None and subject not in keep_subjects:
                continue
            table = read_csv_checked(
                f,
                ANNOTATED_CSV_COLUMNS,
                header=True,
                drop_invalid=drop_invalid,
                what=f"MobiAct annotated CSV with columns {list(COLUMNS)}",
            )
            dropped.update(table.report_dropped())
            frame = table.frame[[c for c in table.frame.columns if c in table.positions]]
            with naming_file(f, "MobiAct recording"):
                recs.append(frame_to_recording(frame, subject, act, trial, rate_hz, str(f)))
    if not recs:
        raise ValueError(f"MobiAct: no recordings for activities {list(wanted)} under {root}")
    recs.sort(key=lambda r: (r.activity, r.subject, r.trial))
    info = {
        "source": str(root),
        "files_read": len(recs),
        "skipped_folders": skipped,
        **({"dropped_rows": dropped} if dropped else {}),
    }
    return recs, info


# --------------------------------------------------------------------------- synthetic data

#: synthetic trial durations (s); real MobiAct: falls 10 s, STD/WAL 5 min, SIT 1 min, JOG/JUM
#: 30 s, stairs 10 s, transitions 6 s (shortened here to keep the synthetic set small)
SYNTHETIC_DURATIONS_S = {
    "STD": 30.0,
    "WAL": 30.0,
    "JOG": 20.0,
    "JUM": 20.0,
    "STU": 10.0,
    "STN": 10.0,
    "SCH": 6.0,
    "SIT": 20.0,
    "CHU": 6.0,
    "CSI": 6.0,
    "CSO": 6.0,
    "LYI": 10.0,
    "FOL": 10.0,
    "FKL": 10.0,
    "BSC": 10.0,
    "SDL": 10.0,
}
_G = 9.81
_UP = np.array([0.0, _G, 0.0])  # phone upright in a trouser pocket: y along the leg
_SEATED = np.array([0.0, 0.2 * _G, 0.98 * _G])
_LYING = {
    "FOL": np.array([0.0, 0.1, -_G]),
    "FKL": np.array([0.0, 0.3, -_G]),
    "BSC": np.array([0.0, 0.6 * _G, 0.8 * _G]),
    "SDL": np.array([_G, 0.2, 0.1]),
    "LYI": np.array([0.0, 0.1, _G]),
}
_FALL_AXIS = {"FOL": 0, "FKL": 0, "BSC": 0, "SDL": 2}
_PERIODIC = {"WAL": (1.8, 2.5), "JOG": (2.8, 7.0), "JUM": (2.0, 11.0), "STU": (1.6, 3.0), "STN": (1.9, 3.5)}


def synthetic_mobiact_frames(
    rng: np.random.Generator,
    num_subjects: int = 12,
    activities: Sequence[str] = ACTIVITIES,
    trials: int = 2,
    mean_rate_hz: float = 87.0,
    duration_scale: float = 1.0,
) -> list[tuple[int, str, int, pd.DataFrame]]:
    """Synthetic MobiAct-format recordings (made-up signals, NOT measurements).

    Every trial is a table with exactly MobiAct's annotated columns and uneven timestamps
    (mean ``mean_rate_hz``, +-30% jitter). Signals: gravity (9.81 m/s^2) in a posture-dependent
    direction plus activity-specific motion: sinusoids for gait-like ADLs, posture changes for
    transitions, and for falls a free-fall dip, an impact spike (2.5-3.5 g) with a rotation
    burst, then lying (labels STD -> fall code -> LYI). Subjects differ in amplitude, cadence
    and phone tilt.

    Args:
        rng: the generator for every random draw.
        num_subjects: subjects 1..num_subjects.
        activities: activity codes (MobiAct ADL / fall codes).
        trials: trials per subject and activity.
        mean_rate_hz: mean sampling rate of the uneven timestamps.
        duration_scale: multiplies :data:`SYNTHETIC_DURATIONS_S`.

    Returns:
        list of ``(subject, activity, trial, frame)``.

    Raises:
        ValueError: unknown activity codes, non-positive counts or rates.
    """
    import pandas as pd

    unknown = [a for a in activities if a not in ACTIVITIES]
    if unknown:
        raise ValueError(f"synthetic MobiAct: unknown activity codes {unknown}; known: {list(ACTIVITIES)}")
    if num_subjects < 1 or trials < 1 or not mean_rate_hz > 0 or not duration_scale > 0:
        raise ValueError(
            f"synthetic MobiAct: need num_subjects >= 1, trials >= 1, mean_rate_hz > 0, duration_scale > 0; got "
            f"{num_subjects}, {trials}, {mean_rate_hz}, {duration_scale}"
        )
    out = []
    for subject in range(1, num_subjects + 1):
        amp = rng.uniform(0.8, 1.2)
        cadence = rng.uniform(0.9, 1.1)
        tilt = rng.normal(0.0, 0.08, size=3)
        for act in activities:
            for trial in range(1, trials + 1):
                dur = SYNTHETIC_DURATIONS_S[act] * duration_scale * rng.uniform(0.9, 1.1)
                dt = rng.uniform(0.7, 1.3, size=int(dur * mean_rate_hz) + 1) / mean_rate_hz
                t = np.concatenate([[0.0], np.cumsum(dt)[:-1]])
                acc, gyro, labels = _synthetic_signal(act, t, rng, amp, cadence)
                acc = acc + tilt * _G
                norm_g = np.linalg.norm(acc, axis=1, keepdims=True).clip(1e-6)
                pitch = np.degrees(np.arcsin(np.clip(acc[:, 2:3] / norm_g, -1, 1)))[:, 0]
                roll = np.degrees(np.arctan2(acc[:, 0], acc[:, 1]))
                t0_ns = 10**12 + int(rng.integers(0, 10**9))
                ts = t0_ns + np.round(t * 1e9).astype(np.int64)
                frame = pd.DataFrame(
                    {
                        "timestamp": ts,
                        "rel_time": (ts - ts[0]) * 1e-9,
                        "acc_x": acc[:, 0],
                        "acc_y": acc[:, 1],
                        "acc_z": acc[:, 2],
                        "gyro_x": gyro[:, 0],
                        "gyro_y": gyro[:, 1],
                        "gyro_z": gyro[:, 2],
                        "azimuth": rng.uniform(0, 360) + np.cumsum(gyro[:, 1] * dt) * 57.3 % 360,
                        "pitch": pitch,
                        "roll": roll,
                        "label": labels,
                    }
                )
                out.append((subject, act, trial, frame[list(COLUMNS)]))
    return out


def _synthetic_signal(act: str, t: np.ndarray, rng: np.random.Generator, amp: float, cadence: float):
    n = t.size
    acc = np.tile(_UP, (n, 1)) + rng.normal(0, 0.15, (n, 3))
    gyro = rng.normal(0, 0.05, (n, 3))
    labels = np.full(n, act, dtype=object)
    if act in _PERIODIC:
        f, a = _PERIODIC[act]
        f *= cadence
        ph = rng.uniform(0, 2 * np.pi)
        acc[:, 1] += amp * a * np.sin(2 * np.pi * f * t + ph)
        acc[:, 0] += 0.4 * amp * a * np.sin(np.pi * f * t + ph)
        acc[:, 2] += (0.8 if act in ("STU", "STN") else 0.3) * amp * a * np.sin(2 * np.pi * f * t + ph + 1.0)
        gyro[:, 2] += amp * a * 0.25 * np.sin(np.pi * f * t + ph)
        if act in ("STU", "STN"):
            acc[:, 2] += (1.0 if act == "STU" else -1.0) * 1.2
    elif act in ("SIT", "LYI"):
        base = _SEATED if act == "SIT" else _LYING["LYI"]
        acc = np.tile(base, (n, 1)) + rng.normal(0, 0.1, (n, 3))
    elif act in ("SCH", "CHU", "CSI", "CSO"):
        # posture change centred in the trial, over 1.5 s (car steps: with a side sway)
        mid = t[-1] * rng.uniform(0.4, 0.6)
        s = 1.0 / (1.0 + np.exp(-(t - mid) / (0.25 / cadence)))
        frm, to = (_UP, _SEATED) if act in ("SCH", "CSI") else (_SEATED, _UP)
        acc = frm + s[:, None] * (to - frm) + rng.normal(0, 0.15, (n, 3))
        bump = np.exp(-((t - mid) ** 2) / (2 * 0.3**2))
        acc[:, 1] += amp * 3.0 * bump
        gyro[:, 0] += amp * 1.5 * bump * (1 if act in ("SCH", "CSI") else -1)
        if act in ("CSI", "CSO"):
            acc[:, 0] += amp * 2.5 * np.exp(-((t - mid + 0.6) ** 2) / (2 * 0.25**2))
            gyro[:, 1] += amp * 2.0 * np.exp(-((t - mid + 0.6) ** 2) / (2 * 0.25**2))
    elif act in FALLS:
        t_fall = t[-1] * rng.uniform(0.25, 0.45)
        t_imp = t_fall + 0.45 / cadence
        lying = _LYING[act]
        before, during, after = t < t_fall, (t >= t_fall) & (t < t_imp + 0.5), t >= t_imp + 0.5
        s = np.clip((t - t_fall) / (t_imp - t_fall), 0, 1)[:, None]
        acc = (1 - s) * _UP * np.where((t >= t_fall) & (t < t_imp), 0.25, 1.0)[:, None] + s * lying
        acc = acc + rng.normal(0, 0.15, (n, 3))
        spike = np.exp(-((t - t_imp) ** 2) / (2 * 0.04**2))
        acc += amp * rng.uniform(2.5, 3.5) * _G * spike[:, None] * np.array([0.3, 0.8, 0.5])
        if act == "FKL":  # knees first, then the torso
            acc += amp * 1.5 * _G * np.exp(-((t - t_imp + 0.25) ** 2) / (2 * 0.04**2))[:, None] * np.array([0.1, 1.0, 0.2])
        burst = np.exp(-((t - (t_fall + t_imp) / 2) ** 2) / (2 * 0.2**2))
        gyro[:, _FALL_AXIS[act]] += amp * rng.uniform(3.0, 5.0) * burst * (-1 if act == "BSC" else 1)
        labels[before] = "STD"
        labels[during] = act
        labels[after] = "LYI"
    return acc, gyro, labels.astype(str)


def write_synthetic_mobiact(root: str | Path, frames: Sequence[tuple[int, str, int, pd.DataFrame]]) -> Path:
    """Write synthetic frames in MobiAct's layout ``<root>/Annotated Data/<ACT>/<ACT>_<s>_<t>_annotated.csv``.

    Returns the ``Annotated Data`` folder.
    """
    base = Path(root) / ANNOTATED_DIR
    for subject, act, trial, frame in frames:
        folder = base / act
        folder.mkdir(parents=True, exist_ok=True)
        frame.to_csv(folder / f"{act}_{subject}_{trial}_annotated.csv", index=False)
    return base
