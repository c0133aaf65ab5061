"""A run resolves its config once (issue 36, "one way through"): the entry point resolves it
(``fedselect.run``, ``fedselect run``, a comparison's plan, the Flower ServerApp), and the
:class:`~fedselect.experiment.resolve.Resolved` then travels to the round, to the engine and to the run's
files; nothing downstream resolves it again. Every call of :func:`fedselect.experiment.resolve.resolve`
is counted here, wherever a module bound it."""

from __future__ import annotations

import importlib.util
import sys

import pytest

import fedselect.experiment.resolve as resolve_module
from support.tiny import tiny_doc, tiny_node_settings

DOC = tiny_doc(name="once", seed=2, num_clients=6, hidden=8)


@pytest.fixture
def resolves(monkeypatch):
    """The ``source`` of every :func:`fedselect.experiment.resolve.resolve` call while the test runs (in
    every module that imported the function by name)."""
    import fedselect.api  # noqa: F401 - the modules that bind it, imported before patching
    import fedselect.cli  # noqa: F401
    import fedselect.experiment.run  # noqa: F401
    import fedselect.study.backends  # noqa: F401

    calls: list[str] = []
    real = resolve_module.resolve

    def counting(cfg, source="<config>"):
        calls.append(source)
        return real(cfg, source)

    for name, mod in list(sys.modules.items()):
        if name.startswith("fedselect") and getattr(mod, "resolve", None) is real:
            monkeypatch.setattr(mod, "resolve", counting)
    return calls


def test_the_api_resolves_a_run_once(resolves, tmp_path):
    import fedselect

    res = fedselect.run(DOC, tmp_path / "run", workers=0)
    assert res.summary["complete"]
    assert resolves == ["<dict>"]  # api.plan_run; nothing after it


def test_the_command_line_resolves_a_run_once(resolves, tmp_path):
    import yaml
    from typer.testing import CliRunner

    from fedselect.cli import app

    (tmp_path / "c.yaml").write_text(yaml.safe_dump(DOC))
    res = CliRunner().invoke(app, ["run", str(tmp_path / "c.yaml"), "-o", str(tmp_path / "run"), "-q", "--workers", "0"])
    assert res.exit_code == 0, res.output
    assert resolves == [str(tmp_path / "c.yaml")]


def test_a_resolved_run_is_never_resolved_again(resolves, tmp_path):
    """run_experiment, resume and the backends' run step with a Resolved: no resolve at all,
    but on resume the checkpoint's own saved config, resolved to be compared with the run's."""
    from fedselect.experiment.resolve import resolve_doc
    from fedselect.experiment.run import resume_experiment, run_experiment
    from fedselect.study.backends import LocalBackend, RunSpec

    r = resolve_doc(DOC)
    resolves.clear()
    run_experiment(r, tmp_path / "a", workers=0, stop_after=1)
    assert resolves == []
    LocalBackend(workers=0).run([RunSpec(r, tmp_path / "b"), RunSpec(r, tmp_path / "c")])
    assert resolves == []
    resume_experiment(tmp_path / "a", workers=0)
    assert resolves == [f"{tmp_path / 'a' / 'config.yaml'}", "<saved run>"]


def test_a_raw_config_is_resolved_once_at_the_entry(resolves, tmp_path):
    from fedselect.config.schema import parse_config
    from fedselect.experiment.run import run_experiment

    raw = parse_config(DOC)  # the schema only: no resolve
    assert resolves == []
    run_experiment(raw, tmp_path / "r", workers=0)
    assert resolves == ["once"]


@pytest.mark.skipif(importlib.util.find_spec("flwr") is None, reason="Flower is the optional extra fedselect[flower]")
def test_a_run_on_flower_resolves_once_on_the_server(resolves, tmp_path):
    """On a Flower grid the server resolves nothing more (the nodes resolve their own node
    config, once per node, in their own processes; here in-process, so they are left out)."""
    from fedselect.experiment.resolve import resolve_doc
    from fedselect.flower.client_app import make_client_app
    from fedselect.flower.grid_run import run_on_grid
    from fedselect.flower.nodes import FlowerOptions
    from support.flower_grid import LocalGrid

    node = tiny_node_settings(seed=2, hidden=8)
    r = resolve_doc(DOC)
    resolves.clear()
    run_on_grid(LocalGrid(make_client_app(node), 6, {}), r, tmp_path / "f", FlowerOptions(poll_s=0.01))
    assert [s for s in resolves if "node/run config" not in s] == []
    assert (tmp_path / "f" / "summary.json").is_file()
