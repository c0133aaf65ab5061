"""Fleets: availability restricts selection, over-selection, partial work of stragglers (docs/fleets.md)."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from fedselect.config.schema import ConfigError
from fedselect.experiment.resolve import parse_experiment
from fedselect.experiment.run import run_experiment
from fedselect.fl.availability import Bernoulli, Diurnal, Markov, Trace, read_trace
from fedselect.fl.round_rules import cancel_late
from fedselect.fl.types import ClientOutcome


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


def test_next_online_is_the_first_moment_someone_is_online():
    """The wait's target for every clocked model: online then, nobody online before it."""
    m = Markov(5, 2, 1.0, 50.0)
    d = Diurnal(3, 0, 24.0, 0.2, 0.0, 12.0)  # hour slots of 1 s
    t = Trace(2, {0: np.array([[10.0, 20.0]]), 1: np.array([[2.0, 3.0], [40.0, 41.0]])}, {1: 50.0})
    for av in (m, d, t):
        for x in (0.0, 7.3, 21.0, 123.4):
            y = av.next_online(1, x, range(av.n))
            assert y >= x and av.online(1, y).any(), (av.model, x)
            if y > x:
                assert not av.online(1, (x + y) / 2).any() and not av.online(1, float(np.nextafter(y, 0))).any()
    # trace: client 1 repeats every 50 s (2-3, 40-41, 52-53 ...); client 0 never after 20 s
    assert [t.next_online(1, x, [0, 1]) for x in (0.0, 12.0, 21.0, 45.0)] == [2.0, 12.0, 40.0, 52.0]
    assert t.next_online(1, 21.0, [0]) is None and t.online_until(1, 40.5, [1]).tolist() == [41.0]
    # diurnal with no chance at any hour, and a trace without rows for the clients: never
    assert Diurnal(3, 0, 24.0, 0.0, 0.0, 12.0).next_online(1, 0.0, range(3)) is None
    assert Trace(3, {0: np.array([[0.0, 1.0]])}).next_online(1, 0.5, [1, 2]) is None


def test_trace_periods_are_checked(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("client,start_s,end_s,period_s\n0,0,10,100\n0,50,60,100\n1,5,6,\n")
    iv, per = read_trace(p)
    assert iv[0].tolist() == [[0.0, 10.0], [50.0, 60.0]] and per == {0: 100.0} and 1 not in per
    av = Trace(2, iv, per)
    assert av.online(1, 255.0).tolist() == [True, False] and av.online_until(1, 255.0, [0]).tolist() == [260.0]
    p.write_text("client,start_s,end_s,period_s\n0,0,10,100\n0,50,60,90\n")
    with pytest.raises(ValueError, match="different period_s"):
        read_trace(p)
    p.write_text("client,start_s,end_s,period_s\n0,0,110,100\n")
    with pytest.raises(ValueError, match="within its client's period_s"):
        read_trace(p)
    p.write_text("client,start_s,end_s,period_s\n0,0,10,0\n")
    with pytest.raises(ValueError, match="period_s must be > 0"):
        read_trace(p)
    # a period that ends online and starts online again goes on through the wrap
    wrap = Trace(1, {0: np.array([[0.0, 5.0], [90.0, 100.0]])}, {0: 100.0})
    assert wrap.online_until(1, 95.0, [0]).tolist() == [105.0]
    assert Trace(1, {0: np.array([[0.0, 100.0]])}, {0: 100.0}).online_until(1, 95.0, [0]).tolist() == [math.inf]


def test_trace_file_errors(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("client,start_s,end_s\n0,5,3\n")
    with pytest.raises(ValueError, match="end_s must be later"):
        read_trace(p)
    p.write_text("client,start_s,end_s\n0,0,1\n0,1,4\n25,0,1\n")
    with pytest.raises(ValueError, match="client id outside"):
        read_trace(p, 20)
    assert read_trace(p)[0][0].tolist() == [[0.0, 4.0]]  # touching intervals merged


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
    from fedselect.world.federation import build_federation

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
    from fedselect.world.system import compute_time

    k = 3
    n_k = fed.clients[k].num_samples
    got = compute_time(1, fed.client_bits(k), 20.0, fed.fleet.cores[k], fed.fleet.mean_mhz[k])
    assert got == pytest.approx(n_k / 400.0) and fed.fleet.mean_mbps[k] == pytest.approx(2.0)
    f.write_text("client,compute_speed,bandwidth_kbps\n0,10,10\n")
    with pytest.raises(ValueError, match="no row for clients"):
        build_federation(parse_experiment(doc(system={"capacity": {"model": "file", "file": str(f)}})))


# ---------------------------------------------------------------- many clients (issue 22 item 6)
def test_clients_are_views_of_the_training_set():
    from fedselect.world.federation import build_federation

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


# ---------------------------------------------------------------- simulated time never stands still (issue 34 item 1)
def _gap_trace(path, n: int, first_end: float, back: float | None) -> str:
    """Every client online in [0, first_end), then (``back``) again from ``back`` on."""
    rows = "".join(f"{k},0,{first_end}\n" + (f"{k},{back},inf\n" if back is not None else "") for k in range(n))
    path.write_text("client,start_s,end_s\n" + rows)
    return str(path)


def _gap_doc(trace: str, **over) -> dict:
    base = {
        "rounds": 6,
        "clients_per_round": 2,
        "checkpoint_every": 1,
        "data": {"dataset": "mnist-embedded", "num_clients": 6, "partition": {"scheme": "iid"}, "holdout_fraction": 0.0},
        "model": {"name": "mlp", "options": {"hidden": [8]}},
        "availability": {"model": "trace", "trace_file": trace},
    }
    return doc(**{**base, **over})


def test_everyone_offline_for_a_while_the_server_waits(tmp_path):
    """Everyone online in [0, 0.3 s), offline until 2 s. Round 3 runs into 0.3 s: client 1 goes
    offline then (dropout at 0.3 s), so round 3 ends at e2e 0.3 s exactly; nobody is online at
    0.3 s, so round 4 waits 2 - 0.3 = 1.7 s and starts at 2 s. (Before: rounds 4, 5, 6 started
    at 0.3 s with 0 clients online, selected nobody, lasted 0 s, and the run reported success.)"""
    run_experiment(parse_experiment(_gap_doc(_gap_trace(tmp_path / "t.csv", 6, 0.3, 2.0))), tmp_path / "r")
    rs = rows(tmp_path / "r")
    assert rs[3]["failed"] == "1:dropout" and float(rs[3]["e2e_latency_s"]) == 0.3
    w = [float(r["waited_s"]) for r in rs]
    assert w[4] == pytest.approx(1.7, abs=1e-12) and w[:4] == [0.0] * 4 and w[5:] == [0.0, 0.0]
    assert float(rs[4]["clock_s"]) == 2.0 and rs[4]["available"] == "6" and rs[4]["selected"] != ""
    # the wait counts in the end-to-end latency, not in the round's latency: every row ends at
    # its start (the previous end plus the wait) plus its round latency, exactly
    for prev, r in zip(rs, rs[1:]):
        assert float(r["clock_s"]) == float(prev["e2e_latency_s"]) + float(r["waited_s"])
        assert float(r["e2e_latency_s"]) == float(r["clock_s"]) + float(r["round_latency_s"])
    assert float(rs[4]["round_latency_s"]) < 0.3
    starts = [float(r["clock_s"]) for r in rs[1:]]
    assert all(b > a for a, b in zip(starts, starts[1:]))  # no two rounds at the same instant
    log = (tmp_path / "r" / "run.log").read_text()
    assert "round 4: no client online at 0.3 s; the server waits 1.7 s, until 2 s" in log


def test_a_trace_that_ends_stops_the_run_and_keeps_the_results(tmp_path):
    """The same trace without the second period: at round 4 nobody is online and nobody ever
    comes back. The run stops with an error naming round 4 and the trace's end; rows 0-3 and the
    round-3 checkpoint are kept, so `--resume` meets the same end."""
    from fedselect.experiment.checkpoint import load_checkpoint
    from fedselect.fl.availability import FleetGone

    cfg = parse_experiment(_gap_doc(_gap_trace(tmp_path / "t.csv", 6, 0.3, None)))
    with pytest.raises(FleetGone, match=r"round 4: no client is online at 0\.3 s .*last online interval ends at 0\.3 s"):
        run_experiment(cfg, tmp_path / "r")
    assert [r["round"] for r in rows(tmp_path / "r")] == ["0", "1", "2", "3"]
    assert load_checkpoint(tmp_path / "r")["round"] == 3 and not (tmp_path / "r" / "summary.json").exists()
    assert "ERROR" in (tmp_path / "r" / "run.log").read_text()
    with pytest.raises(FleetGone, match="round 4"):
        run_experiment(cfg, tmp_path / "r", resume=True)


def test_a_markov_fleet_that_starts_all_offline_waits_for_the_first_client(tmp_path):
    """Markov on/off with mean online 1 s and offline 1e4 s: client k starts online with
    probability 1 / (1 + 1e4) (none does with this seed), so round 1 waits for the end of the
    first offline period, Exp(1e4 s) drawn as -1e4 log(1 - u[k, 0]) with u from the generator
    ``availability/markov/0`` (fedselect.fl.availability.Markov), of the earliest client. Before,
    every round started at 0 s with nobody online and trained nobody."""
    from fedselect.common.seeding import np_rng

    n, seed = 6, 3
    start_on = np_rng(seed, "availability/markov/start").random(n) < 1.0 / (1.0 + 1e4)
    assert not start_on.any()
    first_off = -1e4 * np.log1p(-np_rng(seed, "availability/markov/0").random((n, 64))[:, 0])
    d = _gap_doc("unused", rounds=2, availability={"model": "markov", "mean_on_s": 1.0, "mean_off_s": 1e4})
    run_experiment(parse_experiment(d), tmp_path / "r")
    r1 = rows(tmp_path / "r")[1]
    assert float(r1["waited_s"]) == float(first_off.min()) and float(r1["clock_s"]) == float(first_off.min())
    assert r1["available"] == "1" and r1["selected"] == str(int(first_off.argmin()))


def test_a_resumed_run_with_a_wait_is_exact(tmp_path):
    cfg = parse_experiment(_gap_doc(_gap_trace(tmp_path / "t.csv", 6, 0.3, 2.0)))
    run_experiment(cfg, tmp_path / "full")
    run_experiment(cfg, tmp_path / "cut", stop_after=3)
    run_experiment(cfg, tmp_path / "cut", resume=True)
    assert (tmp_path / "cut" / "metrics.csv").read_bytes() == (tmp_path / "full" / "metrics.csv").read_bytes()


def test_cefl_waits_for_one_of_its_leaders(tmp_path):
    """CEFL's rounds train its cluster leaders only. With the leaders offline until 5 s while
    every other client is online, round 1 waits from the end of the warm-up until 5 s (before:
    rounds without anybody, at the warm-up's end, for ever)."""
    base = _gap_doc(
        "unused",
        rounds=2,
        method="cefl",
        method_options={"clusters": 2, "warmup_epochs": 1, "transfer_epochs": 1, "base_layers": 1},
        data={"dataset": "mnist-embedded", "num_clients": 6, "partition": {"scheme": "iid"}, "holdout_fraction": 0.2},
    )
    del base["availability"]
    run_experiment(parse_experiment(base), tmp_path / "find")
    leaders = [int(k) for k in rows(tmp_path / "find")[1]["selected"].split(";")]
    trace = tmp_path / "t.csv"
    trace.write_text("client,start_s,end_s\n" + "".join(f"{k},{5.0 if k in leaders else 0.0},inf\n" for k in range(6)))
    run_experiment(parse_experiment({**base, "availability": {"model": "trace", "trace_file": str(trace)}}), tmp_path / "r")
    rs = rows(tmp_path / "r")
    warmup = float(rs[0]["e2e_latency_s"])
    assert 0 < warmup < 5.0 and rs[1]["available"] == "6"
    assert float(rs[1]["clock_s"]) == 5.0 and float(rs[1]["waited_s"]) == pytest.approx(5.0 - warmup, abs=1e-12)
    assert [int(k) for k in rs[1]["selected"].split(";")] == leaders
    assert f"no client of {leaders} online" in (tmp_path / "r" / "run.log").read_text()


def test_rounds_no_clock_can_change_are_named(tmp_path, caplog):
    """Per-round draws have no clock to wait on: a bernoulli round with nobody online, and a
    round whose every participant dropped out without a deadline, take no time; each is a
    warning naming the cause. Every other empty round of no time is a bug (RuntimeError)."""
    import logging

    d = doc(rounds=6, clients_per_round=1, data={"dataset": "mnist-embedded", "num_clients": 2, "partition": {"scheme": "iid"}})
    with caplog.at_level(logging.WARNING, logger="fedselect"):
        run_experiment(parse_experiment({**d, "availability": {"model": "bernoulli", "p_online": 0.2}}), tmp_path / "b")
        run_experiment(parse_experiment({**d, "faults": {"dropout": 0.7}}), tmp_path / "f")
    empty = [r for r in rows(tmp_path / "b")[1:] if r["available"] == "0"]
    assert empty and all(float(r["round_latency_s"]) == 0.0 for r in empty)
    assert "in this round's bernoulli draw, which has no clock to wait on" in caplog.text
    dropped = [r for r in rows(tmp_path / "f")[1:] if r["aggregated"] == "0"]
    assert dropped and "every participant was unreachable in this round's fault draw" in caplog.text


def _shipped_fleet_configs() -> list:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "configs"
    return sorted(p for p in root.rglob("*.yaml") if "availability:" in p.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("mean_off_s", [None, 2000.0], ids=["as-shipped", "mostly-offline"])
@pytest.mark.parametrize("path", _shipped_fleet_configs(), ids=lambda p: p.stem)
def test_no_shipped_config_plays_two_rounds_at_one_instant(path, mean_off_s, tmp_path):
    """Every shipped config with an availability model, shrunk to 5 rounds of embedded MNIST over
    60 clients, every method: a row of no simulated time is one in which a client reported
    (async versions aggregated at the same moment), never an empty fleet. ``mostly-offline``
    makes offline periods 2000 s against 5 s online (0.15 of 60 clients online on average), so
    rounds and versions keep meeting an empty fleet and wait."""
    from fedselect.study.compare import load_compare

    shrink = {"rounds": 5, "data.dataset": "mnist-embedded", "data.num_clients": 60, "model.options.hidden": [8]}
    if mean_off_s is not None:
        shrink["availability.mean_off_s"] = mean_off_s
    cc = load_compare(path, shrink)
    assert cc.methods and all(cc.experiment(m, 0).availability.model != "always" for m in cc.methods)
    waited = 0.0
    for entry in cc.methods:
        run_experiment(cc.experiment(entry, cc.seeds[0]), tmp_path / entry.label.replace(" ", "_"), workers=0)
        rs = rows(tmp_path / entry.label.replace(" ", "_"))[1:]
        assert len(rs) == 5
        for r in rs:
            assert float(r["round_latency_s"]) > 0 or int(r["aggregated"]) > 0, (entry.label, r)
        ends = [float(r["e2e_latency_s"]) for r in rs]
        assert ends == sorted(ends)
        waited += sum(float(r["waited_s"]) for r in rs)
    assert (waited > 0) == (mean_off_s is not None)
