"""CEFL: similarity (CE-eq 3, 4), Louvain into K, leaders (CE-eq 5), partial aggregation
(CE-eq 6, 7), communication parts (SPEC 2 item 7)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from fedselect.methods.similarity import (
    ClusterCountWarning,
    edge_weights,
    layer_groups,
    louvain_k,
    select_leaders,
    similarity_factors,
)

torch.set_num_threads(1)


def _two_layer(aw, ab, bw, bb):
    t = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    return {"a.weight": t(aw), "a.bias": t(ab), "b.weight": t(bw), "b.bias": t(bb)}


def test_layer_groups_pairs_weight_and_bias():
    g = layer_groups(["a.weight", "a.bias", "net.0.weight", "net.0.bias", "scale"])
    assert g == {"a": ["a.weight", "a.bias"], "net.0": ["net.0.weight", "net.0.bias"], "scale": ["scale"]}


def test_similarity_and_edge_weights_by_hand():
    m0 = _two_layer([0, 0], [0], [0], [0])
    m1 = _two_layer([3, 0], [4], [1], [0])
    m2 = _two_layer([0, 0], [0], [0], [2])
    d = similarity_factors([m0, m1, m2])
    # layer a: ||(3,0,4)|| = 5; layer b: ||(1,0)|| = 1  -> d01 = 6
    # m0 vs m2: layer a 0, layer b ||(0,2)|| = 2       -> d02 = 2
    # m1 vs m2: layer a 5, layer b ||(1,-2)|| = sqrt 5 -> d12 = 5 + sqrt(5)
    r5 = math.sqrt(5)
    expected_d = np.array([[0, 6, 2], [6, 0, 5 + r5], [2, 5 + r5, 0]])
    np.testing.assert_allclose(d, expected_d, rtol=1e-6)
    s = edge_weights(d)
    # d_min = 2, d_max = 5 + sqrt5: S = -d + 7 + sqrt5
    expected_s = np.array([[0, 1 + r5, 5 + r5], [1 + r5, 0, 2], [5 + r5, 2, 0]])
    np.testing.assert_allclose(s, expected_s, rtol=1e-6)
    # CE-eq 5 over one community: sums 6+2sqrt5, 3+sqrt5, 7+sqrt5 -> client 0 leads
    assert select_leaders(s, [[0, 1, 2]], sizes=[1, 1, 1]) == [0]


def test_edge_weights_rejects_bad_input():
    with pytest.raises(ValueError, match="square"):
        edge_weights(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="symmetric"):
        edge_weights(np.array([[0.0, 1.0], [2.0, 0.0]]))


def _two_clusters_d():
    # A = {0,1,2}: d01 = d02 = 1, d12 = 2 ; B = {3,4}: d34 = 1 ; across: 10
    d = np.full((5, 5), 10.0)
    np.fill_diagonal(d, 0.0)
    d[0, 1] = d[1, 0] = d[0, 2] = d[2, 0] = 1.0
    d[1, 2] = d[2, 1] = 2.0
    d[3, 4] = d[4, 3] = 1.0
    return d


def test_louvain_two_clear_clusters_and_leaders():
    s = edge_weights(_two_clusters_d())  # S = 11 - d off the diagonal
    assert s[0, 1] == 10 and s[1, 2] == 9 and s[0, 3] == 1
    comms, info = louvain_k(s, 2, np.random.default_rng(0))
    assert comms == [[0, 1, 2], [3, 4]]
    assert not info["fallback"]
    # A: sums 20, 19, 19 -> 0. B: tie 10 / 10 -> larger data set (client 4) ...
    assert select_leaders(s, comms, sizes=[5, 5, 5, 3, 7]) == [0, 4]
    # ... and with equal sizes the lower id.
    assert select_leaders(s, comms, sizes=[5, 5, 5, 7, 7]) == [0, 3]


@pytest.mark.parametrize("k", [1, 3, 4, 5])
def test_louvain_returns_exactly_k(k):
    s = edge_weights(_two_clusters_d())
    comms, _ = louvain_k(s, k, np.random.default_rng(1))
    assert len(comms) == k
    assert sorted(i for c in comms for i in c) == [0, 1, 2, 3, 4]


def test_louvain_is_seed_deterministic():
    rng = np.random.default_rng(3)
    pts = rng.normal(size=(12, 4))
    d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    s = edge_weights(d)
    a = louvain_k(s, 3, np.random.default_rng(7))
    b = louvain_k(s, 3, np.random.default_rng(7))
    assert a == b and len(a[0]) == 3


def test_louvain_fallback_warns_with_counts():
    s = edge_weights(_two_clusters_d())
    # one Louvain call only (resolution 1 -> 2 communities), so 4 needs the split fallback
    with pytest.warns(ClusterCountWarning, match=r"gave 2 communities.*produced 4"):
        comms, info = louvain_k(s, 4, np.random.default_rng(0), max_iter=1)
    assert info["fallback"] and info["louvain_count"] == 2
    assert len(comms) == 4 and sorted(i for c in comms for i in c) == list(range(5))
    # with the full search no warning is raised
    with warnings.catch_warnings():
        warnings.simplefilter("error", ClusterCountWarning)
        comms, _ = louvain_k(s, 2, np.random.default_rng(0))
    assert comms == [[0, 1, 2], [3, 4]]


def test_louvain_merge_fallback_joins_most_similar():
    # clusters A={0,1,2}, B={3,4,5}, C={6,7}; d inside 1, A-B 6, A-C 10, B-C 8 (S = 11 - d)
    lab = [0, 0, 0, 1, 1, 1, 2, 2]
    across = {(0, 1): 6.0, (0, 2): 10.0, (1, 2): 8.0}
    d = np.array([[0.0 if i == j else 1.0 if lab[i] == lab[j] else across[tuple(sorted((lab[i], lab[j])))]
                   for j in range(8)] for i in range(8)])
    s = edge_weights(d)
    assert louvain_k(s, 3, np.random.default_rng(0))[0] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    # only resolution 1 tried (3 communities): smallest C has mean S 3 to B and 1 to A -> joins B
    with pytest.warns(ClusterCountWarning, match=r"gave 3 communities.*produced 2"):
        comms, info = louvain_k(s, 2, np.random.default_rng(0), max_iter=1)
    assert comms == [[0, 1, 2], [3, 4, 5, 6, 7]] and info["fallback"]


def test_louvain_k_greater_than_n_raises():
    s = edge_weights(_two_clusters_d())
    with pytest.raises(ValueError, match="k=6 exceeds the number of clients N=5"):
        louvain_k(s, 6, np.random.default_rng(0))
    with pytest.raises(ValueError, match="k must be"):
        louvain_k(s, 0, np.random.default_rng(0))


# ---------------------------------------------------------------- partial aggregation (CE-eq 6, 7)
from fedselect.fl import partial_average, state_bytes  # noqa: E402
from fedselect.methods.fedper import apply_base, base_layer_names  # noqa: E402


class _Tiny(nn.Module):
    """conv3x3(1->2): 2*9 + 2 = 20 params; fc(8->3): 24 + 3 = 27 params; 47 in all."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(torch.flatten(torch.relu(self.conv(x)), 1))


def _tiny(seed):
    g = torch.Generator().manual_seed(seed)
    m = _Tiny()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return m


def test_base_layer_names_default_count_and_names():
    m = _Tiny()
    assert base_layer_names(m) == ["conv.weight", "conv.bias"]  # layers before the first Linear
    assert base_layer_names(m, 2) == ["conv.weight", "conv.bias", "fc.weight", "fc.bias"]
    assert base_layer_names(m, ["fc"]) == ["fc.weight", "fc.bias"]
    assert base_layer_names(m, ["conv.bias"]) == ["conv.bias"]
    with pytest.raises(ValueError, match="empty base layer set"):
        base_layer_names(m, [])
    with pytest.raises(ValueError, match="between 1 and"):
        base_layer_names(m, 0)
    with pytest.raises(ValueError, match="unknown base layer 'head'"):
        base_layer_names(m, ["head"])
    with pytest.raises(ValueError, match="empty base layer set"):
        base_layer_names(nn.Sequential(nn.Linear(2, 2)))  # default on an MLP has no base
    with pytest.raises(ValueError, match="empty"):
        partial_average([m.state_dict()], [1.0], [])


def test_partial_aggregation_only_touches_base_layers():
    models = [_tiny(1), _tiny(2)]
    before = [{k: v.clone() for k, v in m.state_dict().items()} for m in models]
    base = base_layer_names(models[0])
    agg = partial_average([m.state_dict() for m in models], [1.0, 3.0], base)
    assert sorted(agg) == sorted(base)  # personalised entries never leave the clients
    for m in models:
        apply_base(m, agg)
    for m, old in zip(models, before):
        s = m.state_dict()
        for name in base:  # a = (1/4, 3/4)
            torch.testing.assert_close(s[name], 0.25 * before[0][name] + 0.75 * before[1][name])
        for name in ("fc.weight", "fc.bias"):  # bit-identical
            assert torch.equal(s[name], old[name])


def test_payload_sizes_of_tiny_model():
    m = _Tiny()
    assert state_bytes(m.state_dict()) == 47 * 4
    assert state_bytes(m.state_dict(), base_layer_names(m)) == 20 * 4


# ---------------------------------------------------------------- communication (SPEC 2 item 7)
def test_communication_parts_tiny_model_by_hand():
    from fedselect.methods.cefl import cefl_communication, fedper_communication, regular_fl_communication

    m = _Tiny()
    full, base = state_bytes(m.state_dict()), state_bytes(m.state_dict(), base_layer_names(m))
    # N = 5 clients, clusters of 3 and 2 (K = 2), T = 10 rounds; full 188 B, base 80 B
    parts = cefl_communication(full, base, 5, [3, 2], 10)
    assert parts["part1_mb"] == pytest.approx(5 * 188 / 1e6)  # 940 B
    assert parts["part2_mb"] == pytest.approx(10 * 2 * 80 / 1e6)  # 1600 B
    assert parts["part3_mb"] == pytest.approx(1600 / 1e6)
    assert parts["part4_mb"] == pytest.approx(3 * 188 / 1e6)  # 564 B
    assert parts["total_mb"] == pytest.approx(4704 / 1e6)
    assert regular_fl_communication(full, 5, 10) == pytest.approx(2 * 5 * 10 * 188 / 1e6)
    assert fedper_communication(base, 5, 10) == pytest.approx(2 * 5 * 10 * 80 / 1e6)
    with pytest.raises(ValueError, match="sum to 4"):
        cefl_communication(full, base, 5, [2, 2], 10)
