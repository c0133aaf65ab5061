"""Budgeted online selection: alpha* (BO-eq 7), success probability (BO-eq 6), the three-stage
rule (Algorithm 1) and its baselines."""

import math

import numpy as np
import pytest

from fedselect.kernels.secretary import (
    alpha_star,
    competitive_ratio,
    offline_best_rule,
    online_random_rule,
    secretary_rule,
    success_probability,
)

# The paper's Figure 1 example: C_1 .. C_8 as printed; C_9, C_10 are never contacted, so any
# values do (here lower than C_6 and C_8 so that offline best picks the same two).
FIG1 = [0.30, 0.62, 0.23, 0.41, 0.56, 0.85, 0.20, 0.92, 0.50, 0.60]


def test_alpha_star_paper_values():
    assert [alpha_star(1000, 1, r2) for r2 in range(1, 6)] == [367, 243, 162, 109, 73]
    assert alpha_star(10, 1, 2) == 2
    # r1 > 1: floor(1000 * exp(-(3!/1!)^(1/2))) = floor(1000 * exp(-sqrt(6))) = 86
    assert alpha_star(1000, 2, 3) == math.floor(1000 * math.exp(-math.sqrt(6)))
    assert alpha_star(1000, 2, 3) == 86


def test_alpha_star_clamped_and_validated():
    assert alpha_star(10, 1, 1) == 3
    assert alpha_star(10, 1, 1, budget=8) == 2  # clamped to N - R
    assert alpha_star(1, 1, 1) == 0
    assert alpha_star(100, 1, 60) == 0  # huge r2 drives alpha* to 0, never below
    for bad in [dict(n=0, r1=1, r2=1), dict(n=10, r1=0, r2=1), dict(n=10, r1=3, r2=2), dict(n=10, r1=1.5, r2=2)]:
        with pytest.raises(ValueError):
            alpha_star(**bad)
    with pytest.raises(ValueError, match="budget"):
        alpha_star(10, 1, 2, budget=11)
    with pytest.raises(ValueError, match="budget"):
        alpha_star(10, 1, 2, budget=0)


def test_success_probability_closed_form_points():
    # r1 = r2 = 1 is the classical secretary problem: P(N/e) = 1/e
    assert success_probability(1000 / math.e, 1000, 1, 1) == pytest.approx(1 / math.e, abs=1e-12)
    assert success_probability(0, 1000, 1, 3) == 0.0
    assert success_probability(1000, 1000, 1, 3) == 0.0
    # N = 10, r2 = 2, alpha = 2: 0.2 * (ln 5 + ln(5)^2 / 2)
    l5 = math.log(5)
    assert success_probability(2, 10, 1, 2) == pytest.approx(0.2 * (l5 + l5**2 / 2))
    arr = success_probability(np.array([1, 2, 3]), 10, 1, 2)
    assert arr.shape == (3,) and arr[1] == pytest.approx(0.2 * (l5 + l5**2 / 2))
    with pytest.raises(ValueError, match="alpha"):
        success_probability(11, 10, 1, 1)
    with pytest.raises(ValueError, match="r1"):
        success_probability(3, 10, 2, 1)


@pytest.mark.parametrize("n,r2", [(1000, 1), (1000, 2), (1000, 3), (1000, 4), (1000, 5), (10, 2), (100, 2), (200, 3)])
def test_success_probability_peaks_at_alpha_star(n, r2):
    alphas = np.arange(1, n)
    best = int(alphas[np.argmax(success_probability(alphas, n, 1, r2))])
    assert abs(best - alpha_star(n, 1, r2)) <= 1


def test_success_probability_matches_monte_carlo_over_permutations():
    """P(number of records at positions alpha+1..N lies in [r1, r2]) by simulation."""
    n, m = 1000, 6000
    rng = np.random.default_rng(20240501)
    perms = rng.permuted(np.tile(np.arange(n, dtype=np.int16), (m, 1)), axis=1)
    prev_max = np.maximum.accumulate(perms, axis=1)
    record = np.ones_like(perms, dtype=bool)
    record[:, 1:] = perms[:, 1:] > prev_max[:, :-1]
    records_from = np.cumsum(record[:, ::-1], axis=1)[:, ::-1]  # [:, i] = records at 0-based positions >= i
    for r1, r2 in [(1, 1), (1, 2), (1, 3), (2, 4), (1, 5)]:
        for alpha in (20, 50, 100, 200, 367, 500, 800):
            count = records_from[:, alpha]
            mc = float(np.mean((count >= r1) & (count <= r2)))
            assert abs(mc - success_probability(alpha, n, r1, r2)) < 0.02, (r1, r2, alpha, mc)


class _Lazy:
    """A score sequence that records which positions were read."""

    def __init__(self, scores):
        self.scores, self.read = list(scores), []

    def __len__(self):
        return len(self.scores)

    def __getitem__(self, i):
        self.read.append(i)
        return self.scores[i]


def test_paper_figure1_example_accepts_c6_and_c8():
    n, r = 10, 2
    alpha = alpha_star(n, 1, 2, budget=r)
    assert alpha == 2
    lazy = _Lazy(FIG1)
    sel = secretary_rule(lazy, r, alpha)
    assert [i + 1 for i in sel.accepted] == [6, 8]  # paper numbering C_1 .. C_10
    assert sel.threshold == 0.62
    assert sel.evaluated == 8 and sel.tail_filled == []
    assert max(lazy.read) == 7  # C_9 and C_10 are never contacted
    assert competitive_ratio(FIG1, sel.accepted, r) == pytest.approx(1.0)


def test_tail_fill_when_best_is_in_the_observation_phase():
    # the paper's worst case: C_2 = 0.93 beats everyone, so the last two are forced in
    worst = list(FIG1)
    worst[1] = 0.93
    sel = secretary_rule(worst, 2, 2)
    assert sel.threshold == 0.93
    assert sel.accepted == [8, 9] and sel.tail_filled == [8, 9] and sel.evaluated == 10
    # one accepted above the threshold, then the last one is forced
    scores = [0.5, 0.9, 0.1, 0.95, 0.2, 0.3, 0.1]
    sel = secretary_rule(scores, 2, 2)
    assert sel.accepted == [3, 6] and sel.tail_filled == [6]
    # alpha = 0: no threshold, the first R are accepted
    sel = secretary_rule(scores, 3, 0)
    assert sel.accepted == [0, 1, 2] and sel.threshold is None
    # the threshold is strict and not updated: equal scores are rejected
    sel = secretary_rule([0.5, 0.5, 0.6, 0.55, 0.1, 0.1], 2, 1)
    assert sel.accepted == [2, 3]


def test_secretary_rule_validation():
    with pytest.raises(ValueError, match="alpha"):
        secretary_rule(FIG1, 2, 9)  # alpha > N - R
    with pytest.raises(ValueError, match="budget"):
        secretary_rule(FIG1, 11, 0)
    # a NaN score is not an error: it never beats the threshold (tests/kernels/test_nonfinite.py)
    assert secretary_rule([0.1, float("nan"), 0.3], 1, 1).accepted == [2]


def test_online_random_always_fills_the_budget():
    n, r = 50, 10
    evaluated = []
    for seed in range(200):
        sel = online_random_rule(n, r, np.random.default_rng(seed))
        assert len(sel.accepted) == r == len(set(sel.accepted))
        assert sel.accepted == sorted(sel.accepted) and 0 <= sel.accepted[0] and sel.accepted[-1] < n
        assert sel.evaluated == sel.accepted[-1] + 1
        evaluated.append(sel.evaluated)
    # with p = R/N the budget is usually filled near the end, and tail-fill is sometimes needed
    assert 40 < np.mean(evaluated) <= 50
    a = online_random_rule(n, r, np.random.default_rng(7)).accepted
    assert a == online_random_rule(n, r, np.random.default_rng(7)).accepted
    # R = N accepts everyone
    assert online_random_rule(5, 5, np.random.default_rng(0)).accepted == [0, 1, 2, 3, 4]


def test_offline_best_and_competitive_ratio():
    sel = offline_best_rule(FIG1, 3)
    assert sel.accepted == [1, 5, 7] and sel.evaluated == 10
    # ties broken by arrival position
    assert offline_best_rule([0.5, 0.7, 0.7, 0.7], 2).accepted == [1, 2]
    # (0.30 + 0.23) / (0.92 + 0.85)
    assert competitive_ratio(FIG1, [0, 2], 2) == pytest.approx(0.53 / 1.77)
    with pytest.raises(ValueError):
        competitive_ratio([0.0, 0.0], [0], 1)
