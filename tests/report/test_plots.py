"""The plots of a comparison: the bands over seeds."""

import pytest


def test_the_band_is_the_95_percent_interval_of_the_mean_with_three_seeds():
    """Rounds 0, 1; three seeds with e2e latency 1, 2, 3 at round 1: mean 2, sd 1,
    t_{0.975, 2} = 4.302653, half width 4.302653 / sqrt(3) = 2.484138; min..max without ci."""
    from types import SimpleNamespace

    from fedselect.report.plots import _mean_band

    runs = [
        SimpleNamespace(rows=[{"round": "0", "e2e_latency_s": "0"}, {"round": "1", "e2e_latency_s": str(v)}]) for v in (1, 2, 3)
    ]
    x, m, lo, hi = _mean_band(runs, "e2e_latency_s", ci=True)
    assert x.tolist() == [0, 1] and m.tolist() == [0.0, 2.0]
    assert lo[1] == pytest.approx(2 - 2.484138, abs=1e-6) and hi[1] == pytest.approx(2 + 2.484138, abs=1e-6)
    assert lo[0] == hi[0] == 0.0  # no spread at round 0
    _, _, lo, hi = _mean_band(runs, "e2e_latency_s")
    assert (lo[1], hi[1]) == (1.0, 3.0)


def _result(label, seed, mode="sync", rounds=3):
    """A RunSummary of ``rounds`` rows: clients 0 and 1 selected every round."""
    from fedselect.report.runs import RunSummary

    rows = [
        {"round": str(t), "accuracy": str(0.5 + 0.1 * t), "e2e_latency_s": str(2.0 * t), "selected": "0;1" if t else ""}
        for t in range(rounds + 1)
    ]
    return RunSummary(label, seed, None, rows, {}, True, rounds, mode=mode)


def _fed(seed, devices, networks):
    n = len(devices)
    return {
        "seed": seed,
        "device": devices,
        "network": networks,
        "expected_latency_s": [1.0 + k for k in range(n)],
        "expected_compute_s": [1.0 + k for k in range(n)],
        "expected_upload_s": [0.5 * (1 + k) for k in range(n)],
        "num_samples": [10] * n,
        "label_counts": [[5, 5]] * n,
        "class_names": ["a", "b"],
        "dataset": "x",
        "partition": {"scheme": "iid"},
    }


def test_async_runs_are_plotted_per_server_version(tmp_path, monkeypatch):
    """Rows of a `mode: async` run are server versions: the x axes say so; a comparison that
    mixes sync and async says both; a sync one says communication round."""
    import matplotlib.axes

    from fedselect.report.plots import make_plots, round_axis

    labels = []
    monkeypatch.setattr(matplotlib.axes.Axes, "set_xlabel", lambda self, text, *a, **k: labels.append(text))
    fed = _fed(0, ["jetson-nano", "intel-i9", "jetson-nano"], ["wifi-1", "wifi-4", "wifi-1"])
    make_plots(tmp_path / "a", [_result("FedBuff", 0, "async")], ["FedBuff"], [fed])
    others = {"end-to-end latency (s, simulated)", "client id", "client, ranked by expected latency (0 = fastest)"}
    per_row = [x for x in labels if x not in others and not x.startswith("client's expected latency")]
    assert len(per_row) == 5 and set(per_row) == {"server version (one per aggregation)"}  # 3 metric/latency, 2 class panels
    assert round_axis([_result("FedAvg", 0), _result("FedBuff", 0, "async")])[0] == "round (sync) / server version (async)"
    labels.clear()
    make_plots(tmp_path / "s", [_result("FedAvg", 0)], ["FedAvg"], [fed])
    assert {x for x in labels if x not in others and not x.startswith("client's expected latency")} == {"communication round"}


def test_a_fleet_without_classes_gets_no_class_plot(tmp_path):
    """Capacity fleets (every client its own capacity, all named after the model) have one
    device class: no device-class plot; the network plot, with two classes, is drawn."""
    from fedselect.report.plots import make_plots

    fed = _fed(0, ["pareto"] * 3, ["wifi-1", "wifi-4", "wifi-1"])
    files = make_plots(tmp_path, [_result("FedAvg", 0)], ["FedAvg"], [fed])
    assert "selection_device_per_round.png" not in files and not (tmp_path / "selection_device_per_round.png").exists()
    assert "selection_network_per_round.png" in files and "metric_vs_round.png" in files
    files = make_plots(tmp_path / "two", [_result("FedAvg", 0)], ["FedAvg"], [_fed(0, ["a", "b", "a"], ["w"] * 3)])
    assert "selection_device_per_round.png" in files and "selection_network_per_round.png" not in files
