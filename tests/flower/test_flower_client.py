"""fedselect's Flower ClientApp and wire protocol: node settings, every job through a message
and back (fedselect.flower.wire), and hostile replies: whatever a node answers, the server
never crashes and aggregates exactly the good replies."""

import importlib.util
import math

import pytest
import torch

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("flwr") is None, reason="Flower is the optional extra fedselect[flower] (make test installs it)"
)

from fedselect.config.schema import ConfigError  # noqa: E402
from support.tiny import tiny_doc, tiny_node_settings  # noqa: E402

#: the experiment of every node (flat dotted keys, as in a Flower run config)
SETTINGS = {**tiny_node_settings(seed=3, hidden=32, train=True), "torch-threads": 1}


# ---------------------------------------------------------------------------- settings
def test_node_settings_build_the_simulators_experiment(tmp_path):
    from fedselect.experiment.resolve import parse_experiment
    from fedselect.flower.client_app import node_experiment

    k, cfg = node_experiment(SETTINGS, {"partition-id": 2, "num-partitions": 8})
    doc = {
        "seed": 3,
        "clients_per_round": 5,
        "data": {
            "dataset": "mnist-embedded",
            "num_clients": 8,
            "partition": {"scheme": "dirichlet", "alpha": 0.5, "min_size": 10},
        },
        "model": {"name": "mlp", "options": {"hidden": [32]}},
        "train": {"local_epochs": 1, "batch_size": 32, "lr": 0.05},
    }
    assert k == 2 and cfg.model_dump() == parse_experiment(doc).model_dump()
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


# ---------------------------------------------------------------------------- the wire
def _fed():
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    from fedselect.flower.client_app import federation_for, node_experiment

    # what a ServerApp process has: Message() reads the run and node id from it
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, SUPERLINK_NODE_ID, 1
    return federation_for(node_experiment(SETTINGS, {"partition-id": 0, "num-partitions": 6})[1])


def test_every_job_goes_through_a_message_and_back():
    """Each job, encoded for a node, decoded there, run by the node's LocalTransport, its reply
    decoded on the server: the same result as the simulator's transport gives in process."""
    from flwr.app import Message

    from fedselect.fl.local.pool import ClientTrainer
    from fedselect.fl.local.train import TrainConfig
    from fedselect.fl.work import EvalJob, FineTuneJob, LocalTransport, TrainJob
    from fedselect.flower.client_app import run_job
    from fedselect.flower.wire import decode_job, decode_result, encode_job

    fed, cfg = _fed(), TrainConfig(1, 32, 0.05)
    here = LocalTransport(fed, ClientTrainer.from_federation(fed, cfg, workers=0), cfg)
    init = fed.new_model().state_dict()
    jobs = [
        TrainJob(2, init, 1, 3, "train/4/2", sample_losses=True),
        EvalJob(1, init, "holdout"),
        EvalJob(3, init, "train", (0, 5, 7), loss_only=True),
        EvalJob(3, init, "train", (), loss_only=True),
        FineTuneJob(4, init, 2, 1, 0.2, 3, "cefl-transfer/0/4", "cefl/validation/4"),
    ]
    for job in jobs:
        msg = encode_job(job, 1000 + job.client_id, cfg)
        assert decode_job(msg)[1] == cfg
        reply = run_job(fed, job.client_id, msg)
        got, want = decode_result(job, Message(reply.content, reply_to=msg), init, None), here.run([job])[0]
        assert got.error is None and want.error is None, (got.error, want.error)
        for field in ("loss", "accuracy", "f1_macro", "sum_sq_sample_loss", "epochs", "curve", "val_loss"):
            if hasattr(want, field):
                a, b = getattr(got, field), getattr(want, field)
                assert a == b or (a != a and b != b), (type(job).__name__, field, a, b)
        if getattr(want, "state", None) is not None:
            assert all(torch.equal(got.state[n], want.state[n]) for n in want.state)
    assert math.isnan(here.run([jobs[3]])[0].loss)  # an empty sample set scores NaN


def test_a_job_for_another_client_or_a_malformed_one_is_refused():
    from fedselect.fl.local.train import TrainConfig
    from fedselect.fl.work import TrainJob
    from fedselect.flower.client_app import run_job
    from fedselect.flower.wire import encode_job

    fed, cfg = _fed(), TrainConfig(1, 32, 0.05)
    msg = encode_job(TrainJob(2, fed.new_model().state_dict(), 1, 3, "train/1/2"), 1002, cfg)
    with pytest.raises(ValueError, match="a job for client 2 reached the node serving client 0"):
        run_job(fed, 0, msg)
    del msg.content["config"]["stream"]
    with pytest.raises(ValueError, match="message config lacks 'stream'"):
        run_job(fed, 2, msg)


# ---------------------------------------------------------------------------- hostile replies
def _mutate(kind: str, arrays: dict) -> dict:
    first = next(iter(arrays))
    out = dict(arrays)
    if kind == "extra":
        out["junk"] = torch.zeros(3)
    elif kind == "missing":
        del out[first]
    elif kind == "dtype":
        out[first] = out[first].double()
    elif kind == "shape":
        out[first] = out[first].reshape(-1)[:-1].clone()
    elif kind == "nan":
        out[first] = torch.full_like(out[first], float("nan"))
    elif kind == "oversized":
        out["junk"] = torch.zeros(4 * sum(v.numel() for v in arrays.values()))
    return out


@pytest.mark.parametrize("kind", ["extra", "missing", "dtype", "shape", "nan", "oversized"])
def test_hostile_train_replies_never_crash_the_server(kind, tmp_path):
    """Full participation of 4 clients for 3 rounds; the train reply of the first client in
    round 1, of the last in round 2 and of every client in round 3 is mutated (an extra entry,
    a missing one, another dtype or shape, NaN values, an oversized payload). The run
    completes, each bad reply is that client's failure (``nan`` for NaN values, ``error`` with
    the reason otherwise) and metrics.csv and the model equal the simulator's run in which
    exactly those clients fail: the aggregate is the good replies' alone."""

    from flwr.app import ArrayRecord, Message

    from fedselect.experiment.resolve import parse_experiment
    from fedselect.experiment.run import run_experiment
    from fedselect.flower.client_app import make_client_app
    from fedselect.flower.grid_run import run_on_grid
    from fedselect.flower.nodes import FlowerOptions
    from support.flower_grid import LocalGrid

    bad = {1: [0], 2: [3], 3: [0, 1, 2, 3]}
    app = make_client_app(SETTINGS)

    def hostile(msg, ctx):
        reply = app(msg, ctx)
        if msg.metadata.message_type != "train":
            return reply
        t, k = int(msg.content["config"]["server-round"]), ctx.node_config["partition-id"]
        if k in bad.get(t, []):
            content = reply.content
            content["arrays"] = ArrayRecord(_mutate(kind, content["arrays"].to_torch_state_dict()))
            reply = Message(content, reply_to=msg)
        return reply

    doc = tiny_doc(name="hostile", seed=3, rounds=3, method="full", clients_per_round=4, num_clients=4)
    run_on_grid(LocalGrid(hostile, 4, {}), parse_experiment(doc), tmp_path / "flower", FlowerOptions(poll_s=0.01))
    fault = "nan" if kind == "nan" else "raise"
    inject = [{"kind": fault, "rounds": [t], "clients": ks} for t, ks in bad.items()]
    run_experiment(parse_experiment({**doc, "faults": {"inject": inject}}), tmp_path / "sim")
    a, b = (tmp_path / "sim" / "metrics.csv").read_text(), (tmp_path / "flower" / "metrics.csv").read_text()
    assert a == b
    assert (tmp_path / "sim" / "model.pt").read_bytes() == (tmp_path / "flower" / "model.pt").read_bytes()
    rows = [r.split(",") for r in b.splitlines()]
    failed = rows[0].index("failed")
    code = "nan" if kind == "nan" else "error"
    assert [r[failed] for r in rows[1:]] == ["", f"0:{code}", f"3:{code}", ";".join(f"{k}:{code}" for k in range(4))]
    if kind != "nan":
        log = (tmp_path / "flower" / "run.log").read_text()
        assert "its reply was refused" in log


# ---------------------------------------------------------------------------- a deployment's security settings
def test_a_deployments_security_settings_are_checked_before_anything_starts(tmp_path):
    """LocalDeployment refuses, before starting any process: authentication without TLS (Flower
    allows it only over TLS), a registered node without a key, missing files, and a SuperLink
    certificate whose subjectAltName lacks 127.0.0.1 (its own flower-superexec dials it there:
    `flwr run` would hang); the certificate's addresses are read back."""
    from fedselect.flower.deployment import LocalDeployment, certificate_addresses
    from support.flower_tls import make_node_key, make_tls

    good = make_tls(tmp_path / "good")
    assert certificate_addresses(good.cert) == (["127.0.0.1"], ["localhost"])
    bad = make_tls(tmp_path / "bad", addresses=("10.0.0.5",), names=("superlink.example",))
    key = make_node_key(tmp_path / "node-0")
    home = tmp_path / "home"
    with pytest.raises(ValueError, match="authenticate=True needs tls"):
        LocalDeployment(1, home, authenticate=True, node_keys={0: key})
    with pytest.raises(ValueError, match=r"nodes \[1\]: register names a node without a key"):
        LocalDeployment(2, home, tls=good, node_keys={0: key}, register=[0, 1])
    with pytest.raises(ValueError, match="missing key or certificate files"):
        LocalDeployment(1, home, tls=good, node_keys={0: tmp_path / "nope"})
    with pytest.raises(ValueError, match=r"lacks IP:127\.0\.0\.1.*`flwr run` stays pending forever"):
        LocalDeployment(1, home, tls=bad)
    assert not home.exists()  # nothing was started or written
