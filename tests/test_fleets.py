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


def test_fednova_by_hand():
    import torch

    from fedselect.algorithms.fedavg import FedAvg
    from fedselect.fl.types import ServerState

    class _Cfg:
        momentum, optimizer, batch_size = 0.0, "sgd", 10

    alg = FedAvg.__new__(FedAvg)
    alg.train_cfg = _Cfg()
    w = ServerState({"w": torch.tensor([1.0])})
    # client A: 10 samples, 1 epoch = 1 step, w_A = 0; client B: 30 samples, 2 of 3 steps done, w_B = 0.4
    a = ClientOutcome(0, 1, {"w": torch.tensor([0.0])}, 10, 0.1, 1, 0, 0, 0, 1, 0, 0)
    b = ClientOutcome(1, 1, {"w": torch.tensor([0.4])}, 30, 0.1, 1, 0, 0, 0, 1, 0, 0, local_steps=2)
    # p = (0.25, 0.75), a = (1, 2), tau_eff = 1.75; d = 0.25 * 1 / 1 + 0.75 * 0.6 / 2 = 0.475
    got = alg._fednova(w, [a, b], None)["w"].item()
    assert got == pytest.approx(1.0 - 1.75 * 0.475)


def test_capacities_from_draws_and_file(tmp_path):
    from fedselect.federation import build_federation

    for model in ("lognormal", "pareto"):
        cfg = parse_experiment(doc(system={"capacity": {"model": model, "compute_mhz": 500.0, "bandwidth_mbps": 5.0}}))
        fl = build_federation(cfg).fleet
        assert len(fl) == 20 and (fl.std_mhz == 0).all() and (fl.cores == 1).all()
        if model == "pareto":
            assert fl.mean_mhz.min() >= 500.0 and fl.mean_mbps.min() >= 5.0
    f = tmp_path / "caps.csv"
    f.write_text("client,compute_speed,bandwidth_kbps\n" + "".join(f"{k},{100 * (k + 1)},{2000}\n" for k in range(20)))
    cfg = parse_experiment(doc(system={"capacity": {"model": "file", "file": str(f)}}))
    fed = build_federation(cfg)
    # E n_k / compute_speed seconds of compute (FR-eq 4 with f = speed x bits/sample x g / 1e6)
    from fedselect.system import compute_time

    k = 3
    n_k = fed.clients[k].num_samples
    got = compute_time(1, fed.client_bits(k), 20.0, fed.fleet.cores[k], fed.fleet.mean_mhz[k])
    assert got == pytest.approx(n_k / 400.0) and fed.fleet.mean_mbps[k] == pytest.approx(2.0)
    f.write_text("client,compute_speed,bandwidth_kbps\n0,10,10\n")
    with pytest.raises(ValueError, match="no row for clients"):
        build_federation(parse_experiment(doc(system={"capacity": {"model": "file", "file": str(f)}})))


def test_fedscale_converters(tmp_path):
    import pickle

    from fedselect.fedscale import main

    src = tmp_path / "behave.pkl"
    src.write_bytes(
        pickle.dumps({1: {"active": [0, 100], "inactive": [50], "finish_time": 500}, 0: {"active": [10], "inactive": [20]}})
    )
    main(["trace", str(src), str(tmp_path / "t.csv")])
    iv = read_trace(tmp_path / "t.csv")
    assert iv[0].tolist() == [[10.0, 20.0]] and iv[1].tolist() == [[0.0, 50.0], [100.0, 500.0]]
    cap = tmp_path / "cap.pkl"
    cap.write_bytes(pickle.dumps({0: {"computation": 20.0, "communication": 5000.0}}))
    main(["capacity", str(cap), str(tmp_path / "c.csv")])
    assert (tmp_path / "c.csv").read_text().splitlines()[1] == "0,50.0,5000.0"
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps({0: np.float64(1.0)}))
    with pytest.raises(ValueError, match="refused"):
        main(["trace", str(evil), str(tmp_path / "x.csv")])


# ---------------------------------------------------------------- many clients (issue 22 item 6)
def test_clients_are_views_of_the_training_set():
    from fedselect.federation import build_federation

    fed = build_federation(parse_experiment(doc(data={"dataset": "mnist-embedded", "num_clients": 30})))
    counts = fed.label_counts()
    for c in fed.clients[:5]:
        assert c._train is None and c._holdout is None  # nothing copied until asked for
        tr = c.train
        assert np.array_equal(tr.x, fed.train_set.x[c.train_indices]) and np.array_equal(tr.y, c.labels)
        assert np.array_equal(c.holdout.y, fed.train_set.y[c.holdout_indices])
        assert c.num_samples == len(c.train_indices) == counts[c.id].sum()
    assert counts.shape == (30, 10) and counts.sum() == sum(len(c.train_indices) for c in fed.clients)


def test_20000_clients_with_replacement_end_to_end(tmp_path):
    # more clients than the embedded set's 4,000 images: client_dirichlet with replacement
    part = {"scheme": "client_dirichlet", "alpha": 0.5, "samples_per_client": 10, "replacement": True}
    for method in ("fedavg", "oort", "fastest"):
        d = doc(
            method=method,
            rounds=2,
            overselect=1.5,
            availability={"model": "bernoulli", "p_online": 0.5},
            data={"dataset": "mnist-embedded", "num_clients": 20_000, "partition": part, "holdout_fraction": 0.0},
        )
        run_experiment(parse_experiment(d), tmp_path / method)
        rs = rows(tmp_path / method)
        for r in rs[1:]:
            sel = [int(x) for x in r["selected"].split(";")]
            assert len(sel) == 6 and int(r["aggregated"]) == 4 and all(0 <= k < 20_000 for k in sel)
            assert 9_000 < int(r["available"]) < 11_000  # about half of 20,000 online
