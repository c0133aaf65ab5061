"""DDQN agent (FLASH-RL Section III-C2): double-Q targets by hand, epsilon schedule, selector invariants,
checkpoint round trip."""

import io

import numpy as np
import pytest
import torch

from fedselect.experiment.checkpoint import decode_payload, encode_payload
from fedselect.kernels.ddqn import DDQNAgent, DDQNConfig, double_q_targets, linear_epsilon
from fedselect.kernels.replay_memory import ReplayMemory

torch.set_num_threads(1)


def _agent(state_dim=6, n=8, seed=0, **cfg):
    return DDQNAgent(
        state_dim,
        n,
        DDQNConfig(**cfg),
        total_rounds=20,
        rng=np.random.default_rng(seed),
        torch_generator=torch.Generator().manual_seed(seed),
    )


def _set_tiny(agent):
    """main: W1 = I, W2 = [[1,0],[0,1],[1,1]], b2 = [0,0,-0.5]; target: W1 = I, W2 = [[2,0],[0,2],[.5,.5]]."""
    with torch.no_grad():
        for net, w2, b2 in (
            (agent.main, [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], [0.0, 0.0, -0.5]),
            (agent.target, [[2.0, 0.0], [0.0, 2.0], [0.5, 0.5]], [0.0, 0.0, 0.0]),
        ):
            net.net[1].weight.copy_(torch.eye(2))
            net.net[1].bias.zero_()
            net.net[3].weight.copy_(torch.tensor(w2))
            net.net[3].bias.copy_(torch.tensor(b2))


def test_epsilon_schedule_end_points():
    assert linear_epsilon(1, 0.9, 0.35, 100) == pytest.approx(0.9)
    assert linear_epsilon(100, 0.9, 0.35, 100) == pytest.approx(0.35)
    assert linear_epsilon(150, 0.9, 0.35, 100) == pytest.approx(0.35)
    assert linear_epsilon(34, 0.9, 0.35, 67) == pytest.approx(0.625)  # half-way: (34-1)/(67-1)
    assert linear_epsilon(30, 0.9, 0.2, 30) == pytest.approx(0.2)
    assert linear_epsilon(31, 0.9, 0.2, 30) == pytest.approx(0.2)
    assert linear_epsilon(1, 0.9, 0.2, 1) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="1-based"):
        linear_epsilon(0)
    with pytest.raises(ValueError, match="eps_end"):
        linear_epsilon(1, 0.9, 1.5, 10)
    # agent default: decay over all rounds
    a = _agent(eps_init=0.9, eps_end=0.35)
    assert a.epsilon(1) == pytest.approx(0.9) and a.epsilon(20) == pytest.approx(0.35)


def test_double_q_target_by_hand():
    a = _agent(state_dim=2, n=3, hidden=2)
    _set_tiny(a)
    s2 = torch.tensor([[1.0, 2.0]])
    # Q_main(s2) = [1, 2, 2.5] -> argmax 2; Q_target(s2) = [2, 4, 1.5] -> value 1.5 (not max 4)
    r = torch.tensor([[0.5, -0.2]])
    y = double_q_targets(a.main, a.target, r, s2, torch.tensor([0.0]), 0.9)
    assert torch.allclose(y, torch.tensor([[1.85, 1.15]]))
    y_done = double_q_targets(a.main, a.target, r, s2, torch.tensor([1.0]), 0.9)
    assert torch.allclose(y_done, r)


def test_learn_loss_by_hand_and_only_taken_actions():
    a = _agent(state_dim=2, n=3, hidden=2, batch_size=1, memory_capacity=4)
    _set_tiny(a)
    assert a.learn() is None  # empty memory: no step
    a.remember([1.0, 0.0], [0, 1], [0.5, -0.2], [1.0, 2.0], False)
    before = a.main.net[3].weight.detach().clone()
    # Q_main(s) = [1, 0, 0.5]; taken actions 0, 1 -> Q = [1, 0]; Y = [1.85, 1.15]
    loss = a.learn()
    assert loss == pytest.approx((0.85**2 + 1.15**2) / 2)
    after = a.main.net[3].weight.detach()
    assert not torch.equal(before[:2], after[:2])  # rows of taken actions moved
    assert torch.equal(before[2], after[2])  # the untaken action's output row did not


def test_target_sync_every_p_rounds():
    a = _agent(target_sync=3)
    with torch.no_grad():
        a.main.net[3].bias.add_(1.0)
    assert not a.end_round(2)
    assert not torch.equal(a.main.net[3].bias, a.target.net[3].bias)
    assert a.end_round(3)
    assert torch.equal(a.main.net[3].bias, a.target.net[3].bias)


@pytest.mark.parametrize("eps", [0.0, 0.5, 1.0])
def test_selector_distinct_and_exactly_u(eps):
    a = _agent(n=12, eps_init=eps, eps_end=eps)
    rng = np.random.default_rng(5)
    for t in range(1, 40):
        u = 1 + t % 12
        sel = a.select(rng.normal(size=6), u, t)
        assert len(sel) == u and len(set(sel)) == u and all(0 <= c < 12 for c in sel)
    with pytest.raises(ValueError, match="cannot choose"):
        a.select(rng.normal(size=6), 13, 2)


def test_greedy_takes_top_q_in_order():
    a = _agent(n=8, eps_init=0.0, eps_end=0.0)
    s = np.linspace(-1, 1, 6)
    q = a.q_values(s)
    assert a.select(s, 4, 2) == [int(i) for i in np.argsort(-q)[:4]]


def test_memory_ring_overwrites_oldest():
    m = ReplayMemory(3, 2)
    for i in range(5):
        m.push([i, i], [0], [float(i)], [i, i], False)
    assert len(m) == 3 and sorted(m.r[:, 0].tolist()) == [2.0, 3.0, 4.0]
    with pytest.raises(ValueError, match="2 actions but 1 rewards"):
        m.push([0, 0], [0, 1], [1.0], [0, 0], False)


def test_memory_keeps_transitions_of_different_sizes_padded():
    """mode: async: a buffer's outcomes vary in number; a wider transition widens the arrays,
    a narrower one is padded, and lengths (kept through state_dict) say what is real."""
    m = ReplayMemory(4, 2)
    m.push([0, 0], [3], [1.5], [1, 1], False)
    m.push([1, 1], [2, 5], [0.5, -1.0], [2, 2], False)
    m.push([2, 2], [4], [2.0], [3, 3], True)
    assert m.a[:3].tolist() == [[3, 0], [2, 5], [4, 0]]
    assert m.r[:3].tolist() == [[1.5, 0.0], [0.5, -1.0], [2.0, 0.0]]
    assert m.lengths[:3].tolist() == [1, 2, 1]
    m2 = ReplayMemory(4, 2)
    m2.load_state_dict(m.state_dict())
    assert m2.lengths[:3].tolist() == [1, 2, 1] and m2.a[:3].tolist() == m.a[:3].tolist()
    *_, lengths = m.sample_with_lengths(3, np.random.default_rng(0))
    assert sorted(lengths.tolist()) == [1, 1, 2]


def test_padded_actions_do_not_count_in_the_td_loss():
    """The TD loss of a minibatch with padded transitions is the mean squared error over the
    real actions only: checked against the loss computed by hand from the networks."""
    import torch

    a = _agent(n=6, batch_size=2)
    a.remember(np.ones(6), [1], [1.0], np.zeros(6), True)
    a.remember(np.zeros(6), [2, 3], [0.0, 2.0], np.ones(6), True)
    with torch.no_grad():
        q1 = a.main(torch.ones(1, 6, dtype=torch.float32))[0]
        q0 = a.main(torch.zeros(1, 6, dtype=torch.float32))[0]
    # done: y = r; real actions: (s=1, a=1, r=1), (s=0, a=2, r=0), (s=0, a=3, r=2)
    by_hand = ((1.0 - q1[1]) ** 2 + (0.0 - q0[2]) ** 2 + (2.0 - q0[3]) ** 2) / 3
    assert a.learn() == pytest.approx(float(by_hand), rel=1e-5)


def _drive(agent, rng, rounds, start):
    out = []
    for t in range(start, start + rounds):
        s = rng.normal(size=6).astype(np.float32)
        sel = agent.select(s, 3, t)
        agent.remember(s, sel, rng.random(3), rng.normal(size=6), False)
        out.append((sel, agent.learn()))
        agent.end_round(t)
    return out


def test_state_round_trip_gives_identical_next_selections():
    a = _agent(batch_size=4, memory_capacity=10, target_sync=2)
    _drive(a, np.random.default_rng(1), 8, 1)
    buf = io.BytesIO()
    torch.save(encode_payload(a.state_dict()), buf)  # as checkpoints store it: plain data
    buf.seek(0)
    b = _agent(seed=99, batch_size=4, memory_capacity=10, target_sync=2)  # other init, other RNGs
    b.load_state_dict(decode_payload(torch.load(buf, weights_only=True)))
    ra, rb = _drive(a, np.random.default_rng(2), 6, 9), _drive(b, np.random.default_rng(2), 6, 9)
    assert ra == rb
    assert any(loss is not None for _, loss in ra)
    with pytest.raises(ValueError, match="num_actions"):
        _agent(n=5).load_state_dict(a.state_dict())


def test_learn_steps_per_round():
    a = _agent(state_dim=2, n=3, hidden=2, batch_size=1, memory_capacity=4, learn_steps=3)
    _set_tiny(a)
    a.remember([1.0, 0.0], [0, 1], [0.5, -0.2], [1.0, 2.0], False)
    loss = a.learn()
    assert a.learn_steps == 3
    # the first of the three steps has the hand-computed loss 1.0225; later ones are smaller
    assert loss < (0.85**2 + 1.15**2) / 2
    with pytest.raises(ValueError, match="learn_steps"):
        _agent(learn_steps=0)
