"""No estimate from censored samples (issue 34 item 2): the Kaplan-Meier kernel, the adaptive
deadline on a fleet whose latency distribution is known in closed form, and rounds / latency to
target of runs that never reached it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedselect.config_fleet import DeadlineConfig
from fedselect.fl.availability import Availability
from fedselect.fl.clock import FleetClock, latency_observation
from fedselect.fl.types import ClientOutcome, RunSettings
from fedselect.kernels.censored import kaplan_meier, km_quantile, km_quantile_completed


# ---------------------------------------------------------------- the kernel
def test_kaplan_meier_worked_example():
    # reports at 1, 2, 3 s; two cut at a 3.5 s deadline, one at 2.5 s (the module docstring)
    x = [1.0, 2.0, 3.0, 3.5, 3.5, 2.5]
    c = [False, False, False, True, True, True]
    times, surv = kaplan_meier(x, c)
    assert times.tolist() == [1.0, 2.0, 3.0]
    assert surv.tolist() == pytest.approx([5 / 6, 4 / 6, 4 / 9])
    assert km_quantile(x, c, 0.5) == 3.0
    assert km_quantile(x, c, 0.9) is None  # 1 - S never reaches 0.9 within the data
    assert km_quantile_completed(x, c, 0.9) == pytest.approx(3.5 * math.log(0.1) / math.log(4 / 9))
    assert km_quantile_completed(x, c, 0.5) == 3.0  # identified: no tail


def test_kaplan_meier_without_censoring_is_the_sample_quantile():
    x = np.random.default_rng(0).exponential(2.0, 37)
    for q in (0.1, 0.5, 0.9, 1.0):
        assert km_quantile(x, [False] * x.size, q) == float(np.quantile(x, q, method="inverted_cdf"))


def test_kaplan_meier_edge_cases():
    assert km_quantile_completed([2.0, 2.0], [True, True], 0.9) is None  # nothing but lower bounds
    assert km_quantile_completed([], [], 0.5) is None
    assert km_quantile_completed([1.0, 4.0], [False, True], 1.0) is None  # an exponential tail never ends
    assert km_quantile([3.0, 3.0, 3.0], [False] * 3, 0.9) == 3.0  # an empty range: every value the same
    assert km_quantile([1.0, 1.0], [False, True], 0.5) == 1.0  # censored at an event time: still at risk there
    with pytest.raises(ValueError, match="q must be in"):
        km_quantile([1.0], [False], 0.0)
    with pytest.raises(ValueError, match="finite and >= 0"):
        km_quantile([1.0, -1.0], [False, False], 0.5)


# ---------------------------------------------------------------- the adaptive deadline
def _outcome(k: int, latency: float, failed: str | None = None, steps: int | None = None) -> ClientOutcome:
    return ClientOutcome(k, 1, None, 10, 0.1, 1, latency, 0.0, 0.0, latency, 0, 0, failed, local_steps=steps)


def test_latency_observation_of_each_outcome():
    assert latency_observation(_outcome(0, 2.0)) == (2.0, False)
    assert latency_observation(_outcome(0, 2.0, "nan")) == (2.0, False)  # the work arrived (then was rejected)
    assert latency_observation(_outcome(0, 3.0, "timeout")) == (3.0, True)
    assert latency_observation(_outcome(0, 1.5, "cancelled")) == (1.5, True)
    assert latency_observation(_outcome(0, 2.9, None, steps=3)) == (2.9, True)  # partial work: cut at the deadline
    assert latency_observation(_outcome(0, 3.0, "dropout")) is None
    assert latency_observation(_outcome(0, 0.4, "error")) is None


def _settings(n: int, u: int) -> RunSettings:
    return RunSettings(seed=0, rounds=50, num_clients=n, clients_per_round=u, local_epochs=1)


def _deadline_rounds(percentile: float, window: int, u: int, draw, rounds: int = 50):
    """``rounds`` rounds of the adaptive deadline on latencies drawn i.i.d. by ``draw(rng, u)``:
    (share of the participants in time, deadline) per round; round 1 has no deadline."""
    clock = FleetClock(Availability(u), _settings(u, u), 10, adaptive=DeadlineConfig(percentile=percentile, window=window))
    rng = np.random.default_rng(7)
    share, deadlines = [], []
    for _ in range(rounds):
        d = clock.deadline_s(None)
        lat = draw(rng, u)
        ok = np.ones(u, dtype=bool) if d is None else lat <= d
        outs = [_outcome(k, float(x)) if good else _outcome(k, float(d), "timeout") for k, (x, good) in enumerate(zip(lat, ok))]
        clock.advance(float(max(o.latency_s for o in outs)), outs)
        share.append(float(ok.mean()))
        deadlines.append(d)
    return np.array(share), deadlines


@pytest.mark.parametrize("percentile", [50.0, 90.0])
def test_adaptive_deadline_keeps_its_share_on_a_stationary_fleet(percentile):
    """Latencies Exp(mean 2 s), i.i.d. per participant and round: F(x) = 1 - exp(-x / 2), so the
    p-th percentile is -2 ln(1 - p) s and a p-percentile deadline should let a share p in time.
    Learning only from the participants in time, the deadline sank round after round (the share
    in time fell to about p^t); now it holds p +- 10 points over 50 rounds without drifting."""
    p = percentile / 100.0
    share, deadlines = _deadline_rounds(percentile, 5, 10, lambda rng, u: rng.exponential(2.0, u))
    assert deadlines[0] is None and share[0] == 1.0
    assert abs(share[1:].mean() - p) <= 0.10
    assert abs(share[-25:].mean() - p) <= 0.10  # no drift: the last half too
    assert share[-25:].mean() >= share[1:26].mean() - 0.05
    truth = -2.0 * math.log(1.0 - p)
    assert np.median(deadlines[10:]) == pytest.approx(truth, rel=0.25)
