"""Oort (Lai et al., OSDI 2021): kernels with hand-computed values, the per-sample loss statistics
of real local training, the selector's exploration / exploitation on a hand-made fleet, an
end-to-end run on the embedded MNIST and exact kill-and-resume."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from fedselect.common.files import read_csv_rows
from fedselect.common.seeding import torch_rng
from fedselect.config.schema import ConfigError
from fedselect.experiment.resolve import parse_experiment, resolve
from fedselect.experiment.run import run_experiment
from fedselect.experiment.simulation import Simulation
from fedselect.fl.local.train import TrainConfig, iterate_minibatches, local_train, make_optimizer
from fedselect.fl.round import updates
from fedselect.fl.types import ClientOutcome, RunSettings
from fedselect.kernels.oort import (
    blacklist,
    normalise_utilities,
    pacer_update,
    preferred_duration,
    speed_penalty,
    staleness_bonus,
    statistical_utility,
)
from fedselect.kernels.sampling import weighted_sample
from fedselect.selectors.base import RoundView
from fedselect.selectors.oort import Oort, OortOptions
from fedselect.world.data.datasets import ArrayDataset
from fedselect.world.federation import build_federation
from support.tiny import tiny_experiment


# ---------------------------------------------------------------- kernels, by hand
def test_statistical_utility_uses_every_sample_loss():
    # per-sample losses [1, 1, 1, 3] over two mini-batches of 2, |B_k| = 4:
    # U = 4 * sqrt((1 + 1 + 1 + 9) / 4) = 4 * sqrt(3) = 6.928..., not the last batch's 2 * sqrt(5) = 4.47
    u = statistical_utility(1 + 1 + 1 + 9, 4, 4)
    assert u == pytest.approx(4 * math.sqrt(3)) and round(u, 2) == 6.93
    assert abs(u - 2 * math.sqrt((1 + 9) / 2)) > 2
    assert statistical_utility(0.0, 0, 10) == 0.0
    with pytest.raises(ValueError, match="sum_sq_loss"):
        statistical_utility(float("nan"), 3, 3)


def test_local_train_sample_loss_stats_by_hand():
    """A model whose per-sample cross-entropies are exactly [1, 1, 1, 3]: logits (z, 0) with label 1
    give CE = log(1 + e^z), so z = log(e^L - 1). Learning rate 0 keeps the model fixed; batch size 2
    makes two mini-batches."""
    losses = np.array([1.0, 1.0, 1.0, 3.0])
    z = np.log(np.expm1(losses)).astype(np.float32)[:, None]
    data = ArrayDataset(z, np.ones(4, dtype=np.int64), 2)
    model = nn.Linear(1, 2)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0], [0.0]]))
        model.bias.zero_()
    stats: dict = {}
    local_train(
        model, data, TrainConfig(batch_size=2, lr=0.0, momentum=0.0), torch.Generator().manual_seed(0), epochs=1, stats=stats
    )
    assert stats["num_sample_losses"] == 4
    assert stats["sum_sq_sample_loss"] == pytest.approx(12.0, rel=1e-6)
    assert statistical_utility(stats["sum_sq_sample_loss"], stats["num_sample_losses"], len(data)) == pytest.approx(
        4 * math.sqrt(3), rel=1e-6
    )


def test_speed_penalty_by_hand():
    assert speed_penalty(2.0, 1.0, 2.0) == pytest.approx(0.25)  # t_k = 2T, alpha = 2
    assert speed_penalty(4.0, 2.0, 1.0) == pytest.approx(0.5)
    assert speed_penalty(0.5, 1.0, 2.0) == 1.0 and speed_penalty(1.0, 1.0, 2.0) == 1.0  # not slower than T
    assert speed_penalty(100.0, math.inf, 2.0) == 1.0
    np.testing.assert_allclose(speed_penalty(np.array([1.0, 3.0]), 1.5, 2.0), [1.0, 0.25])


def test_staleness_bonus_by_hand():
    assert staleness_bonus(10, 2) == pytest.approx(math.sqrt(0.1 * math.log(10) / 2))  # 0.3393
    assert staleness_bonus(1, 1) == 0.0
    np.testing.assert_allclose(staleness_bonus(5, np.array([1, 4])), np.sqrt(0.1 * math.log(5) / np.array([1.0, 4.0])))
    with pytest.raises(ValueError):
        staleness_bonus(3, 0)


def test_preferred_duration_percentile():
    d = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert preferred_duration(d, 30) == 2.0  # sorted[int(5 * 0.3) = 1]
    assert preferred_duration(d, 0) == 1.0 and preferred_duration(d, 99.9) == 5.0
    assert preferred_duration(d, 100) == math.inf


def test_pacer_relaxes_tightens_and_waits():
    flat = [1.0] * 40
    assert pacer_update(flat, 30.0, 20, 5.0, 40) == (35.0, "relax")  # |20 - 20| <= 2
    assert pacer_update(flat[:39], 30.0, 20, 5.0, 39) == (30.0, "")  # not a pacer round
    assert pacer_update(flat[:20], 30.0, 20, 5.0, 20) == (30.0, "")  # fewer than two windows
    assert pacer_update([1.0] * 20 + [10.0] * 20, 30.0, 20, 5.0, 40) == (25.0, "tighten")  # |200 - 20| >= 100
    assert pacer_update([1.0] * 20 + [1.5] * 20, 30.0, 20, 5.0, 40) == (30.0, "")  # +50 %: kept
    assert pacer_update([1.0] * 20 + [10.0] * 20, 5.0, 20, 5.0, 40) == (5.0, "tighten")  # floor at delta
    assert pacer_update(flat, 98.0, 20, 5.0, 40) == (100.0, "relax")  # cap at 100


def test_pacer_follows_the_artifact_rule_by_hand():
    # W = 2, delta = 10: windows [10, 10] then [9.5, 9.5]: |19 - 20| = 1 <= 0.1 x 20 = 2, the
    # utility fell (flattened): T relaxed, 30 -> 40 percentile points
    assert pacer_update([10.0, 10.0, 9.5, 9.5], 30.0, 2, 10.0, 4) == (40.0, "relax")
    # a rising window ([10, 10] then [15, 15]: |30 - 20| = 10 > 2 and < 5 x 20) keeps T
    assert pacer_update([10.0, 10.0, 15.0, 15.0], 30.0, 2, 10.0, 4) == (30.0, "")
    # the artifact relaxes only a flat window: a fall of more than 10 % ([10, 10] -> [5, 5]) keeps T
    assert pacer_update([10.0, 10.0, 5.0, 5.0], 30.0, 2, 10.0, 4) == (30.0, "")
    # pacer_delta 0 is the artifact's "Oort w/o Pacer": nothing moves
    assert pacer_update([1.0] * 4, 30.0, 2, 0.0, 4) == (30.0, "relax")
    with pytest.raises(ValueError, match="delta"):
        pacer_update([1.0] * 4, 30.0, 2, -1.0, 4)


def test_blacklist_kernel_by_hand():
    # counts [3, 5, 1, 4], R = 2: clients 1 (5), 3 (4), 0 (3) trained more than twice; at most
    # floor(0.5 x 4) = 2 of them, the most-trained: clients 1 and 3
    assert blacklist([3, 5, 1, 4], 2, 0.5).tolist() == [1, 3]
    assert blacklist([3, 5, 1, 4], 2, 1.0).tolist() == [0, 1, 3]
    assert blacklist([3, 5, 1, 4], -1, 1.0).tolist() == []  # -1: off (the artifact's default)
    assert blacklist([3, 5, 1, 4], 5, 1.0).tolist() == []  # nobody trained more than 5 times
    assert blacklist([2, 2, 2, 0], 1, 0.5).tolist() == [0, 1]  # ties: lowest id first
    assert blacklist([9, 9, 9], 0, 0.3).tolist() == []  # floor(0.3 x 3) = 0
    assert blacklist([9] * 10, 0, 0.3).tolist() == [0, 1, 2]  # floor(0.3 x 10) = 3 (not 2.999...)
    with pytest.raises(ValueError, match="blacklist rounds"):
        blacklist([1], -2, 0.3)
    with pytest.raises(ValueError, match="blacklist share"):
        blacklist([1], 1, 1.5)


def test_normalise_utilities_clips_and_scales():
    # positive [2, 4, 6, 100]; clip at sorted[int(4 * 0.5) = 2] = 6; range [2 * 0.999, 6]
    out = normalise_utilities(np.array([0.0, 2.0, 4.0, 6.0, 100.0]), 0.5)
    low, width = 1.998, 6 - 1.998
    np.testing.assert_allclose(out, [0.0, (2 - low) / width, (4 - low) / width, 1.0, 1.0])
    assert (normalise_utilities(np.zeros(3), 0.95) == 0).all()


def test_weighted_sample_distinct_and_zero_weights_last():
    rng = np.random.default_rng(0)
    for _ in range(50):
        got = weighted_sample(rng, np.arange(6), np.array([0, 1.0, 0, 2.0, 0, 0]), 3)
        assert len(set(got)) == 3 and {1, 3} <= set(got)
    with pytest.raises(ValueError):
        weighted_sample(rng, np.arange(2), np.ones(2), 3)


# ---------------------------------------------------------------- the selector on a hand-made fleet
def fake_ctx(num_samples, expected, u):
    n = len(num_samples)
    return SimpleNamespace(
        settings=RunSettings(seed=1, rounds=10, num_clients=n, clients_per_round=u, local_epochs=1),
        num_samples=np.array(num_samples),
        expected_latency_s=lambda epochs=None: np.array(expected, float),
    )


def outcome(k, t, n_k, sum_sq, count, latency, failed=None):
    return ClientOutcome(k, t, None, n_k, 1.0, 1, latency, 0.0, 0.0, latency, 0, 0, failed, sum_sq, count)


def view(t):
    return RoundView(t, None)


def test_exploration_prefers_big_fast_clients():
    # T = sorted([1, 1, 1, 1, 1, 10])[int(6 * 0.3) = 1] = 1 s; client 5 (60 samples, 10 s) scores
    # 60 * (1/10)^2 = 0.6, below everyone; the top two by size are clients 1 (50) and 2 (40)
    ctx = fake_ctx([10, 50, 40, 30, 20, 60], [1, 1, 1, 1, 1, 10], 2)
    sel = Oort(ctx, OortOptions(sample_window=1.0))
    s = sel.select(view(1))
    assert set(s.clients) == {1, 2}
    cols = sel.observe(1, [outcome(1, 1, 50, 4.0 * 20, 20, 1.5), outcome(2, 1, 40, 1.0 * 10, 10, 0.8)], None)
    assert cols["epsilon"] == 0.9 and cols["explored"] == 2 and cols["exploited"] == 0
    assert cols["preferred_duration_s"] == 1.0
    assert cols["mean_utility"] == pytest.approx((50 * 2.0 + 40 * 1.0) / 2)  # U = |B| sqrt(mean sq)
    assert sel.utility[1] == pytest.approx(100.0) and sel.duration[1] == 1.5 and sel.last_round[2] == 1
    assert sel.epsilon == pytest.approx(0.9 * 0.98)


def test_exploitation_penalises_slow_clients_and_cuts_off():
    ctx = fake_ctx([10] * 5, [1.0] * 5, 2)

    def primed(**opts):
        sel = Oort(ctx, OortOptions(cut_off=1.0, clip_bound=1.0, **opts))
        sel.explored[:] = True
        sel.last_round[:] = 1
        sel.utility[:] = [10.0, 50.0, 40.0, 30.0, 100.0]
        sel.duration[:] = [1.0, 1.0, 1.0, 1.0, 8.0]
        return sel

    # T = 1 s; client 4 has the highest utility but (1/8)^2 = 1/64 of its score; with cut_off 1 the
    # pool is exactly the top two: clients 1 and 2, every time
    for seed_round in range(2, 8):
        assert set(primed().select(view(seed_round)).clients) == {1, 2}
    assert set(primed(round_penalty=0.0).select(view(2)).clients) == {4, 1}  # no speed penalty
    sel = primed()
    sel.select(view(2))
    assert sel.pending["epsilon"] == 0.0 and sel.pending["exploited"] == 2  # nothing left to explore


def test_epsilon_decays_to_its_floor_and_failures_get_zero_utility():
    ctx = fake_ctx([10] * 40, [1.0] * 40, 1)
    sel = Oort(ctx)
    eps = []
    for t in range(1, 90):
        s = sel.select(view(t))
        k = s.clients[0]
        failed = "dropout" if t == 3 else None
        eps.append(
            sel.observe(
                t, [outcome(k, t, 10, 0.0 if failed else 40.0, 0 if failed else 10, 0.0 if failed else 2.0, failed)], None
            )["epsilon"]
        )
        if t == 3:
            assert sel.utility[k] == 0.0 and sel.duration[k] == 1.0  # a dropout keeps its duration
            assert not sel.explored[k] and sel.last_round[k] == 0  # it never reported a result: unexplored
    assert eps[0] == 0.9 and eps[1] == pytest.approx(0.882)
    # 40 clients explored one per round (U = 1, int(1 * (1 - eps)) = 0); round 3's dropout stays
    # unexplored, so exploring them all takes 41 rounds, then every slot exploits
    assert eps[40] == pytest.approx(0.9 * 0.98**40) and eps[41] == 0.0 and sel.explored.all()
    assert sel.epsilon == 0.2  # the internal eps reached its floor (0.9 * 0.98^t < 0.2 from t = 75)
    # a timeout is a straggler (FedScale): the round's mean utility (nobody succeeded: 0) and the
    # latency of its whole work, 12 s, not the 7.5 s deadline it was cut at
    sel.observe(90, [replace(outcome(0, 90, 10, 0.0, 0, 7.5, "timeout"), planned_latency_s=12.0)], None)
    assert sel.utility[0] == 0.0 and sel.duration[0] == 12.0 and sel.explored[0]


def test_options_are_validated():
    with pytest.raises(ConfigError, match="exploration_min"):
        parse_experiment({"selector": {"name": "oort", "options": {"exploration_min": 0.95}}, "algorithm": {"name": "fedavg"}})
    with pytest.raises(ConfigError, match="unknown key"):
        parse_experiment({"method": "oort", "method_options": {"alpha": 2}})
    for key, bad, why in (
        ("blacklist_rounds", -2, "greater than or equal to -1"),
        ("blacklist_rounds", 1.5, "a valid integer"),
        ("blacklist_max_len", 1.5, "less than or equal to 1"),
        ("pacer_delta", -1.0, "greater than or equal to 0"),
        ("pacer_step", 0, "greater than or equal to 1"),
        ("round_threshold", 101.0, "less than or equal to 100"),
        ("exploration_decay", 0.0, "greater than 0"),
        ("cut_off", 0.0, "greater than 0"),
        ("sample_window", 0.5, "greater than or equal to 1"),
    ):
        with pytest.raises(ConfigError, match=rf"selector\.options\.{key}: Input should be {why}"):
            parse_experiment({"selector": {"name": "oort", "options": {key: bad}}, "algorithm": {"name": "fedavg"}})
        with pytest.raises(ConfigError, match=rf"method_options\.{key}"):
            parse_experiment({"method": "oort", "method_options": {key: bad}})
    # the artifact's name cut_off_util is refused with a pointer to ours (its FedScale value 0.05 is another rule)
    with pytest.raises(ConfigError, match="cut_off_util: the artifact's name of the option cut_off"):
        parse_experiment({"selector": {"name": "oort", "options": {"cut_off_util": 0.95}}, "algorithm": {"name": "fedavg"}})
    cfg = parse_experiment({"method": "oort"})
    assert cfg.selector.options == OortOptions().model_dump(mode="json")
    assert cfg.selector.options["round_threshold"] == 30.0 and cfg.selector.options["pacer_step"] == 20


def explored_fleet(utilities, durations, u, **opts):
    """An Oort whose clients have all trained once (in round 1): eps is 0, every slot exploits."""
    n = len(utilities)
    sel = Oort(fake_ctx([10] * n, durations, u), OortOptions(**opts))
    sel.explored[:] = True
    sel.count[:] = 1
    sel.last_round[:] = 1
    sel.utility[:] = utilities
    sel.duration[:] = durations
    return sel


def trained(k, t, utility, latency=1.0):
    """An outcome whose statistical utility is ``utility``: |B| = 10, 10 losses of (utility / 10)^2."""
    return outcome(k, t, 10, (utility / 10) ** 2 * 10, 10, latency)


def test_blacklist_excludes_a_client_after_it_trained_more_than_blacklist_rounds_times():
    # clients 0..4, utilities [100, 1, 2, 3, 4], every duration 1 s (no speed penalty), U = 1,
    # cut_off 1: the pool is the top client only. Round 2: client 0 scores norm 1 + sqrt(0.1 ln 2)
    # = 1.263 against 0.0303 + 0.263 for client 4, so client 0 is exploited.
    sel = explored_fleet([100.0, 1.0, 2.0, 3.0, 4.0], [1.0] * 5, 1, cut_off=1.0, clip_bound=1.0, blacklist_rounds=2)
    for t in (2, 3):  # client 0 has trained 1, then 2 times: not more than 2, still exploited
        assert sel.select(view(t)).clients == (0,) and sel.pending["blacklisted"] == 0
        sel.observe(t, [trained(0, t, 100.0)], None)
    assert sel.count.tolist() == [3, 1, 1, 1, 1]
    # round 4: 3 > 2, client 0 is blacklisted; among clients 1-4 (utilities 1-4, min-max normalised
    # over them) client 4 scores 1 + sqrt(0.1 ln 4) and is the only candidate with cut_off 1
    assert sel.select(view(4)).clients == (4,)
    assert sel.pending["blacklisted"] == 1 and sel.pending["exploited"] == 1
    # off (-1, the default): client 0 stays the pick
    off = explored_fleet([100.0, 1.0, 2.0, 3.0, 4.0], [1.0] * 5, 1, cut_off=1.0, clip_bound=1.0)
    off.count[0] = 50
    assert off.select(view(5)).clients == (0,) and off.pending["blacklisted"] == 0


def test_blacklist_count_is_times_involved_stragglers_count_dropouts_do_not():
    """The artifact's count is "times of involved": FedScale's update_client_util adds one for a
    result and for a straggler (given the round's mean utility); a lost client gets no feedback."""
    sel = explored_fleet([5.0, 4.0, 3.0], [1.0] * 3, 3, blacklist_rounds=1)
    sel.select(view(2))
    sel.observe(
        2,
        [trained(0, 2, 5.0), outcome(1, 2, 10, 0.0, 0, 3.0, "cancelled"), outcome(2, 2, 10, 0.0, 0, 0.0, "dropout")],
        None,
    )
    assert sel.count.tolist() == [2, 2, 1]
    assert sel.utility.tolist() == [5.0, 5.0, 3.0]  # the straggler gets the round's mean, the dropout keeps its own
    assert sel.last_round.tolist() == [2, 2, 1]


def test_blacklist_caps_at_its_share_and_the_round_still_gets_u_clients():
    # 5 clients, every one trained 3 times, R = 2, share 0.4: floor(0.4 x 5) = 2 are barred, the
    # two most-trained (ties: lowest ids 0 and 1); U = 5: 3 slots exploit clients 2-4, the other
    # two are filled at random, from the blacklisted clients since no one else is online
    sel = explored_fleet([5.0, 4.0, 3.0, 2.0, 1.0], [1.0] * 5, 5, blacklist_rounds=2, blacklist_max_len=0.4)
    sel.count[:] = 3
    s = sel.select(view(2))
    assert sorted(s.clients) == [0, 1, 2, 3, 4] and set(s.clients[:3]) == {2, 3, 4} and set(s.clients[3:]) == {0, 1}
    assert sel.pending["blacklisted"] == 2 and sel.pending["exploited"] == 3
    # availability: only clients 1, 2 and 3 online, U = 3; client 1 is barred, so exploitation takes
    # 2 and 3 and the random fill the barred client 1, the only one left online
    sel = explored_fleet([5.0, 4.0, 3.0, 2.0, 1.0], [1.0] * 5, 3, blacklist_rounds=2, blacklist_max_len=0.4)
    sel.count[:] = 3
    s = sel.select(RoundView(2, None, available=np.array([1, 2, 3])))
    assert set(s.clients) == {1, 2, 3} and set(s.clients[:2]) == {2, 3} and sel.pending["exploited"] == 2


def test_pacer_in_the_selector_relaxes_t_after_a_flat_falling_window_not_after_a_rising_one():
    # 10 clients with durations 1..10 s: T = sorted[int(10 x 30 / 100) = 3] = 4 s; W = 2, delta 10.
    # Exploitation utility per round [10, 10, 9.5, 9.5]: |19 - 20| <= 2, relaxed after round 4 to
    # 40 %, T = sorted[4] = 5 s from round 5. Rising [10, 10, 15, 15]: T stays 4 s.
    def run(per_round):
        durations = [float(d) for d in range(1, 11)]
        sel = explored_fleet([1.0] * 10, durations, 1, pacer_step=2, pacer_delta=10.0)
        for t, util in enumerate(per_round, start=1):
            k = sel.select(view(t)).clients[0]
            assert sel.pending["exploited"] == 1
            sel.observe(t, [trained(k, t, util, latency=durations[k])], None)
        sel.select(view(len(per_round) + 1))
        return sel.pending["round_threshold"], sel.pending["preferred_duration_s"]

    assert run([10.0, 10.0, 9.5, 9.5]) == (40.0, 5.0)
    assert run([10.0, 10.0, 15.0, 15.0]) == (30.0, 4.0)
    assert run([10.0, 10.0, 9.5]) == (30.0, 4.0)  # round 3 is no pacer round (W = 2: rounds 4, 6, ...)


def test_exploration_factor_after_k_rounds_is_max_min_and_decayed_factor():
    # 200 clients, U = 1: never out of clients to explore, so eps only decays: after k rounds
    # eps = max(0.2, 0.9 x 0.98^k) (0.9 x 0.98^74 = 0.2018 > 0.2 > 0.9 x 0.98^75 = 0.1978); round t
    # uses the value after t - 1 rounds
    sel = Oort(fake_ctx([10] * 200, [1.0] * 200, 1))
    for k in range(1, 101):
        sel.select(view(k))
        assert sel.pending["epsilon"] == pytest.approx(max(0.2, 0.9 * 0.98 ** (k - 1)))
        sel.observe(k, [], None)
        assert sel.epsilon == pytest.approx(max(0.2, 0.9 * 0.98**k))
    assert 0.9 * 0.98**74 > 0.2 > 0.9 * 0.98**75
    assert sel.epsilon == 0.2
    # another floor and decay: max(0.5, 0.9 x 0.5^k): 0.45 < 0.5 from k = 1
    fast = Oort(fake_ctx([10] * 5, [1.0] * 5, 1), OortOptions(exploration_decay=0.5, exploration_min=0.5))
    fast.observe(1, [], None)
    assert fast.epsilon == 0.5


def test_defaults_are_the_artifacts_where_it_is_consistent():
    """docs/selectors.md#oort tabulates these against the artifact (SymbioticLab/Oort
    training/argParser.py) and FedScale (fedscale/cloud/config_parser.py)."""
    assert OortOptions().model_dump() == {
        "round_penalty": 2.0,  # both
        "round_threshold": 30.0,  # FedScale (the artifact: 101 = off, or 10)
        "pacer_step": 20,  # both
        "pacer_delta": 5.0,  # FedScale and one artifact version (the other: 10)
        "exploration_factor": 0.9,  # both
        "exploration_decay": 0.98,  # FedScale and one artifact version (the other: 0.95)
        "exploration_min": 0.2,  # the artifact (FedScale: 0.3)
        "cut_off": 0.95,  # the artifact's comment "95%" (its cut_off_util: 0.7 / 0.9; FedScale 0.05, another rule)
        "clip_bound": 0.95,  # one artifact version (the other 0.98; FedScale 0.9)
        "sample_window": 5.0,  # both
        "blacklist_rounds": -1,  # both: off
        "blacklist_max_len": 0.3,  # both
    }


# ---------------------------------------------------------------- real runs on the embedded MNIST
def tiny(method="oort", **over):
    return tiny_experiment(method, seed=4, **over)


@pytest.fixture(scope="module")
def fed():
    return build_federation(tiny())


def test_outcome_sample_losses_match_a_replay_of_local_training(fed):
    """The loop hands Oort the squared per-sample losses of every mini-batch of real local training;
    a replay of the same training (same start, same mini-batch stream) recomputes them."""
    r = resolve(tiny())
    sim = Simulation(r, fed)
    state = sim.algorithm.initial_state()
    outs = updates(sim, 1, [0, 5], state)
    for o in outs:
        k = o.client_id
        model = fed.new_model()
        model.load_state_dict(state.model)
        opt = make_optimizer(model, r.train_cfg)
        data = fed.clients[k].train
        x, y = torch.from_numpy(data.x), torch.from_numpy(data.y)
        gen = torch_rng(fed.seed, f"train/1/{k}")
        sq, count = 0.0, 0
        for idx in iterate_minibatches(len(data), r.train_cfg.batch_size, gen):
            opt.zero_grad()
            per = nn.functional.cross_entropy(model(x[idx]), y[idx], reduction="none")
            sq += float((per.detach().double() ** 2).sum())
            count += len(idx)
            per.mean().backward()
            opt.step()
        assert o.sample_loss_count == count == len(data) > 0
        assert o.sample_loss_sq_sum == pytest.approx(sq, rel=1e-12)
        assert all(torch.equal(o.state[n], v) for n, v in model.state_dict().items())  # training unchanged
    # a selector that does not ask gets no statistics
    plain = updates(Simulation(resolve(tiny("fedavg")), fed), 1, [0], state)[0]
    assert (plain.sample_loss_sq_sum, plain.sample_loss_count) == (0.0, 0)


def test_oort_end_to_end_on_embedded_mnist(tmp_path, fed):
    run_experiment(tiny(), tmp_path / "run", federation=fed)
    rows = [r for r in read_csv_rows(tmp_path / "run" / "metrics.csv") if r["round"] != "0"]
    assert len(rows) == 4
    # N 8, U 3: eps 0.9, 0.882, 0.864 leave int(3 * (1 - eps)) = 0 exploitation slots; rounds 1-2
    # explore 3 each, round 3 the last 2 (+1 at random); round 4 exploits all 3 (eps 0)
    assert [int(r["explored"]) for r in rows] == [3, 3, 2, 0]
    assert [int(r["exploited"]) for r in rows] == [0, 0, 0, 3]
    assert [float(r["epsilon"]) for r in rows] == pytest.approx([0.9, 0.882, 0.86436, 0.0])
    seen = set()
    for r in rows[:3]:
        ids = [int(k) for k in r["selected"].split(";")]
        assert len(set(ids)) == 3
        seen |= set(ids)
    assert seen == set(range(8))
    assert all(float(r["mean_utility"]) > 0 for r in rows)
    assert all(float(r["preferred_duration_s"]) > 0 for r in rows)


def same_run(a: Path, b: Path) -> None:
    assert (a / "metrics.csv").read_bytes() == (b / "metrics.csv").read_bytes()
    ma, mb = torch.load(a / "model.pt"), torch.load(b / "model.pt")
    assert list(ma) == list(mb) and all(torch.equal(ma[k], mb[k]) for k in ma)


@pytest.mark.parametrize("faults", [None, {"dropout": 0.3}])
def test_oort_kill_and_resume_is_exact(tmp_path, fed, faults):
    over = {"rounds": 6} | ({"faults": faults} if faults else {})
    cfg = tiny(**over)
    run_experiment(cfg, tmp_path / "ref", federation=fed)
    run_experiment(cfg, tmp_path / "cut", federation=fed, stop_after=2)
    run_experiment(cfg, tmp_path / "cut", federation=fed, resume=True)
    same_run(tmp_path / "ref", tmp_path / "cut")
    rows = read_csv_rows(tmp_path / "ref" / "metrics.csv")
    assert int(rows[-1]["exploited"]) == 3  # the resumed part exploits (the state was restored)


def test_oort_with_blacklist_and_pacer_kill_and_resume_is_exact(tmp_path, fed):
    """The blacklist counts and the pacer's history live in the selector's state_dict: a run cut
    after round 3 and resumed equals the uninterrupted one. N 8, U 3, R = 1: clients that trained
    twice leave exploitation (at most floor(0.3 x 8) = 2); W = 2 decides in rounds 4 and 6."""
    cfg = tiny(rounds=7, method_options={"blacklist_rounds": 1, "pacer_step": 2})
    run_experiment(cfg, tmp_path / "ref", federation=fed)
    run_experiment(cfg, tmp_path / "cut", federation=fed, stop_after=3)
    run_experiment(cfg, tmp_path / "cut", federation=fed, resume=True)
    same_run(tmp_path / "ref", tmp_path / "cut")
    rows = [r for r in read_csv_rows(tmp_path / "ref" / "metrics.csv") if r["round"] != "0"]
    assert max(int(r["blacklisted"]) for r in rows) == 2  # the cap floor(0.3 x 8) is reached
    assert all(int(r["blacklisted"]) <= 2 for r in rows)


# ---------------------------------------------------------------- bookkeeping under failures
def test_explored_means_reported_a_training_result(tmp_path):
    """Issue input: N 8, U 4, faults.dropout 0.75, 3 rounds. Before: all 8 clients counted as
    explored after rounds 1-2 and epsilon fell to 0 in round 3, although only 2 clients ever
    trained. Now a client is explored once it has reported a result (outcome.ok)."""
    cfg = parse_experiment(
        {
            "method": "oort",
            "rounds": 3,
            "clients_per_round": 4,
            "data": {"dataset": "mnist-embedded", "num_clients": 8, "partition": {"scheme": "iid"}},
            "model": {"name": "mlp", "options": {"hidden": [8]}},
            "train": {"local_epochs": 1, "batch_size": 32},
            "faults": {"dropout": 0.75},
        }
    )
    summary = run_experiment(cfg, tmp_path / "run")
    rows = [r for r in read_csv_rows(tmp_path / "run" / "metrics.csv") if r["round"] != "0"]
    trained = set()
    for r in rows:
        failed = {int(x.split(":")[0]) for x in r["failed"].split(";") if x}
        trained |= {int(k) for k in r["selected"].split(";")} - failed
    assert 0 < len(trained) < 8  # with 75% dropout few clients ever trained
    assert summary["explored_clients"] == len(trained)
    # clients are left to explore in every round, so eps never drops to 0 (0.9, 0.882, 0.86436)
    assert [float(r["epsilon"]) for r in rows] == pytest.approx([0.9, 0.882, 0.86436])
    assert all(int(r["exploited"]) == 0 for r in rows)


def test_stragglers_get_the_rounds_mean_utility_and_their_whole_duration_by_hand():
    """FedScale's rule for clients that did not finish in time (aggregator.py,
    round_completion_handler; the artifact's param_server.py): register_feedback(client,
    last_round_avg_util, time_stamp=round, duration=computation + communication of its whole
    task), which marks it explored and counts it; a client not active at the end of its work is
    dropped from the round without feedback. Round 1: clients 1 and 2 deliver (U = 10 sqrt(40 /
    10) = 20 and 10 sqrt(90 / 10) = 30), client 0 is cancelled at the round's end (3 s) although
    its work takes 6.5 s, client 3 drops out. Before: client 0 stayed unexplored with utility 0
    and duration max(1, 2 x 3) = 6 s, its own 6.5 s never seen."""
    ctx = fake_ctx([10, 10, 10, 10], [1.0, 1.0, 1.0, 8.0], 2)
    sel = Oort(ctx)
    sel.select(view(1))
    outs = [
        replace(outcome(0, 1, 10, 0.0, 0, 3.0, "cancelled"), planned_latency_s=6.5),
        outcome(1, 1, 10, 40.0, 10, 3.0),
        outcome(2, 1, 10, 90.0, 10, 2.0),
        outcome(3, 1, 10, 0.0, 0, 0.0, "dropout"),
    ]
    cols = sel.observe(1, outs, None)
    assert sel.utility.tolist() == pytest.approx([25.0, 20.0, 30.0, 0.0])  # (20 + 30) / 2 for the straggler
    assert sel.duration.tolist() == [6.5, 3.0, 2.0, 8.0]  # the dropout keeps its expected 8 s
    assert sel.explored.tolist() == [True, True, True, False]
    assert sel.count.tolist() == [1, 1, 1, 0] and sel.last_round.tolist() == [1, 1, 1, 0]
    assert cols["mean_utility"] == pytest.approx(25.0)  # of the results only
    # a timeout whose whole latency is unknown (a real transport's, an injected hang): at least the
    # cut, never less than what was known: max(9.0, 2.5) = 9.0 and max(1.0, 2.5) = 2.5
    sel.duration[3] = 9.0
    sel.observe(2, [outcome(3, 2, 10, 0.0, 0, 2.5, "timeout"), outcome(2, 2, 10, 0.0, 0, 2.5, "timeout")], None)
    assert sel.duration[3] == 9.0 and sel.duration[2] == 2.5
    assert sel.utility[3] == 0.0 and sel.explored[3]  # nobody succeeded: mean utility 0
    # a straggler's partial work is a result, but its duration is its whole work's (5.0 s), not 2.4 s
    sel.observe(3, [replace(outcome(1, 3, 10, 40.0, 10, 2.4), local_steps=2, planned_latency_s=5.0)], None)
    assert sel.duration[1] == 5.0 and sel.utility[1] == pytest.approx(20.0)
    # an error reports the time it really spent, utility 0
    sel.observe(4, [outcome(1, 4, 10, 0.0, 0, 0.7, "error")], None)
    assert sel.duration[1] == 0.7 and sel.utility[1] == 0.0


def test_the_round_gives_cut_participants_their_planned_latency(fed):
    """A timeout and a cancelled participant keep the cost model's latency of their whole work
    (FR-eq 3-5) in ``planned_latency_s`` while ``latency_s`` is the cut."""
    from fedselect.fl.round_rules import cancel_late

    run = Simulation(resolve(tiny(system={"round_deadline_s": 1e-9})), fed)
    outs = updates(run, 1, [0, 1, 2], run.algorithm.initial_state())
    draws = run.ctx.draw(1)
    for o in outs:
        assert o.failed == "timeout" and o.latency_s == 1e-9
        assert o.planned_latency_s == run.ctx.client_cost(o.client_id, 1, draws).latency_s
    run = Simulation(resolve(tiny()), fed)
    outs = updates(run, 1, [0, 1, 2], run.algorithm.initial_state())
    late = [o for o in cancel_late(1, outs, 1) if o.failed == "cancelled"]
    assert len(late) == 2
    for o in late:
        assert o.planned_latency_s == next(x.latency_s for x in outs if x.client_id == o.client_id) > o.latency_s


def test_fedselect_list_shows_oorts_options_with_their_defaults():
    from typer.testing import CliRunner

    from fedselect.cli import app

    res = CliRunner().invoke(app, ["list"], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    for shown in ("blacklist_rounds=-1", "blacklist_max_len=0.3", "pacer_step=20", "pacer_delta=5.0", "exploration_min=0.2"):
        assert shown in text, shown


def test_blacklist_with_availability_and_over_selection_end_to_end(tmp_path, fed):
    """Clients 0-5 of 8 online (trace), U 3, overselect 1.5: ceil(4.5) = 5 selected among the 6
    online, the first 3 to finish aggregated, the other 2 cancelled (stragglers: counted as involved).
    blacklist_rounds 0: a client that trained once leaves exploitation, at most floor(0.25 x 8) = 2."""
    trace = tmp_path / "trace.csv"
    trace.write_text("client,start_s,end_s\n" + "".join(f"{k},0,inf\n" for k in range(6)))
    cfg = tiny(
        rounds=5,
        availability={"model": "trace", "trace_file": str(trace)},
        overselect=1.5,
        method_options={"blacklist_rounds": 0, "blacklist_max_len": 0.25},
    )
    summary = run_experiment(cfg, tmp_path / "run", federation=fed)
    rows = [r for r in read_csv_rows(tmp_path / "run" / "metrics.csv") if r["round"] != "0"]
    for r in rows:
        sel = [int(k) for k in r["selected"].split(";")]
        assert len(sel) == len(set(sel)) == 5 and all(k < 6 for k in sel)
        assert len(r["aggregated_ids"].split(";")) == 3
    assert [int(r["blacklisted"]) for r in rows][0] == 0  # nobody has trained before round 1
    assert all(int(r["blacklisted"]) == 2 for r in rows[1:])  # 3 trained in round 1, the cap keeps 2
    assert summary["blacklisted_clients"] == 2


def test_random_fill_draws_from_the_online_pool_not_the_exploitation_candidates():
    """5 explored clients, 1 unexplored, U 4, eps 0.5: floor(4 x 0.5) = 2 exploited (cut_off 1:
    exactly the top 2 are candidates), 1 explored, 1 slot left for the random fill. It used to be
    drawn from the 2 candidates, both taken already (an error); now from the online clients."""
    sel = explored_fleet([50.0, 40.0, 30.0, 20.0, 10.0, 0.0], [1.0] * 6, 4, cut_off=1.0, clip_bound=1.0)
    sel.explored[5], sel.count[5] = False, 0
    sel.epsilon = 0.5
    s = sel.select(view(2))
    assert len(set(s.clients)) == 4 and set(s.clients[:2]) == {0, 1} and s.clients[2] == 5
    assert s.clients[3] in {2, 3, 4} and (sel.pending["exploited"], sel.pending["explored"]) == (2, 1)


def test_top_desc_is_the_head_of_the_full_ranking_with_ties():
    from fedselect.kernels.oort import rank_desc
    from fedselect.kernels.sampling import kth_largest, top_desc

    rng = np.random.default_rng(0)
    ids = rng.permutation(5_000)[:3_000]
    scores = rng.integers(0, 50, size=ids.size).astype(float)  # many ties: the id breaks them
    full = rank_desc(ids, scores)
    score_of = dict(zip(ids.tolist(), scores.tolist()))
    for m in (1, 7, 100, 2_999, 3_000, 4_000):
        head, head_scores = top_desc(ids, scores, m=m)
        assert head.tolist() == full[:m].tolist()
        assert head_scores.tolist() == [score_of[k] for k in full[:m].tolist()]
    cut = 0.95 * kth_largest(scores, 10)
    got, _ = top_desc(ids, scores, at_least=cut)
    assert got.tolist() == [k for k in full.tolist() if score_of[k] >= cut]
    assert kth_largest(np.array([3.0, 9.0, 9.0, 1.0]), 2) == 9.0 and kth_largest(np.array([3.0, 9.0, 9.0, 1.0]), 3) == 3.0
