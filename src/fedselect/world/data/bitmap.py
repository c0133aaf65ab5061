"""CEFL's bitmap encoding of accelerometer + gyroscope windows (CEFL Section IV,
after He et al.'s FD-CNN preprocessing).

A window of ``W`` samples (CEFL: 200) of (acc_x, acc_y, acc_z, gyro_x, gyro_y, gyro_z) gives
``2W`` (x, y, z) triples: the ``W`` acceleration triples then the ``W`` angular-velocity
triples. Triple ``p`` (0-based) becomes pixel ``(row, col) = (p // side, p % side)`` of a
``side x side`` RGB image (``side = sqrt(2W)``, 20 for W = 200), with x -> R, y -> G, z -> B:

- acceleration (m/s^2): ``pixel = clip(int((a + 20) * 6), 0, 255)``;
- angular velocity: min-max scaled over the window to 0..250:
  ``pixel = int(250 * (g - g_min) / (g_max - g_min))``. CEFL's text names the encoding but not
  these formulas; whether the gyro min/max is per axis is fedselect's choice: by default (``gyro_scaling="joint"``) one min and
  one max are taken over all three gyro axes of the window, which keeps the axes' relative
  magnitudes; ``"per_axis"`` scales each axis on its own. A constant window (max == min)
  gives pixels 0.

``int()`` truncates; for the values that survive the clip this is ``floor``.
"""

from __future__ import annotations

import math

import numpy as np

#: the encoding's constants (module docstring)
ACC_OFFSET = 20.0  # m/s^2
ACC_SCALE = 6.0
GYRO_MAX_PIXEL = 250.0
GYRO_SCALINGS = ("joint", "per_axis")


def bitmap_side(window: int) -> int:
    """Image side for windows of ``window`` samples: ``sqrt(2 * window)``.

    Raises:
        ValueError: ``2 * window`` is not a perfect square (e.g. W = 200 -> 20 is fine).
    """
    side = math.isqrt(2 * int(window))
    if window < 1 or side * side != 2 * window:
        raise ValueError(f"bitmap window must make 2*W a perfect square (W = 200 -> 20x20), got W = {window}")
    return side


def acc_pixels(acc_ms2: np.ndarray) -> np.ndarray:
    """Acceleration pixel ``clip(int((a + 20) * 6), 0, 255)``; ``acc_ms2`` in m/s^2, any
    shape; returns uint8 of the same shape."""
    return np.clip(np.floor((np.asarray(acc_ms2, dtype=np.float64) + ACC_OFFSET) * ACC_SCALE), 0, 255).astype(np.uint8)


def gyro_pixels(gyro: np.ndarray, scaling: str = "joint") -> np.ndarray:
    """Min-max scale angular velocities of windows to 0..250 (module docstring).

    Args:
        gyro: ``(n, W, 3)`` angular velocities (rad/s; the unit cancels out).
        scaling: ``"joint"`` (one min/max over the window's three axes) or ``"per_axis"``.

    Returns:
        uint8 ``(n, W, 3)``.

    Raises:
        ValueError: unknown scaling or a wrong shape.
    """
    g = np.asarray(gyro, dtype=np.float64)
    if g.ndim != 3 or g.shape[2] != 3:
        raise ValueError(f"gyro windows must have shape (n, W, 3), got {g.shape}")
    if scaling == "joint":
        axes = (1, 2)
    elif scaling == "per_axis":
        axes = (1,)
    else:
        raise ValueError(f"gyro_scaling must be one of {GYRO_SCALINGS}, got {scaling!r}")
    lo = g.min(axis=axes, keepdims=True)
    span = g.max(axis=axes, keepdims=True) - lo
    safe = np.where(span > 0, span, 1.0)
    scaled = np.where(span > 0, (g - lo) / safe, 0.0)
    return np.clip(np.floor(GYRO_MAX_PIXEL * scaled), 0, GYRO_MAX_PIXEL).astype(np.uint8)


def encode_bitmaps(windows: np.ndarray, gyro_scaling: str = "joint") -> np.ndarray:
    """Encode windows as RGB bitmaps (module docstring).

    Args:
        windows: ``(n, W, 6)`` float windows, channels acc_x, acc_y, acc_z (m/s^2),
            gyro_x, gyro_y, gyro_z (rad/s); ``2W`` must be a perfect square (W = 200).
        gyro_scaling: see the module docstring.

    Returns:
        uint8 ``(n, 3, side, side)`` images (side = 20 for W = 200), channel 0 = x axis (R),
        1 = y (G), 2 = z (B); pixel ``p = row * side + col`` holds acceleration sample ``p`` for
        ``p < W`` and gyro sample ``p - W`` otherwise.

    Raises:
        ValueError: wrong shape, a window length without a square image, unknown scaling.
    """
    w = np.asarray(windows)
    if w.ndim != 3 or w.shape[2] != 6:
        raise ValueError(f"windows must have shape (n, W, 6), got {w.shape}")
    n, W, _ = w.shape
    side = bitmap_side(W)
    triples = np.concatenate([acc_pixels(w[:, :, :3]), gyro_pixels(w[:, :, 3:], gyro_scaling)], axis=1)  # (n, 2W, 3)
    return np.ascontiguousarray(triples.reshape(n, side, side, 3).transpose(0, 3, 1, 2))
