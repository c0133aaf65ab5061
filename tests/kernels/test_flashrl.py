"""FLASH-RL reward ingredients (FLASH-RL Section III-B) by hand."""

import math

import numpy as np
import pytest
import torch

from fedselect.fl.aggregate import flat_parameters
from fedselect.kernels.rewards import favor_reward, normalise_latency, normalised_divergence, update_reputations, utility


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


def test_flat_parameters_skip_integer_buffers():
    sd = {"a": torch.tensor([[1.0, 2.0]]), "n": torch.tensor(7), "b": torch.tensor([3.0])}
    assert flat_parameters(sd).tolist() == [1.0, 2.0, 3.0]
    assert flat_parameters(sd, ["b", "a"]).tolist() == [3.0, 1.0, 2.0]


def test_utility_both_branches():
    d = 1.0 / 3.0
    assert utility(d, improved=True) == pytest.approx(math.exp(-d))  # 0.716531
    assert utility(d, improved=False) == pytest.approx(1 - math.exp(-d))  # 0.283469
    assert utility(-d, improved=True) == pytest.approx(0.7165313105737893)
    assert utility(0.0, improved=False) == 0.0
    assert np.allclose(utility(np.array([0.0, 1.0]), True), [1.0, math.exp(-1)])


def test_two_rounds_of_reputation_updates_by_hand():
    psi = np.full(4, 0.25)  # Psi_0 = 1/N
    r1 = update_reputations(psi, [0, 2], zeta=[0.8, 0.5], lnorm=[0.1, 0.5])
    # 0.6*(0.8-0.1) + 0.4*0.25 = 0.52 ; 0.6*(0.5-0.5) + 0.4*0.25 = 0.10
    assert np.allclose(r1, [0.52, 0.25, 0.10, 0.25])
    assert np.allclose(psi, 0.25)  # input untouched
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
    # an empty range (every client alike): 0 at the bounds (up to float rounding), 1 beyond; was a ValueError
    assert normalise_latency(3.0, 3.0, 3.0) == 0.0 and normalise_latency(3.0 * (1 + 1e-12), 3.0, 3.0) == 0.0
    assert normalise_latency(np.array([2.0, 3.0, 3.5]), 3.0, 3.0).tolist() == [0.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="L_min <= L_max"):
        normalise_latency(1.0, 3.0, 2.0)
    assert favor_reward(0.99, 0.99) == 0.0
    assert favor_reward(0.49, 0.99) == pytest.approx(64**-0.5 - 1)  # -0.875


# ---------------------------------------------------------------- the methods in the round loop
import csv

from fedselect.config.schema import ConfigError
from fedselect.experiment.resolve import parse_experiment
from fedselect.experiment.run import make_simulation, run_experiment
from fedselect.world.data.datasets import ArrayDataset, register_dataset
from fedselect.world.federation import build_federation

torch.set_num_threads(1)


@register_dataset("flashrl-test-synthetic")
def _synthetic_blobs(seed=0, **_):
    """Synthetic 4-class Gaussian blobs in 12 dimensions (test-only, loads in milliseconds)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 2, (4, 12))
    y = rng.integers(0, 4, 600)
    x = centres[y] + rng.normal(0, 1, (600, 12))
    return (
        ArrayDataset(x[:480], y[:480], 4, "flashrl-test-synthetic"),
        ArrayDataset(x[480:], y[480:], 4, "flashrl-test-synthetic"),
    )


def _cfg(method, rounds=4, **opts):
    return parse_experiment(
        {
            "name": "t",
            "method": method,
            "rounds": rounds,
            "clients_per_round": 3,
            "seed": 3,
            "data": {"dataset": "flashrl-test-synthetic", "num_clients": 8},
            "model": {"name": "mlp", "options": {"hidden": [16]}},
            "train": {"local_epochs": 1, "batch_size": 64, "lr": 0.05},
            "method_options": {"rl_batch_size": 2, "pca_components": 5, "hidden": 32, "target_sync": 2, **opts},
        }
    )


def _rows(run_dir):
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def fed():
    return build_federation(_cfg("flashrl"))


def test_flashrl_state_layout_and_standardisation(fed):
    m = make_simulation(_cfg("flashrl"), fed).selector
    info = m.prepare().summary
    assert info["pca_components"] == 5 and 0 < info["pca_explained_variance"] <= 1.0 + 1e-6
    # all 8 clients upload the whole MLP 12-16-4 once: 12*16+16+16*4+4 = 276 float32 parameters each
    assert info["upload_bytes"] == info["download_bytes"] == 8 * 276 * 4
    s = m.state_vector(1, fed.fleet.draw(1), None).reshape(8, 5 + 4)
    assert m.state_dim() == 8 * 9
    # n_k and c_k standardised with the fleet's own mean and std: mean 0, std 1 over clients
    assert np.allclose(s[:, 5:7].mean(0), 0, atol=1e-5) and np.allclose(s[:, 5:7].std(0), 1, atol=1e-4)
    # the PCA rows of the warm-up models have unit std on the first component
    assert s[:, 0].std(ddof=1) == pytest.approx(1.0, rel=1e-3)
    assert np.allclose(s[:, :5], m.client_rows)


def test_flashrl_runs_with_extra_metrics(fed, tmp_path):
    cfg = _cfg("flashrl", eps_end=0.35)
    summary = run_experiment(cfg, tmp_path, federation=fed)
    rows = _rows(tmp_path)
    assert [int(r["round"]) for r in rows] == [0, 1, 2, 3, 4]
    for r in rows[1:]:
        sel = [int(x) for x in r["selected"].split(";")]
        assert len(sel) == 3 == len(set(sel))
        assert len(r["selected_devices"].split(";")) == 3 and len(r["selected_networks"].split(";")) == 3
    assert [float(r["epsilon"]) for r in rows[1:]] == pytest.approx([1.0, 0.9 - 0.55 / 3, 0.9 - 1.1 / 3, 0.35])
    assert rows[1]["td_loss"] == "nan" and np.isfinite(float(rows[2]["td_loss"]))
    # the warm-up straggler counts in the end-to-end latency (round-0 row)
    assert float(rows[0]["e2e_latency_s"]) > 0
    assert summary["e2e_latency_s"] == pytest.approx(float(rows[-1]["e2e_latency_s"]))


@pytest.mark.parametrize("method,extra", [("flashrl", {}), ("favor", {"checkpoint_pca": False, "target": 0.9})])
def test_resume_gives_identical_rows(fed, tmp_path, method, extra):
    cfg = _cfg(method, **extra)
    run_experiment(cfg, tmp_path / "a", federation=fed)
    run_experiment(cfg, tmp_path / "b", federation=fed, stop_after=2)
    run_experiment(cfg, tmp_path / "b", federation=fed, resume=True)
    assert _rows(tmp_path / "a") == _rows(tmp_path / "b")


def test_favor_reward_and_target(fed, tmp_path):
    run_experiment(_cfg("favor", rounds=2, target=0.5), tmp_path, federation=fed)
    for r in _rows(tmp_path)[1:]:
        # the reward reads the server's validation set, not the reported test accuracy
        assert float(r["mean_reward"]) == pytest.approx(64 ** (float(r["val_accuracy"]) - 0.5) - 1)
        assert float(r["mean_reward"]) != pytest.approx(64 ** (float(r["accuracy"]) - 0.5) - 1)


def test_flashrl_needs_every_round_evaluated(fed):
    cfg = _cfg("flashrl").model_copy(update={"eval_every": 2})
    with pytest.raises(
        ConfigError, match="selector 'flashrl' needs the global metric every round .* set eval_every: 1 \\(got 2\\)"
    ):
        make_simulation(cfg, fed)


def test_timeouts_and_dropouts_never_look_fast_by_hand(fed):
    """FR-eq 10's latency term l_t^k for a participant cut before its work was done: the latency
    of its whole work (FR-eq 5, the cost model's, as the paper's environment computes it for
    every selected client), where that is unknown (an injected hang) at least the cut; a dropout
    its expected latency. Before: a timeout was charged max(expected, 2 x deadline) = 5.0 s
    whatever its work took (7.0 s here), a cancelled one likewise."""
    from dataclasses import replace

    from fedselect.fl.types import ClientOutcome, Evaluation
    from fedselect.selectors.base import Feedback

    m = make_simulation(_cfg("flashrl"), fed).selector
    m.l_min, m.l_max = 0.5, 8.0
    m._expected = np.array([1.0, 2.0, 3.0, 1.0, 4.0, 1.0, 1.0, 1.0])
    g = {k: v.clone() for k, v in fed.new_model().state_dict().items()}

    def out(k, latency, failed=None, state=None, **kw):
        return replace(ClientOutcome(k, 1, state, 60, 1.0, 1, latency, 0.0, 0.0, latency, 0, 0, failed, 0.0, 0), **kw)

    outcomes = [
        out(0, 2.5, "timeout", planned_latency_s=7.0),  # cut at the 2.5 s deadline, its work takes 7 s
        out(1, 2.4, None, g),  # delivered
        out(2, 0.0, "dropout"),
        out(3, 2.5, "timeout"),  # an injected hang: whole latency unknown, at least the cut
        out(4, 2.5, "timeout"),  # unknown, expected 4.0 s > the cut
        out(5, 1.8, "cancelled", planned_latency_s=3.3),  # over-selection ended the round at 1.8 s
    ]
    assert [m.latency_for(o) for o in outcomes] == [7.0, 2.4, 3.0, 2.5, 4.0, 3.3]
    fb = Feedback(Evaluation(0.5, 0.5, 1.0), Evaluation(0.6, 0.6, 1.0), True, g)
    psi = m.round_rewards(1, outcomes, fb)
    # Psi = 0.6 (zeta - lnorm) + 0.4 / 8, lnorm = (l - 0.5) / 7.5; client 1 equals the global model:
    # divergence 0, the metric improved, zeta = exp(0) = 1; failed clients have zeta 0
    lnorm = [(x - 0.5) / 7.5 for x in (7.0, 2.4, 3.0, 2.5, 4.0, 3.3)]
    zeta = [0, 1, 0, 0, 0, 0]
    assert psi.tolist() == pytest.approx([0.6 * (z - ln) + 0.05 for z, ln in zip(zeta, lnorm)])
    assert min(lnorm[i] for i in (0, 3, 4, 5)) >= lnorm[1]  # nobody cut is charged less than one that delivered


# ---------------------------------------------------------------- named schedules (paper / tuned / code)
_PAPER = {
    "eps_init": 0.9,
    "eps_end": 0.35,
    "eps_decay_rounds": None,
    "rl_batch_size": 50,
    "rl_learn_start": None,
    "rl_lr": 0.01,
    "rl_learn_steps": 1,
}
_TUNED = {
    "eps_init": 0.9,
    "eps_end": 0.2,
    "eps_decay_rounds": 30,
    "rl_batch_size": 10,
    "rl_learn_start": None,
    "rl_lr": 0.001,
    "rl_learn_steps": 10,
}
# the authors' RL/DQL.py: epsilon 0.9 - 0.7/500 a round to 0.2 (round 502), minibatch 50, learning from round 1
_CODE = {
    "eps_init": 0.9,
    "eps_end": 0.2,
    "eps_decay_rounds": 502,
    "rl_batch_size": 50,
    "rl_learn_start": 1,
    "rl_lr": 0.01,
    "rl_learn_steps": 1,
}


def _resolved(method, options):
    return parse_experiment(
        {
            "name": "t",
            "method": method,
            "data": {"dataset": "flashrl-test-synthetic", "num_clients": 8},
            "model": {"name": "mlp", "options": {"hidden": [16]}},
            "metrics": {"target": 0.9},
            "method_options": options,
        }
    ).model_dump(mode="json")


@pytest.mark.parametrize("method", ["flashrl", "favor"])
@pytest.mark.parametrize("name,values", [("paper", _PAPER), ("tuned", _TUNED), ("code", _CODE)])
def test_schedule_expands_to_the_explicit_values(method, name, values):
    got = _resolved(method, {"schedule": name})
    assert got == _resolved(method, dict(values))  # the resolved config is the written-out one
    opts = got["selector"]["options"]
    assert {k: opts[k] for k in values} == values and "schedule" not in opts


def test_schedule_explicit_options_override_it():
    opts = _resolved("flashrl", {"schedule": "tuned", "eps_decay_rounds": 6, "rl_batch_size": 5})["selector"]["options"]
    assert opts["eps_decay_rounds"] == 6 and opts["rl_batch_size"] == 5  # explicit wins
    assert (opts["eps_end"], opts["rl_lr"], opts["rl_learn_steps"]) == (0.2, 0.001, 10)  # the rest from `tuned`


def test_no_schedule_keeps_the_defaults():
    """The default agent is neither preset: Table IV except eps_end 0.2 (unchanged)."""
    opts = _resolved("flashrl", {})["selector"]["options"]
    assert {k: opts[k] for k in _PAPER} == {**_PAPER, "eps_end": 0.2}
    assert _resolved("flashrl", {"schedule": None}) == _resolved("flashrl", {})


@pytest.mark.parametrize("bad", ["Paper", "fast", 1])
def test_unknown_schedule_lists_the_allowed_names(bad):
    with pytest.raises(ConfigError, match=r"method_options\.schedule: Input should be 'paper', 'tuned' or 'code'"):
        _resolved("flashrl", {"schedule": bad})


def test_repro_schedules_config_uses_the_presets_with_the_same_values():
    """configs/repro/flashrl-mnist-dir05-schedules.yaml names the schedules; its resolved
    experiments are those of the six options written out (saved runs are compared against them)."""
    from pathlib import Path

    import yaml

    from fedselect.study.compare import load_compare, parse_compare

    path = Path(__file__).resolve().parents[2] / "configs/repro/flashrl-mnist-dir05-schedules.yaml"
    doc = yaml.safe_load(path.read_text())
    named = {m["label"]: m.get("method_options", {}) for m in doc["methods"]}
    assert named["FLASH-RL (paper schedule)"] == {"schedule": "paper"}
    assert named["FLASH-RL (tuned)"] == {"schedule": "tuned"}
    assert named["FAVOR"] == {"target": 0.99, "schedule": "paper"}
    explicit = {
        "FLASH-RL (paper schedule)": {
            "rl_batch_size": 50,
            "rl_lr": 0.01,
            "rl_learn_steps": 1,
            "eps_end": 0.35,
            "eps_decay_rounds": None,
        },
        "FLASH-RL (tuned)": {"rl_batch_size": 10, "rl_lr": 0.001, "rl_learn_steps": 10, "eps_end": 0.2, "eps_decay_rounds": 30},
        "FAVOR": {
            "target": 0.99,
            "rl_batch_size": 50,
            "rl_lr": 0.01,
            "rl_learn_steps": 1,
            "eps_end": 0.35,
            "eps_decay_rounds": None,
        },
    }
    old = {
        **doc,
        "methods": [{**m, "method_options": explicit[m["label"]]} if m["label"] in explicit else m for m in doc["methods"]],
    }
    a, b = load_compare(path), parse_compare(old)
    for ea, eb in zip(a.methods, b.methods):
        assert a.experiment(ea, 3).model_dump(mode="json") == b.experiment(eb, 3).model_dump(mode="json")
