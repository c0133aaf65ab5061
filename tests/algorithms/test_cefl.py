"""CEFL: similarity (CE-eq 3, 4), Louvain into K, leaders (CE-eq 5), partial aggregation
(CE-eq 6, 7), the four communication parts."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from fedselect.fl.round import updates
from fedselect.kernels.similarity import (
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
    d = np.array(
        [
            [0.0 if i == j else 1.0 if lab[i] == lab[j] else across[tuple(sorted((lab[i], lab[j])))] for j in range(8)]
            for i in range(8)
        ]
    )
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
from fedselect.algorithms.fedper import base_layer_names  # noqa: E402
from fedselect.fl import partial_average, state_bytes  # noqa: E402


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
    for m in models:  # CE-eq 7: every participant takes the average for its base entries
        m.load_state_dict(agg, strict=False)
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


# ---------------------------------------------------------------- communication (the four parts)
def test_communication_parts_tiny_model_by_hand():
    from fedselect.algorithms.cefl import cefl_communication, fedper_communication, regular_fl_communication

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


# ---------------------------------------------------------------- the methods on the core loop
from fedselect.algorithms.cefl import fine_tune  # noqa: E402
from fedselect.config.schema import ConfigError  # noqa: E402
from fedselect.experiment.resolve import parse_experiment  # noqa: E402
from fedselect.experiment.run import make_simulation, run_experiment  # noqa: E402
from fedselect.selectors.base import RoundView  # noqa: E402
from fedselect.world.data.datasets import ArrayDataset, register_dataset  # noqa: E402
from fedselect.world.federation import build_federation  # noqa: E402


@register_dataset("cefl-test-synthetic")
def _synthetic_two_populations(seed=0, **_):
    """Synthetic 4-class blobs in 12 dimensions for 8 clients of 60 samples (test only).
    Clients 0-4 use one label mapping, clients 5-7 the reversed one, so their models differ
    strongly: two clear clusters. ``groups`` = client id (volunteer division)."""
    rng = np.random.default_rng(0)
    centres = rng.normal(0, 3, (4, 12))
    xs, ys, gs = [], [], []
    for k in range(8):
        c = rng.integers(0, 4, 60)
        xs.append(centres[c] + rng.normal(0, 1, (60, 12)))
        ys.append(c if k < 5 else 3 - c)
        gs.append(np.full(60, k))
    x, y, g = np.concatenate(xs), np.concatenate(ys), np.concatenate(gs)
    return (
        ArrayDataset(x, y, 4, "cefl-test-synthetic", groups=g),
        ArrayDataset(x[:40], y[:40], 4, "cefl-test-synthetic", groups=g[:40]),
    )


def _cfg(method, rounds=2, **opts):
    return parse_experiment(
        {
            "name": "t",
            "method": method,
            "rounds": rounds,
            "clients_per_round": 2,
            "seed": 1,
            "data": {
                "dataset": "cefl-test-synthetic",
                "num_clients": 8,
                "partition": {"scheme": "volunteer"},
                "holdout_fraction": 0.25,
            },
            "model": {"name": "mlp", "options": {"hidden": [16]}},
            "train": {"local_epochs": 1, "batch_size": 16, "lr": 0.01, "optimizer": "adam"},
            "checkpoint_every": 0,
            "method_options": opts,
        }
    )


@pytest.fixture(scope="module")
def fed():
    return build_federation(_cfg("fedper", base_layers=1))


# MLP 12 -> 16 -> 4: layer net.1 (base) 12*16+16 = 208 values, layer net.3 16*4+4 = 68 values
FULL, BASE = 276 * 4, 208 * 4


def test_fedper_round_shares_base_keeps_heads(fed):
    sim = make_simulation(_cfg("fedper", base_layers=1), fed)
    alg = sim.algorithm
    state = alg.initial_state()
    draws = fed.fleet.draw(1)
    sel = sim.selector.select(RoundView(1, draws))
    assert list(sel.clients) == list(range(8))
    ups = updates(sim, 1, sel.clients, state)
    assert all(u.upload_bytes == u.download_bytes == BASE for u in ups)
    init_head = state.clients[1]["net.3.weight"].clone()
    new = alg.aggregate(1, state, ups)
    s0 = new.clients[0]
    for k, u in enumerate(ups):
        s = new.clients[k]
        assert torch.equal(s["net.1.weight"], s0["net.1.weight"])  # one shared base
        assert torch.equal(s["net.3.weight"], u.state["net.3.weight"])  # own head, bit-identical
    assert not torch.equal(new.clients[1]["net.3.weight"], s0["net.3.weight"])
    # aggregate returns a new state and leaves the old one alone
    assert torch.equal(state.clients[1]["net.3.weight"], init_head) and not state.aggregated and new.aggregated
    # the next round starts from own head + shared base
    st = alg.start_state(new, 2)
    assert torch.equal(st["net.3.weight"], ups[2].state["net.3.weight"])
    assert torch.equal(st["net.1.bias"], new.model["net.1.bias"])


def test_individual_sends_nothing_and_regular_fl_scores_clients(fed):
    ind = make_simulation(_cfg("individual"), fed)
    state = ind.algorithm.initial_state()
    draws = fed.fleet.draw(1)
    ups = updates(ind, 1, ind.selector.select(RoundView(1, draws)).clients, state)
    assert all(u.upload_bytes == 0 and u.download_bytes == 0 for u in ups)
    new = ind.algorithm.aggregate(1, state, ups)
    assert all(torch.equal(new.clients[k]["net.3.bias"], ups[k].state["net.3.bias"]) for k in range(8))
    assert new.model is state.model  # nothing shared: the server model is unchanged
    reg = make_simulation(_cfg("regular_fl"), fed)
    rstate = reg.algorithm.initial_state()
    ev = reg.algorithm.evaluate(0, rstate)
    from fedselect.fl.evaluate import evaluate

    model = fed.new_model()
    model.load_state_dict(rstate.model)
    accs = [evaluate(model, c.holdout)["accuracy"] for c in fed.clients]
    assert ev.per_client["client_accuracy"] == pytest.approx(accs) and ev.accuracy == pytest.approx(np.mean(accs))
    assert ev.per_client["accuracy_std"] == pytest.approx(np.std(accs))


def test_cefl_end_to_end(tmp_path, fed):
    cfg = _cfg("cefl", rounds=3, clusters=2, base_layers=1, warmup_epochs=3, transfer_epochs=4)
    s = run_experiment(cfg, tmp_path / "run", federation=fed)
    # warm-up separates the two populations; leaders are one per population
    assert s["clusters"] == [[0, 1, 2, 3, 4], [5, 6, 7]]
    assert s["leaders"][0] in range(5) and s["leaders"][1] in range(5, 8)
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    assert all(r.split(",")[1] == ";".join(map(str, sorted(s["leaders"]))) for r in rows[2:])
    from fedselect.algorithms.cefl import cefl_communication

    assert s["communication_parts_mb"] == pytest.approx(cefl_communication(FULL, BASE, 8, [5, 3], 3))
    assert s["communication_mb"] == pytest.approx((8 * FULL + 2 * 3 * 2 * BASE + 6 * FULL) / 1e6)
    assert len(s["client_accuracy"]) == 8 and s["final_accuracy"] == pytest.approx(np.mean(s["client_accuracy"]))
    assert set(s["transfer_epochs"]) == {str(k) for k in range(8) if k not in s["leaders"]}
    assert all(1 <= e <= 4 for e in s["transfer_epochs"].values())


def test_cefl_too_many_clusters_and_empty_base(fed):
    # K > N is found from the config alone, before any data is loaded
    with pytest.raises(ConfigError, match=r"selector 'cefl_leaders': clusters \(K = 9\) exceeds the number of clients N = 8"):
        _cfg("cefl", clusters=9, base_layers=1)
    with pytest.raises(ValueError, match="empty base layer set"):
        make_simulation(_cfg("cefl", clusters=2), fed)  # MLP: no layer before the first Linear


def test_fine_tune_keeps_best_state_and_stops(fed):
    from fedselect.fl.local.train import TrainConfig

    model = fed.new_model()
    start = {k: v.clone() for k, v in model.state_dict().items()}
    client = fed.clients[0]
    # a huge SGD step makes every epoch worse than epoch 0: stop after `patience` epochs, keep epoch 0
    res = fine_tune(
        model, client.train, client.holdout, TrainConfig(1, 8, 1e4, 0.0, "sgd"), 20, 2, torch.Generator().manual_seed(0)
    )
    assert res["epochs"] == 2 and res["best_epoch"] == 0
    assert all(torch.equal(model.state_dict()[k], start[k]) for k in start)


def test_cefl_resume_is_exact(tmp_path, fed):
    from fedselect.experiment.run import resume_experiment

    doc = dict(method_options={"clusters": 2, "base_layers": 1, "transfer_epochs": 2})
    cfg = _cfg("cefl", rounds=3, **doc["method_options"]).model_copy(update={"checkpoint_every": 1})
    ref = run_experiment(cfg, tmp_path / "ref", federation=fed)
    run_experiment(cfg, tmp_path / "run", federation=fed, stop_after=2)
    res = resume_experiment(tmp_path / "run")
    assert (tmp_path / "ref" / "metrics.csv").read_bytes() == (tmp_path / "run" / "metrics.csv").read_bytes()
    assert res["client_accuracy"] == ref["client_accuracy"] and res["clusters"] == ref["clusters"]


def test_louvain_fallback_is_reported_once_in_the_cli_output_and_the_run_log(tmp_path, monkeypatch):
    """The merge/split fallback's warning reaches the console and run.log exactly once."""
    import yaml
    from typer.testing import CliRunner

    from fedselect.cli import app
    from fedselect.kernels import similarity
    from fedselect.selectors import cefl_leaders

    real = similarity.louvain_k

    def fallback(s, k, rng):
        out = real(s, k, rng)
        warnings.warn(
            "Louvain gave 1 communities at best (test); merge/split fallback produced 2", ClusterCountWarning, stacklevel=2
        )
        return out

    monkeypatch.setattr(cefl_leaders, "louvain_k", fallback)
    doc = _cfg("cefl", rounds=1, clusters=2, base_layers=1, transfer_epochs=1).model_dump(mode="json")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc))
    r = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "run"), "-q"])
    assert r.exit_code == 0, r.output
    assert r.output.count("merge/split fallback produced 2") <= 1
    assert (tmp_path / "run" / "run.log").read_text().count("merge/split fallback produced 2") == 1


@pytest.mark.slow
def test_cefl_table_leaves_per_round_figures_blank_and_says_why(tmp_path):
    """CEFL 2 rounds beside Individual 3 on the two-population data: CEFL's best / last-k / to-target
    are blank (members were scored with their leader's model during the rounds), its final is
    the transfer's mean client accuracy; Individual's per-round figures are its rows'."""
    from fedselect.report.build import build_report
    from fedselect.study.compare import parse_compare, run_comparison

    base = _cfg("individual", rounds=3).model_dump(mode="json")
    for k in ("name", "seed", "method", "selector", "algorithm", "method_options"):  # the comparison gives these
        base.pop(k, None)
    base["metrics"]["target"] = 0.5
    cc = parse_compare(
        {
            "name": "t",
            "seeds": [1],
            "base": base,
            "baseline": "Individual",
            "methods": [
                {
                    "label": "CEFL",
                    "method": "cefl",
                    "rounds": 2,
                    "method_options": {"clusters": 2, "base_layers": 1, "warmup_epochs": 2, "transfer_epochs": 2},
                },
                {"label": "Individual", "method": "individual"},
            ],
        }
    )
    d = tmp_path / "c"
    run_comparison(cc, d)
    s = __import__("json").loads((d / "runs/CEFL-s1/summary.json").read_text())
    assert s["round_scores"].startswith("during the rounds a member is scored with its leader's current model")
    rep = build_report(d, plots=True)
    cefl, ind = rep["table"]
    assert cefl["final_accuracy"] == pytest.approx(np.mean(s["client_accuracy"]))
    for k in ("best_accuracy", "last_k_accuracy", "rounds_to_target", "latency_to_target_s"):
        assert cefl[k] is None and cefl[k + "_vs"] is None
    rows = (d / "runs/Individual-s1/metrics.csv").read_text().splitlines()
    acc = [float(r.split(",")[2]) for r in rows[2:]]  # rounds 1..3
    assert ind["best_accuracy"] == pytest.approx(max(acc)) and ind["last_k_accuracy"] == pytest.approx(np.mean(acc))
    md = rep["markdown"]
    assert "`best acc`, `acc mean last 10`, `rounds to target`, `latency to target (s)` are blank (-) for CEFL: during" in md
    assert "Methods ran different numbers of rounds (CEFL 2, Individual 3)" in md
    paired = rep["paired"][0]["cells"]
    assert paired["last_k_accuracy"]["diffs"] == {} and paired["final_accuracy"]["diffs"][1] == pytest.approx(
        100 * (cefl["final_accuracy"] - ind["final_accuracy"])
    )
    assert "are blank (-) for CEFL" in (d / "report.html").read_text()
    # not finished (no transfer yet): no final figures either, and the table says so
    (d / "runs/CEFL-s1/summary.json").unlink()
    cefl = build_report(d, plots=False)["table"][0]
    assert cefl["final_accuracy"] is None and cefl["incomplete"] == [
        "CEFL-s1 (2 of 2 rounds; not transferred yet, no final figures)"
    ]
