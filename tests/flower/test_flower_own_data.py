"""A real fleet: Flower nodes that own their data (fedselect.flower.owndata) and a server that
knows them only from their reports (fedselect.flower.fleet). In-process grid (tests/support/flower_grid.py:
every node answers through the real ClientApp): the server never opens a node's file (an audit
hook on ``open``), its view of the fleet is the reports' (sizes, classes, speeds), evaluation is
federated (the sample-weighted mean, recomputed here) or on the server's test set, the label
histogram leaves a node only when allowed, and what cannot run is refused before any node is
asked. The example examples/flower-own-data runs over TLS on 127.0.0.1 (slow).
"""

import importlib.util
import json
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("flwr") is None, reason="Flower is the optional extra fedselect[flower] (make test installs it)"
)

from fedselect.config.schema import ConfigError  # noqa: E402

#: the run config every node reads (the model; the nodes' data come from their node configs)
RUN = {"seed": 3, "model.name": "mlp", "model.options.hidden": "[32]", "torch-threads": 1}
#: rows in node k's file, and its held-out rows (load_npz: round(0.2 n))
ROWS = [60, 80, 100, 120]
HELD = [12, 16, 20, 24]


def experiment(**extra) -> dict:
    doc = {
        "name": "own-data",
        "seed": 3,
        "rounds": 3,
        "clients_per_round": 2,
        "method": "oort",
        "data": {"num_clients": 4},
        "model": {"name": "mlp", "options": {"hidden": [32]}},
        "train": {"local_epochs": 1, "batch_size": 16, "lr": 0.05},
    }
    doc.update(extra)
    return doc


def write_files(d: Path) -> list[Path]:
    """Node k's file: ROWS[k] embedded-MNIST rows of 4 digits of its own."""
    from fedselect.world.data.catalog import load_dataset

    train, _ = load_dataset("mnist-embedded", seed=0)
    out = []
    for k, n in enumerate(ROWS):
        rows = np.flatnonzero(np.isin(train.y, [(2 * k + j) % 10 for j in range(4)]))
        rows = np.sort(np.random.default_rng(k).permutation(rows)[:n])
        p = d / f"node-{k}" / "data.npz"
        p.parent.mkdir(parents=True)
        np.savez(p, x=train.x[rows], y=train.y[rows], num_classes=np.int64(10))
        out.append(p)
    return out


# ----------------------------------------------------------------------------- the audit
class Audit:
    """Every ``open`` of a file under ``root`` in this process, split by whether a node's
    handler (the ClientApp, called by the in-process grid) or anything else (the server) made it."""

    local = threading.local()
    root: str | None = None
    by_node: list[str] = []
    by_server: list[str] = []

    @classmethod
    def hook(cls, event, args):
        if event == "open" and cls.root is not None and args and isinstance(args[0], (str, bytes, Path)):
            path = str(Path(args[0] if not isinstance(args[0], bytes) else args[0].decode()).resolve())
            if path.startswith(cls.root):
                (cls.by_node if getattr(cls.local, "node", False) else cls.by_server).append(path)


_INSTALLED = []


def audited(app):
    """``app`` (a ClientApp) marked as the node side for :class:`Audit`."""
    if not _INSTALLED:
        sys.addaudithook(Audit.hook)  # stays for the process; records only while Audit.root is set
        _INSTALLED.append(True)

    def node(msg, context):
        Audit.local.node = True
        try:
            return app(msg, context)
        finally:
            Audit.local.node = False

    return node


def fleet_grid(files: list[Path], extra=lambda i: {}, n: int = 4):
    """An in-process grid of ``n`` nodes, node i serving ``files[i]`` (wifi-3, intel-i5 for odd i,
    measured speed for even i)."""
    from fedselect.flower.client_app import make_client_app
    from support.flower_grid import LocalGrid

    grid = LocalGrid(audited(make_client_app(RUN)), n, {})
    for i, nid in enumerate(grid.ids):
        conf = {"data-path": str(files[i]), "network": "wifi-3", **({"device": "intel-i5"} if i % 2 else {}), **extra(i)}
        grid.contexts[nid].node_config.update({k: v for k, v in conf.items() if v is not None})
    return grid


def run(grid, doc: dict, out: Path, test_set=None, **options):
    from fedselect.experiment.resolve import parse_experiment
    from fedselect.flower.fleet import run_fleet
    from fedselect.flower.nodes import FlowerOptions

    options.setdefault("poll_s", 0.001)
    return run_fleet(grid, parse_experiment(doc), out, FlowerOptions(**options), test_set)


def node_holdouts(files: list[Path]):
    from fedselect.flower.owndata import load_npz

    return [load_npz(seed=3, path=str(p))[1] for p in files]


def model_of(out: Path):
    from fedselect.world.models import build_model

    m = build_model("mlp", (1, 28, 28), 10, hidden=[32])
    m.load_state_dict(torch.load(out / "model.pt", weights_only=True))
    return m


# ----------------------------------------------------------------------------- tests
def test_the_server_never_opens_a_nodes_file_and_evaluates_federated(tmp_path):
    """Oort on 4 nodes, each with a file of its own: the run completes; every open of a node
    file came from a node's handler, none from the server (the audit sees the nodes open them:
    the hook works); the fleet view is the reports' (training and held-out sizes, no label
    histogram); each round's accuracy is the held-out-weighted mean of the nodes' accuracies,
    recomputed here from model.pt for the last round."""
    from fedselect.fl.evaluate import evaluate

    files = write_files(tmp_path / "nodes")
    grid = fleet_grid(files)
    Audit.root, Audit.by_node, Audit.by_server = str((tmp_path / "nodes").resolve()), [], []
    try:
        summary = run(grid, experiment(), tmp_path / "run")
    finally:
        Audit.root = None
    assert Audit.by_server == [] and sorted(set(Audit.by_node)) == sorted(str(p.resolve()) for p in files)
    assert summary["complete"]
    fl = summary["flower"]
    assert fl["node_data"] == "own" and fl["evaluation"].startswith("federated")
    for k in range(4):
        p = fl["profiles"][str(k)]
        assert (p["num-examples"], p["holdout-examples"]) == (ROWS[k] - HELD[k], HELD[k])
        assert "label-counts" not in p and p["input-shape"] == [1, 28, 28] and p["num-classes"] == 10
        assert p["speed-source"] == ("configured" if k % 2 else "measured")
    inputs = json.loads((tmp_path / "run" / "inputs.json").read_text())
    assert inputs["client_samples"] == [n - h for n, h in zip(ROWS, HELD)] and inputs["train_size"] == 0
    model = model_of(tmp_path / "run")
    figures = [evaluate(model, d) for d in node_holdouts(files)]
    want = sum(h * f["accuracy"] for h, f in zip(HELD, figures)) / sum(HELD)
    want_loss = sum(h * f["loss"] for h, f in zip(HELD, figures)) / sum(HELD)
    last = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    header, row = last[0].split(","), last[-1].split(",")
    assert float(row[header.index("accuracy")]) == pytest.approx(want, abs=1e-12)
    assert float(row[header.index("test_loss")]) == pytest.approx(want_loss, rel=1e-5)
    assert summary["final_accuracy"] == pytest.approx(want, abs=1e-12)
    # every selected client trained on its node: a train message per participation
    trained = [e for e in grid.events if e[0] == "train"]
    assert len(trained) == 3 * 2


def test_a_server_test_set_and_a_shared_label_histogram(tmp_path):
    """With test-data the server evaluates on its own test set (recomputed here); a node with
    share-label-histogram = true reports its label counts, the others do not."""
    from fedselect.fl.evaluate import evaluate
    from fedselect.flower.fleet import server_test_set

    files = write_files(tmp_path / "nodes")
    np.savez(tmp_path / "server.npz", x=np.load(files[0])["x"][:30], y=np.load(files[0])["y"][:30], num_classes=np.int64(10))
    test = server_test_set("fedselect.flower.owndata:load_npz", str(tmp_path / "server.npz"), {"test_fraction": 0}, 3, "all")
    assert len(test) == 30
    grid = fleet_grid(files, lambda i: {"share-label-histogram": True} if i == 1 else {})
    summary = run(grid, experiment(rounds=2), tmp_path / "run", test_set=test)
    assert summary["flower"]["evaluation"] == "server test set"
    assert summary["final_accuracy"] == pytest.approx(evaluate(model_of(tmp_path / "run"), test)["accuracy"], abs=1e-12)
    profiles = summary["flower"]["profiles"]
    y1 = np.load(files[1])["y"]
    from fedselect.flower.owndata import load_npz

    train1, _ = load_npz(seed=3, path=str(files[1]))
    assert profiles["1"]["label-counts"] == np.bincount(train1.y, minlength=10).tolist() and set(y1) == {2, 3, 4, 5}
    assert all("label-counts" not in profiles[k] for k in ("0", "2", "3"))


def test_the_fleet_view_is_built_from_the_reports():
    """A reported device class is the server's table row; a compute-speed s is charged
    E n_k / s seconds by FR-eq 4; a bandwidth is the network's mean (no spread)."""
    from fedselect.experiment.resolve import parse_experiment
    from fedselect.flower.fleet import fleet_federation
    from fedselect.flower.owndata import model_digest

    cfg = parse_experiment(experiment(train={"local_epochs": 2, "batch_size": 16, "lr": 0.05}))
    base = {"own-data": True, "input-shape": [1, 28, 28], "num-classes": 10, "model": model_digest(cfg, (1, 28, 28), 10)}
    profiles = {
        0: {**base, "client-id": 0, "num-examples": 50, "holdout-examples": 5, "device": "intel-i5", "network": "wifi-1"},
        1: {**base, "client-id": 1, "num-examples": 80, "holdout-examples": 0, "compute-speed": 40.0, "bandwidth-mbps": 12.5},
        2: {**base, "client-id": 2, "num-examples": 10, "holdout-examples": 2, "device": "tpu-v1", "bandwidth-mbps": 3.0},
        3: {**base, "client-id": 3, "num-examples": 20, "holdout-examples": 4, "compute-speed": 1000.0, "network": "wifi-4"},
    }
    fed = fleet_federation(cfg, profiles)
    assert [c.num_samples for c in fed.clients] == [50, 80, 10, 20] and len(fed.clients[1].holdout_indices) == 0
    assert fed.fleet.devices[0].name == "intel-i5" and fed.fleet.mean_mhz[0] == 4300 and fed.fleet.cores[0] == 4
    assert fed.fleet.mean_mbps.tolist() == [6, 12.5, 3.0, 336] and fed.fleet.std_mbps[1] == 0
    lm, g = fed.latency_model, cfg.system.cycles_per_bit
    for k, speed in ((1, 40.0), (3, 1000.0)):
        seconds = lm.compute_s(2, fed.client_bits(k), g, fed.fleet.cores[k], fed.fleet.mean_mhz[k])
        assert seconds == pytest.approx(2 * profiles[k]["num-examples"] / speed, rel=1e-12)
    with pytest.raises(RuntimeError, match="stays on its node"):
        _ = fed.clients[0].train
    with pytest.raises(ValueError, match="did not share"):
        fed.label_counts()


def test_what_needs_central_data_is_refused_before_any_node_is_asked(tmp_path):
    """A selector declaring needs_central_data, and selection_eval: test without a server test
    set, are refused with the reason before a query is sent; nodes without held-out rows and
    no server test set are refused after the reports (nothing to evaluate on); a node without
    data-path (the faithful mode) is refused by a real fleet's server, naming data-path."""
    from dataclasses import replace

    from fedselect.experiment.resolve import parse_experiment
    from fedselect.flower.fleet import run_fleet
    from fedselect.flower.nodes import FlowerOptions

    files = write_files(tmp_path / "nodes")
    r = parse_experiment(experiment())
    from fedselect.experiment.resolve import resolve

    plan = resolve(r, r.name)

    class NeedsLabels(plan.selector):
        needs_central_data = "it reads every client's labels from the server's copy of the data"

    grid = fleet_grid(files)
    with pytest.raises(ConfigError, match="needs data the server holds .it reads every client's labels"):
        run_fleet(grid, replace(plan, selector=NeedsLabels), tmp_path / "a", FlowerOptions(poll_s=0.001))
    with pytest.raises(ConfigError, match="selection_eval: test .* this server has none"):
        run(grid, experiment(selection_eval="test"), tmp_path / "b")
    assert not [e for e in grid.events if e[0] != "poll"]  # no node was asked anything
    grid = fleet_grid(files, lambda i: {"data-options": "{test_fraction: 0}"})
    with pytest.raises(ConfigError, match="nothing to evaluate on"):
        run(grid, experiment(), tmp_path / "c")
    assert not (tmp_path / "c").exists()
    grid = fleet_grid(files, lambda i: {"data-path": None} if i == 2 else {})
    with pytest.raises(ConfigError, match="node 1002 serves a partition .*data-path"):
        run(grid, experiment(), tmp_path / "d")


def test_bad_node_configs_are_named(tmp_path):
    """A node that gives no network, or a device and a speed both, or a file that is not there,
    answers the query with an error naming the key; the server stops at the start."""
    files = write_files(tmp_path / "nodes")
    cases = [
        ({"network": None}, "network=NAME"),
        ({"compute-speed": 10.0, "device": "intel-i5"}, "not both"),
        ({"data-path": str(tmp_path / "nowhere.npz")}, "no such file"),
        ({"device": "abacus"}, "device class 'abacus'"),
    ]
    for extra, message in cases:
        grid = fleet_grid(files, lambda i, extra=extra: extra if i == 0 else {})
        with pytest.raises((RuntimeError, ConfigError), match=message):
            run(grid, experiment(), tmp_path / "x", connect_timeout=5)


def test_the_node_profile_holds_only_the_listed_fields(tmp_path):
    """What leaves a node in its query reply: the fields of PROFILE_FIELDS (docs/flower.md
    lists them) and nothing else; the label counts only with share-label-histogram."""
    from fedselect.experiment.resolve import parse_experiment
    from fedselect.flower.owndata import PROFILE_FIELDS, node_data, profile

    files = write_files(tmp_path / "nodes")
    cfg = parse_experiment(experiment())
    for share in (False, True):
        node = node_data(
            0, cfg, {"data-path": str(files[0]), "compute-speed": 5.0, "bandwidth-mbps": 2.0, "share-label-histogram": share}
        )
        p = dict(profile(node)["profile"])
        assert set(p) <= set(PROFILE_FIELDS) and ("label-counts" in p) == share
        assert p["compute-speed"] == 5.0 and p["speed-source"] == "configured" and "device" not in p
    docs = (Path(__file__).parents[2] / "docs" / "flower.md").read_text()
    assert all(f"`{f}`" in docs for f in PROFILE_FIELDS)


# ----------------------------------------------------------------------------- the example
@pytest.mark.slow
def test_the_own_data_example_over_tls_and_the_serverapp_opens_no_node_file(tmp_path):
    """examples/flower-own-data: a SuperLink and 4 SuperNodes on 127.0.0.1 over TLS, each told
    only its own file; the ServerApp process runs under an audit hook that records every open
    of a file under the nodes' data directory (and proves it was installed). The run completes
    with federated evaluation, and the ServerApp opened none of the nodes' files."""
    import shutil

    example = Path(__file__).parents[2] / "examples" / "flower-own-data"
    sys.path.insert(0, str(example))
    try:
        import run as example_run
    finally:
        sys.path.remove(str(example))
    work = tmp_path / "work"
    data_root = (work / "data").resolve()
    app = tmp_path / "app"
    shutil.copytree(example, app, ignore=shutil.ignore_patterns("__pycache__"))
    marks = tmp_path / "audit"
    marks.mkdir()
    (app / "audited_server.py").write_text(
        "import os\n"
        "import sys\n"
        "from pathlib import Path\n"
        f"ROOT, MARKS = {str(data_root)!r}, Path({str(marks)!r})\n"
        "def _hook(event, args):\n"
        "    path = os.fspath(args[0]) if event == 'open' and args and isinstance(args[0], (str, os.PathLike)) else ''\n"
        "    if path.startswith(ROOT):\n"
        "        with open(MARKS / 'opened.txt', 'a') as f:\n"
        "            f.write(path + '\\n')\n"
        "sys.addaudithook(_hook)\n"
        "(MARKS / 'installed.txt').write_text(sys.argv[0])  # which process runs under the hook\n"
        "from fedselect.flower.server_app import app as _app  # noqa: E402\n"
        "app = _app  # (flwr run finds the attribute by reading the module: an assignment)\n"
    )
    toml = (app / "pyproject.toml").read_text().replace('"fedselect.flower.server_app:app"', '"audited_server:app"')
    (app / "pyproject.toml").write_text(toml)
    summary = example_run.run(work, app=app, timeout=500)
    assert "flwr-serverapp" in (marks / "installed.txt").read_text() and not (marks / "opened.txt").exists()
    assert summary["complete"] and summary["rounds"] == 3
    fl = summary["flower"]
    assert fl["node_data"] == "own" and fl["latency"] == "measured" and fl["evaluation"].startswith("federated")
    assert {k: p["num-examples"] for k, p in fl["profiles"].items()} == {"0": 80, "1": 112, "2": 144, "3": 176}
    assert fl["profiles"]["2"]["speed-source"] == "measured" and fl["profiles"]["0"]["device"] == "raspberry-pi-3"


def test_a_fleet_run_is_reproducible_and_resumes_exactly(tmp_path):
    """With configured profiles and simulated latency a real fleet's run depends only on the
    nodes' data and the seed: run twice it writes the same metrics.csv, and stopped after round
    1 and resumed (a fresh grid: the nodes reload their files) it writes that metrics.csv too."""
    files = write_files(tmp_path / "nodes")
    devices = lambda i: {"device": ["intel-i3", "intel-i5", "tpu-v1", "jetson-nano"][i]}  # noqa: E731
    run(fleet_grid(files, devices), experiment(), tmp_path / "a")
    run(fleet_grid(files, devices), experiment(), tmp_path / "b")
    from fedselect.experiment.resolve import parse_experiment
    from fedselect.flower.fleet import run_fleet
    from fedselect.flower.nodes import FlowerOptions

    opts = FlowerOptions(poll_s=0.001)
    assert run_fleet(fleet_grid(files, devices), parse_experiment(experiment()), tmp_path / "c", opts, stop_after=1) == {
        "stopped_after": 1
    }
    run_fleet(fleet_grid(files, devices), parse_experiment(experiment()), tmp_path / "c", opts, resume=True)
    want = (tmp_path / "a" / "metrics.csv").read_text()
    assert len(want.splitlines()) == 5
    assert (tmp_path / "b" / "metrics.csv").read_text() == want == (tmp_path / "c" / "metrics.csv").read_text()


def test_the_serverapp_run_config_of_a_real_fleet():
    """node-data is partition or own; test-data only with own; a real fleet's latency defaults
    to measured (the ServerApp's reading of its run config)."""
    from fedselect.flower.server_app import strategy_settings

    assert strategy_settings({"node-data": "own", "test-data": "mnist"})["latency"] == "simulated"  # the ServerApp then measures
    with pytest.raises(ConfigError, match="'node-data' must be one of \\['partition', 'own'\\]"):
        strategy_settings({"node-data": "mine"})
    with pytest.raises(ConfigError, match="'test-data' is the test set of a real fleet's server"):
        strategy_settings({"test-data": "mnist"})
    with pytest.raises(ConfigError, match="'test-data-path' must be of type"):
        strategy_settings({"node-data": "own", "test-data-path": 3})
