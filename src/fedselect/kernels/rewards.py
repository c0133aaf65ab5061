"""FLASH-RL reward ingredients as pure functions (FLASH-RL Section III-B).

* :func:`normalised_divergence` — normalised model divergence, FR-eq 7, with a zero guard.
* :func:`signed_mean_divergence` — the FLASH-RL authors' code's form of it: |mean of the signed ratios|.
* :func:`utility` — the two-branch utility, FR-eq 8.
* :func:`reputation_utility_latency` — reputation-based utility with latency, FR-eq 10 (default).
* :func:`reputation_utility` — reputation-based utility without latency, FR-eq 9.
* :func:`reputation_accuracy` — accuracy-based reputation, FR-eq 6.
* :func:`update_reputations` — applies one of the three to the selected clients only.
* :func:`normalise_latency` — min-max normalised latency used in FR-eq 10.
* :func:`favor_reward` — FAVOR's scalar reward 64^(acc - target) - 1 (Wang et al., INFOCOM 2020).

Nothing here touches a random number generator or a model: inputs are arrays and floats.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Coordinates of the global model with ``|w[j]| < DIVERGENCE_ZERO_GUARD`` are left out of FR-eq 7.
DIVERGENCE_ZERO_GUARD = 1e-8

#: Names accepted by :func:`update_reputations` (config key ``reward``).
REWARD_KINDS = ("utility_latency", "utility", "reputation_accuracy")


def normalised_divergence(local: np.ndarray, global_: np.ndarray, guard: float = DIVERGENCE_ZERO_GUARD) -> float:
    """Normalised model divergence d(w_k, w), FR-eq 7.

    ``d = (1/|J|) * sum_{j in J} |(w_k[j] - w[j]) / w[j]|`` with
    ``J = {j : |w[j]| >= guard}``. The paper divides by every ``w[j]``; a coordinate of the
    global model that is (numerically) zero would make the sum infinite, so such coordinates
    are excluded and the mean is taken over the remaining ones (fedselect's guard: the paper divides by every w[j]).

    Args:
        local: client k's local weights ``w_k``, any shape (flattened here).
        global_: the global weights ``w`` AFTER this round's aggregation, same size.
        guard: the zero threshold (default 1e-8).

    Returns:
        The divergence, a float >= 0 (dimensionless).

    Raises:
        ValueError: the sizes differ, the vectors are empty, a value is not finite, or every
            coordinate of ``global_`` is below the guard (the divergence is then undefined).
    """
    return float(np.mean(np.abs(_relative_changes(local, global_, guard, "normalised_divergence"))))


def signed_mean_divergence(local: np.ndarray, global_: np.ndarray, guard: float = DIVERGENCE_ZERO_GUARD) -> float:
    """The FLASH-RL authors' code's divergence (``serverFL/Server_FLASHRL.py``): the absolute
    value of the mean of the *signed* relative changes, ``|(1/|J|) sum_{j in J} (w_k[j] - w[j]) / w[j]|``,
    where FR-eq 7 averages their absolute values. Changes of opposite sign cancel, so it is never
    above :func:`normalised_divergence`. Same guard, arguments and errors as that function
    (the code divides by every ``w[j]`` and by the number of parameters)."""
    return float(abs(np.mean(_relative_changes(local, global_, guard, "signed_mean_divergence"))))


def _relative_changes(local: np.ndarray, global_: np.ndarray, guard: float, who: str) -> np.ndarray:
    """``(w_k[j] - w[j]) / w[j]`` over ``J = {j : |w[j]| >= guard}``, float64; ValueError as
    :func:`normalised_divergence` documents (``who`` names the caller)."""
    wk = np.asarray(local, dtype=np.float64).reshape(-1)
    w = np.asarray(global_, dtype=np.float64).reshape(-1)
    if wk.shape != w.shape:
        raise ValueError(f"{who}: local has {wk.size} weights, global has {w.size}")
    if w.size == 0:
        raise ValueError(f"{who}: empty weight vectors")
    if not (np.all(np.isfinite(wk)) and np.all(np.isfinite(w))):
        raise ValueError(f"{who}: weights must be finite (got NaN or inf)")
    keep = np.abs(w) >= guard
    if not np.any(keep):
        raise ValueError(f"{who}: every global weight has |w| < {guard}; divergence undefined")
    return (wk[keep] - w[keep]) / w[keep]


def utility(divergence: float | np.ndarray, improved: bool) -> float | np.ndarray:
    """Utility zeta of a client's update, FR-eq 8.

    ``zeta = exp(-|d|)`` if the global performance improved this round (``P_t > P_{t-1}``),
    else ``1 - exp(-|d|)``. Values lie in [0, 1].

    Args:
        divergence: d from :func:`normalised_divergence`, a float or an array of them.
        improved: whether ``P_t > P_{t-1}`` (strictly; equal counts as not improved).

    Returns:
        zeta, same shape as ``divergence``.
    """
    d = np.abs(np.asarray(divergence, dtype=np.float64))
    z = np.exp(-d) if improved else 1.0 - np.exp(-d)
    return float(z) if z.ndim == 0 else z


def reputation_utility_latency(psi_prev, zeta, lnorm, lam: float = 0.6, alpha1: float = 1.0, alpha2: float = 1.0):
    """Reputation-based utility with latency, FR-eq 10.

    ``Psi_t = lam * (alpha1 * zeta_t - alpha2 * lnorm_t) + (1 - lam) * Psi_{t-1}``.

    Args:
        psi_prev: previous reputation(s) Psi_{t-1}.
        zeta: utility from :func:`utility`.
        lnorm: min-max normalised latency in [0, 1] (:func:`normalise_latency`).
        lam, alpha1, alpha2: weights (FR Table IV: 0.6, 1, 1).

    Returns:
        Psi_t, broadcast shape of the inputs.
    """
    return lam * (alpha1 * np.asarray(zeta, float) - alpha2 * np.asarray(lnorm, float)) + (1.0 - lam) * np.asarray(
        psi_prev, float
    )


def reputation_utility(psi_prev, zeta, lam: float = 0.6):
    """Reputation-based utility without latency, FR-eq 9: ``Psi_t = lam * zeta_t + (1 - lam) * Psi_{t-1}``."""
    return lam * np.asarray(zeta, float) + (1.0 - lam) * np.asarray(psi_prev, float)


def reputation_accuracy(psi_prev, local_accuracy, prev_global_accuracy: float, lam: float = 0.6):
    """Accuracy-based reputation, FR-eq 6: ``Psi_t = lam * (A_t^k - A_{t-1}) + (1 - lam) * Psi_{t-1}``.

    ``A_t^k`` is client k's local-model accuracy this round (on the evaluation set),
    ``A_{t-1}`` the global model's accuracy of the previous round; accuracies are fractions.
    """
    return lam * (np.asarray(local_accuracy, float) - float(prev_global_accuracy)) + (1.0 - lam) * np.asarray(psi_prev, float)


def update_reputations(
    psi: np.ndarray,
    selected: Sequence[int],
    kind: str = "utility_latency",
    *,
    zeta: Sequence[float] | None = None,
    lnorm: Sequence[float] | None = None,
    local_accuracy: Sequence[float] | None = None,
    prev_global_accuracy: float | None = None,
    lam: float = 0.6,
    alpha1: float = 1.0,
    alpha2: float = 1.0,
) -> np.ndarray:
    """One round of reputation updates: only the clients selected in round t change (FR-eq 6, 9, 10).

    Args:
        psi: reputations of all N clients, shape ``(N,)`` (Psi_0 = 1/N).
        selected: the U selected client ids, in the order of the per-client inputs.
        kind: ``utility_latency`` (FR-eq 10), ``utility`` (FR-eq 9) or
            ``reputation_accuracy`` (FR-eq 6).
        zeta: per-selected utilities (needed by the two utility kinds), length U.
        lnorm: per-selected normalised latencies (``utility_latency``), length U.
        local_accuracy, prev_global_accuracy: for ``reputation_accuracy``.
        lam, alpha1, alpha2: FR-eq 10 weights.

    Returns:
        A new array ``(N,)``; ``psi`` is not modified. The rewards of FR-eq 14 are
        ``result[selected]``.

    Raises:
        ValueError: unknown ``kind``, missing or mis-sized inputs, duplicate or out-of-range ids.
    """
    out = np.array(psi, dtype=np.float64, copy=True)
    sel = np.asarray(selected, dtype=np.int64)
    if sel.ndim != 1 or sel.size == 0:
        raise ValueError("update_reputations: 'selected' must be a non-empty list of client ids")
    if np.unique(sel).size != sel.size or sel.min() < 0 or sel.max() >= out.size:
        raise ValueError(f"update_reputations: selected ids must be distinct and in [0, {out.size}), got {sel.tolist()}")

    def need(name, val):
        if val is None:
            raise ValueError(f"update_reputations: reward kind {kind!r} needs {name!r}")
        arr = np.asarray(val, dtype=np.float64).reshape(-1)
        if arr.size != sel.size:
            raise ValueError(f"update_reputations: {name!r} has {arr.size} values for {sel.size} selected clients")
        return arr

    if kind == "utility_latency":
        out[sel] = reputation_utility_latency(out[sel], need("zeta", zeta), need("lnorm", lnorm), lam, alpha1, alpha2)
    elif kind == "utility":
        out[sel] = reputation_utility(out[sel], need("zeta", zeta), lam)
    elif kind == "reputation_accuracy":
        if prev_global_accuracy is None:
            raise ValueError("update_reputations: reward kind 'reputation_accuracy' needs 'prev_global_accuracy'")
        out[sel] = reputation_accuracy(out[sel], need("local_accuracy", local_accuracy), prev_global_accuracy, lam)
    else:
        raise ValueError(f"update_reputations: unknown reward kind {kind!r}; allowed: {list(REWARD_KINDS)}")
    return out


#: relative tolerance under which a latency counts as equal to the bounds of an empty range
EMPTY_RANGE_RTOL = 1e-9


def normalise_latency(latency, l_min: float, l_max: float):
    """Min-max normalised latency for FR-eq 10: ``clip((l - L_min) / (L_max - L_min), 0, 1)``.

    **Empty range** (``L_max == L_min``: every client alike, one device class and one network
    without spread): the limit of the clipped formula as the range shrinks to 0, i.e. 0 for a
    latency at or below the bounds (no client is slower than another: FR-eq 10's latency term
    charges nobody) and 1 above them (a latency beyond the slowest the fleet allows, e.g. a
    measured one). "At" allows float rounding (:data:`EMPTY_RANGE_RTOL`): the cost model and the
    bounds compute the same latency along different float paths.

    Args:
        latency: seconds, float or array.
        l_min, l_max: the federation's fastest / slowest possible client latency in seconds
            (fixed once per federation).

    Raises:
        ValueError: ``l_max < l_min`` or a bound is not finite.
    """
    if not (np.isfinite(l_min) and np.isfinite(l_max)) or l_max < l_min:
        raise ValueError(f"normalise_latency: need finite L_min <= L_max, got L_min={l_min}, L_max={l_max}")
    lat = np.asarray(latency, dtype=np.float64)
    if l_max == l_min:
        z = np.where(lat > l_max * (1.0 + EMPTY_RANGE_RTOL), 1.0, 0.0)
    else:
        z = np.clip((lat - l_min) / (l_max - l_min), 0.0, 1.0)
    return float(z) if z.ndim == 0 else z


def favor_reward(accuracy: float, target: float, base: float = 64.0) -> float:
    """FAVOR's reward (Wang et al. 2020): ``base ** (accuracy - target) - 1``.

    Accuracy and target are fractions in [0, 1]; the reward is in (-1, base - 1], 0 at the target.
    """
    return float(base ** (float(accuracy) - float(target)) - 1.0)
