"""Pure kernels of Oort (Lai, Zhu, Madhyastha, Chowdhury, "Oort: Efficient Federated Learning via
Guided Participant Selection", OSDI 2021; the training selector of FedScale).

Oort scores a client ``k`` that took part in training by (paper Eq. (1), (2) and Algorithm 1)::

    Util(k) = [ U_k + sqrt(0.1 ln(t) / L_k) ] * (T / t_k)^{1[T < t_k] * alpha}

* ``U_k = |B_k| sqrt( (1/|B_k|) sum_{i in B_k} Loss(i)^2 )`` — the statistical utility (Eq. (1)):
  ``|B_k|`` is the client's number of training samples and the mean of the squared per-sample
  losses is taken over every loss seen in its last local training (:func:`statistical_utility`);
  before scoring, utilities are clipped at a high quantile and min-max normalised
  (:func:`normalise_utilities`);
* ``sqrt(0.1 ln(t) / L_k)`` — the temporal-uncertainty (staleness) bonus of Algorithm 1: ``t``
  the current round, ``L_k`` the last round ``k`` took part in (:func:`staleness_bonus`);
* ``(T / t_k)^alpha`` when ``t_k > T`` — the system-utility speed penalty (Eq. (2)): ``t_k`` the
  client's last round duration (s), ``T`` the developer-preferred round duration (s), ``alpha``
  the penalty exponent (:func:`speed_penalty`). ``T`` is a percentile of the known durations
  (:func:`preferred_duration`) that the pacer moves every W rounds (:func:`pacer_update`).

Clients that have trained more than ``blacklist_rounds`` times may be barred from exploitation
(:func:`blacklist`; off by default, as in the authors' artifact).

Everything here is a pure function of arrays and floats; the selector
(:mod:`fedselect.selectors.oort`) keeps the state and draws with
:func:`fedselect.kernels.sampling.weighted_sample` and its own generator.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

#: Oort's scaling of the temporal-uncertainty term (Algorithm 1: sqrt(0.1 log(R) / L(i)))
STALENESS_SCALE = 0.1
#: the lower end of the min-max range is ``min * MIN_SHRINK`` so the smallest utility scores > 0
MIN_SHRINK = 0.999
#: smallest range of the min-max normalisation (guards identical utilities)
MIN_RANGE = 1e-4


def statistical_utility(sum_sq_loss: float, num_losses: int, num_samples: int) -> float:
    """Oort's statistical utility U_k = |B_k| * sqrt(sum_sq_loss / num_losses) (Oort Eq. (1)).

    Args:
        sum_sq_loss: sum of the squared per-sample losses over every mini-batch of the client's
            local training (cross-entropy in nats, squared).
        num_losses: how many per-sample losses were summed (samples x epochs).
        num_samples: |B_k|, the client's number of training samples.

    Returns:
        U_k >= 0 (0 when no loss was recorded).

    Raises:
        ValueError: a negative or non-finite sum, a negative count or sample number.

    Example: per-sample losses [1, 1, 1, 3] seen in two mini-batches of 2 by a client with 4
    samples: U = 4 * sqrt((1 + 1 + 1 + 9) / 4) = 4 * sqrt(3) = 6.93.
    """
    if num_losses < 0 or num_samples < 0:
        raise ValueError(f"num_losses and num_samples must be >= 0, got {num_losses} and {num_samples}")
    if not math.isfinite(sum_sq_loss) or sum_sq_loss < 0:
        raise ValueError(f"sum_sq_loss must be finite and >= 0, got {sum_sq_loss}")
    if num_losses == 0:
        return 0.0
    return float(num_samples) * math.sqrt(sum_sq_loss / num_losses)


def speed_penalty(duration: float | np.ndarray, preferred: float, alpha: float) -> float | np.ndarray:
    """Oort's system-utility factor (Oort Eq. (2)): ``(T / t_k)^alpha`` if ``t_k > T`` else 1.

    Args:
        duration: t_k, the client's round duration in seconds (scalar or array).
        preferred: T, the preferred round duration in seconds (``inf``: no penalty).
        alpha: the penalty exponent (>= 0; Oort's default 2).

    Returns:
        Factors in (0, 1], the shape of ``duration``.

    Example: t_k = 2T, alpha = 2 gives (1/2)^2 = 1/4.
    """
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    d = np.asarray(duration, dtype=np.float64)
    if math.isinf(preferred):
        out = np.ones_like(d)
    else:
        slow = d > preferred
        out = np.where(slow, (float(preferred) / np.maximum(d, 1e-12)) ** float(alpha), 1.0)
    return float(out) if np.ndim(duration) == 0 else out


def staleness_bonus(t: int, last_round: int | np.ndarray) -> float | np.ndarray:
    """Oort's temporal-uncertainty term sqrt(0.1 ln(t) / L_k) (Algorithm 1, line "Util(i) +=").

    Args:
        t: the current round (>= 1).
        last_round: L_k, the last round (>= 1) client k took part in (scalar or array).

    Returns:
        Bonus >= 0 (0 in round 1); larger for clients not seen for a long time.

    Raises:
        ValueError: ``t < 1`` or a ``last_round < 1``.
    """
    if t < 1:
        raise ValueError(f"round t must be >= 1, got {t}")
    last = np.asarray(last_round, dtype=np.float64)
    if np.any(last < 1):
        raise ValueError(f"last_round must be >= 1, got {last_round}")
    out = np.sqrt(STALENESS_SCALE * math.log(t) / last)
    return float(out) if np.ndim(last_round) == 0 else out


def preferred_duration(durations: Sequence[float] | np.ndarray, percentile: float) -> float:
    """The preferred round duration T: the ``percentile``-th percent of the sorted durations
    (Oort Sec. 4.3; FedScale's ``round_threshold``), i.e. ``sorted(d)[min(floor(n * p / 100), n - 1)]``.

    Args:
        durations: known durations of the clients, seconds (non-empty).
        percentile: in [0, 100]; 100 (or more) means no preference (``inf``).

    Returns:
        T in seconds (``inf`` when ``percentile >= 100``).
    """
    d = np.sort(np.asarray(durations, dtype=np.float64))
    if d.size == 0:
        raise ValueError("preferred_duration needs at least one duration")
    if percentile >= 100:
        return math.inf
    if percentile < 0:
        raise ValueError(f"percentile must be in [0, 100], got {percentile}")
    return float(d[min(int(d.size * percentile / 100.0), d.size - 1)])


def pacer_update(history: Sequence[float], threshold: float, step: int, delta: float, t: int) -> tuple[float, str]:
    """Oort's pacer (Sec. 4.3; the rule of the authors' artifact, ``_training_selector.pacer``):
    every ``step`` rounds (from round ``2 * step``) compare the exploitation utility summed over
    the last ``step`` rounds with the ``step`` rounds before:

    * within 10 % (``|cur - prev| <= 0.1 * prev``): utility has flattened, relax the preferred
      duration (``threshold += delta``, at most 100);
    * changed by 5x or more (``|cur - prev| >= 5 * prev``): tighten it (``threshold -= delta``, at
      least ``delta``);
    * otherwise unchanged (in particular a window that rose by more than 10 % and less than 5x,
      or fell by more than 10 %).

    ``threshold`` is a percentile, so T (s) moves with it: :func:`preferred_duration` turns it
    into seconds. ``delta = 0`` keeps T fixed (the artifact's "Oort w/o Pacer").

    Args:
        history: exploitation utility of rounds 1..t (index i = round i + 1).
        threshold: the current percentile of :func:`preferred_duration`.
        step: W, the pacer window in rounds (>= 1). delta: the percentile step.
        t: the round just finished.

    Returns:
        (new threshold, ``"relax"`` / ``"tighten"`` / ``""``).
    """
    if step < 1:
        raise ValueError(f"pacer step must be >= 1, got {step}")
    if delta < 0:
        raise ValueError(f"pacer delta must be >= 0, got {delta}")
    if t < 2 * step or t % step != 0 or len(history) < 2 * step:
        return threshold, ""
    prev = float(sum(history[-2 * step : -step]))
    cur = float(sum(history[-step:]))
    change = abs(cur - prev)
    if change <= 0.1 * prev:
        return min(100.0, threshold + delta), "relax"
    if change >= 5.0 * prev:
        return max(float(delta), threshold - delta), "tighten"
    return threshold, ""


def blacklist(counts: Sequence[int] | np.ndarray, rounds: int, max_share: float) -> np.ndarray:
    """Clients barred from exploitation (the artifact's ``get_blacklist``; Oort Sec. 7.2.3, robustness
    to outliers): those that have trained more than ``rounds`` times, most-trained first (ties:
    lowest id first), at most ``floor(max_share * N)`` of the ``N`` clients.

    Args:
        counts: ``(N,)`` how many training results each client has reported so far.
        rounds: the artifact's ``blacklist_rounds``; ``-1`` turns the blacklist off.
        max_share: the artifact's ``blacklist_max_len``, share of all clients in [0, 1].

    Returns:
        Sorted ids of the blacklisted clients (empty when off).

    Example: counts [3, 5, 1, 4], rounds 2, max share 0.5: clients 1 (5), 3 (4) and 0 (3) trained
    more than twice; at most floor(0.5 * 4) = 2 are kept, the two most-trained: [1, 3].
    """
    if rounds < -1:
        raise ValueError(f"blacklist rounds must be -1 (off) or >= 0, got {rounds}")
    if not 0.0 <= max_share <= 1.0:
        raise ValueError(f"blacklist share must be in [0, 1], got {max_share}")
    c = np.asarray(counts, dtype=np.int64)
    if rounds == -1:
        return np.zeros(0, dtype=np.int64)
    ids = np.arange(c.size, dtype=np.int64)
    over = ids[c > rounds]
    over = over[np.lexsort((over, -c[over]))]  # most-trained first, ties by id
    cap = int(math.floor(max_share * c.size + 1e-9))
    return np.sort(over[:cap])


def normalise_utilities(utilities: np.ndarray, clip_bound: float) -> np.ndarray:
    """Clip statistical utilities at their ``clip_bound`` quantile and min-max normalise them
    (Oort Sec. 4.4, robust to outliers; FedScale's ``clip_bound``).

    Only positive utilities define the range (a failed or not-yet-useful client has 0 and does not
    stretch it): the clip value is ``sorted(pos)[min(floor(m * clip_bound), m - 1)]``, the range is
    ``[MIN_SHRINK * min(pos), clip]`` (at least :data:`MIN_RANGE` wide). Values are clipped to
    ``[0, 1]`` after scaling, so non-positive utilities map to 0.

    Args:
        utilities: ``(n,)`` utilities (>= 0). clip_bound: quantile in (0, 1].

    Returns:
        ``(n,)`` normalised utilities in [0, 1] (all 0 when none is positive).
    """
    u = np.asarray(utilities, dtype=np.float64)
    pos = np.sort(u[u > 0])
    if pos.size == 0:
        return np.zeros_like(u)
    clip = float(pos[min(int(pos.size * clip_bound), pos.size - 1)])
    low = float(pos[0]) * MIN_SHRINK
    width = max(clip - low, MIN_RANGE)
    return np.clip((np.minimum(u, clip) - low) / width, 0.0, 1.0)


def exploitation_scores(
    utility: np.ndarray, last_round: np.ndarray, duration: np.ndarray, t: int, preferred: float, alpha: float, clip_bound: float
) -> np.ndarray:
    """Util(k) = [norm(U_k) + sqrt(0.1 ln t / L_k)] * speed_penalty(t_k) for explored clients
    (Oort Algorithm 1, lines "Util(i) = U(i) + ..." and "Util(i) *= (T/t_i)^alpha").

    Args:
        utility: ``(m,)`` statistical utilities of the explored clients.
        last_round: ``(m,)`` last round each took part in (>= 1).
        duration: ``(m,)`` last known round duration of each, seconds.
        t: the current round. preferred: T, seconds. alpha: penalty exponent.
        clip_bound: quantile of :func:`normalise_utilities`.

    Returns:
        ``(m,)`` scores >= 0.
    """
    base = normalise_utilities(utility, clip_bound) + staleness_bonus(t, np.asarray(last_round))
    return base * speed_penalty(np.asarray(duration, dtype=np.float64), preferred, alpha)


def exploration_scores(num_samples: np.ndarray, expected_duration: np.ndarray, preferred: float, alpha: float) -> np.ndarray:
    """Priority of unexplored clients (Oort Sec. 4.4: explore fast clients with much data first):
    ``|B_k| * speed_penalty(expected duration)``.

    Args:
        num_samples: ``(m,)`` training samples. expected_duration: ``(m,)`` seconds.
        preferred: T, seconds. alpha: penalty exponent.
    """
    return np.asarray(num_samples, dtype=np.float64) * speed_penalty(
        np.asarray(expected_duration, dtype=np.float64), preferred, alpha
    )


def rank_desc(ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """``ids`` sorted by decreasing score (ties: lowest id first)."""
    ids = np.asarray(ids, dtype=np.int64)
    return ids[np.lexsort((ids, -np.asarray(scores, dtype=np.float64)))]
