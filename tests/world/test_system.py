import numpy as np
import pytest

from fedselect.kernels.rewards import normalise_latency
from fedselect.world.system import (
    DEFAULT_DEVICES,
    DEFAULT_NETWORKS,
    LATENCY_MODELS,
    DeviceProfile,
    Fleet,
    NetworkProfile,
    RoundDraws,
    compute_time,
    latency_bounds,
    transmit_time,
)


def test_latency_worked_example():
    # 600 samples x 784 features x 32 bits = 15,052,800 bits; E = 5, g = 20 cycles/bit
    # raspberry-pi-3 at 350 MHz with 4 cores: 5 * 15,052,800 * 20 / (4 * 350e6) = 1.0752 s
    bits = 600 * 784 * 32
    assert bits == 15_052_800
    assert compute_time(5, bits, 20, 4, 350.0) == pytest.approx(1.0752)
    # model of 431,080 float32 parameters over wifi-1 at 6 Mb/s: 13,794,560 bits / 6e6 = 2.29909 s
    assert transmit_time(431_080 * 32, 6.0) == pytest.approx(2.2990933, rel=1e-6)
    # the cost model (fl/cost.py, where every latency of a run comes from): FR-eq 3 = compute + upload
    from types import SimpleNamespace

    from fedselect.fl.cost import CostModel
    from fedselect.fl.types import RunSettings

    fed = SimpleNamespace(
        fleet=SimpleNamespace(cores=np.array([4])), latency_model=LATENCY_MODELS["paper"], client_bits=lambda k: bits
    )
    draws = RoundDraws(1, np.array([350.0]), np.array([6.0]))
    payload = (431_080 * 4, 431_080 * 4)  # bytes of float32 values, up and down
    for count_download, total in ((False, 1.0752 + 2.2990933), (True, 1.0752 + 2 * 2.2990933)):  # download: twice the transfer
        settings = RunSettings(0, 1, 1, 1, 5, count_download=count_download, cycles_per_bit=20.0)
        cost = CostModel(fed, settings, payload).client_cost(0, 5, draws)
        assert (cost.compute_s, cost.upload_s, cost.download_s) == pytest.approx((1.0752, 2.2990933, 2.2990933), rel=1e-6)
        assert cost.latency_s == pytest.approx(total, rel=1e-6)


def test_round_latency_is_the_probing_then_the_straggler():
    from fedselect.fl.cost import CostModel

    assert CostModel.round_latency_s(0.0, [2.0, 5.0, 3.0]) == 5.0
    assert CostModel.round_latency_s(1.5, [2.0, 5.0, 3.0]) == 6.5
    assert CostModel.round_latency_s(0.25, []) == 0.25


def test_profiles_match_the_paper_tables():
    names = {d.name: d for d in DEFAULT_DEVICES}
    assert len(DEFAULT_DEVICES) == 12 and len(DEFAULT_NETWORKS) == 4
    assert (names["raspberry-pi-3"].mean_mhz, names["raspberry-pi-3"].cores) == (350, 4)
    assert (names["intel-i9"].mean_mhz, names["intel-i9"].std_mhz, names["intel-i9"].cores) == (4400, 100, 8)
    assert [n.mean_mbps for n in DEFAULT_NETWORKS] == [6, 33, 100, 336]


def test_fleet_assignment_round_robin_and_draws_are_per_round():
    fleet = Fleet.create(24, seed=1)
    # round-robin: each of the 12 devices twice, each of the 4 networks 6 times
    assert sorted(d.name for d in fleet.devices) == sorted([d.name for d in DEFAULT_DEVICES] * 2)
    assert sorted(n.name for n in fleet.networks) == sorted([n.name for n in DEFAULT_NETWORKS] * 6)
    a, b = fleet.draw(7), Fleet.create(24, seed=1).draw(7)
    np.testing.assert_array_equal(a.freq_mhz, b.freq_mhz)
    fleet.draw(3)  # drawing another round first changes nothing
    np.testing.assert_array_equal(fleet.draw(7).bandwidth_mbps, a.bandwidth_mbps)
    assert not np.array_equal(fleet.draw(8).freq_mhz, a.freq_mhz)
    assert (a.freq_mhz > 0).all() and (a.bandwidth_mbps > 0).all()


def test_truncation_never_below_five_percent_of_mean():
    fleet = Fleet([DeviceProfile("d", 100, 1000, 1)] * 50, [NetworkProfile("n", 10, 100)] * 50, seed=0)
    for t in range(5):
        d = fleet.draw(t)
        assert d.freq_mhz.min() >= 5.0 and d.bandwidth_mbps.min() >= 0.5


def test_mix_gives_proportional_counts_and_rejects_unknown():
    fleet = Fleet.create(10, 0, device_mix={"raspberry-pi-3": 3, "intel-i9": 1})
    names = [d.name for d in fleet.devices]
    assert names.count("raspberry-pi-3") in (7, 8) and names.count("raspberry-pi-3") + names.count("intel-i9") == 10
    with pytest.raises(ValueError, match="unknown profiles"):
        Fleet.create(10, 0, device_mix={"cray-1": 1})


def test_latency_bounds_and_normalisation():
    fleet = Fleet([DeviceProfile("d", 1000, 10, 1)], [NetworkProfile("n", 10, 1)], seed=0)
    lo, hi = latency_bounds(fleet, [1e6], epochs=1, cycles_per_bit=1, upload_bits=1e6)
    assert lo == pytest.approx(1e6 / 1030e6 + 1e6 / 13e6)
    assert hi == pytest.approx(1e6 / 970e6 + 1e6 / 7e6)
    assert normalise_latency(hi * 2, lo, hi) == 1.0 and normalise_latency(0.0, lo, hi) == 0.0
    assert normalise_latency((lo + hi) / 2, lo, hi) == pytest.approx(0.5)


def test_bad_profiles_raise():
    with pytest.raises(ValueError, match="cores >= 1"):
        DeviceProfile("x", 100, 1, 0)
    with pytest.raises(ValueError, match="mean_mbps > 0"):
        NetworkProfile("x", 0, 1)
