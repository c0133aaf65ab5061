"""The Flower strategy (fedselect.flower.strategy) on an in-process grid (tests/support/flower_grid.py:
every node answers through the real ClientApp in this process): the same config gives the same
metrics.csv, model and selector state as our simulator, failures are the simulator's kinds,
budgeted-online candidates are evaluated as their nodes connect, and bad input is refused.

Flower's simulation engine and a real SuperLink with SuperNodes: tests/flower/test_flower_runs.py.
"""

import copy
import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("flwr") is None, reason="Flower is the optional extra fedselect[flower] (make test installs it)"
)

from fedselect.config.schema import ConfigError  # noqa: E402
from support.tiny import tiny_doc, tiny_node_settings  # noqa: E402

#: what every node builds (flat dotted keys, as in a Flower run config)
NODE = tiny_node_settings(seed=3, hidden=32, train=True)


def experiment(n: int = 6, u: int = 2, rounds: int = 3, **extra) -> dict:
    doc = tiny_doc(name="flower-test", seed=3, rounds=rounds, clients_per_round=u, num_clients=n)
    for key, value in extra.items():
        doc[key] = value
    return doc


def simulate(doc: dict, out: Path) -> Path:
    from fedselect.experiment.resolve import parse_experiment
    from fedselect.experiment.run import run_experiment

    run_experiment(parse_experiment(doc), out)
    return out


def flower(doc: dict, out: Path | None, grid=None, n: int | None = None, **options):
    """Run ``doc`` with the strategy on an in-process grid of N nodes; returns (strategy, grid)."""
    from fedselect.experiment.resolve import parse_experiment
    from fedselect.flower.client_app import make_client_app
    from fedselect.flower.strategy import FedselectStrategy
    from support.flower_grid import LocalGrid

    n = n or doc["data"]["num_clients"]
    grid = grid or LocalGrid(make_client_app(NODE), n, {})
    options.setdefault("poll_s", 0.01)
    s = FedselectStrategy(parse_experiment(doc), out, **options)
    s.start(grid)
    return s, grid


def same(a, b, path="") -> list[str]:
    """Differences between two nested states (tensors, arrays, numbers with NaN == NaN)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(map(str, set(a) ^ set(b)))}"]
        return [d for k in a for d in same(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{path}: lengths {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same(x, y, f"{path}[{i}]")]
    if isinstance(a, torch.Tensor):
        return (
            []
            if isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a.nan_to_num(7.5), b.nan_to_num(7.5))
            else [path]
        )
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return [] if np.array_equal(np.asarray(a), np.asarray(b), equal_nan=np.asarray(a).dtype.kind == "f") else [path]
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return []
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


# ---------------------------------------------------------------------------- the same run
FLASH = {"pca_components": 3, "rl_batch_size": 2, "memory_capacity": 50, "hidden": 16}
CASES = {
    "flashrl": {"method": "flashrl", "method_options": FLASH},
    "favor": {"method": "favor", "method_options": {**FLASH, "target": 0.5}},
    "oort": {"method": "oort"},
    "power_of_choice-cpow-d+fedper": {
        "selector": {"name": "power_of_choice", "options": {"variant": "cpow-d", "minibatch_size": 16}},
        "algorithm": {"name": "fedper", "options": {"base_layers": 1}},
        "rounds": 4,
    },
    "flashrl+fedper": {
        "selector": {"name": "flashrl", "options": FLASH},
        "algorithm": {"name": "fedper", "options": {"base_layers": 1}},
    },
    "secretary-reruns": {"method": "budgeted_online", "method_options": {"rerun_every": 2}, "rounds": 4},
    "offline_best-stream": {
        "method": "offline_best",
        "method_options": {"rerun_every": 2, "initial_available": 0.7, "mean_stay": 3.0},
        "rounds": 4,
    },
    "regular_fl-deadline": {"method": "regular_fl", "system": {"round_deadline_s": 0.2}},
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_same_run_as_the_simulator(case, tmp_path):
    """Same config: the strategy on Flower nodes (simulated latency) writes the simulator's
    metrics.csv byte for byte (selections, losses, latencies, bytes, accuracies, the selector's
    columns) and model.pt, and ends with the same selector state."""
    from fedselect.experiment.checkpoint import load_checkpoint

    doc = experiment(**copy.deepcopy(CASES[case]))
    sim = simulate(doc, tmp_path / "sim")
    s, grid = flower(doc, tmp_path / "flower")
    a, b = (sim / "metrics.csv").read_text(), (tmp_path / "flower" / "metrics.csv").read_text()
    assert a == b
    ref, got = torch.load(sim / "model.pt"), torch.load(tmp_path / "flower" / "model.pt")
    assert same(ref, got) == []
    assert same(load_checkpoint(sim)["snapshot"]["selector"], s.selector.state_dict()) == []
    # the nodes that trained are exactly the selector's choices, round by round
    rows = [r.split(",") for r in a.splitlines()[1:]]
    for t, row in enumerate(rows[1:], start=1):
        chosen = [int(k) for k in row[1].split(";")] if row[1] else []
        assert [k for kind, k, r in grid.events if kind == "train" and r == t] == chosen
    assert (tmp_path / "flower" / "summary.json").exists() and (tmp_path / "flower" / "checkpoint.pt").exists()


def test_the_whole_state_travels_and_the_nodes_keep_nothing(tmp_path):
    """FedPer: a train message carries the client's whole start state (its own head under the
    server's base layers) and the reply the whole trained state; the nodes keep nothing, so a
    restarted node loses nothing and a run resumes exactly."""
    from flwr.app import ArrayRecord

    from fedselect.flower.client_app import make_client_app
    from support.flower_grid import LocalGrid

    doc = experiment(**copy.deepcopy(CASES["power_of_choice-cpow-d+fedper"]))
    sent: list[list[str]] = []
    app = make_client_app(NODE)

    def spy(msg, ctx):
        if msg.metadata.message_type == "train" and isinstance(msg.content.get("arrays"), ArrayRecord):
            sent.append(list(msg.content["arrays"].keys()))
        return app(msg, ctx)

    grid = LocalGrid(spy, 6, {})
    s, _ = flower(doc, tmp_path / "run", grid)
    entries = list(s.run.algorithm.initial_state().model)
    assert sent and all(keys == entries for keys in sent)
    assert all(len(ctx.state) == 0 for ctx in grid.contexts.values())


# ---------------------------------------------------------------------------- failures
def test_failures_are_the_simulators_kinds(tmp_path):
    """Every client every round (N = 4): round 1 nobody answers (dropout: the round fails, the
    model is kept), round 2 client 1's ClientApp raises (error) and client 2's node is
    unavailable (dropout), round 3 a deadline makes the slow ones time out. The same rows as
    the simulator's injected faults give."""
    sel = [0, 1, 2, 3]
    base = experiment(n=4, u=4, rounds=3, method="full", system={"round_deadline_s": 0.1})
    faults = {
        "inject": [
            {"kind": "drop", "rounds": [1], "clients": sel},
            {"kind": "raise", "rounds": [2], "clients": [1]},
            {"kind": "drop", "rounds": [2], "clients": [2]},
        ]
    }
    sim = simulate({**base, "faults": faults}, tmp_path / "sim")
    from fedselect.flower.client_app import make_client_app
    from support.flower_grid import LocalGrid

    def behaviour(kind, k, t):
        if kind != "train":
            return None
        return {(1, 0): "silent", (1, 1): "silent", (1, 2): "gone", (1, 3): "silent", (2, 1): "error", (2, 2): "gone"}.get((t, k))

    grid = LocalGrid(make_client_app(NODE), 4, {}, behaviour=behaviour)
    s, _ = flower(base, tmp_path / "flower", grid, reply_timeout=0.3)
    a, b = (sim / "metrics.csv").read_text(), (tmp_path / "flower" / "metrics.csv").read_text()
    assert a == b
    rows = {int(r.split(",")[0]): r.split(",") for r in b.splitlines()[1:]}
    assert rows[0][0] == "0"
    header = b.splitlines()[0].split(",")
    col = {c: header.index(c) for c in ("failed", "round_failed", "aggregated")}
    assert rows[1][col["failed"]] == "0:dropout;1:dropout;2:dropout;3:dropout" and rows[1][col["round_failed"]] == "1"
    assert rows[2][col["failed"]].startswith("1:error;2:dropout") and rows[2][col["aggregated"]] != "0"
    assert rows[3][col["failed"]] == "1:timeout"  # its simulated latency (0.137 s) exceeds the deadline
    assert rows[1][col["round_failed"]] == "1" and rows[1][2:5] == rows[0][2:5]  # nobody answered: the model was kept


def test_measured_latency_deadline_and_error(tmp_path):
    """Measured latency: a silent node is a timeout at the wall-clock deadline, an error reply
    an error, the others' latency the measured round trip; the run goes on."""
    from fedselect.flower.client_app import make_client_app
    from support.flower_grid import LocalGrid

    doc = experiment(n=4, u=4, rounds=2, method="full", system={"round_deadline_s": 0.5})
    grid = LocalGrid(
        make_client_app(NODE),
        4,
        {},
        behaviour=lambda kind, k, t: {(1, 2): "silent", (2, 3): "error"}.get((t, k)) if kind == "train" else None,
    )
    s, _ = flower(doc, tmp_path / "run", grid, latency="measured")
    r1, r2 = s.results
    f1 = {o.client_id: o for o in r1.outcomes}
    assert f1[2].failed == "timeout" and f1[2].latency_s == 0.5  # charged the deadline, not the polling overhead
    assert all(f1[k].ok and 0 < f1[k].latency_s < 0.5 for k in (0, 1, 3))
    assert [o.failed for o in r2.outcomes] == [None, None, None, "error"] and r2.aggregated == 3
    assert r2.after.accuracy > r1.after.accuracy or r2.after.loss < r1.after.loss
    # latency_sum_s: the measured round trips summed, the timeout at the deadline (the round's one rule)
    import csv

    with open(tmp_path / "run" / "metrics.csv", newline="") as fh:
        written = list(csv.DictReader(fh))
    for row, res in zip(written[1:], (r1, r2)):
        assert float(row["latency_sum_s"]) == pytest.approx(sum(o.latency_s for o in res.outcomes), rel=1e-12)
        assert float(row["round_latency_s"]) == pytest.approx(max(o.latency_s for o in res.outcomes), rel=1e-12)
    # without a deadline a silent node is a dropout (after the reply timeout)
    grid = LocalGrid(
        make_client_app(NODE), 4, {}, behaviour=lambda kind, k, t: "silent" if (kind, k, t) == ("train", 0, 1) else None
    )
    s, _ = flower(experiment(n=4, u=4, rounds=1, method="full"), None, grid, latency="measured", reply_timeout=0.3)
    ((o, *_),) = [r.outcomes for r in s.results]
    assert o.failed == "dropout" and o.latency_s == pytest.approx(0.3, abs=0.2)


def test_nodes_that_leave_or_join_late(tmp_path):
    """A client whose node left is a dropout without any message; a node that connects late
    is queried and trains once it is there."""
    from fedselect.flower.client_app import make_client_app
    from support.flower_grid import LocalGrid

    doc = experiment(n=4, u=4, rounds=3, method="full")
    # once round 1 has trained, node 1 leaves and node 3 (absent until then) connects
    grid = LocalGrid(make_client_app(NODE), 4, {}, join_at={3: 10**6})
    orig = grid.get_node_ids

    def listing():
        if any(kind == "train" and t == 1 for kind, _, t in grid.events):
            grid.leave(1)
            grid.join_at[1003] = 0
        return orig()

    grid.get_node_ids = listing
    s, _ = flower(doc, tmp_path / "run", grid, connect_timeout=0.05)
    failed = {r.round: {o.client_id: o.failed for o in r.outcomes if not o.ok} for r in s.results}
    assert failed[1] == {3: "dropout"}  # not connected yet
    assert failed[2] == {1: "dropout"} and failed[3] == {1: "dropout"}  # left; 3 joined and trains
    assert not [e for e in grid.events if e[:2] == ("train", 1) and e[2] > 1]  # nothing sent to a node that left
    assert ("train", 3, 2) in grid.events and s.nodes.node(3) == 1003


# ---------------------------------------------------------------------------- budgeted online
def test_candidates_are_evaluated_as_their_nodes_connect(tmp_path):
    """arrival="nodes": the arrival order is the order the nodes connect (not the seeded one);
    each candidate is evaluated when it has connected, before the next one connects, and the
    accepted clients train afterwards."""
    from fedselect.flower.client_app import make_client_app
    from support.flower_grid import LocalGrid

    doc = experiment(n=6, u=2, rounds=2, method="budgeted_online")
    joins = {0: 1, 2: 2, 1: 3, 4: 4, 3: 5, 5: 6}  # node i connects at the joins[i]-th listing
    clients = {0: 4, 1: 2, 2: 0, 3: 5, 4: 1, 5: 3}  # node i serves client clients[i]
    grid = LocalGrid(make_client_app(NODE), 6, {}, join_at=joins, client_of=clients)
    s, _ = flower(doc, tmp_path / "run", grid, arrival="nodes")
    order = [clients[i] for i in sorted(joins, key=joins.get)]
    assert order == [4, 0, 2, 1, 5, 3] and s.nodes.arrivals == order and s.selector.runs[0]["arrival_order"] == order
    asked = [(kind, k) for kind, k, t in grid.events if kind == "query" or (kind, t) == ("train", 0)]
    assert asked == [x for k in order for x in (("query", k), ("train", k))]  # a candidate trains once it connected
    run = s.selector.runs[0]
    assert [k for kind, k, t in grid.events if kind == "train" and t == 1] == sorted(run["accepted_clients"])
    # the rule saw the scores of the simulator's candidate evaluation, in this order
    from fedselect.experiment.resolve import parse_experiment
    from fedselect.experiment.run import make_simulation

    ref = make_simulation(parse_experiment(doc))
    assert run["accepted_scores"] == [ref.ctx.evaluate_candidate(k, 1)[0] for k in run["accepted_clients"]]
    # the simulator's seeded order is another one (the nodes' order was used, not a coincidence)
    ref.selector.prepare()
    assert ref.selector.runs[0]["arrival_order"] != order


def test_a_candidate_that_never_connects_scores_nan(tmp_path):
    from fedselect.flower.client_app import make_client_app
    from support.flower_grid import LocalGrid

    doc = experiment(n=4, u=2, rounds=1, method="offline_best")
    grid = LocalGrid(make_client_app(NODE), 4, {}, join_at={2: 10**6})  # client 2's node never comes
    s, _ = flower(doc, tmp_path / "run", grid, arrival="nodes", connect_timeout=0.2)
    run = s.selector.runs[0]
    assert run["arrival_order"][-1] == 2 and 2 not in run["accepted_clients"]
    assert math.isnan(s.selector._scores[2][0]) and len(s.results) == 1


# ---------------------------------------------------------------------------- refusals
def test_a_node_of_another_federation_is_named(tmp_path):
    from fedselect.flower.client_app import make_client_app
    from support.flower_grid import LocalGrid

    grid = LocalGrid(make_client_app({**NODE, "seed": 4}), 4, {})
    with pytest.raises(ConfigError, match=r"node 100\d \(client \d\) built its federation from other settings than the server"):
        flower(experiment(n=4, u=2, rounds=1), tmp_path / "run", grid)
    # a node whose ClientApp cannot serve its settings: its error, named, before anything runs
    grid = LocalGrid(make_client_app(NODE), 4, {}, client_of={3: 7})
    with pytest.raises(
        RuntimeError, match=r"node 1003 could not answer the query \(error code 2\).*partition-id 7 is not a client id 0..3"
    ):
        flower(experiment(n=4, u=2, rounds=1), None, grid)


def test_bad_options_and_existing_runs(tmp_path):
    from fedselect.experiment.resolve import parse_experiment
    from fedselect.flower.strategy import FedselectStrategy

    cfg = parse_experiment(experiment(n=4, u=2))
    with pytest.raises(ValueError, match=r"latency must be one of \['simulated', 'measured'\], got 'wall'"):
        FedselectStrategy(cfg, latency="wall")
    with pytest.raises(ValueError, match="reply_timeout must be a number of seconds > 0"):
        FedselectStrategy(cfg, reply_timeout=0)
    simulate(experiment(n=4, u=2, rounds=1), tmp_path / "done")
    with pytest.raises(FileExistsError, match="already holds a run"):
        FedselectStrategy(cfg, tmp_path / "done")


# ---------------------------------------------------------------------------- the ServerApp's settings
def test_server_app_settings(tmp_path):
    from fedselect.experiment.resolve import parse_experiment
    from fedselect.flower.server_app import server_experiment, strategy_settings

    f = tmp_path / "exp.yaml"
    f.write_text("seed: 7\nrounds: 4\ndata: {dataset: mnist-embedded, num_clients: 6}\nmodel: {name: mlp}\nmethod: oort\n")
    cfg = server_experiment(
        {
            "fedselect-config": str(f),
            "clients_per_round": 2,
            "model.options.hidden": "[16]",
            "latency": "measured",
            "partition-id": 3,
        }
    )
    assert cfg == parse_experiment(
        {
            "seed": 7,
            "rounds": 4,
            "clients_per_round": 2,
            "method": "oort",
            "data": {"dataset": "mnist-embedded", "num_clients": 6},
            "model": {"name": "mlp", "options": {"hidden": [16]}},
        }
    )
    assert strategy_settings({"latency": "measured", "reply-timeout": 30, "arrival-order": "nodes"}) == {
        "latency": "measured",
        "arrival": "nodes",
        "overwrite": False,
        "resume": False,
        "reply_timeout": 30.0,
    }
    with pytest.raises(ConfigError, match=r"'latency' must be one of \['simulated', 'measured'\], got 'fast'"):
        strategy_settings({"latency": "fast"})
    with pytest.raises(ConfigError, match="'reply-timeout' must be of type"):
        strategy_settings({"reply-timeout": "10"})
    with pytest.raises(ConfigError, match="unknown method 'nope'"):
        server_experiment({"method": "nope"})


def test_the_example_app(tmp_path, monkeypatch):
    """examples/flower: its components are fedselect's apps, its run config and both
    experiments are valid for the server and the nodes (which build the same federation), and
    `fedselect-config` is found in the app's directory as Flower puts it on sys.path."""
    import tomllib

    from fedselect.experiment.resolve import resolve
    from fedselect.flower.client_app import config_file, federation_for, federation_hash, node_experiment
    from fedselect.flower.server_app import server_experiment, strategy_settings

    app = Path(__file__).resolve().parents[2] / "examples" / "flower"
    doc = tomllib.loads((app / "pyproject.toml").read_text())
    assert doc["tool"]["flwr"]["app"]["components"] == {
        "serverapp": "fedselect.flower.server_app:app",
        "clientapp": "fedselect.flower.client_app:app",
    }
    run_config = doc["tool"]["flwr"]["app"]["config"]
    assert run_config["fedselect-config"] == "flashrl.yaml" and strategy_settings(run_config)["latency"] == "simulated"
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(app))  # what Flower does when it loads the app
    assert config_file("oort.yaml") == app / "oort.yaml" and config_file("nope.yaml") == Path("nope.yaml")
    for name, method in (("flashrl.yaml", "flashrl"), ("oort.yaml", "oort")):
        rc = {**run_config, "fedselect-config": name}
        cfg = server_experiment(rc)
        assert (cfg.method, cfg.data.num_clients, cfg.clients_per_round) == (method, 10, 3)
        resolve(cfg)
        k, node_cfg = node_experiment(rc, {"partition-id": 9, "num-partitions": 10})
        assert k == 9 and federation_hash(federation_for(node_cfg)) == federation_hash(federation_for(cfg))


def test_flowers_own_loop_drives_the_four_seams(tmp_path):
    """Flower's Strategy.start (send_and_receive, then the four seams, each round) runs the
    experiment too: the same rounds as FedselectStrategy.start, without a run directory."""
    from flwr.app import ArrayRecord
    from flwr.serverapp.strategy import Strategy

    from fedselect.experiment.resolve import parse_experiment
    from fedselect.flower.client_app import make_client_app
    from fedselect.flower.strategy import FedselectStrategy
    from support.flower_grid import LocalGrid

    doc = experiment(n=6, u=2, rounds=3, method="oort")
    ref, _ = flower(doc, tmp_path / "ref")
    s = FedselectStrategy(parse_experiment(doc), poll_s=0.01)
    init = ArrayRecord(s.fed.new_model().state_dict())
    result = Strategy.start(s, LocalGrid(make_client_app(NODE), 6, {}), init, num_rounds=3, timeout=60)
    assert [r.selection.clients for r in s.results] == [r.selection.clients for r in ref.results]
    assert [r.after for r in s.results] == [r.after for r in ref.results]
    assert sorted(result.train_metrics_clientapp) == [1, 2, 3]
    assert [result.train_metrics_clientapp[t]["aggregated"] for t in (1, 2, 3)] == [r.aggregated for r in ref.results]


def test_failed_probes_and_evaluations_score_nan(tmp_path):
    """Power-of-Choice with FedPer, client 0's node failing every evaluate message: its probe
    loss is NaN (never chosen over a finite one), its held-out accuracy NaN in client_accuracy
    (the means are over the other clients), and the run goes on."""
    import csv

    from fedselect.flower.client_app import make_client_app
    from support.flower_grid import LocalGrid

    doc = experiment(
        n=6,
        u=2,
        rounds=3,
        selector={"name": "power_of_choice", "options": {"d": 6}},
        algorithm={"name": "fedper", "options": {"base_layers": 1}},
    )
    grid = LocalGrid(make_client_app(NODE), 6, {}, behaviour=lambda kind, k, t: "error" if (kind, k) == ("evaluate", 0) else None)
    s, _ = flower(doc, tmp_path / "run", grid)
    assert all(0 not in r.selection.clients and len(r.selection.clients) == 2 for r in s.results)
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    for row in rows[1:]:
        acc = [float(a) for a in row["client_accuracy"].split(";")]
        assert math.isnan(acc[0]) and all(0 <= a <= 1 for a in acc[1:])
        assert float(row["accuracy"]) == pytest.approx(float(np.mean(acc[1:])), abs=1e-6)  # the column rounds to 6 digits
    assert len(rows) == 4 and s.summary_json["complete"]


def test_the_same_run_as_the_simulator_with_a_cnn(tmp_path):
    """The MNIST CNN trains channels-last in the simulator's engine: the nodes train with the
    same engine, so the runs are still byte-identical (FedAvg's random selection, 2 rounds)."""
    from fedselect.flower.client_app import make_client_app
    from support.flower_grid import LocalGrid

    doc = experiment(rounds=2, model={"name": "mnist_cnn"}, train={"local_epochs": 1, "batch_size": 50, "lr": 0.05})
    sim = simulate(doc, tmp_path / "sim")
    node = {**{k: v for k, v in NODE.items() if not k.startswith("model.")}, "model.name": "mnist_cnn", "train.batch_size": 50}
    flower(doc, tmp_path / "flower", grid=LocalGrid(make_client_app(node), 6, {}))
    assert (sim / "metrics.csv").read_bytes() == (tmp_path / "flower" / "metrics.csv").read_bytes()
    ref, got = torch.load(sim / "model.pt", weights_only=True), torch.load(tmp_path / "flower" / "model.pt", weights_only=True)
    assert same(ref, got) == []


def test_an_interrupted_flower_run_stops_at_once_and_records_nothing_more(tmp_path):
    """Ctrl-C in Flower's engine sets the run's stop event (fedselect.flower.engine): a round
    waiting for a silent node (reply timeout 600 s) ends at once with KeyboardInterrupt,
    records no failure for the nodes it was waiting for, and the run resumes exactly."""
    import threading
    import time

    from fedselect.experiment.resolve import parse_experiment
    from fedselect.flower.client_app import make_client_app
    from fedselect.flower.grid_run import run_on_grid
    from fedselect.flower.nodes import FlowerOptions
    from support.flower_grid import LocalGrid

    doc = experiment(n=4, u=4, rounds=3, method="full")
    stop = threading.Event()
    grid = LocalGrid(make_client_app(NODE), 4, {}, behaviour=lambda kind, k, t: "silent" if (kind, t) == ("train", 2) else None)

    def interrupt_in_round_2():  # Ctrl-C while round 2 waits for its silent nodes
        while not any(kind == "train" and t == 2 for kind, _, t in list(grid.events)):
            time.sleep(0.01)
        time.sleep(0.2)
        stop.set()

    threading.Thread(target=interrupt_in_round_2, daemon=True).start()
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        run_on_grid(grid, parse_experiment(doc), tmp_path / "run", FlowerOptions(poll_s=0.01, reply_timeout=600), stop=stop)
    assert time.perf_counter() - t0 < 30
    assert (tmp_path / "run" / "metrics.csv").read_text().count("\n") == 1 + 2  # rounds 0 and 1 only
    assert "dropped out" not in (tmp_path / "run" / "run.log").read_text()
    run_on_grid(
        grid_ok := LocalGrid(make_client_app(NODE), 4, {}),
        parse_experiment(doc),
        tmp_path / "run",
        FlowerOptions(poll_s=0.01),
        resume=True,
    )
    simulate(doc, tmp_path / "sim")
    assert (tmp_path / "sim" / "metrics.csv").read_text() == (tmp_path / "run" / "metrics.csv").read_text()
    assert grid_ok.events
