"""FedCS (Nishio and Yonetani, ICC 2019): Algorithm 2 by hand, on a fleet whose times are known,
and the deadline it needs."""

from __future__ import annotations

import pytest
from test_fastest import _cfg as fastest_cfg

from fedselect.config.schema import ConfigError
from fedselect.experiment.resolve import parse_experiment
from fedselect.experiment.run import make_simulation
from fedselect.selectors.base import RoundView
from fedselect.selectors.fedcs import greedy_schedule


def test_algorithm_2_sequential_by_hand():
    # (t_UD, t_UL) = (1, 1), (2, 1), (4, 2) s, T_round 5 s. Theta after 0: 0 + 1 + max(0, 1 - 0) = 2;
    # then 1 (increase 1 + max(0, 2 - 2) = 1 against 2 + max(0, 4 - 2) = 4): Theta 3; then 2: 3 + 2 + 1 = 6 > 5
    kept, est = greedy_schedule([1, 2, 4], [1, 1, 2], [0, 0, 0], 5.0)
    assert kept == [0, 1] and est == pytest.approx(3.0)
    assert greedy_schedule([1, 2, 4], [1, 1, 2], [0, 0, 0], 6.0) == ([0, 1, 2], pytest.approx(6.0))
    # the distribution to S (the slowest download of S) comes first: 0.5 s more for everyone
    assert greedy_schedule([1, 2, 4], [1, 1, 2], [0.5, 0.5, 0.5], 5.0) == ([0, 1], pytest.approx(3.5))
    assert greedy_schedule([1, 2, 4], [1, 1, 2], [0, 0, 0], 6.0, limit=1) == ([0], pytest.approx(2.0))
    assert greedy_schedule([1], [1], [0], 1.5) == ([], 0.0)  # nobody fits


def test_a_candidate_that_does_not_fit_is_skipped_and_the_next_tried():
    # (10, 1) never fits a 5 s deadline; (3, 1) after (1, 1) ends at max(2, 3) + 1 = 4
    kept, est = greedy_schedule([10, 1, 3], [1, 1, 1], [0, 0, 0], 5.0)
    assert kept == [1, 2] and est == pytest.approx(4.0)


def test_parallel_schedule_takes_clients_by_latency():
    # latencies 2, 3, 6 s on their own links: the round lasts as long as the slowest
    assert greedy_schedule([1, 2, 4], [1, 1, 2], [0, 0, 0], 5.0, "parallel") == ([0, 1], pytest.approx(3.0))
    assert greedy_schedule([4, 1, 2], [2, 1, 1], [0, 0, 0], 6.0, "parallel") == ([1, 2, 0], pytest.approx(6.0))


def _cfg(**options):
    """The fleet of tests/selectors/test_fastest.py (two 4 x 1000 MHz clients, two 1 x 100 MHz ones, 10 Mb/s),
    FedCS asking every client, with a 0.2 s deadline unless ``options`` say otherwise."""
    return fastest_cfg(
        method=None, selector={"name": "fedcs", "options": {"request_fraction": 1.0, "deadline_s": 0.2, **options}}
    )


# the fleet of tests/selectors/test_fastest.py: 720 samples per client (800 less the server's 10% validation
# set); t_UD 0.0903168 s fast (4 x 1000 MHz), 3.612672 s slow (1 x 100 MHz); t_UL 0.020384 s
# (25,480 bytes at 10 Mb/s)
FAST_UD, SLOW_UD, UL = 0.0903168, 3.612672, 0.020384


def test_on_a_fleet_whose_times_are_known():
    sim = make_simulation(_cfg())
    fast = sorted(k for k, d in enumerate(sim.fed.fleet.devices) if d.name == "fast")
    sel = sim.selector.select(RoundView(1, sim.fed.fleet.draw(1)))
    # deadline 0.2 s: fast a ends at 0.1107008; fast b: its update ends at 0.0903168, its upload follows a's:
    # 0.1107008 + 0.020384 = 0.1310848; a slow one would end at 0.1310848 + 0.020384 + (3.612672 - 0.1310848) > 0.2
    assert sorted(sel.clients) == fast
    assert sim.selector.pending["estimated_round_s"] == pytest.approx(FAST_UD + 2 * UL)
    sim.close()
    sim = make_simulation(_cfg(deadline_s=5.0))
    sel = sim.selector.select(RoundView(1, sim.fed.fleet.draw(1)))
    assert sorted(sel.clients) == [0, 1, 2, 3]  # all four fit 5 s
    # the slow pair: the first slow upload starts when its update ends (3.612672), the second follows it
    assert sim.selector.pending["estimated_round_s"] == pytest.approx(SLOW_UD + 2 * UL)
    assert set(sel.clients[:2]) == set(fast)  # the fast ones lengthen the round least: added first
    sim.close()


def test_a_run_trains_exactly_the_clients_that_fit(tmp_path):
    from fedselect.experiment.run import run_experiment

    s = run_experiment(_cfg(), tmp_path / "r")
    rows = (tmp_path / "r" / "metrics.csv").read_text().splitlines()
    head = rows[0].split(",")
    sim = make_simulation(_cfg())
    fast = {str(k) for k, d in enumerate(sim.fed.fleet.devices) if d.name == "fast"}
    sim.close()
    assert all(set(r.split(",")[head.index("selected")].split(";")) == fast for r in rows[2:])
    assert s["e2e_latency_s"] == pytest.approx(2 * (FAST_UD + UL))  # each round: the two fast clients in parallel


def test_fedcs_needs_a_deadline_and_refuses_async():
    with pytest.raises(ConfigError, match="needs a round deadline"):
        parse_experiment(
            {
                "selector": {"name": "fedcs"},
                "data": {"num_clients": 4, "partition": {"scheme": "iid"}},
                "clients_per_round": 2,
            }
        )
    ok = parse_experiment({"selector": {"name": "fedcs", "options": {"deadline_s": 3.0}}})
    assert ok.selector.options["deadline_s"] == 3.0
    sim = make_simulation(parse_experiment({"selector": {"name": "fedcs"}, "system": {"round_deadline_s": 2.5}}))
    assert sim.selector.deadline == 2.5  # no deadline of its own: the system's
    sim.close()
    with pytest.raises(ConfigError, match="fixed set of clients"):
        parse_experiment({"selector": {"name": "fedcs", "options": {"deadline_s": 3.0}}, "mode": "async"})
