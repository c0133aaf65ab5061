"""An engine from outside the package (examples/own-engine/queue_engine.py: every job through a
queue to a worker thread), named by module path: the same run as the simulator, byte for byte,
from the API, the command line and a comparison (one engine start for the runs of a
federation), resumed exactly on it; and the mistakes a user makes naming an engine."""

from __future__ import annotations

import ast
import csv
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fedselect.cli import app
from fedselect.config.schema import ConfigError
from fedselect.experiment.resolve import resolve_doc
from fedselect.experiment.run import run_experiment
from fedselect.world.data.datasets import DatasetNotFoundError
from support.tiny import tiny_doc

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own-engine"
QUEUE = "queue_engine:QueueEngine"
CEFL = {"clusters": 2, "warmup_epochs": 1, "base_layers": 1, "transfer_epochs": 2}
DOC = tiny_doc(name="queue", seed=5, rounds=3, num_clients=6, hidden=16, faults={"dropout": 0.2})


@pytest.fixture(autouse=True)
def example_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))


def same_run(a: Path, b: Path) -> None:
    assert (a / "metrics.csv").read_text() == (b / "metrics.csv").read_text()
    assert (a / "model.pt").read_bytes() == (b / "model.pt").read_bytes()


def test_the_example_imports_no_experiment_layer():
    """An engine gives transports and a session; it never runs an experiment (nor imports the
    layers that do)."""
    tree = ast.parse((EXAMPLE / "queue_engine.py").read_text())
    used = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("fedselect")}
    assert used == {
        "fedselect.engines",
        "fedselect.world.federation",
        "fedselect.fl.local.pool",
        "fedselect.fl.work",
        "fedselect.experiment.resolve",
    }


@pytest.mark.parametrize("method", ["fedavg", "cefl", "oort"])
def test_a_run_on_the_queue_engine_is_the_simulators(method, tmp_path):
    """FedAvg, CEFL (warm-up, leaders, fine-tuning jobs) and Oort (sample losses) with 20 %
    dropout: the same metrics.csv and model.pt; config.yaml names the engine, summary.json has
    its section."""
    import queue_engine

    doc = {**DOC, "method": method, "method_options": CEFL if method == "cefl" else {}}
    run_experiment(resolve_doc(doc), tmp_path / "sim", workers=0)
    before = queue_engine.QueueEngine.started
    summary = run_experiment(resolve_doc({**doc, "engine": QUEUE}), tmp_path / "queue")
    same_run(tmp_path / "sim", tmp_path / "queue")
    assert queue_engine.QueueEngine.started == before + 1
    assert summary["queue"]["jobs"] >= 3 * 2 and "queue" not in json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert yaml.safe_load((tmp_path / "queue" / "config.yaml").read_text())["engine"] == QUEUE


def test_resumed_on_the_queue_engine_and_from_the_command_line(tmp_path):
    """`fedselect run --engine queue_engine:QueueEngine`, stopped after round 1 and continued
    with `fedselect run --resume` (which runs on the engine config.yaml names): the bytes of an
    uninterrupted simulator run."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({**DOC, "method": "power_of_choice", "method_options": {"d": 4}}))
    runner = CliRunner()
    res = runner.invoke(app, ["run", str(cfg), "-o", str(tmp_path / "sim"), "-q", "--workers", "0"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["run", str(cfg), "-o", str(tmp_path / "queue"), "-q", "--engine", QUEUE])
    assert res.exit_code == 0, res.output
    same_run(tmp_path / "sim", tmp_path / "queue")

    doc = {**yaml.safe_load(cfg.read_text()), "engine": QUEUE}
    run_experiment(resolve_doc(doc), tmp_path / "cut", stop_after=1)
    assert len(list(csv.DictReader(open(tmp_path / "cut" / "metrics.csv")))) == 2
    res = runner.invoke(app, ["run", "--resume", str(tmp_path / "cut"), "-q"])
    assert res.exit_code == 0, res.output
    same_run(tmp_path / "sim", tmp_path / "cut")
    assert "queue" in json.loads((tmp_path / "cut" / "summary.json").read_text())


@pytest.mark.slow
def test_a_comparison_on_the_queue_engine_starts_it_once(tmp_path):
    """The runs of one federation share one engine session (fedselect.study.backends): two methods,
    one worker thread started, each run the simulator's."""
    import queue_engine

    import fedselect

    base = {k: v for k, v in DOC.items() if k not in ("name", "seed")}
    config = {"name": "cmp", "seeds": [0], "base": base, "methods": [{"method": "fedavg"}, {"method": "fastest"}]}
    fedselect.compare(config, out=tmp_path / "sim", progress=False, workers=0)
    before = queue_engine.QueueEngine.started
    fedselect.compare(config, out=tmp_path / "queue", progress=False, engine=QUEUE)
    assert queue_engine.QueueEngine.started == before + 1
    for run in ("fedavg-s0", "fastest-s0"):
        same_run(tmp_path / "sim" / "runs" / run, tmp_path / "queue" / "runs" / run)


def test_mode_async_on_the_queue_engine(tmp_path):
    """FedBuff's submit / collect go through the engine's transport too."""
    doc = {**DOC, "mode": "async", "rounds": 4, "async": {"concurrency": 3, "buffer_size": 2}}
    run_experiment(resolve_doc(doc), tmp_path / "sim", workers=0)
    run_experiment(resolve_doc({**doc, "engine": QUEUE}), tmp_path / "queue")
    same_run(tmp_path / "sim", tmp_path / "queue")


def test_a_wrong_engine_is_refused_naming_it(tmp_path):
    with pytest.raises(ConfigError, match=r"engine: unknown engine 'quuee'; allowed: \['flower', 'simulator'\]"):
        resolve_doc({**DOC, "engine": "quuee"})
    with pytest.raises(ConfigError, match="engine: engine 'queue_engine:Nope': module 'queue_engine' has no attribute 'Nope'"):
        resolve_doc({**DOC, "engine": "queue_engine:Nope"})
    with pytest.raises(ConfigError, match=r"engine 'queue_engine:QueueWorker' is .*not a subclass of fedselect.engines.Engine"):
        resolve_doc({**DOC, "engine": "queue_engine:QueueWorker"})
    res = CliRunner().invoke(app, ["run", "--engine", "quuee", "-o", str(tmp_path / "r")])
    assert res.exit_code == 2 and "'quuee' is not an engine; allowed: simulator, flower" in " ".join(res.output.split())
    assert not (tmp_path / "r").exists()


def test_the_engine_list_comes_from_the_registry(monkeypatch):
    """`fedselect list` and --engine read the registry: an engine registered by a user's module
    is listed and accepted beside the built-ins; a declared built-in whose optional extra is
    missing says what it needs."""
    from fedselect.cli.console import engine_table
    from fedselect.registry import ENGINES, Registry

    rows = dict(zip(engine_table().columns[0]._cells, engine_table().columns[1]._cells))
    assert rows["simulator"].startswith("this process and its worker pool")
    assert "needs the extra fedselect\\[flower]" in rows["flower"] or "No module named 'flwr'" in rows["flower"]

    import queue_engine

    monkeypatch.setitem(ENGINES._classes, "queue", queue_engine.QueueEngine)
    assert "queue" in ENGINES.names() and resolve_doc({**DOC, "engine": "queue"}).engine is queue_engine.QueueEngine

    reg = Registry(
        "engine", None, "none", declared={"gone": "no_such_module_x:Engine"}, needs={"gone": "the extra fedselect[gone]"}
    )
    assert reg.builtin_names() == [] and reg.names() == ["gone"]
    with pytest.raises(
        ValueError, match=r"engine 'gone' needs the extra fedselect\[gone\] \(.*No module named 'no_such_module_x'"
    ):
        reg.get("gone")


def test_the_federation_is_built_before_the_engine_starts(tmp_path):
    """Data that cannot be loaded fails before the engine starts anything (Flower: before Ray and
    its processes, which also keeps them out of the loading's memory peak)."""
    before = __import__("queue_engine").QueueEngine.started
    doc = {**DOC, "engine": QUEUE, "data": {**DOC["data"], "dataset": "mnist", "options": {"path": str(tmp_path / "none")}}}
    with pytest.raises(DatasetNotFoundError, match="mnist: no data found"):
        run_experiment(resolve_doc(doc), tmp_path / "run")
    assert __import__("queue_engine").QueueEngine.started == before
