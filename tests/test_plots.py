"""The plots of a comparison: the bands over seeds."""

import pytest


def test_the_band_is_the_95_percent_interval_of_the_mean_with_three_seeds():
    """Rounds 0, 1; three seeds with e2e latency 1, 2, 3 at round 1: mean 2, sd 1,
    t_{0.975, 2} = 4.302653, half width 4.302653 / sqrt(3) = 2.484138; min..max without ci."""
    from types import SimpleNamespace

    from fedselect.plots import _mean_band

    runs = [
        SimpleNamespace(rows=[{"round": "0", "e2e_latency_s": "0"}, {"round": "1", "e2e_latency_s": str(v)}]) for v in (1, 2, 3)
    ]
    x, m, lo, hi = _mean_band(runs, "e2e_latency_s", ci=True)
    assert x.tolist() == [0, 1] and m.tolist() == [0.0, 2.0]
    assert lo[1] == pytest.approx(2 - 2.484138, abs=1e-6) and hi[1] == pytest.approx(2 + 2.484138, abs=1e-6)
    assert lo[0] == hi[0] == 0.0  # no spread at round 0
    _, _, lo, hi = _mean_band(runs, "e2e_latency_s")
    assert (lo[1], hi[1]) == (1.0, 3.0)
