"""fedselect's selectors driving real Flower runs: Flower's simulation engine (Ray, 10 nodes)
and a real SuperLink with three SuperNodes as processes on 127.0.0.1, one of them dead. The
strategy's logic is tested in-process in tests/flower/test_flower_strategy.py, the engine contract
in tests/engines/test_engines.py."""

import importlib.util
import json
import time
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("flwr") is None, reason="Flower is the optional extra fedselect[flower] (make test installs it)"
    ),
    pytest.mark.slow,
]

from support.tiny import tiny_doc, tiny_node_settings  # noqa: E402

#: what every node builds (the run config of a Flower app; num-partitions comes from the engine)
NODE = {**tiny_node_settings(seed=3, hidden=32, train=True), "torch-threads": 1}


def experiment(n: int, u: int, rounds: int, **extra) -> dict:
    return tiny_doc(name="flower-run", seed=3, rounds=rounds, clients_per_round=u, num_clients=n, **extra)


def simulate(doc: dict, out: Path) -> list[dict[str, str]]:
    from fedselect.experiment.resolve import parse_experiment
    from fedselect.experiment.run import run_experiment

    run_experiment(parse_experiment(doc), out)
    return rows(out)


def rows(run_dir: Path) -> list[dict[str, str]]:
    import csv

    with open(run_dir / "metrics.csv", newline="") as fh:
        return list(csv.DictReader(fh))


# ---------------------------------------------------------------------------- the simulation engine
ENGINE = {
    "flashrl": experiment(10, 3, 3, method="flashrl", method_options={"pca_components": 5, "rl_batch_size": 3, "hidden": 32}),
    "oort": experiment(10, 3, 3, method="oort"),
    "power_of_choice": experiment(10, 3, 3, method="power_of_choice"),
}


def test_three_experiments_in_one_simulation_engine_start(tmp_path):
    """One Flower simulation (10 SuperNodes, Ray) runs three experiments one after another
    (fedselect.flower.grid_run.run_many): FLASH-RL and Oort give the simulator's metrics.csv
    byte for byte; Power-of-Choice with measured latency probes by messages (its probing
    latency is the exchange's wall time) and charges measured round trips."""
    from fedselect.experiment.resolve import parse_experiment
    from fedselect.flower.grid_run import run_many
    from fedselect.flower.nodes import FlowerOptions

    runs = [(parse_experiment(doc), tmp_path / name) for name, doc in ENGINE.items() if name != "power_of_choice"]
    t0 = time.perf_counter()
    run_many(runs, FlowerOptions(reply_timeout=120))
    run_many([(parse_experiment(ENGINE["power_of_choice"]), tmp_path / "pow")], FlowerOptions(latency="measured"))
    wall = time.perf_counter() - t0
    for name in ("flashrl", "oort"):
        simulate(ENGINE[name], tmp_path / f"sim-{name}")
        assert (tmp_path / name / "metrics.csv").read_text() == (tmp_path / f"sim-{name}" / "metrics.csv").read_text()
    got = rows(tmp_path / "pow")
    for row in got[1:]:
        assert int(row["candidates_probed"]) == 6 and float(row["probe_latency_s"]) > 0
        assert 0 < float(row["round_latency_s"]) < 120 and row["failed"] == ""
    summary = json.loads((tmp_path / "pow" / "summary.json").read_text())
    assert summary["flower"]["latency"] == "measured" and summary["complete"] and wall < 600


# ---------------------------------------------------------------------------- a real deployment
def _write_app(app_dir: Path, config: dict) -> None:
    import tomli_w

    app_dir.mkdir(parents=True)
    nested: dict = {}
    for key, v in config.items():  # dotted keys -> TOML tables (Flower flattens them back)
        node = nested
        *head, last = key.split(".")
        for part in head:
            node = node.setdefault(part, {})
        node[last] = v
    doc = {
        "project": {"name": "fedselect-deployment-test", "version": "1.0.0", "license": "MIT", "dependencies": []},
        "tool": {
            "flwr": {
                "app": {
                    "publisher": "fedselect",
                    "config": nested,
                    "components": {
                        "serverapp": "fedselect.flower.server_app:app",
                        "clientapp": "fedselect.flower.client_app:app",
                    },
                }
            }
        },
    }
    (app_dir / "pyproject.toml").write_text(tomli_w.dumps(doc))


def test_a_real_superlink_and_supernodes_with_a_dead_node(tmp_path):
    """SuperLink + 3 SuperNodes as processes on 127.0.0.1 (insecure), `flwr run` of an app whose
    ServerApp and ClientApp are fedselect's: Oort chooses 2 of 3 nodes for 3 rounds; one node is
    killed before the run. The run completes, that client is a dropout whenever chosen, and
    metrics.csv is the simulator's with that client dropping out (an injected ``drop``): no
    timing decides the result (the old test killed a node between rounds and raced the server
    on a loaded machine). No process is left."""
    from fedselect.flower.deployment import LocalDeployment, _alive, _descendants, processes_in_groups

    doc = experiment(3, 2, 3, method="oort")
    victim = 1
    ref = simulate({**doc, "faults": {"inject": [{"kind": "drop", "clients": [victim]}]}}, tmp_path / "sim")
    run_dir = tmp_path / "flower-run"
    settings = {
        **NODE,
        "data.num_clients": 3,
        "method": "oort",
        "rounds": 3,
        "clients_per_round": 2,
        "name": "flower-run",
        "run-dir": str(run_dir),
        "reply-timeout": 60.0,
        "connect-timeout": 20.0,
    }
    app = tmp_path / "app"
    _write_app(app, settings)
    with LocalDeployment(3, home=tmp_path / "flwr-home") as dep:
        dep.kill_node(victim)
        res = dep.run_app(app, timeout=400)
        logs = "\n".join(f"--- {name}\n{dep.log(name)[-3000:]}" for name in ["superlink"] + [f"supernode-{i}" for i in range(3)])
        ok = res is not None and res.returncode == 0 and "ServerApp raised" not in res.stdout  # flwr run exits 0 even then
        assert ok, f"{res and res.stdout[-3000:]}\n{res and res.stderr[-3000:]}\n{logs}"
        groups = {p.pid for p in dep.nodes if p is not None} | {dep.superlink.pid}
        family = set().union(*(_descendants(pid) for pid in groups)) | groups
    assert (run_dir / "metrics.csv").read_text() == (tmp_path / "sim" / "metrics.csv").read_text()
    got = rows(run_dir)
    assert any(f"{victim}:dropout" in r["failed"] for r in got[1:]) and ref
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] and summary["flower"]["clients_without_node"] == [victim]
    assert processes_in_groups(groups) == [] and not [pid for pid in family if _alive(pid)]  # nothing left running


# ---------------------------------------------------------------------------- TLS and node authentication
def test_a_tls_deployment_admits_only_registered_supernodes(tmp_path):
    """The recipe of docs/flower.md on 127.0.0.1: TLS on every connection (a CA and a SuperLink
    certificate for 127.0.0.1 made here) and node authentication (--enable-supernode-auth; the
    three SuperNodes' public keys registered with `flwr supernode register`). A fourth SuperNode,
    whose key was never registered, is refused by the SuperLink and exits; the three run FedAvg,
    2 of 3 per round for 2 rounds, and write the simulator's metrics.csv; `flwr run --stream`
    shows each round. No process is left."""
    from fedselect.flower.deployment import LocalDeployment, _alive, _descendants, processes_in_groups
    from support.flower_tls import make_node_key, make_tls

    doc = experiment(3, 2, 2, method="fedavg")
    simulate(doc, tmp_path / "sim")
    run_dir = tmp_path / "flower-run"
    settings = {**NODE, "data.num_clients": 3, "method": "fedavg", "rounds": 2, "clients_per_round": 2, "name": "flower-run"}
    settings.update({"run-dir": str(run_dir), "reply-timeout": 120.0, "connect-timeout": 60.0})
    app = tmp_path / "app"
    _write_app(app, settings)
    tls = make_tls(tmp_path / "certs")
    keys = {i: make_node_key(tmp_path / "certs" / f"node-{i}") for i in range(4)}
    config = lambda i: {"partition-id": i, "num-partitions": 3 if i < 3 else 4}  # noqa: E731 (node 3: refused)
    with LocalDeployment(
        4, home=tmp_path / "flwr-home", node_config=config, tls=tls, authenticate=True, node_keys=keys, register=[0, 1, 2]
    ) as dep:
        assert sorted(dep.node_ids) == [0, 1, 2] and len(set(dep.node_ids.values())) == 3
        refused = dep.nodes[3].wait(timeout=120)  # bounded: a node the SuperLink refuses exits
        res = dep.run_app(app, timeout=400)
        logs = "\n".join(f"--- {n}\n{dep.log(n)[-3000:]}" for n in ["superlink"] + [f"supernode-{i}" for i in range(4)])
        ok = res.returncode == 0 and "ServerApp raised" not in res.stdout
        assert ok, f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}\n{logs}"
        for i in range(3):
            assert dep.nodes[i].poll() is None and f"SuperNode ID: {dep.node_ids[i]}" in dep.log(f"supernode-{i}"), logs
        groups = {p.pid for p in dep.nodes if p is not None} | {dep.superlink.pid}
        family = set().union(*(_descendants(pid) for pid in groups)) | groups
    assert refused != 0 and "Failed to activate SuperNode" in dep.log("supernode-3")
    assert (run_dir / "metrics.csv").read_text() == (tmp_path / "sim" / "metrics.csv").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] and summary["flower"]["clients_without_node"] == []
    streamed = res.stdout + res.stderr
    for t in (1, 2):
        assert f"round {t}/2: accuracy" in streamed, streamed[-3000:]
    assert f"done: 2 rounds, final accuracy {summary['final_accuracy']:.4f}" in streamed
    assert "DEPRECATED" not in streamed
    ours = [x for x in streamed.splitlines() if x.startswith("fedselect ")]
    # fedselect's lines are plain; flwr-serverapp's first line comes before fedselect is imported
    assert len(ours) >= 4 and not [x for x in ours if "\x1b[" in x]
    assert processes_in_groups(groups) == [] and not [pid for pid in family if _alive(pid)]  # nothing left running
