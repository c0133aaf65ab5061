"""Fleets: availability restricts selection, over-selection, partial work of stragglers (docs/fleets.md)."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from fedselect.config import ConfigError
from fedselect.experiment import run_experiment
from fedselect.fl.availability import Bernoulli, Diurnal, Markov, Trace, read_trace
from fedselect.fl.round import cancel_late
from fedselect.fl.types import ClientOutcome
from fedselect.resolve import parse_experiment


def doc(**over) -> dict:
    d = {
        "name": "fleet",
        "seed": 3,
        "method": "fedavg",
        "rounds": 4,
        "clients_per_round": 4,
        "checkpoint_every": 0,
        "data": {"dataset": "mnist-embedded", "num_clients": 20, "partition": {"scheme": "iid"}},
        "model": {"name": "mlp", "options": {"hidden": [8]}},
        "train": {"local_epochs": 1, "batch_size": 20, "lr": 0.05, "workers": 0},
    }
    d.update(over)
    return d


def rows(run) -> list[dict[str, str]]:
    with open(run / "metrics.csv") as fh:
        return list(csv.DictReader(fh))


def test_trace_restricts_selection(tmp_path):
    trace = tmp_path / "trace.csv"
    lines = ["client,start_s,end_s"] + [f"{k},0,inf" for k in range(10)] + [f"{k},1e12,2e12" for k in range(10, 20)]
    trace.write_text("\n".join(lines) + "\n")
    for method in ("fedavg", "oort", "power_of_choice", "fastest"):
        cfg = parse_experiment(doc(method=method, availability={"model": "trace", "trace_file": str(trace)}))
        run_experiment(cfg, tmp_path / method)
        rs = rows(tmp_path / method)
        for r in rs[1:]:
            sel = [int(x) for x in r["selected"].split(";")]
            assert len(sel) == 4 and all(k < 10 for k in sel), (method, sel)
            assert r["available"] == "10"
        clocks = [float(r["clock_s"]) for r in rs[1:]]
        e2e = [float(r["e2e_latency_s"]) for r in rs]
        assert clocks == pytest.approx(e2e[:-1])  # round t starts when round t-1 ended


def test_overselect_selects_more_aggregates_u(tmp_path):
    cfg = parse_experiment(doc(overselect=1.5))
    run_experiment(cfg, tmp_path / "r")
    for r in rows(tmp_path / "r")[1:]:
        sel = [int(x) for x in r["selected"].split(";")]
        agg = [int(x) for x in r["aggregated_ids"].split(";")]
        assert len(sel) == 6 and len(agg) == 4 and set(agg) <= set(sel)
        assert r["aggregated"] == "4" and r["failed"] == "" and r["round_failed"] == "0"


def _o(k, lat, failed=None):
    return ClientOutcome(k, 1, {} if failed is None else None, 10, 0.1, 1, lat / 2, lat / 2, 0.0, lat, 100, 100, failed)


def test_cancel_late_by_hand():
    outs = [_o(0, 5.0), _o(1, 1.0), _o(2, 3.0, "error"), _o(3, 2.0), _o(4, 9.0)]
    got = cancel_late(1, outs, 2)  # arrivals: 1 (1 s), 3 (2 s) -> the round ends at 2 s
    assert [o.failed for o in got] == ["cancelled", None, "cancelled", None, "cancelled"]
    assert [o.latency_s for o in got] == [2.0, 1.0, 2.0, 2.0, 2.0]
    assert [o.upload_bytes for o in got] == [0, 100, 0, 100, 0] and all(o.download_bytes == 100 for o in got)
    assert cancel_late(1, outs, 5) == tuple(outs)  # fewer than 5 good updates: wait for all


def test_partial_stragglers_upload_their_steps(tmp_path):
    base = doc(rounds=2, system={"round_deadline_s": 1e-9})
    run_experiment(parse_experiment(base), tmp_path / "drop")
    for r in rows(tmp_path / "drop")[1:]:
        assert r["aggregated"] == "0" and "timeout" in r["failed"]
    d = doc(rounds=2, straggler="partial", system={"round_deadline_s": 0.5})
    run_experiment(parse_experiment(d), tmp_path / "partial")
    rs = rows(tmp_path / "partial")
    assert all(float(r["round_latency_s"]) <= 0.5 + 1e-9 for r in rs[1:])
    assert all(r["aggregated"] == "4" for r in rs[1:])


def test_availability_models_are_deterministic_and_consistent():
    m = Markov(50, 1, 10.0, 30.0, spread=0.5)
    on = m.online(1, 100.0)
    assert 0 < on.sum() < 50
    ends = m.online_until(1, 100.0, np.flatnonzero(on))
    assert (ends > 100.0).all()
    assert np.array_equal(Markov(50, 1, 10.0, 30.0, spread=0.5).online(1, 100.0), on)  # independent of query history
    b = Bernoulli(1000, 2, 0.3).online(5, 0.0)
    assert abs(b.mean() - 0.3) < 0.05
    d = Diurnal(200, 0, 24.0, 1.0, 0.0, 12.0)  # a day of 24 s: always online at the local peak hour
    on = d.online(1, 0.5)
    assert np.array_equal(on[(d.zone + 0) % 24 == 12], np.ones(((d.zone % 24) == 12).sum(), bool))
    t = Trace(3, {0: np.array([[0.0, 5.0]]), 1: np.array([[2.0, math.inf]])})
    assert t.online(1, 1.0).tolist() == [True, False, False] and t.online_until(1, 1.0, [0]).tolist() == [5.0]


def test_trace_file_errors(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("client,start_s,end_s\n0,5,3\n")
    with pytest.raises(ValueError, match="end_s must be later"):
        read_trace(p)
    p.write_text("client,start_s,end_s\n0,0,1\n0,1,4\n25,0,1\n")
    with pytest.raises(ValueError, match="client id outside"):
        read_trace(p, 20)
    assert read_trace(p)[0].tolist() == [[0.0, 4.0]]  # touching intervals merged


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="p_online applies only to model"):
        parse_experiment(doc(availability={"model": "markov", "p_online": 0.3}))
    with pytest.raises(ConfigError, match="trace_file"):
        parse_experiment(doc(availability={"model": "trace"}))
    with pytest.raises(ConfigError, match="straggler"):
        parse_experiment(doc(straggler="partial"))
    with pytest.raises(ConfigError, match="overselect"):
        parse_experiment(doc(overselect=0.5))
