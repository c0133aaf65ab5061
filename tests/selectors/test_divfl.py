"""DivFL (Balakrishnan et al., ICLR 2022): the dissimilarities and the greedy facility location
by hand on 5 clients, the stochastic greedy, the warm-up's representatives and a run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedselect.kernels.facility import facility_cost, greedy, stochastic_subset_size
from fedselect.kernels.representatives import Representatives, dissimilarities
from support.tiny import tiny_experiment


def test_dissimilarities_by_hand():
    g = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 2.0]], dtype=np.float32)
    l2, l1, ang = (dissimilarities(g, g, m) for m in ("L2", "L1", "arccos"))
    assert l2[0, 1] == pytest.approx(5.0) and l1[0, 1] == pytest.approx(7.0)
    assert ang[0, 1] == pytest.approx(math.pi / 2) and ang[1, 1] == 0.0  # a zero vector: pi/2 from the others, 0 from itself
    assert ang[2, 3] == pytest.approx(math.pi) and ang[2, 4] == pytest.approx(math.pi / 2)
    assert ang[0, 2] == pytest.approx(math.acos(3 / 5))
    with pytest.raises(ValueError, match="unknown dissimilarity"):
        dissimilarities(g, g, "cosine")


def test_representatives_update_only_their_rows_and_columns():
    reps = Representatives(3, 2, "L2")
    assert reps.matrix.tolist() == [[0.0] * 3] * 3  # all zero: nothing tells them apart yet
    reps.update([1], np.array([[3.0, 4.0]]))
    assert reps.matrix[1].tolist() == [5.0, 0.0, 5.0] and reps.matrix[:, 1].tolist() == [5.0, 0.0, 5.0]
    assert reps.matrix[0, 2] == 0.0 and reps.known.tolist() == [False, True, False]


# five clients on a line (updates (x, 0)), x = 0, 2, 3, 7, 12: d(j, i) = |x_j - x_i|
X = [0.0, 2.0, 3.0, 7.0, 12.0]


def _dist():
    reps = Representatives(5, 2, "L2")
    reps.update(range(5), np.array([[x, 0.0] for x in X]))
    return reps.matrix


def test_greedy_order_by_hand_on_five_clients():
    """Step 1, L({i}) = sum_j |x_j - x_i|: 24, 18, 17, 21, 36: client 2 (17).
    Step 2, nearest distances so far (3, 1, 0, 4, 9); adding 0: 0+1+0+4+9 = 14, 1: 2+0+0+4+9 = 15,
    3: 3+1+0+0+5 = 9, 4: 3+1+0+4+0 = 8: client 4 (8).
    Step 3, (3, 1, 0, 4, 0); adding 0: 0+1+0+4+0 = 5, 1: 2+0+0+4+0 = 6, 3: 3+1+0+0+0 = 4: client 3 (4)."""
    d = _dist()
    assert d[:, 2].sum() == pytest.approx(17.0)
    assert greedy(d, 3) == [2, 4, 3]
    assert [facility_cost(d, greedy(d, k)) for k in (1, 2, 3)] == pytest.approx([17.0, 8.0, 4.0])
    assert greedy(d, 2, candidates=[0, 1, 3]) == [1, 3]  # only online candidates; every client is still represented
    assert greedy(d, 9) == [2, 4, 3, 0, 1]  # capped at the candidates


def test_stochastic_greedy():
    d = _dist()
    assert stochastic_subset_size(100, 10, 0.1) == math.ceil(10 * math.log(10))  # 24
    assert greedy(d, 3, rng=np.random.default_rng(0), subset=5) == [2, 4, 3]  # the subset is everyone: exact greedy
    runs = {tuple(greedy(d, 2, rng=np.random.default_rng(s), subset=2)) for s in range(30)}
    assert (2, 4) in runs and len(runs) > 1  # random subsets: other (worse) sets too
    a, b = np.random.default_rng(7), np.random.default_rng(7)
    assert greedy(d, 3, rng=a, subset=2) == greedy(d, 3, rng=b, subset=2)  # the caller's generator only
    with pytest.raises(ValueError, match="both"):
        greedy(d, 2, rng=np.random.default_rng(0))


def test_the_warm_up_gives_every_client_its_update_and_is_charged():
    from fedselect.experiment.run import make_simulation

    sim = make_simulation(tiny_experiment("divfl"))
    prepared = sim.selector.prepare()
    init = sim.ctx.initial_state()
    state, _ = sim.ctx.train(5, init, 1, "divfl-warmup", 0)  # the same stream as client 5's warm-up
    flat = lambda s: torch.cat([s[n].reshape(-1).float() for n in sim.ctx.parameter_names]).numpy()  # noqa: E731
    assert sim.selector.updates.reps.vectors[5] == pytest.approx(flat(state) - flat(init), abs=1e-6)
    costs = [sim.ctx.client_cost(k, 1, sim.ctx.draw(0)) for k in range(8)]
    assert prepared.cost.latency_s == pytest.approx(max(c.latency_s for c in costs))
    assert prepared.cost.upload_bytes == sum(c.upload_bytes for c in costs)
    sim.close()


@pytest.mark.slow
def test_divfl_runs_and_refreshes_its_participants(tmp_path):
    from fedselect.experiment.run import run_experiment

    s = run_experiment(tiny_experiment("divfl", method_options={"greedy": "stochastic"}), tmp_path / "r")
    rows = (tmp_path / "r" / "metrics.csv").read_text().splitlines()
    head = rows[0].split(",")
    cost = [float(r.split(",")[head.index("facility_cost")]) for r in rows[2:]]
    assert all(c > 0 for c in cost) and s["rounds"] == 4
    assert float(rows[1].split(",")[head.index("round_latency_s")]) > 0  # the warm-up, charged in round 0
