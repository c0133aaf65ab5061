"""fedselect's Flower ClientApp (fedselect.flower.client_app): node settings, the train /
evaluate / query replies against our simulator, and the app in Flower's simulation engine and
in a real SuperLink + SuperNodes deployment on 127.0.0.1."""

import importlib.util
import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from fedselect.fl.round import updates

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("flwr") is None, reason="Flower is the optional extra fedselect[flower] (make test installs it)"
)

from fedselect.config import ConfigError  # noqa: E402

#: the experiment of every node (flat dotted keys, as in a Flower run config)
SETTINGS = {
    "seed": 3,
    "data.dataset": "mnist-embedded",
    "data.partition.scheme": "dirichlet",
    "data.partition.alpha": 0.5,
    "data.partition.min_size": 10,
    "model.name": "mlp",
    "model.options.hidden": "[32]",
    "train.local_epochs": 1,
    "train.batch_size": 32,
    "train.lr": 0.05,
    "torch-threads": 1,
}


def _cfg_doc(n: int) -> dict:
    return {
        "seed": 3,
        "clients_per_round": min(5, n),
        "data": {
            "dataset": "mnist-embedded",
            "num_clients": n,
            "partition": {"scheme": "dirichlet", "alpha": 0.5, "min_size": 10},
        },
        "model": {"name": "mlp", "options": {"hidden": [32]}},
        "train": {"local_epochs": 1, "batch_size": 32, "lr": 0.05},
    }


def _expected(n: int, t: int = 1) -> dict[int, tuple]:
    """Our simulator's FedAvg local update of every client from the initial global model
    (``Simulation.train``, the round loop's path): k -> (digest of the trained state, train
    loss, latency, upload bytes, profile names)."""
    from fedselect.experiment import make_simulation
    from fedselect.resolve import parse_experiment
    from flower_probe import arrays_digest

    sim = make_simulation(parse_experiment(_cfg_doc(n)))
    fed = sim.fed
    state = sim.algorithm.initial_state()
    outcomes = updates(sim, t, list(range(n)), state)
    return {
        o.client_id: (arrays_digest(o.state), o.train_loss, o.latency_s, o.upload_bytes, fed.fleet.describe(o.client_id))
        for o in outcomes
    }


# ---------------------------------------------------------------------------- settings
def test_node_settings_build_the_simulators_experiment(tmp_path):
    from fedselect.flower.client_app import node_experiment
    from fedselect.resolve import parse_experiment

    k, cfg = node_experiment(SETTINGS, {"partition-id": 2, "num-partitions": 8})
    assert k == 2 and cfg.model_dump() == parse_experiment(_cfg_doc(8)).model_dump()
    # a YAML file on the node, overridden key by key; node config over run config
    f = tmp_path / "exp.yaml"
    f.write_text("seed: 7\ndata: {dataset: mnist-embedded, num_clients: 6}\nmodel: {name: mlp}\ntrain: {lr: 0.1}\n")
    k, cfg = node_experiment({"fedselect-config": str(f), "train.lr": 0.2, "probe.x": 1}, {"partition-id": 5, "train.lr": 0.3})
    assert (k, cfg.seed, cfg.data.num_clients, cfg.train.lr, cfg.clients_per_round) == (5, 7, 6, 0.3, 5)


@pytest.mark.parametrize(
    "run_config, node_config, message",
    [
        ({}, {}, "no 'partition-id'"),
        ({}, {"partition-id": 3, "num-partitions": 3}, r"partition-id 3 is not a client id 0..2"),
        ({"data.num_clients": 10}, {"partition-id": 0, "num-partitions": 4}, "num-partitions = 4 but data.num_clients = 10"),
        ({"data.dataset": "nope"}, {"partition-id": 0}, "unknown dataset 'nope'"),
        ({"model.options.hidden": "[32"}, {"partition-id": 0}, "not valid YAML"),
        ({"fedselect-config": "/no/such/file.yaml"}, {"partition-id": 0}, "config file not found"),
    ],
)
def test_bad_node_settings_are_named(run_config, node_config, message):
    from fedselect.flower.client_app import node_experiment

    with pytest.raises((ConfigError, FileNotFoundError), match=message):
        node_experiment(run_config, node_config)


# ---------------------------------------------------------------------------- replies
def test_train_reply_is_the_simulators_local_update():
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict

    from fedselect.flower.client_app import TRAIN_METRICS, federation_for, node_experiment, train_reply
    from flower_probe import arrays_digest

    n, t = 8, 4
    exp = _expected(n, t)
    k, cfg = node_experiment(SETTINGS, {"partition-id": 2, "num-partitions": n})
    fed = federation_for(cfg)
    init = fed.new_model().state_dict()
    rec = train_reply(fed, cfg, k, RecordDict({"arrays": ArrayRecord(init), "config": ConfigRecord({"server-round": t})}))
    m = dict(rec["metrics"])
    assert tuple(m) == TRAIN_METRICS
    assert arrays_digest(rec["arrays"].to_torch_state_dict()) == exp[k][0]
    assert (m["train-loss"], m["latency-s"], m["upload-bytes"]) == exp[k][1:4]
    assert m["download-bytes"] == m["upload-bytes"] and m["num-examples"] == fed.clients[k].num_samples
    d = fed.fleet.draw(t)
    assert (m["freq-mhz"], m["bandwidth-mbps"]) == (d.freq_mhz[k], d.bandwidth_mbps[k])
    # FR-eq 3-5 by hand: E |D_k| g / (c_k f) + 8 * bytes / (b * 1e6)
    bits = fed.clients[k].num_samples * 784 * 32
    assert m["compute-s"] == pytest.approx(1 * bits * 20.0 / (fed.fleet.cores[k] * d.freq_mhz[k] * 1e6), rel=1e-12)
    assert m["upload-s"] == pytest.approx(8 * m["upload-bytes"] / (d.bandwidth_mbps[k] * 1e6), rel=1e-12)
    assert m["latency-s"] == pytest.approx(m["compute-s"] + m["upload-s"], rel=1e-12)  # count_download is false
    assert dict(rec["profile"])["client-id"] == k and dict(rec["profile"])["device"] == fed.fleet.describe(k)["device"]


def test_partial_layers_and_kept_state():
    """The server sends and asks back only some entries (partial-layer algorithms); the rest
    start from the node's kept state (keep-state), else from the common initial model."""
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict

    from fedselect.flower.client_app import STATE_KEY, federation_for, node_experiment, train_reply

    k, cfg = node_experiment(SETTINGS, {"partition-id": 1, "num-partitions": 4})
    fed = federation_for(cfg)
    init = fed.new_model().state_dict()
    shared = ["net.1.weight", "net.1.bias"]  # the hidden layer; the output layer stays on the node
    personal = [n for n in init if n not in shared]
    state = RecordDict()
    conf = {"upload-keys": shared, "keep-state": True}
    r1 = train_reply(
        fed,
        cfg,
        k,
        RecordDict({"arrays": ArrayRecord({n: init[n] for n in shared}), "config": ConfigRecord({"server-round": 1, **conf})}),
        state,
    )
    assert list(r1["arrays"].keys()) == shared
    m = dict(r1["metrics"])
    one = sum(init[n].numel() * 4 for n in shared)
    assert m["upload-bytes"] == one and m["download-bytes"] == one
    kept = state[STATE_KEY].to_torch_state_dict()
    assert all(not torch.equal(kept[n], init[n]) for n in personal)  # trained and kept on the node
    # round 2: new shared entries from the server, personal ones from the kept state
    new_shared = {n: init[n] + 0.01 for n in shared}
    r2 = train_reply(
        fed, cfg, k, RecordDict({"arrays": ArrayRecord(new_shared), "config": ConfigRecord({"server-round": 2, **conf})}), state
    )
    # the same start trained in our simulator's way
    model = fed.new_model()
    model.load_state_dict({**kept, **new_shared})
    from fedselect.fl.train import TrainConfig, local_train

    tr = cfg.train
    local_train(
        model,
        fed.clients[k].train,
        TrainConfig(tr.local_epochs, tr.batch_size, tr.lr, tr.momentum, tr.optimizer, tr.weight_decay),
        fed.train_generator(2, k),
    )
    got = r2["arrays"].to_torch_state_dict()
    assert all(torch.equal(got[n], model.state_dict()[n]) for n in shared)
    with pytest.raises(ValueError, match=r"upload-keys \['nope'\] are not entries"):
        train_reply(
            fed,
            cfg,
            k,
            RecordDict({"arrays": ArrayRecord(init), "config": ConfigRecord({"server-round": 1, "upload-keys": ["nope"]})}),
        )
    with pytest.raises(ValueError, match="config needs 'server-round'"):
        train_reply(fed, cfg, k, RecordDict({"arrays": ArrayRecord(init)}))
    with pytest.raises(ValueError, match="needs an ArrayRecord 'arrays'"):
        train_reply(fed, cfg, k, RecordDict({"config": ConfigRecord({"server-round": 1})}))


def test_evaluate_reply_is_the_budgeted_candidate_evaluation():
    """train-epochs E from the initial model on the 'candidate' stream, scored on the test set:
    the budgeted-online candidate evaluation of our simulator."""
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict

    from fedselect.experiment import make_simulation
    from fedselect.flower.client_app import evaluate_reply, federation_for, node_experiment
    from fedselect.resolve import parse_experiment

    n, k, epochs = 6, 4, 2
    sim = make_simulation(parse_experiment({**_cfg_doc(n), "method": "offline_best", "rounds": 1}))
    acc, _, loss = sim.ctx.evaluate_candidate(k, epochs)
    kk, cfg = node_experiment(SETTINGS, {"partition-id": k, "num-partitions": n})
    fed = federation_for(cfg)
    rec = evaluate_reply(
        fed,
        cfg,
        kk,
        RecordDict(
            {
                "arrays": ArrayRecord(fed.new_model().state_dict()),
                "config": ConfigRecord({"train-epochs": epochs, "eval-split": "test"}),
            }
        ),
    )
    m = dict(rec["metrics"])
    assert (m["accuracy"], m["train-loss"], m["num-examples"]) == (acc, loss, len(fed.test_set))
    # no training: the given weights scored on the client's own training data
    rec = evaluate_reply(fed, cfg, kk, RecordDict({"arrays": ArrayRecord(fed.new_model().state_dict())}))
    m = dict(rec["metrics"])
    assert m["num-examples"] == fed.clients[k].num_samples and math.isnan(m["train-loss"]) and m["compute-s"] == 0.0
    assert 0.0 <= m["accuracy"] <= 1.0 and "arrays" not in rec
    with pytest.raises(ValueError, match=r"'eval-split' must be one of \['train', 'holdout', 'test'\]"):
        evaluate_reply(
            fed,
            cfg,
            kk,
            RecordDict({"arrays": ArrayRecord(fed.new_model().state_dict()), "config": ConfigRecord({"eval-split": "all"})}),
        )


def test_oort_sample_losses_and_power_of_choice_probes():
    """What Oort (per-sample losses of local training) and Power-of-Choice (the loss of the
    global model on some of a client's samples) ask of the simulator, from the ClientApp."""
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict

    from fedselect.experiment import make_simulation
    from fedselect.fl.clients import SequentialTrainer, TrainJob
    from fedselect.flower.client_app import evaluate_reply, federation_for, node_experiment, train_reply
    from fedselect.resolve import parse_experiment

    n, k, t = 5, 3, 2
    sim = make_simulation(parse_experiment(_cfg_doc(n)))
    init = sim.ctx.initial_state()
    r = SequentialTrainer(sim.fed.new_model, [c.train for c in sim.fed.clients], sim.resolved.train_cfg).train(
        [TrainJob(k, init, 1, sim.fed.seed, f"train/{t}/{k}", True)]
    )[0]
    idx = [0, 2, 5, 7]
    probe = sim.ctx.client_losses([init], [k], [idx])[0]
    kk, cfg = node_experiment(SETTINGS, {"partition-id": k, "num-partitions": n})
    fed = federation_for(cfg)
    m = dict(
        train_reply(
            fed,
            cfg,
            kk,
            RecordDict({"arrays": ArrayRecord(init), "config": ConfigRecord({"server-round": t, "sample-losses": True})}),
        )["metrics"]
    )
    assert (m["train-loss"], m["sum-sq-sample-loss"], m["num-sample-losses"]) == (
        r.loss,
        r.sum_sq_sample_loss,
        r.num_sample_losses,
    )
    assert m["num-sample-losses"] == fed.clients[k].num_samples  # one epoch: every sample once
    e = dict(
        evaluate_reply(fed, cfg, kk, RecordDict({"arrays": ArrayRecord(init), "config": ConfigRecord({"sample-indices": idx})}))[
            "metrics"
        ]
    )
    assert (e["loss"], e["num-examples"]) == (probe, 4)
    with pytest.raises(ValueError, match="sample-indices outside"):
        evaluate_reply(
            fed, cfg, kk, RecordDict({"arrays": ArrayRecord(init), "config": ConfigRecord({"sample-indices": [10**6]})})
        )


def _check_probe(res: dict, n: int) -> None:
    """What the probe ServerApp saw matches our simulator, client by client."""
    exp = _expected(n)
    assert len(res["node_ids"]) == n
    profiles = res["profiles"]
    assert sorted(p["client-id"] for p in profiles.values()) == list(range(n))  # stable ids, not Flower's node ids
    for p in profiles.values():
        assert {"device": p["device"], "network": p["network"]} == exp[p["client-id"]][4]
    assert len({p["federation"] for p in profiles.values()}) == 1
    assert sorted(res["train"]) == [str(k) for k in range(n)]
    for k, r in res["train"].items():
        assert "error" not in r, r
        assert (r["digest"], r["metrics"]["train-loss"], r["metrics"]["latency-s"], r["metrics"]["upload-bytes"]) == exp[int(k)][
            :4
        ]
    assert len(res["bad"]) == 1 and res["bad"][0]["error"] and "config needs 'server-round'" in res["bad"][0]["reason"]
    if res["evaluate"]:
        (ev,) = res["evaluate"].values()
        assert ev["epochs"] == 1 and 0.0 <= ev["accuracy"] <= 1.0


# ---------------------------------------------------------------------------- Flower runtimes
@pytest.mark.slow
def test_client_app_in_the_simulation_engine(tmp_path):
    import warnings

    from flwr.simulation import run_simulation

    from fedselect.flower.client_app import make_client_app
    from flower_probe import make_probe

    out, n = tmp_path / "probe.json", 4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_simulation(
            server_app=make_probe(SETTINGS, str(out), n, timeout=120),
            client_app=make_client_app(SETTINGS),
            num_supernodes=n,
            backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2}},
        )
    assert out.exists(), "the probe ServerApp did not finish (see the log above)"
    res = json.loads(out.read_text())
    assert len(res["evaluate"]) == 1
    _check_probe(res, n)


def _write_app(app_dir: Path, config: dict) -> None:
    import tomli_w

    app_dir.mkdir(parents=True)
    shutil.copy(Path(__file__).parent / "flower_probe.py", app_dir / "flower_probe.py")
    nested: dict = {}
    for key, v in config.items():  # dotted keys -> TOML tables (Flower flattens them back)
        node = nested
        *head, last = key.split(".")
        for part in head:
            node = node.setdefault(part, {})
        node[last] = v
    doc = {
        "project": {
            "name": "fedselect-probe",
            "version": "1.0.0",
            "description": "probe of fedselect's ClientApp",
            "license": "MIT",
            "dependencies": [],
        },
        "tool": {
            "flwr": {
                "app": {
                    "publisher": "fedselect",
                    "config": nested,
                    "components": {"serverapp": "flower_probe:app", "clientapp": "fedselect.flower.client_app:app"},
                }
            }
        },
    }
    (app_dir / "pyproject.toml").write_text(tomli_w.dumps(doc))


@pytest.mark.slow
def test_client_app_on_a_real_superlink_and_supernodes(tmp_path):
    """SuperLink + 3 SuperNodes as processes on 127.0.0.1 (insecure), `flwr run` of an app
    whose ClientApp is fedselect's: node configs reach the nodes, replies match our simulator,
    and every process is gone afterwards."""
    from fedselect.flower.deployment import LocalDeployment

    n, out = 3, tmp_path / "probe.json"
    app = tmp_path / "probeapp"
    # evaluate replies are checked in the simulation engine; here every message costs a process
    _write_app(app, {**SETTINGS, "probe.out": str(out), "probe.nodes": n, "probe.timeout": 120.0, "probe.evaluate": False})
    with LocalDeployment(n, home=tmp_path / "flwr-home") as dep:
        res = dep.run_app(app, timeout=300)
        logs = "\n".join(f"--- {name}\n{dep.log(name)[-3000:]}" for name in ["superlink"] + [f"supernode-{i}" for i in range(n)])
        assert res.returncode == 0 and out.exists(), f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}\n{logs}"
        groups = {p.pid for p in dep.nodes} | {dep.superlink.pid}
        from fedselect.flower.deployment import _descendants

        family = set().union(*(_descendants(pid) for pid in groups)) | groups
    _check_probe(json.loads(out.read_text()), n)
    from fedselect.flower.deployment import _alive, processes_in_groups

    assert processes_in_groups(groups) == [] and not [pid for pid in family if _alive(pid)]  # nothing left running
