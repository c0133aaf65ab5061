"""Power-of-Choice (Cho, Wang, Joshi 2020): the U highest losses among d candidates drawn by data
share, the probing cost charged to the round, the cpow-d / rpow-d variants, a real run on the
embedded MNIST and exact kill-and-resume."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from fedselect.common.files import read_csv_rows
from fedselect.config.schema import ConfigError
from fedselect.experiment.resolve import parse_experiment, resolve
from fedselect.experiment.run import run_experiment
from fedselect.experiment.simulation import Simulation
from fedselect.fl.types import ClientCost, ClientOutcome, RunSettings
from fedselect.selectors.base import RoundView
from fedselect.selectors.power_of_choice import PowerOfChoice, PowerOfChoiceOptions
from fedselect.world.federation import build_federation
from support.tiny import tiny_doc, tiny_experiment

N_SAMPLES = np.arange(1, 11) * 10  # clients 0..9 hold 10, 20, ..., 100 samples: p_k = (k + 1) / 55
DOWN_BYTES = 1000


class FakeCtx:
    """A selector context with a hand-made cost model: one local epoch of client k computes for
    (k + 1) s, its download takes 0.5 s, and sending b bytes takes b / 100 s."""

    def __init__(self, u=2, num_samples=N_SAMPLES):
        self.settings = RunSettings(seed=7, rounds=10, num_clients=len(num_samples), clients_per_round=u, local_epochs=1)
        self.num_samples = np.asarray(num_samples)
        self.calls = []

    def client_cost(self, k, epochs, draws):
        self.calls.append((k, epochs))
        comp = epochs * (k + 1)
        return ClientCost(comp, 0.1, 0.5, comp + 0.1, 10, DOWN_BYTES)

    def transmit_s(self, num_bytes, k, draws):
        return num_bytes / 100


def fake_view(t, losses, log=None):
    def probe(ids, samples=None):
        if log is not None:
            log.append((list(ids), samples))
        return [losses[k] for k in ids]

    return RoundView(t, None, None, probe)


def test_picks_the_top_u_of_the_d_sampled_candidates():
    losses = [0.3, 2.0, 1.1, 0.7, 5.0, 0.2, 1.9, 0.4, 3.3, 1.0]
    sel = PowerOfChoice(FakeCtx(u=2), PowerOfChoiceOptions(d=4))
    for t in range(1, 30):
        log = []
        s = sel.select(fake_view(t, losses, log))
        cands = log[0][0]
        assert len(cands) == 4 == len(set(cands)) and log[0][1] is None  # pow-d scores all the data
        assert sel.pending["candidate_ids"] == cands
        want = sorted(cands, key=lambda k: -losses[k])[:2]
        assert list(s.clients) == want
        assert sel.pending["mean_candidate_loss"] == pytest.approx(np.mean([losses[k] for k in cands]))


def test_ties_go_to_the_lowest_id_and_nan_never_wins():
    sel = PowerOfChoice(FakeCtx(u=2), PowerOfChoiceOptions(d=10))  # every client is a candidate
    assert list(sel.select(fake_view(1, [1.0] * 10)).clients) == [0, 1]
    losses = [float("nan")] * 10
    losses[7], losses[3] = 0.1, 0.2
    assert list(sel.select(fake_view(2, losses)).clients) == [3, 7]


def successive_inclusion(p, d):
    """Exact P(k in A) when d ids are drawn one after another with probability proportional to p
    (renormalised over those not drawn yet)."""
    incl = np.zeros(len(p))
    for perm in itertools.permutations(range(len(p)), d):
        prob, left = 1.0, 1.0
        for k in perm:
            prob *= p[k] / left
            left -= p[k]
        incl[list(perm)] += prob
    return incl


def test_candidates_follow_the_data_share():
    p = N_SAMPLES / N_SAMPLES.sum()
    sel = PowerOfChoice(FakeCtx(u=2), PowerOfChoiceOptions(d=4))
    draws = 20000
    first, incl = np.zeros(10), np.zeros(10)
    for t in range(draws):
        log = []
        sel.select(fake_view(t + 1, [0.0] * 10, log))
        first[log[0][0][0]] += 1
        incl[log[0][0]] += 1
    # the first candidate is drawn with probability p_k; a standard error is at most 0.0035
    np.testing.assert_allclose(first / draws, p, atol=0.012)
    exact = successive_inclusion(p, 4)
    assert exact.sum() == pytest.approx(4.0)
    np.testing.assert_allclose(incl / draws, exact, atol=0.015)
    assert incl[9] > incl[0] * 5  # the biggest client is a candidate far more often than the smallest


def test_probing_cost_by_hand():
    ctx = FakeCtx(u=2)
    sel = PowerOfChoice(ctx, PowerOfChoiceOptions(d=4))
    log = []
    s = sel.select(fake_view(1, list(range(10)), log))
    cands = log[0][0]
    # candidate k: download 0.5 s + forward pass (1/3) * (k + 1) s + 4 bytes / 100 = 0.04 s
    want = max(0.5 + (k + 1) / 3 + 0.04 for k in cands)
    assert s.cost.latency_s == pytest.approx(want)
    assert (s.cost.upload_bytes, s.cost.download_bytes, s.cost.candidates) == (4 * 4, 4 * DOWN_BYTES, 4)
    assert sorted(ctx.calls) == sorted((k, pytest.approx(1 / 3)) for k in cands)


def test_cpow_d_scores_a_minibatch_and_pays_for_it_only():
    ctx = FakeCtx(u=2)
    sel = PowerOfChoice(ctx, PowerOfChoiceOptions(d=5, variant="cpow-d", minibatch_size=30))
    log = []
    s = sel.select(fake_view(1, list(range(10)), log))
    cands, samples = log[0]
    for k, idx in zip(cands, samples):
        b = min(30, N_SAMPLES[k])
        assert len(idx) == b == len(set(idx.tolist())) and 0 <= idx.min() and idx.max() < N_SAMPLES[k]
    want = max(0.5 + (1 / 3) * (k + 1) * min(30, N_SAMPLES[k]) / N_SAMPLES[k] + 0.04 for k in cands)
    assert s.cost.latency_s == pytest.approx(want) and s.cost.candidates == 5


def test_rpow_d_uses_last_reported_losses_without_probing():
    sel = PowerOfChoice(FakeCtx(u=2), PowerOfChoiceOptions(d=10, variant="rpow-d"))
    view = RoundView(1, None)  # no probe needed
    s = sel.select(view)
    assert list(s.clients) == [0, 1] and s.cost.latency_s == 0 and s.cost.candidates == 0  # unseen first (lowest ids)
    outs = [
        ClientOutcome(k, 1, None, 10, loss, 1, 1.0, 0.0, 0.0, 1.0, 0, 0, failed)
        for k, loss, failed in [(0, 0.5, None), (1, 9.0, "dropout")]
    ]
    sel.observe(1, outs, None)
    assert sel.last_loss[0] == 0.5 and math.isnan(sel.last_loss[1])  # a failed client keeps no loss
    sel.last_loss[:] = [0.5, 0.1, 3.0, 0.2, 0.9, 2.5, 0.3, 0.1, 0.1, 0.1]
    assert list(sel.select(RoundView(2, None)).clients) == [2, 5]


def test_options_and_check():
    with pytest.raises(ConfigError, match=r"d = 2 is below clients_per_round = 3"):
        parse_experiment({"method": "power_of_choice", "clients_per_round": 3, "method_options": {"d": 2}})
    with pytest.raises(ConfigError, match="variant"):
        parse_experiment({"method": "power_of_choice", "method_options": {"variant": "pow"}})
    cfg = parse_experiment({"method": "power_of_choice"})
    assert cfg.selector.options == {
        "variant": "pow-d",
        "d": None,
        "eval_compute_factor": 1 / 3,
        "minibatch_size": 64,
        "report_bytes": 4,
    }
    sel = PowerOfChoice(FakeCtx(u=3), PowerOfChoiceOptions())
    assert sel.d == 6
    assert PowerOfChoice(FakeCtx(u=3), PowerOfChoiceOptions(d=50)).d == 10  # capped at N


# ---------------------------------------------------------------- real runs on the embedded MNIST
def tiny(**over):
    return tiny_experiment(over.pop("method", "power_of_choice"), seed=2, **over)


@pytest.fixture(scope="module")
def fed():
    return build_federation(tiny())


def test_probing_appears_in_the_round_row(tmp_path, fed):
    cfg = tiny()
    run_experiment(cfg, tmp_path / "run", federation=fed)
    rows = read_csv_rows(tmp_path / "run" / "metrics.csv")
    sim = Simulation(resolve(cfg), fed)
    ctx = sim.ctx
    assert rows[0]["probe_latency_s"] == ""  # round 0 probes nothing
    for r in rows[1:]:
        t = int(r["round"])
        draws = fed.fleet.draw(t)
        cands = [int(k) for k in r["candidate_ids"].split(";")]
        chosen = [int(k) for k in r["selected"].split(";")]
        assert len(cands) == 6 and set(chosen) <= set(cands)  # d = 2U
        probe = max(
            ctx.client_cost(k, 1 / 3, draws).download_s + ctx.client_cost(k, 1 / 3, draws).compute_s + ctx.transmit_s(4, k, draws)
            for k in cands
        )
        train = [ctx.client_cost(k, 1, draws) for k in chosen]
        assert float(r["probe_latency_s"]) == pytest.approx(probe, rel=1e-12)
        assert float(r["round_latency_s"]) == pytest.approx(probe + max(c.latency_s for c in train), rel=1e-12)
        assert int(r["candidates_probed"]) == 6
        assert int(r["probe_upload_bytes"]) == 6 * 4
        assert int(r["probe_download_bytes"]) == 6 * ctx.download_bytes
        assert int(r["upload_bytes"]) == sum(c.upload_bytes for c in train) + 6 * 4
        assert int(r["download_bytes"]) == sum(c.download_bytes for c in train) + 6 * ctx.download_bytes
    # round 1 starts from the initial model: its chosen are the 3 highest initial losses of the candidates
    cands = [int(k) for k in rows[1]["candidate_ids"].split(";")]
    init = sim.algorithm.initial_state()
    losses = ctx.client_losses([sim.algorithm.start_state(init, k) for k in cands], cands)
    want = sorted(cands, key=lambda k: -losses[cands.index(k)])[:3]
    assert [int(k) for k in rows[1]["selected"].split(";")] == want
    assert float(rows[1]["mean_candidate_loss"]) == pytest.approx(np.mean(losses))


def same_run(a: Path, b: Path) -> None:
    assert (a / "metrics.csv").read_bytes() == (b / "metrics.csv").read_bytes()
    ma, mb = torch.load(a / "model.pt"), torch.load(b / "model.pt")
    assert list(ma) == list(mb) and all(torch.equal(ma[k], mb[k]) for k in ma)


@pytest.mark.parametrize("variant", ["pow-d", "cpow-d", "rpow-d"])
def test_kill_and_resume_is_exact(tmp_path, fed, variant):
    cfg = tiny(rounds=5, method_options={"variant": variant})
    run_experiment(cfg, tmp_path / "ref", federation=fed)
    run_experiment(cfg, tmp_path / "cut", federation=fed, stop_after=2)
    run_experiment(cfg, tmp_path / "cut", federation=fed, resume=True)
    same_run(tmp_path / "ref", tmp_path / "cut")


def test_unreachable_candidates_are_neither_charged_nor_chosen(tmp_path):
    """d = N = 6, U = 2, dropout 0.5 (issue: it picked [3, 2] in round 1 while 0 and 4 were
    reachable, and charged all 6 probes every round): every round the chosen are reachable
    whenever 2 are, and only the reachable candidates are probed and charged."""
    import csv

    from fedselect.experiment.resolve import parse_experiment
    from fedselect.experiment.run import make_simulation, run_experiment

    doc = tiny_doc(
        name="pow-dropout",
        seed=4,
        rounds=4,
        num_clients=6,
        hidden=16,
        selector={"name": "power_of_choice", "options": {"d": 6}},
        algorithm={"name": "fedavg"},
        faults={"dropout": 0.5},
    )
    run_experiment(parse_experiment(doc), tmp_path / "run")
    sim = make_simulation(parse_experiment(doc))
    faults, down_one = sim.faults, sim.algorithm.payload_bytes()[1]
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))[1:]
    for t, row in enumerate(rows, start=1):
        reachable = set(range(6)) - faults.unreachable(t)
        chosen = {int(k) for k in row["selected"].split(";")}
        assert int(row["candidates_probed"]) == len(reachable)
        assert int(row["probe_upload_bytes"]) == 4 * len(reachable)
        assert int(row["probe_download_bytes"]) == down_one * len(reachable)
        if len(reachable) >= 2:
            assert chosen <= reachable, (t, chosen, reachable)
        assert "dropout" not in row["failed"] or len(reachable) < 2
    assert any(len(set(range(6)) - faults.unreachable(t)) < 6 for t in range(1, 5))  # the case is exercised
