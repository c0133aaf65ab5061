"""FLASH-RL reward ingredients (SPEC 1.1) by hand."""

import math

import numpy as np
import pytest
import torch

from fedselect.methods.rewards import (favor_reward, flatten_weights, normalise_latency,
                                       normalised_divergence, update_reputations, utility)


def test_divergence_by_hand_with_zero_coordinate():
    w = np.array([2.0, -4.0, 0.0, 0.5, 1e-9])
    wk = np.array([3.0, -2.0, 7.0, 0.5, 5.0])
    # coordinates 2 (w = 0) and 4 (|w| < 1e-8) are left out: (|1/2| + |2/-4| + 0) / 3
    assert normalised_divergence(wk, w) == pytest.approx(1.0 / 3.0)
    assert normalised_divergence(w, w) == 0.0
    with pytest.raises(ValueError, match="undefined"):
        normalised_divergence([1.0, 2.0], [0.0, 1e-9])
    with pytest.raises(ValueError, match="local has 2"):
        normalised_divergence([1.0, 2.0], [1.0, 2.0, 3.0])


def test_flatten_state_dict_skips_integer_buffers():
    sd = {"a": torch.tensor([[1.0, 2.0]]), "n": torch.tensor(7), "b": torch.tensor([3.0])}
    assert flatten_weights(sd).tolist() == [1.0, 2.0, 3.0]


def test_utility_both_branches():
    d = 1.0 / 3.0
    assert utility(d, improved=True) == pytest.approx(math.exp(-d))           # 0.716531
    assert utility(d, improved=False) == pytest.approx(1 - math.exp(-d))      # 0.283469
    assert utility(-d, improved=True) == pytest.approx(0.7165313105737893)
    assert utility(0.0, improved=False) == 0.0
    assert np.allclose(utility(np.array([0.0, 1.0]), True), [1.0, math.exp(-1)])


def test_two_rounds_of_reputation_updates_by_hand():
    psi = np.full(4, 0.25)                                       # Psi_0 = 1/N
    r1 = update_reputations(psi, [0, 2], zeta=[0.8, 0.5], lnorm=[0.1, 0.5])
    # 0.6*(0.8-0.1) + 0.4*0.25 = 0.52 ; 0.6*(0.5-0.5) + 0.4*0.25 = 0.10
    assert np.allclose(r1, [0.52, 0.25, 0.10, 0.25])
    assert np.allclose(psi, 0.25)                                # input untouched
    r2 = update_reputations(r1, [2, 3], zeta=[0.9, 0.2], lnorm=[0.0, 1.0])
    # 0.6*0.9 + 0.4*0.10 = 0.58 ; 0.6*(0.2-1.0) + 0.4*0.25 = -0.38
    assert np.allclose(r2, [0.52, 0.25, 0.58, -0.38])


def test_reputation_variants_and_errors():
    psi = np.full(3, 0.5)
    # FR-eq 9: 0.6*0.9 + 0.4*0.5 = 0.74
    assert np.allclose(update_reputations(psi, [1], "utility", zeta=[0.9]), [0.5, 0.74, 0.5])
    # FR-eq 6: 0.6*(0.93 - 0.90) + 0.4*0.5 = 0.218
    out = update_reputations(psi, [2], "reputation_accuracy", local_accuracy=[0.93], prev_global_accuracy=0.90)
    assert np.allclose(out, [0.5, 0.5, 0.218])
    # alpha weights: 0.6*(2*0.5 - 0.5*0.4) + 0.4*0.5 = 0.68
    out = update_reputations(psi, [0], zeta=[0.5], lnorm=[0.4], alpha1=2.0, alpha2=0.5)
    assert out[0] == pytest.approx(0.68)
    with pytest.raises(ValueError, match="unknown reward kind"):
        update_reputations(psi, [0], "bogus", zeta=[1.0])
    with pytest.raises(ValueError, match="lnorm"):
        update_reputations(psi, [0], zeta=[1.0])
    with pytest.raises(ValueError, match="distinct"):
        update_reputations(psi, [0, 0], zeta=[1.0, 1.0], lnorm=[0.0, 0.0])


def test_normalised_latency_and_favor_reward():
    assert normalise_latency(15.0, 10.0, 30.0) == pytest.approx(0.25)
    assert np.allclose(normalise_latency(np.array([5.0, 40.0]), 10.0, 30.0), [0.0, 1.0])
    with pytest.raises(ValueError, match="L_min"):
        normalise_latency(1.0, 3.0, 3.0)
    assert favor_reward(0.99, 0.99) == 0.0
    assert favor_reward(0.49, 0.99) == pytest.approx(64 ** -0.5 - 1)     # -0.875
