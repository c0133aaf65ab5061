"""Any selector with any algorithm: composed pairs run end to end on the embedded data, a
comparison mixes selectors and algorithms on one federation, and the method presets resolve to
exactly the pairs the docs promise."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from fedselect.config.presets import PRESETS
from fedselect.config.schema import ConfigError
from fedselect.experiment.resolve import parse_experiment, resolve
from fedselect.experiment.run import make_simulation, run_experiment
from fedselect.study.compare import load_compare, run_comparison

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def base(**over):
    d = {
        "name": "comp",
        "seed": 2,
        "rounds": 3,
        "clients_per_round": 3,
        "checkpoint_every": 1,
        "data": {
            "dataset": "mnist-embedded",
            "num_clients": 8,
            "partition": {"scheme": "dirichlet", "alpha": 0.5, "min_size": 10},
        },
        "model": {"name": "mnist_cnn"},
        "train": {"local_epochs": 1, "batch_size": 50, "lr": 0.05},
    }
    d.update(over)
    return d


@pytest.mark.slow
def test_flashrl_with_fedper_trains_the_agent_on_shared_layers_only(tmp_path):
    cfg = parse_experiment(
        base(
            selector={"name": "flashrl", "options": {"rl_batch_size": 2, "pca_components": 4, "hidden": 16}},
            algorithm={"name": "fedper"},
        )
    )
    assert resolve(cfg).method == "flashrl+fedper"
    sim = make_simulation(cfg)
    base_keys = ["conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias"]
    assert sim.algorithm.upload_keys() == base_keys and sim.ctx.upload_keys == base_keys
    # the PCA rows and FR-eq 7's divergence use the uploaded (shared) entries only
    state = sim.algorithm.initial_state()
    assert sim.selector.flat(state.clients[0]).numel() == 20 * 25 + 20 + 50 * 20 * 25 + 50  # conv1 + conv2: 25,570
    s = run_experiment(cfg, tmp_path / "run")
    r = rows(tmp_path / "run" / "metrics.csv")
    base_bytes = 4 * 25_570
    for row in r[1:]:
        assert len(row["selected"].split(";")) == 3
        assert int(row["upload_bytes"]) == 3 * base_bytes  # only the base layers travel
        assert row["client_accuracy"] and row["epsilon"]  # FedPer's per-client scores, FLASH-RL's columns
    assert s["selector"] == "flashrl" and s["algorithm"] == "fedper" and s["method"] == "flashrl+fedper"


@pytest.mark.slow
def test_oort_with_fedavg_end_to_end_and_resume(tmp_path):
    cfg = parse_experiment(base(method="oort"))
    assert (cfg.selector.name, cfg.algorithm.name) == ("oort", "fedavg")
    ref = run_experiment(cfg, tmp_path / "ref")
    run_experiment(cfg, tmp_path / "run", stop_after=1)
    res = run_experiment(cfg, tmp_path / "run", resume=True)
    assert (tmp_path / "ref" / "metrics.csv").read_bytes() == (tmp_path / "run" / "metrics.csv").read_bytes()
    assert res["final_accuracy"] == ref["final_accuracy"] and ref["rounds"] == 3


def test_presets_are_the_documented_pairs():
    pairs = {n: (p.selector, p.algorithm) for n, p in PRESETS.items()}
    assert pairs == {
        "fedavg": ("random", "fedavg"),
        "full": ("all", "fedavg"),
        "regular_fl": ("all", "fedavg"),
        "flashrl": ("flashrl", "fedavg"),
        "favor": ("favor", "fedavg"),
        "cefl": ("cefl_leaders", "cefl"),
        "fedper": ("all", "fedper"),
        "individual": ("all", "individual"),
        "budgeted_online": ("secretary", "fedavg"),
        "online_random": ("online_random", "fedavg"),
        "offline_best": ("offline_best", "fedavg"),
        "oort": ("oort", "fedavg"),
        "power_of_choice": ("power_of_choice", "fedavg"),
        "fastest": ("fastest", "fedavg"),
        "clustered_sampling": ("clustered_sampling", "fedavg"),
        "divfl": ("divfl", "fedavg"),
        "afl": ("afl", "fedavg"),
        "fedprox": ("random", "fedprox"),
        "fedadam": ("random", "fedadam"),
        "fedyogi": ("random", "fedyogi"),
        "fedadagrad": ("random", "fedadagrad"),
        "scaffold": ("random", "scaffold"),
    }
    assert parse_experiment(base(method="regular_fl")).algorithm.options == {"evaluation": "per_client"}


def test_method_options_go_to_their_owner_and_resolution_is_idempotent():
    cfg = parse_experiment(base(method="cefl", method_options={"clusters": 3, "transfer_epochs": 7}))
    assert cfg.selector.options["clusters"] == 3 and "transfer_epochs" not in cfg.selector.options
    assert cfg.algorithm.options["transfer_epochs"] == 7 and "clusters" not in cfg.algorithm.options
    assert cfg.method_options == {} and cfg.method == "cefl"
    again = parse_experiment(cfg.model_dump(mode="json"))
    assert again == cfg  # the resolved config (config.yaml) resolves to itself
    assert resolve(again).method == "cefl"
    # an explicit part replaces the preset's; options given twice are refused
    mixed = parse_experiment(
        base(method="cefl", algorithm={"name": "cefl", "options": {"patience": 5}}, method_options={"clusters": 2})
    )
    assert mixed.algorithm.options["patience"] == 5 and mixed.selector.options["clusters"] == 2
    with pytest.raises(ConfigError, match=r"algorithm.options and method_options both set \['patience'\]"):
        parse_experiment(
            base(method="cefl", algorithm={"name": "cefl", "options": {"patience": 5}}, method_options={"patience": 4})
        )


@pytest.mark.slow
def test_comparison_mixes_selectors_and_algorithms_on_one_federation(tmp_path):
    cc = load_compare(CONFIGS / "selectors-small.yaml", {"rounds": 2, "data.num_clients": 8, "clients_per_round": 3})
    labels = [m.label for m in cc.methods]
    assert labels == ["FedAvg", "FLASH-RL", "FAVOR", "Oort", "Power-of-Choice", "fastest", "FLASH-RL+FedPer"]
    out = run_comparison(cc, tmp_path / "c")
    assert sorted(p.name for p in out.glob("federation-s*.json")) == ["federation-s0.json"]  # built once, shared
    sums = {lab: json.loads((out / "runs" / f"{lab}-s0" / "summary.json").read_text()) for lab in labels}
    assert all(s["complete"] and s["rounds"] == 2 for s in sums.values())
    assert {s["selector"] for s in sums.values()} == {"random", "flashrl", "favor", "oort", "power_of_choice", "fastest"}
    assert sums["FLASH-RL+FedPer"]["algorithm"] == "fedper"
    pow_rows = rows(out / "runs" / "Power-of-Choice-s0" / "metrics.csv")
    assert "probe_latency_s" in pow_rows[0] and float(pow_rows[1]["probe_latency_s"]) > 0
    assert "probe_latency_s" not in rows(out / "runs" / "FedAvg-s0" / "metrics.csv")[0]
    # every method of the seed saw the same round-1 draws and the same clients' data: the same initial accuracy
    assert (
        len({rows(out / "runs" / f"{lab}-s0" / "metrics.csv")[0]["accuracy"] for lab in labels if lab != "FLASH-RL+FedPer"}) == 1
    )
    assert (out / "table.md").exists() and (out / "report.html").exists()


# the baselines of issue 38: which algorithms each composes with, and why the others are refused
BASELINE_PAIRS = {
    "clustered_sampling": {"cefl": "cluster leaders", "individual": "shared global model", "scaffold": "its own weights"},
    "divfl": {"cefl": "cluster leaders", "individual": "shared global model"},
    "fedcs": {"cefl": "cluster leaders"},
    "afl": {"cefl": "cluster leaders"},
}


@pytest.mark.parametrize("selector", sorted(BASELINE_PAIRS))
def test_the_baselines_compose_with_every_algorithm_that_fits(selector):
    from fedselect.algorithms import ALGORITHMS

    opts = {"deadline_s": 1.0} if selector == "fedcs" else {}
    for alg in sorted(ALGORITHMS.builtin_names()):
        doc = base(selector={"name": selector, "options": opts}, algorithm={"name": alg})
        why = BASELINE_PAIRS[selector].get(alg)
        if why is None:
            parse_experiment(doc)
        else:
            with pytest.raises(ConfigError, match=why):
                parse_experiment(doc)


@pytest.mark.slow
@pytest.mark.parametrize(
    "selector,algorithm",
    [("clustered_sampling", "fedadam"), ("divfl", "scaffold"), ("fedcs", "fedprox"), ("afl", "fedyogi")],
)
def test_a_baseline_runs_with_another_algorithm(tmp_path, selector, algorithm):
    opts = {"deadline_s": 1.0, "request_fraction": 1.0} if selector == "fedcs" else {}
    doc = base(rounds=2, selector={"name": selector, "options": opts}, algorithm={"name": algorithm})
    doc["model"] = {"name": "mlp", "options": {"hidden": [16]}}
    s = run_experiment(parse_experiment(doc), tmp_path / "r")
    assert s["rounds"] == 2 and s["algorithm"] == algorithm and 0 < s["final_accuracy"] <= 1
