"""Client faults in the round loop: survivors re-weighted, failed rounds leave the model
bit-identical, NaN/inf updates rejected and logged, the round deadline, dropout per profile."""

from __future__ import annotations

import copy
import csv
import logging
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from fedselect.algorithms import register_algorithm
from fedselect.algorithms.fedavg import FedAvg
from fedselect.config.presets import PRESETS
from fedselect.experiment.resolve import parse_experiment
from fedselect.experiment.run import make_simulation, run_experiment
from fedselect.fl.faults import ClientFailure, FaultModel, Injection, corrupt_state, non_finite_entries, survivor_weights
from fedselect.selectors import register_selector
from fedselect.selectors.base import Selection, Selector
from fedselect.world.federation import Client, build_federation
from support.tiny import METHOD_OPTIONS

SIZES = {0: 40, 1: 60, 2: 50}


def doc(**over) -> dict:
    d = {
        "name": "faults",
        "seed": 2,
        "selector": {"name": "_probe"},
        "rounds": 3,
        "clients_per_round": 3,
        "checkpoint_every": 0,
        "data": {"dataset": "mnist-embedded", "num_clients": 6, "partition": {"scheme": "iid"}},
        "model": {"name": "mlp", "options": {"hidden": [8]}},
        "train": {"local_epochs": 1, "batch_size": 20, "lr": 0.05},
    }
    if "method" in over:
        d.pop("selector")
    d.update(over)
    return d


parse_config = parse_experiment


@register_selector
class Probe(Selector):
    """Selects clients 0, 1, 2 every round; records what the loop hands to observe()."""

    name = "_probe"
    wants_weights = True
    records: list = []

    def select(self, view):
        return Selection([0, 1, 2])

    def observe(self, t, outcomes, feedback):
        Probe.records.append(
            {"t": t, "updates": list(outcomes), "global": {k: v.clone() for k, v in feedback.global_state.items()}}
        )
        return {}


@register_algorithm
class Overflow(FedAvg):
    """An aggregate that overflows: every entry becomes +inf."""

    name = "_overflow"

    def aggregate(self, t, state, outcomes):
        return replace(state, model={k: torch.full_like(v, math.inf) for k, v in state.model.items()})


@pytest.fixture(scope="module")
def fed():
    """Clients 0, 1, 2 hold exactly 40, 60 and 50 training samples."""
    Probe.records = []
    base = build_federation(parse_config(doc(method="fedavg")))
    fed = copy.copy(base)
    clients = list(base.clients)
    for k, n in SIZES.items():
        c = clients[k]
        idx = c.train_indices[:n]
        clients[k] = Client(k, base.train_set.subset(idx, f"client{k}"), c.holdout, idx, c.holdout_indices)
    fed.clients = clients
    return fed


@pytest.fixture
def probe():
    Probe.records = []
    return Probe


def rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def weighted(states, weights):
    out = {}
    for name in states[0]:
        acc = torch.zeros_like(states[0][name], dtype=torch.float64)
        for s, w in zip(states, weights):
            acc += s[name].to(torch.float64) * w
        out[name] = acc.to(states[0][name].dtype)
    return out


def test_survivors_with_40_and_60_samples_get_weights_04_and_06(tmp_path, fed, probe, caplog):
    cfg = parse_config(doc(rounds=1, faults={"inject": [{"kind": "raise", "rounds": 1, "clients": 2}]}))
    with caplog.at_level(logging.INFO, logger="fedselect"):
        run_experiment(cfg, tmp_path, federation=fed)
    (rec,) = probe.records
    u0, u1, u2 = rec["updates"]
    assert [u.num_samples for u in (u0, u1, u2)] == [40, 60, 50]
    assert survivor_weights({0: 40, 1: 60}) == {0: 0.4, 1: 0.6}
    expected = weighted([u0.state, u1.state], [0.4, 0.6])
    for k, v in rec["global"].items():
        assert torch.equal(v, expected[k]), k
    assert "aggregated the survivors with weights n_k/sum n {0: 0.4, 1: 0.6}" in caplog.text
    # the failed client: its failure latency (compute only: nothing uploaded), no state
    assert u2.failed == "error" and u2.state is None and u2.upload_bytes == 0 and u2.download_bytes > 0
    assert u2.latency_s == pytest.approx(u2.compute_s) and u2.latency_s > 0
    r = rows(tmp_path)[1]
    assert r["failed"] == "2:error" and r["aggregated"] == "2" and r["round_failed"] == "0"
    assert int(r["upload_bytes"]) == u0.upload_bytes + u1.upload_bytes
    assert float(r["round_latency_s"]) == max(u0.latency_s, u1.latency_s, u2.latency_s)


@pytest.mark.parametrize("deadline", [None, 5.0])
def test_round_where_every_client_drops_leaves_the_model_bit_identical(tmp_path, fed, probe, deadline):
    system = {} if deadline is None else {"round_deadline_s": deadline}
    cfg = parse_config(doc(system=system, faults={"inject": [{"kind": "drop", "rounds": 2}]}))
    run_experiment(cfg, tmp_path, federation=fed)
    g1, g2, g3 = (r["global"] for r in probe.records)
    assert all(torch.equal(g1[k], g2[k]) for k in g1)
    assert not all(torch.equal(g2[k], g3[k]) for k in g2)  # round 3 trains again
    assert all(u.failed == "dropout" and u.state is None for u in probe.records[1]["updates"])
    r1, r2 = rows(tmp_path)[1:3]
    assert r2["failed"] == "0:dropout;1:dropout;2:dropout" and r2["round_failed"] == "1" and r2["aggregated"] == "0"
    assert r2["accuracy"] == r1["accuracy"] and r2["test_loss"] == r1["test_loss"]
    assert float(r2["round_latency_s"]) == (0.0 if deadline is None else deadline)
    assert r2["upload_bytes"] == r2["download_bytes"] == "0"


def test_dropout_one_keeps_the_initial_model(tmp_path, fed):
    cfg = parse_config(doc(method="fedavg", clients_per_round=2, faults={"dropout": 1.0}))
    summary = run_experiment(cfg, tmp_path, federation=fed)
    final = torch.load(tmp_path / "model.pt", weights_only=True)
    init = fed.new_model().state_dict()
    assert all(torch.equal(final[k], init[k]) for k in init)
    assert summary["failed_rounds"] == 3 and summary["client_failures"] == {"dropout": 6}


@pytest.mark.parametrize("kind", ["nan", "inf"])
def test_non_finite_update_is_rejected_and_logged(tmp_path, fed, probe, caplog, kind):
    cfg = parse_config(doc(rounds=1, faults={"inject": [{"kind": kind, "rounds": 1, "clients": [0]}]}))
    with caplog.at_level(logging.WARNING, logger="fedselect"):
        run_experiment(cfg, tmp_path, federation=fed)
    (rec,) = probe.records
    u0, u1, u2 = rec["updates"]
    assert u0.failed == kind and u0.state is None
    expected = weighted([u1.state, u2.state], [60 / 110, 50 / 110])
    assert all(torch.equal(rec["global"][k], expected[k]) for k in expected)
    assert all(torch.isfinite(v).all() for v in rec["global"].values())
    assert (
        f"round 1: client 0 update rejected, not averaged: non-finite values ({kind}) in ['net.1.bias', 'net.1.weight'"
        in caplog.text
    )
    r = rows(tmp_path)[1]
    assert r["failed"] == f"0:{kind}" and r["aggregated"] == "2"
    assert int(r["upload_bytes"]) == u0.upload_bytes + u1.upload_bytes + u2.upload_bytes  # it was sent, then rejected


def test_deadline_drops_the_straggler_and_the_round_lasts_the_deadline(tmp_path, fed, probe):
    run_experiment(parse_config(doc(rounds=1)), tmp_path / "free", federation=fed)
    lat = {u.client_id: u.latency_s for u in probe.records[0]["updates"]}
    order = sorted(lat, key=lat.get)
    deadline = (lat[order[1]] + lat[order[2]]) / 2
    probe.records.clear()
    run_experiment(parse_config(doc(rounds=1, system={"round_deadline_s": deadline})), tmp_path / "dl", federation=fed)
    ups = {u.client_id: u for u in probe.records[0]["updates"]}
    slow = ups[order[2]]
    assert slow.failed == "timeout" and slow.state is None and slow.latency_s == deadline and slow.upload_bytes == 0
    assert all(ups[k].failed is None for k in order[:2])
    n = {k: SIZES[k] for k in order[:2]}
    expected = weighted([ups[k].state for k in order[:2]], [n[k] / sum(n.values()) for k in order[:2]])
    assert all(torch.equal(probe.records[0]["global"][k], expected[k]) for k in expected)
    r = rows(tmp_path / "dl")[1]
    assert float(r["round_latency_s"]) == deadline and r["failed"] == f"{order[2]}:timeout"


def test_injected_timeout_needs_and_uses_the_deadline(tmp_path, fed, probe):
    cfg = parse_config(doc(rounds=1, system={"round_deadline_s": 100.0}, faults={"inject": [{"kind": "timeout", "clients": 1}]}))
    run_experiment(cfg, tmp_path, federation=fed)
    u = probe.records[0]["updates"][1]
    assert u.failed == "timeout" and u.latency_s == 100.0
    assert float(rows(tmp_path)[1]["round_latency_s"]) == 100.0


def test_dropout_by_device_profile(tmp_path, fed, probe):
    names = [d.name for d in fed.fleet.devices]
    assert names[0] not in (names[1], names[2])
    cfg = parse_config(doc(rounds=4, faults={"dropout_by_device": {names[0]: 1.0}}))
    run_experiment(cfg, tmp_path, federation=fed)
    for rec in probe.records:
        assert [u.failed for u in rec["updates"]] == ["dropout", None, None]
    assert [r["failed"] for r in rows(tmp_path)[1:]] == ["0:dropout"] * 4


def test_client_failure_raised_in_local_training_is_a_client_error_other_exceptions_stop_the_run(
    tmp_path, fed, probe, monkeypatch
):
    from fedselect.fl.local import pool

    real = pool.train_job

    def flaky(model, data, cfg, job, *a, **kw):
        if job.client_id == 1:
            raise ClientFailure("battery empty")
        return real(model, data, cfg, job, *a, **kw)

    monkeypatch.setattr(pool, "train_job", flaky)
    run_experiment(parse_config(doc(rounds=1)), tmp_path / "a", federation=fed)
    assert rows(tmp_path / "a")[1]["failed"] == "1:error"

    def broken(*a, **kw):
        raise KeyError("a bug")

    monkeypatch.setattr(pool, "train_job", broken)
    with pytest.raises(KeyError):
        run_experiment(parse_config(doc(rounds=1)), tmp_path / "b", federation=fed)


def test_non_finite_aggregate_is_not_committed(tmp_path, fed, probe, caplog):
    with caplog.at_level(logging.ERROR, logger="fedselect"):
        run_experiment(parse_config(doc(rounds=1, algorithm={"name": "_overflow"})), tmp_path, federation=fed)
    init = fed.new_model().state_dict()
    assert all(torch.equal(probe.records[0]["global"][k], init[k]) for k in init)
    assert rows(tmp_path)[1]["round_failed"] == "1" and rows(tmp_path)[1]["aggregated"] == "0"
    assert "the aggregate holds non-finite values in model" in caplog.text


def test_fault_model_probabilities_and_determinism():
    fm = FaultModel.build(7, ["a", "b", "a", "b"], ["x", "x", "y", "y"], dropout=0.5, dropout_by_device={"a": 0.5})
    assert fm.dropout.tolist() == [0.75, 0.5, 0.75, 0.5]
    assert np.array_equal(fm.dropped(3), fm.dropped(3)) and not all(
        np.array_equal(fm.dropped(3), fm.dropped(t)) for t in range(4, 10)
    )
    freq = np.mean([fm.dropped(t) for t in range(1, 801)], axis=0)
    assert np.allclose(freq, [0.75, 0.5, 0.75, 0.5], atol=0.05)
    assert not FaultModel.build(7, ["a"], ["x"]).dropped(1).any()
    with pytest.raises(
        ValueError, match=r"faults.dropout_by_network: unknown profile name\(s\) \['wifi'\]; profiles in this fleet: \['x', 'y'\]"
    ):
        FaultModel.build(7, ["a", "b"], ["x", "y"], dropout_by_network={"wifi": 0.1})
    with pytest.raises(ValueError, match=r"faults.dropout must be a probability in \[0, 1\], got 2"):
        FaultModel.build(7, ["a"], ["x"], dropout=2)
    inj = Injection("nan", frozenset({2}), None)
    assert FaultModel(0, np.zeros(3), [inj]).injected(2, 1) == "nan" and FaultModel(0, np.zeros(3), [inj]).injected(3, 1) is None


def test_corrupt_and_detect_non_finite_entries():
    state = {"w": torch.ones(2, 2), "b": torch.zeros(2), "n": torch.tensor(3)}
    bad = corrupt_state(state, "inf", keys=["w"])
    assert torch.isinf(bad["w"]).all() and torch.equal(bad["b"], state["b"]) and torch.equal(bad["n"], state["n"])
    assert non_finite_entries(bad) == {"w": "inf"} and non_finite_entries(bad, keys=["b", "n"]) == {}
    mixed = {"w": torch.tensor([math.inf, math.nan])}
    assert non_finite_entries(mixed) == {"w": "nan"}
    assert torch.equal(state["w"], torch.ones(2, 2))  # the original is untouched
    with pytest.raises(ValueError, match="kind must be 'nan' or 'inf'"):
        corrupt_state(state, "zero")


@pytest.mark.parametrize("method", sorted(PRESETS))
def test_every_method_runs_through_failures(tmp_path, fed, method):
    """Dropout, a NaN client in round 2 and a deadline: every method finishes, records the
    failures and receives the failed updates in observe()."""
    cfg = parse_config(
        doc(
            method=method,
            clients_per_round=3,
            method_options=copy.deepcopy(METHOD_OPTIONS.get(method, {})),
            faults={"dropout": 0.3, "inject": [{"kind": "nan", "rounds": 2, "clients": "all"}]},
            system={"round_deadline_s": 0.5},
        )
    )
    summary = run_experiment(cfg, tmp_path, federation=fed)
    assert summary["complete"] and summary["rounds"] == 3
    r = rows(tmp_path)
    assert all(math.isfinite(float(x["accuracy"])) for x in r)
    uploads = make_simulation(cfg, fed).algorithm.upload_keys() != []  # Individual uploads nothing: nothing to poison
    if r[2]["selected"] and uploads:  # every participant of round 2 is poisoned (or dropped / late): the round fails
        assert r[2]["round_failed"] == "1" and r[2]["aggregated"] == "0"
        assert len(r[2]["failed"].split(";")) == len(r[2]["selected"].split(";"))


def test_one_list_of_failure_kinds_and_an_outcome_refuses_any_other():
    from fedselect.fl.faults import INJECT_KINDS
    from fedselect.fl.types import FAILURE_KINDS, ClientOutcome

    assert FAILURE_KINDS == ("dropout", "error", "nan", "inf", "timeout", "cancelled")
    assert set(INJECT_KINDS.values()) <= set(FAILURE_KINDS)
    ok = ClientOutcome(3, 1, None, 10, math.nan, 0, 0.0, 0.0, 0.0, 1.5, 0, 0)
    assert ok.ok and all(replace(ok, failed=kind).failed == kind for kind in FAILURE_KINDS)
    with pytest.raises(ValueError, match=r"client 3: unknown failure kind 'crash'; allowed: \['dropout', 'error', "):
        replace(ok, failed="crash")
