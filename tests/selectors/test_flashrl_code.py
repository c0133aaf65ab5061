"""The FLASH-RL authors' code as a second reference (docs/flash-rl.md, "Latency models"): their
latency formulas (``system.latency_model: flashrl-code``), their pickled fleet
(``system.profiles: flashrl-code``), their agent's schedule (``schedule: code``) and divergence
(``divergence: code``), and the layer options that give their CNN. Values worked by hand from
``serverFL/Server_FLASHRL.py`` and ``RL/DQL.py``."""

from __future__ import annotations

import csv
import math
from collections import Counter

import numpy as np
import pytest
import torch

from fedselect.config.schema import ConfigError
from fedselect.experiment.resolve import parse_experiment
from fedselect.experiment.run import make_simulation, run_experiment
from fedselect.fl.cost import CostModel
from fedselect.fl.types import ClientOutcome, Evaluation, RunSettings
from fedselect.kernels.ddqn import DDQNAgent, DDQNConfig, linear_epsilon
from fedselect.kernels.rewards import normalised_divergence, signed_mean_divergence
from fedselect.selectors.base import Feedback
from fedselect.world.federation import build_federation
from fedselect.world.models import build_model
from fedselect.world.profiles import FLASHRL_CODE_DEVICES, PROFILE_PRESETS
from fedselect.world.system import FLASHRL_CODE_SAMPLE_BITS, LATENCY_MODELS

torch.set_num_threads(1)
PAPER, CODE = LATENCY_MODELS["paper"], LATENCY_MODELS["flashrl-code"]


# ---------------------------------------------------------------- the two latency models by hand
def test_latency_models_worked_example():
    """600 MNIST samples (784 features), E = 5, a Raspberry Pi 3 (4 cores, 350 MHz), wifi-1 at 6 Mb/s."""
    assert FLASHRL_CODE_SAMPLE_BITS == 64 * 40 * 20 == 51_200
    # ours: 5 x 600 x 784 x 32 x 20 / (4 x 350e6) = 1.0752 s; 431,080 float32 = 13,794,560 bits / 6e6 s
    bits = PAPER.data_bits(600, 784)
    assert bits == 15_052_800
    assert PAPER.compute_s(5, bits, 20.0, 4, 350.0) == pytest.approx(1.0752)
    assert PAPER.transmit_s(431_080 * 4, 6.0) == pytest.approx(13_794_560 / 6e6)
    # the code: 600 x 51,200 / (4 x 350e6 x ... g = 1) = 0.0219429 s whatever E and system.cycles_per_bit
    bits = CODE.data_bits(600, 784)
    assert bits == 30_720_000
    for epochs in (1, 5):
        assert CODE.compute_s(epochs, bits, 20.0, 4, 350.0) == pytest.approx(30_720_000 / 1.4e9)  # 0.021943
    # parameters x 64 bits: the authors' 582,026-parameter CNN, 2,328,104 float32 bytes -> 37,249,664 bits
    assert CODE.payload_bits(582_026 * 4) == 37_249_664
    assert CODE.transmit_s(582_026 * 4, 6.0) == pytest.approx(6.2082773, rel=1e-7)
    # the default keeps 8 bits a byte exactly (results of every existing config unchanged)
    assert PAPER.payload_bits(431_080 * 4) == 431_080 * 32 and PAPER.charged_epochs(5) == 5 and CODE.charged_epochs(5) == 1


def _doc(n=100, **system):
    return {
        "name": "code",
        "seed": 2,
        "method": "fedavg",
        "rounds": 2,
        "clients_per_round": 5,
        "checkpoint_every": 0,
        "data": {"dataset": "mnist-embedded", "num_clients": n, "partition": {"scheme": "iid"}},
        "model": {"name": "mlp", "options": {"hidden": [8]}},
        "train": {"local_epochs": 5, "batch_size": 20, "workers": 0},
        "system": system,
    }


@pytest.fixture(scope="module")
def code_fed():
    return build_federation(parse_experiment(_doc(latency_model="flashrl-code", profiles="flashrl-code")))


def test_cost_model_charges_the_authors_formulas(code_fed):
    fed = code_fed
    settings = RunSettings(seed=2, rounds=2, num_clients=100, clients_per_round=5, local_epochs=5)
    payload = 6_370 * 4  # the MLP 784-8-10 in float32 bytes: 784 x 8 + 8 + 8 x 10 + 10 = 6,370 parameters
    cost = CostModel(fed, settings, (payload, payload))
    draws = fed.fleet.draw(1)
    for k in (0, 37, 99):
        n, c = fed.clients[k].num_samples, fed.fleet.cores[k]
        f, b = draws.freq_mhz[k], draws.bandwidth_mbps[k]
        comp = n * 51_200 / (c * f * 1e6)
        up = (payload / 4) * 64 / (b * 1e6)
        got = cost.client_cost(k, 5, draws)
        assert got.compute_s == pytest.approx(comp, rel=1e-12) and got.upload_s == pytest.approx(up, rel=1e-12)
        assert got.latency_s == pytest.approx(comp + up, rel=1e-12)  # the broadcast does not count by default
        assert cost.client_cost(k, 1, draws).latency_s == got.latency_s  # no factor E
        assert got.upload_bytes == payload  # bytes stay the float32 payload
    fl = fed.fleet
    n = np.array([cl.num_samples for cl in fed.clients], float)
    expected = n * 51_200 / (fl.cores * fl.mean_mhz * 1e6) + (payload / 4) * 64 / (fl.mean_mbps * 1e6)
    np.testing.assert_allclose(cost.expected_latency_s(), expected, rtol=1e-12)
    # L_min: the fastest client at mean + 3 std; L_max: the slowest at mean - 3 std (floored at 5%)
    lo = n * 51_200 / (fl.cores * (fl.mean_mhz + 3 * fl.std_mhz) * 1e6) + payload * 16 / ((fl.mean_mbps + 3 * fl.std_mbps) * 1e6)
    f_lo = np.maximum(fl.mean_mhz - 3 * fl.std_mhz, 0.05 * fl.mean_mhz)
    b_lo = np.maximum(fl.mean_mbps - 3 * fl.std_mbps, 0.05 * fl.mean_mbps)
    hi = n * 51_200 / (fl.cores * f_lo * 1e6) + payload * 16 / (b_lo * 1e6)
    assert cost.latency_bounds() == pytest.approx((lo.min(), hi.max()), rel=1e-12)


def test_the_authors_fleet_as_pickled(code_fed):
    """clients_info/CIFAR10: 4 Jetson Nano and 8 of every other device row; 24/26/24/26 per network."""
    fl = code_fed.fleet
    devices = Counter(d.name for d in fl.devices)
    assert devices == {d.name: (4 if d.name == "jetson-nano" else 8) for d in FLASHRL_CODE_DEVICES}
    assert Counter(x.name for x in fl.networks) == {"wifi-1": 24, "wifi-3": 26, "fast-ethernet": 24, "wifi-4": 26}
    rows = {d.name: d for d in FLASHRL_CODE_DEVICES}
    cores = {name: rows[name].cores for name in ("jetson-agx-xavier", "fpga-zcu102", "intel-i3", "intel-i5", "raspberry-pi-3-2c")}
    assert cores == {"jetson-agx-xavier": 512, "fpga-zcu102": 2, "intel-i3": 1, "intel-i5": 2, "raspberry-pi-3-2c": 2}
    assert (
        rows["xavier-nx-15w"].mean_mhz == 1110
        and {x.name: x.mean_mbps for x in PROFILE_PRESETS["flashrl-code"].networks}["wifi-3"] == 30
    )
    # MobiAct's 50 clients: the same table with half the counts
    half = build_federation(parse_experiment(_doc(n=50, profiles="flashrl-code"))).fleet
    assert Counter(d.name for d in half.devices) == {d.name: (2 if d.name == "jetson-nano" else 4) for d in FLASHRL_CODE_DEVICES}
    assert Counter(x.name for x in half.networks) == {"wifi-1": 12, "wifi-3": 13, "fast-ethernet": 12, "wifi-4": 13}


def test_a_replaced_table_drops_the_presets_shares():
    rows = [{"name": "a", "mean_mhz": 1000, "std_mhz": 0, "cores": 1}, {"name": "b", "mean_mhz": 500, "std_mhz": 0, "cores": 2}]
    fl = build_federation(parse_experiment(_doc(n=20, profiles="flashrl-code", devices=rows))).fleet
    assert Counter(d.name for d in fl.devices) == {"a": 10, "b": 10}  # round-robin over the new table
    assert Counter(x.name for x in fl.networks)["wifi-1"] == round(20 * 0.24)  # the preset's network shares stay


def test_config_errors_of_the_code_model():
    with pytest.raises(ConfigError, match=r"system\.cycles_per_bit applies only to latency_model 'paper'.*got cycles_per_bit 10"):
        parse_experiment(_doc(latency_model="flashrl-code", cycles_per_bit=10.0))
    parse_experiment(_doc(latency_model="flashrl-code", cycles_per_bit=20.0))  # a resolved config writes the default
    with pytest.raises(ConfigError, match=r"system\.capacity\.model 'file'.*latency_model 'flashrl-code'"):
        parse_experiment(_doc(latency_model="flashrl-code", capacity={"model": "file", "file": "caps.csv"}))
    with pytest.raises(ConfigError, match=r"system\.latency_model: Input should be 'paper' or 'flashrl-code'"):
        parse_experiment(_doc(latency_model="code"))


def test_federation_info_uses_the_latency_model(code_fed):
    from fedselect.study.compare import federation_info

    info = federation_info(code_fed, 5)
    fl, params = code_fed.fleet, 784 * 8 + 8 + 8 * 10 + 10
    k = 11
    assert info["expected_upload_s"][k] == pytest.approx(params * 64 / (fl.mean_mbps[k] * 1e6), rel=1e-12)
    assert info["expected_compute_s"][k] == pytest.approx(
        code_fed.clients[k].num_samples * 51_200 / (fl.cores[k] * fl.mean_mhz[k] * 1e6), rel=1e-12
    )


# ---------------------------------------------------------------- the authors' CNN, CEFL's text's FD-CNN
def test_layer_options_give_the_authors_and_the_papers_networks():
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(build_model("mnist_cnn", (1, 28, 28), 10)) == 431_080  # FLASH-RL Sec. IV-A: 20, 50
    # models/MNIST/CNN.py: 1->32->64 5x5, fc 1024->512->10: 832 + 51,264 + 524,800 + 5,130
    assert count(build_model("mnist_cnn", (1, 28, 28), 10, channels=[32, 64], hidden=512)) == 582_026
    assert count(build_model("fd_cnn", (3, 20, 20), 8)) == 877_512  # ours: 32, 64 filters
    # CEFL Sec. IV's text: 3 and 32 filters, fc 800->512->8: 228 + 2,432 + 410,112 + 4,104
    assert count(build_model("fd_cnn", (3, 20, 20), 8, channels=[3, 32])) == 416_876
    with pytest.raises(ConfigError, match=r"model\.options\.channels: List should have at most 2 items"):
        parse_experiment({**_doc(), "model": {"name": "mnist_cnn", "options": {"channels": [8, 16, 32]}}})


# ---------------------------------------------------------------- the authors' agent
def test_code_schedule_epsilon_against_the_authors_recursion():
    """RL/DQL.py: eps 0.9, minus (0.9 - 0.2) / 500 after each epsilon-greedy selection (from round
    2; round 1 is random), floor 0.2. Ours, linear over 502 rounds, is below it by 0.7 (502 - t) / 250,500."""
    eps, delta = 0.9, 0.7 / 500
    for t in range(2, 700):
        ours = linear_epsilon(t, 0.9, 0.2, 502)
        assert ours == pytest.approx(eps, abs=0.0014 + 1e-12) and eps - ours == pytest.approx(
            max(0.0, 0.7 * (502 - t) / 250_500), abs=1e-12
        )
        eps = max(eps - delta, 0.2)
        if eps < 0.2 + 1e-12:
            eps = 0.2
    assert linear_epsilon(100, 0.9, 0.2, 502) == pytest.approx(0.9 - 0.7 * 99 / 501)  # 0.76168; the code's 0.7628
    assert linear_epsilon(502, 0.9, 0.2, 502) == pytest.approx(0.2) == linear_epsilon(600, 0.9, 0.2, 502)


def _agent(learn_start):
    cfg = DDQNConfig(hidden=4, batch_size=3, learn_start=learn_start, memory_capacity=10, gamma=0.5, lr=0.01)
    return DDQNAgent(2, 3, cfg, 10, np.random.default_rng(0), torch.Generator().manual_seed(0))


def test_learning_from_the_first_transition_on_min_stored_and_batch():
    s, s2 = np.array([1.0, -1.0], np.float32), np.array([0.5, 2.0], np.float32)
    waiting, eager = _agent(None), _agent(1)
    for a in (waiting, eager):
        a.remember(s, [2, 0], [0.3, -0.1], s2, False)
    assert waiting.learn(1) is None  # Table IV read as ours: wait for a minibatch of 3
    # the code: one transition, a minibatch of it. Y_j = r_j + 0.5 Q_target(s2, argmax_a Q_main(s2, a)) (FR-eq 16)
    with torch.no_grad():
        q_s, q_s2 = eager.main(torch.from_numpy(s)[None])[0], eager.main(torch.from_numpy(s2)[None])[0]
        boot = eager.target(torch.from_numpy(s2)[None])[0][int(q_s2.argmax())]
        y = torch.tensor([0.3, -0.1]) + 0.5 * boot
        want = float(torch.mean((y - q_s[[2, 0]]) ** 2))
    assert eager.learn(1) == pytest.approx(want, rel=1e-6) and eager.learn_steps == 1
    for _ in range(3):
        eager.remember(s2, [1, 2], [0.0, 0.2], s, False)
    assert len(eager.memory) == 4 and eager.learn(2) is not None  # then minibatches of 3 of the 4
    with pytest.raises(ValueError, match="learn_start must lie in"):
        DDQNConfig(memory_capacity=10, batch_size=3, learn_start=11).validate()


def test_rl_learn_start_above_the_memory_is_refused_up_front():
    with pytest.raises(ConfigError, match=r"rl_learn_start 2000 > memory_capacity 1000.*never learn"):
        parse_experiment({**_doc(), "method": "flashrl", "method_options": {"rl_learn_start": 2000}})


def test_signed_mean_divergence_by_hand():
    """The code's |mean of signed (w_k - w) / w| against FR-eq 7's mean of |(w_k - w) / w|."""
    w, wk = np.array([2.0, -4.0, 0.5, 0.0]), np.array([3.0, -2.0, 0.5, 9.0])
    # kept (|w| >= 1e-8): 1/2, 2/-4, 0 -> FR-eq 7: (0.5 + 0.5 + 0) / 3 = 1/3; the code: |0| = 0
    assert normalised_divergence(wk, w) == pytest.approx(1 / 3) and signed_mean_divergence(wk, w) == 0.0
    assert signed_mean_divergence(np.array([3.0, -6.0, 0.5]), w[:3]) == pytest.approx(1 / 3)  # same signs: equal
    rng = np.random.default_rng(5)
    for _ in range(20):  # never above FR-eq 7 (|mean| <= mean of ||)
        g, loc = rng.normal(size=50), rng.normal(size=50)
        assert signed_mean_divergence(loc, g) <= normalised_divergence(loc, g) + 1e-12
    with pytest.raises(ValueError, match="signed_mean_divergence: every global weight"):
        signed_mean_divergence([1.0], [0.0])


# ---------------------------------------------------------------- FLASH-RL with the code's agent, end to end
def _flashrl(**opts):
    return parse_experiment(
        {
            "name": "code-agent",
            "method": "flashrl",
            "rounds": 4,
            "clients_per_round": 3,
            "seed": 3,
            "checkpoint_every": 0,
            "data": {"dataset": "mnist-embedded", "num_clients": 8, "partition": {"scheme": "iid"}},
            "model": {"name": "mlp", "options": {"hidden": [16]}},
            "train": {"local_epochs": 2, "batch_size": 64, "lr": 0.05, "workers": 0},
            "system": {"latency_model": "flashrl-code", "profiles": "flashrl-code"},
            "method_options": {"schedule": "code", "divergence": "code", "pca_components": 5, "hidden": 32, **opts},
        }
    )


def test_flashrl_with_the_code_agent_and_latency_runs(tmp_path):
    cfg = _flashrl()
    fed = build_federation(cfg)
    run_experiment(cfg, tmp_path, federation=fed)
    with open(tmp_path / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    # learning from round 1 (rl_learn_start 1) although the RL batch is 50
    assert all(math.isfinite(float(r["td_loss"])) for r in rows[1:])
    assert [float(r["epsilon"]) for r in rows[2:]] == pytest.approx([0.9 - 0.7 * t / 501 for t in (1, 2, 3)])
    # each round lasts as long as its slowest participant under the authors' formulas (E = 2 not charged)
    params = 784 * 16 + 16 + 16 * 10 + 10
    for r in rows[1:]:
        t, ids = int(r["round"]), [int(x) for x in r["selected"].split(";")]
        d = fed.fleet.draw(t)
        lat = [
            fed.clients[k].num_samples * 51_200 / (fed.fleet.cores[k] * d.freq_mhz[k] * 1e6)
            + params * 64 / (d.bandwidth_mbps[k] * 1e6)
            for k in ids
        ]
        assert float(r["round_latency_s"]) == pytest.approx(max(lat), rel=1e-9)


def test_divergence_code_in_the_reward_by_hand():
    """Client 0's update changes two weights by +50% and -50% of the global model's: FR-eq 7 gives
    d = 1 / P (two of P coordinates at 0.5 each ... over P), the code 0 (they cancel)."""
    cfg = _flashrl()
    fed = build_federation(cfg)
    g = {k: v.clone() for k, v in fed.new_model().state_dict().items()}
    local = {k: v.clone() for k, v in g.items()}
    w = local["net.1.weight"].view(-1)
    w[0] *= 1.5
    w[1] *= 0.5
    p = sum(v.numel() for v in g.values())
    fb = Feedback(Evaluation(0.5, 0.5, 1.0), Evaluation(0.6, 0.6, 1.0), True, g)  # improved: zeta = exp(-d)

    def reward(divergence):
        m = make_simulation(_flashrl(divergence=divergence), fed).selector
        m.l_min, m.l_max = 0.0, 10.0
        o = ClientOutcome(0, 1, local, 60, 1.0, 1, 0.0, 0.0, 0.0, 2.0, 0, 0, None, 0.0, 0)
        return float(m.round_rewards(1, [o], fb)[0])

    # Psi = 0.6 (zeta - 2 / 10) + 0.4 / 8
    assert reward("code") == pytest.approx(0.6 * (1.0 - 0.2) + 0.05)
    assert reward("paper") == pytest.approx(0.6 * (math.exp(-1.0 / p) - 0.2) + 0.05)
