"""Wearable-sensor recordings and sliding windows (FLASH-RL IV-A; CEFL Section IV).

A :class:`Recording` is one trial of one subject doing one activity: a ``(T, 6)`` float32
array of 3-axis acceleration (m/s^2) and 3-axis angular velocity (rad/s) sampled at a fixed
rate. Windows of ``W`` samples are cut every ``S`` samples: ``floor((T - W) / S) + 1`` windows
starting at ``0, S, 2S, ...``; a recording shorter than ``W`` gives no window and is counted as
*dropped*. CEFL's per-activity slide interval ``I_type`` is :func:`activity_stride`.

Knows nothing of federated learning.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

log = logging.getLogger("fedselect.data.imu")

#: channel order of :attr:`Recording.data`; units m/s^2 for acc_*, rad/s for gyro_*
CHANNELS = ("acc_x", "acc_y", "acc_z", "gyro_x", "gyro_y", "gyro_z")


@dataclass
class Recording:
    """One trial of one subject performing one activity.

    Attributes:
        subject: subject (volunteer) id.
        activity: activity code, e.g. ``"FOL"`` (MobiAct) or ``"PEN"`` (seglearn watch).
        trial: trial number (1-based).
        rate_hz: sampling rate in Hz (samples are equally spaced, ``1 / rate_hz`` seconds apart).
        data: float32 array ``(T, 6)``: acc_x, acc_y, acc_z in m/s^2, gyro_x, gyro_y, gyro_z in rad/s.
        labels: optional per-sample activity codes, shape ``(T,)`` (MobiAct's ``label`` column).
        meta: free-form extras (source file, side, ...).
    """

    subject: int
    activity: str
    trial: int
    rate_hz: float
    data: np.ndarray
    labels: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.data = np.ascontiguousarray(self.data, dtype=np.float32)
        if self.data.ndim != 2 or self.data.shape[1] != len(CHANNELS):
            raise ValueError(
                f"recording {self.activity}_{self.subject}_{self.trial}: data must have shape (T, 6) "
                f"({', '.join(CHANNELS)}), got {self.data.shape}"
            )
        if not self.rate_hz > 0:
            raise ValueError(f"recording {self.activity}_{self.subject}_{self.trial}: rate_hz must be > 0, got {self.rate_hz}")
        if self.labels is not None:
            self.labels = np.asarray(self.labels).astype(str)
            if self.labels.shape != (self.data.shape[0],):
                raise ValueError(
                    f"recording {self.activity}_{self.subject}_{self.trial}: {self.labels.shape[0]} labels "
                    f"for {self.data.shape[0]} samples"
                )

    def __len__(self) -> int:
        return int(self.data.shape[0])

    @property
    def duration_s(self) -> float:
        """Recorded duration in seconds, ``T / rate_hz``."""
        return len(self) / self.rate_hz


def num_windows(length: int, window: int, stride: int) -> int:
    """Number of windows of ``window`` samples every ``stride`` samples in ``length`` samples:
    ``floor((length - window) / stride) + 1``, or 0 when ``length < window``.

    Raises:
        ValueError: window or stride < 1, or a negative length.
    """
    _check_ws(window, stride)
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    return 0 if length < window else (length - window) // stride + 1


def window_starts(length: int, window: int, stride: int) -> np.ndarray:
    """Start indices ``0, stride, 2*stride, ...`` of the :func:`num_windows` windows (int64).

    Example: ``window_starts(10, 4, 2) -> [0, 2, 4, 6]``; ``window_starts(3, 4, 2) -> []``.
    """
    return np.arange(num_windows(length, window, stride), dtype=np.int64) * stride


def _check_ws(window: int, stride: int) -> None:
    if int(window) != window or window < 1:
        raise ValueError(f"window must be an integer >= 1 (samples), got {window}")
    if int(stride) != stride or stride < 1:
        raise ValueError(f"stride must be an integer >= 1 (samples), got {stride}")


def activity_stride(duration_s: float, i0: int = 40, t0_s: float = 10.0) -> int:
    """CEFL's per-activity slide interval (its preprocessing paragraph): ``I_type = max(1, round(I_0 * t_type / t_0))``.

    Args:
        duration_s: ``t_type``, the activity's recorded duration in seconds.
        i0: reference interval ``I_0`` in samples (paper: 40).
        t0_s: reference duration ``t_0`` in seconds (paper: 10, the length of a fall trial).

    Raises:
        ValueError: negative duration, ``i0 < 1`` or ``t0_s <= 0``.
    """
    if duration_s < 0:
        raise ValueError(f"activity duration must be >= 0 s, got {duration_s}")
    if i0 < 1 or not t0_s > 0:
        raise ValueError(f"need i0 >= 1 and t0_s > 0, got i0={i0}, t0_s={t0_s}")
    return max(1, int(round(i0 * duration_s / t0_s)))


def activity_durations(recordings: Sequence[Recording]) -> dict[str, float]:
    """``t_type`` per activity code: the mean recorded duration (s) over that activity's
    recordings. (CEFL does not say mean or median; MobiAct trials of one activity have nearly
    equal lengths, so the choice hardly matters.)"""
    acc: dict[str, list[float]] = {}
    for r in recordings:
        acc.setdefault(r.activity, []).append(r.duration_s)
    return {a: float(np.mean(v)) for a, v in acc.items()}


@dataclass
class Windows:
    """Windows cut from a list of recordings.

    Attributes:
        x: float32 ``(n, W, 6)`` windows.
        recording: int64 ``(n,)`` index of each window's recording in the input list.
        start: int64 ``(n,)`` first sample of each window in its recording.
        dropped: indices of recordings shorter than ``W`` (no window).
    """

    x: np.ndarray
    recording: np.ndarray
    start: np.ndarray
    dropped: list[int]


def sliding_windows(
    recordings: Sequence[Recording],
    window: int,
    stride: int | Callable[[Recording], int],
    name: str = "imu",
) -> Windows:
    """Cut every recording into windows of ``window`` samples.

    Args:
        recordings: the recordings (each ``(T, 6)``).
        window: W, samples per window.
        stride: S in samples, or a function ``recording -> S`` (e.g. CEFL's ``I_type``).
        name: data set name used in the dropped-recordings log message.

    Returns:
        :class:`Windows`; recordings with ``T < W`` give none and are listed in ``dropped``
        (also logged at WARNING level with their count).

    Raises:
        ValueError: window or a stride < 1.
    """
    _check_ws(window, 1)
    xs, rec, starts, dropped = [], [], [], []
    for i, r in enumerate(recordings):
        s = stride(r) if callable(stride) else stride
        st = window_starts(len(r), window, s)
        if st.size == 0:
            dropped.append(i)
            continue
        idx = st[:, None] + np.arange(window)[None, :]
        xs.append(r.data[idx])
        rec.append(np.full(st.size, i, dtype=np.int64))
        starts.append(st)
    if dropped:
        log.warning(
            "%s: %d of %d recordings are shorter than the window (%d samples) and were dropped",
            name,
            len(dropped),
            len(recordings),
            window,
        )
    if xs:
        return Windows(np.concatenate(xs).astype(np.float32), np.concatenate(rec), np.concatenate(starts), dropped)
    return Windows(np.zeros((0, window, len(CHANNELS)), np.float32), np.zeros(0, np.int64), np.zeros(0, np.int64), dropped)


def majority_label(labels: np.ndarray, start: int, window: int) -> str:
    """Most frequent per-sample code in ``labels[start:start + window]`` (ties: first in
    sorted order)."""
    vals, counts = np.unique(labels[start : start + window], return_counts=True)
    return str(vals[int(np.argmax(counts))])


def resample_uniform(t_s: np.ndarray, values: np.ndarray, rate_hz: float, labels: np.ndarray | None = None):
    """Resample unevenly timed samples onto the grid ``0, 1/rate, 2/rate, ...`` (seconds from
    the first sample) up to the last timestamp.

    Channels are linearly interpolated (``numpy.interp``); per-sample labels take the value of
    the last original sample at or before each grid point (zero-order hold). Samples are
    sorted by time and repeated timestamps keep their first occurrence.

    Args:
        t_s: ``(T,)`` sample times in seconds (any origin).
        values: ``(T, C)`` values.
        rate_hz: target rate in Hz (> 0).
        labels: optional ``(T,)`` per-sample labels.

    Returns:
        ``(values (T', C) float32, labels (T',) or None)`` with
        ``T' = floor((t_last - t_first) * rate_hz) + 1`` (0 when there are no samples).

    Raises:
        ValueError: rate <= 0, non-finite times, or mismatched lengths.
    """
    if not rate_hz > 0:
        raise ValueError(f"rate_hz must be > 0, got {rate_hz}")
    t = np.asarray(t_s, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or v.shape[0] != t.shape[0]:
        raise ValueError(f"resample: {t.shape[0]} times for values of shape {v.shape}")
    if not np.all(np.isfinite(t)):
        raise ValueError("resample: timestamps must be finite")
    if t.size == 0:
        return np.zeros((0, v.shape[1]), np.float32), (None if labels is None else np.zeros(0, str))
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    keep = np.concatenate([[True], np.diff(t) > 0])
    t, v = t[keep], v[keep]
    lab = None if labels is None else np.asarray(labels)[order][keep]
    t = t - t[0]
    n = int(math.floor(t[-1] * rate_hz + 1e-9)) + 1
    grid = np.arange(n, dtype=np.float64) / rate_hz
    out = np.stack([np.interp(grid, t, v[:, c]) for c in range(v.shape[1])], axis=1).astype(np.float32)
    if lab is not None:
        pos = np.clip(np.searchsorted(t, grid + 1e-12, side="right") - 1, 0, len(t) - 1)
        lab = lab[pos]
    return out, lab
