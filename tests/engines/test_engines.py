"""One round, two transports: the simulator and Flower give the same run, byte for byte.

The contract test runs every case of the registry (tests/support/registry_cases.py: every method preset,
every registered selector with FedAvg and with FedPer where allowed) for 3 rounds on both
engines, with and without ``faults.dropout: 0.2``, and compares ``metrics.csv`` and
``model.pt``. Flower here is the in-process grid of tests/support/flower_grid.py, whose nodes answer
through the real ClientApp; Flower's own simulation engine (Ray) runs through the CLI's
``--engine flower`` below, and resume on Flower is exact."""

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("flwr") is None, reason="Flower is the optional extra fedselect[flower] (make test installs it)"
)

from fedselect.experiment.resolve import parse_experiment  # noqa: E402
from fedselect.world.federation import build_federation  # noqa: E402
from support.registry_cases import cases  # noqa: E402
from support.tiny import tiny_doc, tiny_node_settings  # noqa: E402

#: every node's settings (flat dotted keys, as in a Flower run config)
NODE = tiny_node_settings(seed=7, hidden=16)
BASE = tiny_doc(name="contract", seed=7, rounds=3, num_clients=6, hidden=16)
CASES = cases(BASE)


@pytest.fixture(scope="module")
def fed():
    return build_federation(parse_experiment(BASE))


def grid(n: int = 6, node: dict | None = None, **kw):
    from fedselect.flower.client_app import make_client_app
    from support.flower_grid import LocalGrid

    return LocalGrid(make_client_app(node or NODE), n, {}, **kw)


def on_flower(doc: dict, out: Path, fed, g=None, **kw) -> Path:
    from fedselect.flower.grid_run import run_on_grid
    from fedselect.flower.nodes import FlowerOptions

    run_on_grid(g or grid(), parse_experiment(doc), out, FlowerOptions(poll_s=0.01), federation=fed, **kw)
    return out


def on_simulator(doc: dict, out: Path, fed, **kw) -> Path:
    from fedselect.experiment.run import run_experiment

    run_experiment(parse_experiment(doc), out, federation=fed, **kw)
    return out


def assert_same_run(a: Path, b: Path) -> None:
    ma, mb = (a / "metrics.csv").read_text(), (b / "metrics.csv").read_text()
    assert ma == mb, "\n".join(f"{x}\n{y}" for x, y in zip(ma.splitlines(), mb.splitlines()) if x != y)
    assert (a / "model.pt").read_bytes() == (b / "model.pt").read_bytes()


def test_the_cases_cover_the_registry():
    from fedselect.algorithms import ALGORITHMS
    from fedselect.config.presets import PRESETS
    from fedselect.selectors import SELECTORS

    docs = CASES.values()
    assert set(PRESETS) <= set(CASES)
    assert set(SELECTORS.builtin_names()) == {d["selector"]["name"] for d in docs}
    assert set(ALGORITHMS.builtin_names()) == {d["algorithm"]["name"] for d in docs}
    assert "flashrl+fedper" in CASES and "oort+fedper" in CASES and "power_of_choice+fedper" in CASES


@pytest.mark.slow
@pytest.mark.parametrize("dropout", [0.0, 0.2], ids=["no-faults", "dropout-0.2"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_simulator_and_flower_give_the_same_run(case, dropout, fed, tmp_path):
    doc = {**CASES[case], "faults": {"dropout": dropout}}
    sim = on_simulator(doc, tmp_path / "sim", fed)
    assert_same_run(sim, on_flower(doc, tmp_path / "flower", fed))


def test_a_flower_run_resumed_after_round_2_equals_the_uninterrupted_one(fed, tmp_path):
    """CEFL with dropout: stopped after round 2 of 4, resumed on a fresh grid (new nodes that
    keep nothing): the same metrics.csv and model as without the stop."""
    doc = {**CASES["cefl"], "rounds": 4, "faults": {"dropout": 0.2}}
    whole = on_flower(doc, tmp_path / "whole", fed)
    on_flower(doc, tmp_path / "stopped", fed, stop_after=2)
    assert (tmp_path / "stopped" / "metrics.csv").read_text().count("\n") == 1 + 3
    on_flower(doc, tmp_path / "stopped", fed, resume=True)
    assert_same_run(whole, tmp_path / "stopped")
    assert (tmp_path / "stopped" / "inputs.json").is_file() and (tmp_path / "stopped" / "checkpoint.pt").is_file()
    assert_same_run(whole, on_simulator(doc, tmp_path / "sim", fed))


# ---------------------------------------------------------------------------- Flower's simulation engine
@pytest.mark.slow
def test_engine_flower_from_the_cli_and_resume_on_it(tmp_path):
    """`fedselect run X --engine flower` (Flower's simulation engine, Ray, one SuperNode per
    client) writes the simulator's run directory: CEFL with dropout 0.2 gives the same
    metrics.csv and model; a Flower run stopped after round 2 and continued with
    `fedselect run --resume DIR` continues on Flower (config.yaml says so) and ends equal."""
    import json

    import yaml
    from typer.testing import CliRunner

    from fedselect.cli import app
    from fedselect.experiment.run import run_experiment

    doc = {**CASES["cefl"], "rounds": 3, "faults": {"dropout": 0.2}}
    cfg = tmp_path / "cefl.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    runner = CliRunner()
    res = runner.invoke(app, ["run", str(cfg), "-o", str(tmp_path / "sim"), "-q"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["run", str(cfg), "-o", str(tmp_path / "flower"), "--engine", "flower", "-q"])
    assert res.exit_code == 0, res.output
    assert_same_run(tmp_path / "sim", tmp_path / "flower")
    summary = json.loads((tmp_path / "flower" / "summary.json").read_text())
    assert summary["flower"]["engine"] == "flower" and len(summary["flower"]["nodes"]) == 6
    assert yaml.safe_load((tmp_path / "flower" / "config.yaml").read_text())["engine"] == "flower"

    run_experiment(parse_experiment({**doc, "engine": "flower"}), tmp_path / "stopped", stop_after=2)
    res = runner.invoke(app, ["run", "--resume", str(tmp_path / "stopped"), "-q"])
    assert res.exit_code == 0, res.output
    assert_same_run(tmp_path / "sim", tmp_path / "stopped")
    assert "flower" in json.loads((tmp_path / "stopped" / "summary.json").read_text())


@pytest.mark.slow
def test_a_comparison_on_flower_starts_the_engine_once(tmp_path):
    """`fedselect compare CONFIG --engine flower`: every run of a federation in one engine start
    (fedselect.engines.Engine.session, from fedselect.study.backends), each run byte-identical to the simulator's."""
    import yaml
    from typer.testing import CliRunner

    from fedselect.cli import app

    base = {k: BASE[k] for k in ("rounds", "clients_per_round", "data", "model", "train")}
    doc = {
        "name": "cmp",
        "seeds": [0],
        "baseline": "FedAvg",
        "base": {**base, "faults": {"dropout": 0.2}},
        "methods": [{"label": "FedAvg", "method": "fedavg"}, {"label": "CEFL", **CASES["cefl"]}],
    }
    for m in doc["methods"][1:]:
        for k in list(m):
            if k not in ("label", "selector", "algorithm"):
                del m[k]
    cfg = tmp_path / "cmp.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    for engine in ("simulator", "flower"):
        res = CliRunner().invoke(app, ["compare", str(cfg), "-o", str(tmp_path / engine), "-q", "--engine", engine])
        assert res.exit_code == 0, res.output
    for run in ("FedAvg-s0", "CEFL-s0"):
        assert_same_run(tmp_path / "simulator" / "runs" / run, tmp_path / "flower" / "runs" / run)
    assert (tmp_path / "flower" / "runs" / "CEFL-s0" / "summary.json").read_text().count('"engine": "flower"') == 1


def test_live_curves_of_a_flower_run(fed, tmp_path):
    """`log.tensorboard` on Flower: the run files are the simulator's code, so the event files
    are written there too, one per run directory."""
    pytest.importorskip("tensorboard")
    doc = {**CASES["oort"], "log": {"tensorboard": True}}
    on_flower(doc, tmp_path / "flower", fed)
    assert any((tmp_path / "flower" / "tb").iterdir())
    assert_same_run(on_simulator(doc, tmp_path / "sim", fed), tmp_path / "flower")


# ---------------------------------------------------------------------------- fleets on both engines
FLEET = {
    "availability": {"model": "markov", "mean_on_s": 0.6, "mean_off_s": 0.3, "spread": 0.5},
    "overselect": 1.5,
    "straggler": "partial",
    "system": {
        "adaptive_deadline": {"percentile": 50, "window": 2},
        "round_deadline_s": 0.25,
        "capacity": {
            "model": "lognormal",
            "compute_mhz": 300.0,
            "compute_sigma": 1.0,
            "bandwidth_mbps": 5.0,
            "bandwidth_sigma": 1.0,
        },
    },
}


@pytest.fixture(scope="module")
def fleet_fed():
    return build_federation(parse_experiment({**BASE, **FLEET}))


@pytest.mark.parametrize("case", ["fedavg", "oort", "flashrl", "power_of_choice", "cefl"])
def test_fleet_features_give_the_same_run_on_both_engines(case, fleet_fed, tmp_path):
    """Markov availability, over-selection 1.5, an adaptive deadline with stragglers' partial
    work (FedNova) and lognormal capacities: the simulator and Flower write the same files, and
    the fleet did what it says. With these settings every round plans partial work for 1-2
    stragglers (max_steps over the wire) under a deadline of 0.24-0.25 s."""
    import csv

    doc = {**CASES[case], **FLEET, "rounds": 4}
    sim = on_simulator(doc, tmp_path / "sim", fleet_fed)
    node = {**NODE, **{f"system.capacity.{k}": v for k, v in FLEET["system"]["capacity"].items()}}
    assert_same_run(sim, on_flower(doc, tmp_path / "flower", fleet_fed, g=grid(node=node)))
    rows = list(csv.DictReader(open(sim / "metrics.csv")))[1:]
    assert min(int(r["available"]) for r in rows) < 6  # someone was offline at a round's start
    assert any("dropout" in r["failed"] for r in rows)  # an online period ended mid-work
    assert [float(r["clock_s"]) for r in rows] == sorted(float(r["clock_s"]) for r in rows)


@pytest.mark.parametrize("case", ["fedavg", "cefl"])
def test_a_wait_for_the_fleet_is_the_same_on_both_engines(case, fed, tmp_path):
    """Every client offline from 0.1 s to 1.5 s: the round that meets the empty fleet waits
    until 1.5 s (fedselect.fl.round.begin, which both engines call) and both engines write the
    same files."""
    import csv

    trace = tmp_path / "t.csv"
    trace.write_text("client,start_s,end_s\n" + "".join(f"{k},0,0.1\n{k},1.5,inf\n" for k in range(6)))
    doc = {**CASES[case], "rounds": 4, "availability": {"model": "trace", "trace_file": str(trace)}}
    sim = on_simulator(doc, tmp_path / "sim", fed)
    assert_same_run(sim, on_flower(doc, tmp_path / "flower", fed))
    rows = list(csv.DictReader(open(sim / "metrics.csv")))[1:]
    waited = [r for r in rows if float(r["waited_s"]) > 0]
    assert len(waited) == 1 and float(waited[0]["clock_s"]) == 1.5


# ---------------------------------------------------------------------------- mode: async on both engines
ASYNC = {
    "mode": "async",
    "rounds": 5,
    "async": {"concurrency": 3, "buffer_size": 2, "staleness": {"function": "polynomial", "a": 0.5}},
    "availability": {"model": "markov", "mean_on_s": 0.6, "mean_off_s": 0.3, "spread": 0.5},
    "faults": {"dropout": 0.1},
    "system": {"capacity": FLEET["system"]["capacity"]},
}


@pytest.mark.parametrize("case", ["fedavg", "oort", "flashrl", "power_of_choice"])
def test_an_async_run_is_the_same_on_both_engines(case, fleet_fed, tmp_path):
    """FedBuff (C 3, K 2, polynomial staleness) on a fleet with Markov availability, lognormal
    capacities and simulated dropouts: Flower's nodes get each job when its client starts and
    answer when they have trained; the simulator and Flower write the same metrics.csv and
    model.pt."""
    import csv

    doc = {**CASES[case], **ASYNC}
    sim = on_simulator(doc, tmp_path / "sim", fleet_fed)
    node = {**NODE, **{f"system.capacity.{k}": v for k, v in FLEET["system"]["capacity"].items()}}
    g = grid(node=node)
    assert_same_run(sim, on_flower(doc, tmp_path / "flower", fleet_fed, g=g))
    rows = list(csv.DictReader(open(sim / "metrics.csv")))[1:]
    assert [int(r["version"]) for r in rows] == [1, 2, 3, 4, 5]
    assert all(int(r["aggregated"]) <= 2 for r in rows)


def test_async_on_flower_pushes_each_job_when_its_client_starts(fleet_fed, tmp_path):
    """The Flower transport's submit / collect: every training job is one message, pushed
    before the earlier ones' results were all collected (jobs overlap in time), and
    ``latency: measured`` is refused with async mode."""
    import csv

    from fedselect.flower.grid_run import run_on_grid
    from fedselect.flower.nodes import FlowerOptions

    doc = {**CASES["fedavg"], **ASYNC}
    node = {**NODE, **{f"system.capacity.{k}": v for k, v in FLEET["system"]["capacity"].items()}}
    seen, g = [], grid(node=node)
    outstanding: set = set()
    overlap = []  # messages already out, at each later push
    push, pull = g.push_messages, g.pull_messages

    def spy_push(msgs):
        msgs = list(msgs)
        overlap.append(len(outstanding))
        ids = list(push(msgs))
        outstanding.update(i for i in ids if i)
        return ids

    def spy_pull(ids):
        got = list(pull(ids))
        outstanding.difference_update(r.metadata.reply_to_message_id for r in got)
        return got

    g.push_messages, g.pull_messages = spy_push, spy_pull
    on_flower(doc, tmp_path / "flower", fleet_fed, g=g, on_simulation=lambda sim: seen.append(sim))
    assert max(overlap) >= 2  # a job went out while two others were still being trained
    tr = seen[0].transport
    assert not tr._queued and tr.messages >= 10  # 5 versions x K 2 updates at least, each one message
    rows = list(csv.DictReader(open(tmp_path / "flower" / "metrics.csv")))[1:]
    assert max(float(r["staleness_max"]) for r in rows if r["staleness_max"] != "nan") >= 1  # really asynchronous
    with pytest.raises(ValueError, match="latency: measured is not available with mode: async"):
        run_on_grid(
            grid(node=node), parse_experiment(doc), tmp_path / "m", FlowerOptions(latency="measured"), federation=fleet_fed
        )
