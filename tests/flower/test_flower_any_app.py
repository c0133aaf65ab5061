"""examples/flower-any-app in Flower's simulation engine (Ray, 5 SuperNodes): a ClientApp written
the way Flower's quickstart writes one, Flower's FedAvg wrapped in fedselect's SelectionStrategy.
Partition 0 is a slow device (it sleeps 1 s before every reply): Oort, which learns the nodes'
measured round trips, tries it only once every fast node has been tried and then leaves it out;
Power-of-Choice's probe (an evaluate message) does not wait for it, so it is never chosen. The
bookkeeping and the statistics of many rounds: tests/test_flower_selection.py."""

import csv
import importlib.util
import json
import os
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("flwr") is None, reason="Flower is the optional extra fedselect[flower] (make test installs it)"
    ),
    pytest.mark.slow,
]
APP = Path(__file__).parents[2] / "examples" / "flower-any-app"


def read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_oort_and_power_of_choice_choose_the_nodes_of_a_flower_style_app(tmp_path, monkeypatch):
    # the simulation engine's workers import the app (anyapp) from the example's directory
    monkeypatch.syspath_prepend(str(APP))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(APP), os.environ.get("PYTHONPATH", "")) if p))
    from anyapp.client_app import app as client_app
    from anyapp.server_app import federate
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    done: dict = {}
    server = ServerApp()

    @server.main()
    def main(grid, context) -> None:
        try:  # Power-of-Choice first: its profiling exchange also wakes every simulated node
            done["poc"] = federate(
                grid, "power_of_choice", num_rounds=3, run_dir=tmp_path / "poc", options={"d": 4}, probe_timeout=0.5
            )[0]
            done["oort"] = federate(grid, "oort", num_rounds=4, run_dir=tmp_path / "oort")[0]
        except BaseException as e:  # the engine would only log it
            done["error"] = e

    run_simulation(
        server_app=server,
        client_app=client_app,
        num_supernodes=5,
        # 3 simulated devices at a time for the 5 nodes: fewer processes to start; a message waits
        # for a free one at most as long as a fast node takes (one node only is slow)
        backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 3}},
    )
    if "error" in done:
        raise done["error"]

    # Oort: the slow node is the one whose profiling round trip took the 1 s it sleeps
    summary = json.loads((tmp_path / "oort" / "summary.json").read_text())
    profile = summary["measured"]["profile_round_trip_s"]
    slow = [k for k, s in enumerate(profile) if s >= 1.0]
    assert len(slow) == 1, profile
    slow = slow[0]
    rows = read(tmp_path / "oort" / "metrics.csv")
    picks = [[int(k) for k in r["selected"].split(";")] for r in rows]
    assert [len(p) for p in picks] == [2, 2, 2, 2]  # fraction_train 0.4 of 5 nodes
    first = next((t for t, p in enumerate(picks) if slow in p), None)
    tried = {k for p in picks[: first if first is not None else len(picks)] for k in p}
    assert first is None or tried == set(range(5)) - {slow}, picks  # explored after every fast node
    assert sum(slow in p for p in picks) <= 1 and slow not in picks[3], picks  # and never exploited
    if first is not None:
        assert summary["measured"]["last_round_trip_s"][slow] >= 1.0
    assert all(0.0 <= float(r["accuracy"]) <= 1.0 for r in rows)  # the ServerApp's evaluate_fn
    assert all(float(r["train_loss"]) > 0 for r in rows)  # the ClientApp's train_loss

    # Power-of-Choice: never the slow node, which cannot answer the 0.5 s probe
    poc = read(tmp_path / "poc" / "metrics.csv")
    assert len(poc) == 3
    for r in poc:
        cands = [int(k) for k in r["candidate_ids"].split(";")]
        chosen = [int(k) for k in r["selected"].split(";")]
        assert len(cands) == 4 and len(chosen) == 2 and set(chosen) <= set(cands)
        assert slow not in chosen, (slow, r)
        assert int(r["candidates_probed"]) == 4 - (slow in cands)
