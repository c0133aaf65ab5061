"""AFL (Goetz et al. 2019): the probabilities by hand, the cut clients, the uniform share and the
valuations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedselect.fl.types import ClientOutcome, RunSettings
from fedselect.selectors.afl import AFL, AFLOptions, afl_probabilities
from fedselect.selectors.base import RoundView
from support.tiny import tiny_experiment


def test_probabilities_by_hand():
    # values 3, 1, 2 and an unvalued client; alpha1 0.5 cuts the 2 lowest (1 and 2); the unvalued client
    # weighs as much as the best valued one: P = e^(3) / (2 e^(3)) each
    p = afl_probabilities(np.array([3.0, 1.0, 2.0, np.nan]), 0.5, 1.0, np.zeros(4))
    assert p.tolist() == pytest.approx([0.5, 0.0, 0.0, 0.5])
    # no cut, alpha2 = 1: softmax of 0, ln 2, ln 3 (and an unvalued client at the top value ln 3): 1, 2, 3, 3 over 9
    p = afl_probabilities(np.array([0.0, math.log(2), math.log(3), np.nan]), 0.0, 1.0, np.zeros(4))
    assert p.tolist() == pytest.approx([1 / 9, 2 / 9, 3 / 9, 3 / 9])
    # ties are cut by the tiebreak: four unvalued clients, alpha1 0.5: the two lowest tiebreaks go
    p = afl_probabilities(np.full(4, np.nan), 0.5, 0.01, np.array([0.9, 0.1, 0.5, 0.3]))
    assert p.tolist() == pytest.approx([0.5, 0.0, 0.5, 0.0])
    assert afl_probabilities(np.array([1e6, 0.0]), 0.0, 1.0, np.zeros(2))[0] == pytest.approx(1.0)  # no overflow


class _Ctx:
    def __init__(self, sizes):
        self.num_samples = np.asarray(sizes)
        self.settings = RunSettings(seed=2, rounds=5, num_clients=len(sizes), clients_per_round=5, local_epochs=1)


def _outcome(k, n, loss, failed=None):
    return ClientOutcome(k, 1, None, n, loss, 1, 0.0, 0.0, 0.0, 0.0, 0, 0, failed)


def test_valuations_and_the_cut():
    sizes = [100, 25, 64, 49, 36, 16, 81, 9, 4, 1]
    sel = AFL(_Ctx(sizes), AFLOptions(alpha3=0.0))
    cols = sel.observe(1, [_outcome(k, sizes[k], 0.5) for k in range(10)], None)
    # v_k = sum of losses / sqrt(n_k) = sqrt(n_k) x mean loss: 10 x 0.5 = 5 for client 0
    assert sel.values.tolist() == pytest.approx([math.sqrt(n) * 0.5 for n in sizes])
    assert cols["mean_valuation"] == pytest.approx(np.mean([math.sqrt(n) * 0.5 for n in sizes]))
    sel.observe(2, [_outcome(0, 100, math.nan, "dropout")], None)
    assert sel.values[0] == pytest.approx(5.0)  # a failed client keeps its valuation
    top = {0, 6, 2}  # alpha1 0.75 of 10: the 7 lowest valuations cut, the 3 highest (sqrt 100, 81, 64) stay
    for _ in range(30):
        s = sel.select(RoundView(3, None, count=3))
        assert set(s.clients) == top  # alpha3 0: every place is drawn by P, over the 3 that are left


def test_a_share_of_places_is_uniform():
    sizes = list(range(1, 21))
    sel = AFL(_Ctx(sizes), AFLOptions())  # alpha3 0.1: of 10 places, 9 by P and 1 uniformly
    sel.observe(1, [_outcome(k, sizes[k], 1.0) for k in range(20)], None)
    kept = set(np.argsort(sel.values)[-5:].tolist())  # alpha1 0.75 of 20: 15 cut, the 5 largest kept
    outside = 0
    for _ in range(40):
        s = sel.select(RoundView(2, None, count=10))
        assert len(set(s.clients)) == 10 and kept <= set(s.clients)  # only 5 are drawable by P: all of them
        outside += len(set(s.clients) - kept)
    assert outside == 40 * 5  # min(9, 5 drawable) = 5 places by P; the other 5 uniformly among the 15 left


def test_round_one_is_uniform_over_the_clients():
    sel = AFL(_Ctx([10] * 8), AFLOptions())
    seen = np.zeros(8)
    for _ in range(400):
        for k in sel.select(RoundView(1, None, count=2)).clients:
            seen[k] += 1
    assert seen.sum() == 800 and np.all(np.abs(seen / 800 - 1 / 8) < 0.05)


@pytest.mark.slow
def test_afl_runs(tmp_path):
    from fedselect.experiment.run import run_experiment

    s = run_experiment(tiny_experiment("afl"), tmp_path / "r")
    rows = (tmp_path / "r" / "metrics.csv").read_text().splitlines()
    head = rows[0].split(",")
    valued = [int(r.split(",")[head.index("valued_clients")]) for r in rows[2:]]  # rounds 1..4
    assert valued[0] == 0 and valued == sorted(valued) and s["rounds"] == 4
