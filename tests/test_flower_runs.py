"""fedselect's selectors driving real Flower runs: Flower's simulation engine (Ray, 10 nodes)
and a real SuperLink with three SuperNodes as processes on 127.0.0.1, a node killed between
rounds. The strategy's logic is tested in-process in tests/test_flower_strategy.py."""

import importlib.util
import json
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("flwr") is None, reason="Flower is the optional extra fedselect[flower] (make test installs it)"
    ),
    pytest.mark.slow,
]
sys.path.insert(0, str(Path(__file__).parent))

#: what every node builds (the run config of a Flower app; num-partitions comes from the engine)
NODE = {
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


def experiment(n: int, u: int, rounds: int, **extra) -> dict:
    return {
        "name": "flower-run",
        "seed": 3,
        "rounds": rounds,
        "clients_per_round": u,
        "data": {
            "dataset": "mnist-embedded",
            "num_clients": n,
            "partition": {"scheme": "dirichlet", "alpha": 0.5, "min_size": 10},
        },
        "model": {"name": "mlp", "options": {"hidden": [32]}},
        "train": {"local_epochs": 1, "batch_size": 32, "lr": 0.05},
        **extra,
    }


def simulate(doc: dict, out: Path) -> list[list[str]]:
    from fedselect.experiment import run_experiment
    from fedselect.resolve import parse_experiment

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


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """One Flower simulation (10 SuperNodes, Ray) whose ServerApp runs three experiments one
    after another with FedselectStrategy; Power-of-Choice with measured latency."""
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    from fedselect.flower.client_app import make_client_app
    from fedselect.flower.strategy import FedselectStrategy
    from fedselect.resolve import parse_experiment

    out = tmp_path_factory.mktemp("engine")
    strategies, errors = {}, []
    server = ServerApp()

    @server.main()
    def main(grid, context):
        for name, doc in ENGINE.items():
            try:
                s = FedselectStrategy(
                    parse_experiment(doc),
                    out / name,
                    latency="measured" if name == "power_of_choice" else "simulated",
                    reply_timeout=120,
                )
                strategies[name] = s
                s.start(grid)
            except Exception as e:  # reported by the tests (the engine would only log it)
                errors.append(f"{name}: {type(e).__name__}: {e}")

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_simulation(
            server_app=server,
            client_app=make_client_app(NODE),
            num_supernodes=10,
            backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2}},
        )
    return {"out": out, "strategies": strategies, "errors": errors, "wall_s": time.perf_counter() - t0}


def test_flashrl_in_the_simulation_engine(engine, tmp_path):
    """10 nodes, 3 rounds, FLASH-RL choosing 3 per round: the nodes that trained are exactly
    the selector's choices, accuracy improves, and the run is our simulator's, byte for byte."""
    assert engine["errors"] == []
    s = engine["strategies"]["flashrl"]
    got = rows(engine["out"] / "flashrl")
    for t, result in enumerate(s.results, start=1):
        assert len(result.selection.clients) == 3
        assert s.trained[t] == list(result.selection.clients)  # the nodes that replied to a train message
        assert got[t]["selected"] == ";".join(map(str, result.selection.clients)) and got[t]["failed"] == ""
    assert float(got[3]["accuracy"]) > float(got[0]["accuracy"]) + 0.1
    assert simulate(ENGINE["flashrl"], tmp_path / "sim") == got
    assert (engine["out"] / "flashrl" / "metrics.csv").read_text() == (tmp_path / "sim" / "metrics.csv").read_text()


def test_oort_in_the_simulation_engine(engine, tmp_path):
    assert engine["errors"] == []
    s = engine["strategies"]["oort"]
    assert simulate(ENGINE["oort"], tmp_path / "sim") == rows(engine["out"] / "oort")
    assert s.selector.explored.sum() >= 3 and all(s.trained[t] == list(r.selection.clients) for t, r in enumerate(s.results, 1))


def test_power_of_choice_probes_by_evaluate_messages(engine):
    """Measured latency: candidates are probed by evaluate messages (the probe's wall time is
    the probing latency), the chosen are the candidates with the highest loss."""
    assert engine["errors"] == []
    s = engine["strategies"]["power_of_choice"]
    got = rows(engine["out"] / "power_of_choice")
    assert s.ctx.messages >= 3 * 6  # d = 2U = 6 candidates probed per round
    for t, result in enumerate(s.results, start=1):
        cands = [int(k) for k in got[t]["candidate_ids"].split(";")]
        assert len(cands) == 6 and set(result.selection.clients) <= set(cands)
        assert int(got[t]["candidates_probed"]) == 6 and float(got[t]["probe_latency_s"]) > 0
        assert s.trained[t] == list(result.selection.clients)
        assert all(0 < o.latency_s < 120 for o in result.outcomes)  # measured round trips
    summary = json.loads((engine["out"] / "power_of_choice" / "summary.json").read_text())
    assert summary["flower"]["latency"] == "measured" and summary["complete"]


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


def test_a_real_superlink_and_supernodes_with_a_node_killed_between_rounds(tmp_path):
    """SuperLink + 3 SuperNodes as processes on 127.0.0.1 (insecure), `flwr run` of an app whose
    ServerApp and ClientApp are fedselect's: Oort chooses 2 of 3 nodes for 2 rounds; the node of
    one of round 2's choices is killed after round 1. The selections are the simulator's, the
    killed node is round 2's dropout, the run completes, and no process is left."""
    from fedselect.flower.deployment import LocalDeployment, _alive, _descendants, processes_in_groups

    doc = experiment(3, 2, 2, method="oort")
    ref = simulate(doc, tmp_path / "sim")
    victim = int(ref[2]["selected"].split(";")[0])
    run_dir = tmp_path / "flower-run"
    settings = {
        **NODE,
        "data.num_clients": 3,
        "method": "oort",
        "rounds": 2,
        "clients_per_round": 2,
        "name": "flower-run",
        "run-dir": str(run_dir),
        "reply-timeout": 30.0,
    }
    app = tmp_path / "app"
    _write_app(app, settings)
    done: dict = {}
    with LocalDeployment(3, home=tmp_path / "flwr-home") as dep:
        runner = threading.Thread(target=lambda: done.setdefault("res", dep.run_app(app, timeout=400)), daemon=True)
        runner.start()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and runner.is_alive():  # kill the node once round 1 is recorded
            if (run_dir / "metrics.csv").exists() and len((run_dir / "metrics.csv").read_text().splitlines()) >= 3:
                dep.kill_node(victim)
                break
            time.sleep(0.1)
        runner.join(timeout=400)
        res = done.get("res")
        logs = "\n".join(f"--- {name}\n{dep.log(name)[-3000:]}" for name in ["superlink"] + [f"supernode-{i}" for i in range(3)])
        ok = res is not None and res.returncode == 0 and "ServerApp raised" not in res.stdout  # flwr run exits 0 even then
        assert ok, f"{res and res.stdout[-3000:]}\n{res and res.stderr[-3000:]}\n{logs}"
        assert "fedselect on Flower: finished 2 rounds" in res.stdout  # the ServerApp's progress is streamed
        groups = {p.pid for p in dep.nodes if p is not None} | {dep.superlink.pid}
        family = set().union(*(_descendants(pid) for pid in groups)) | groups
    got = rows(run_dir)
    assert [r["selected"] for r in got] == [r["selected"] for r in ref]
    assert got[:2] == ref[:2]  # rounds 0 and 1: the simulator's rows
    assert got[2]["failed"] == f"{victim}:dropout" and got[2]["aggregated"] == "1" and got[2]["round_failed"] == "0"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] and summary["client_failures"] == {"dropout": 1} and len(summary["flower"]["nodes"]) >= 2
    assert processes_in_groups(groups) == [] and not [pid for pid in family if _alive(pid)]  # nothing left running
