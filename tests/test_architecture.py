"""The rooms of the code base: one package per layer, every import points to the same or a
lower layer, the module import graph has no cycle, the top level of the package is its public
face only, and every component the docs promise is registered.

The graph holds the imports written in the code (function-level ones included) and the edges of
the plug-ins that registries load by name at run time (:data:`PLUGIN_DRIVERS`): read from the
registries' declarations, not from ``importlib`` strings, so an engine that called back into the
experiment layer that drives it shows as a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "fedselect"

#: layer of each package or module (longest prefix wins); lower layers never import higher ones.
#: A package is one layer, except where a module of it must sit lower because a lower layer
#: imports it (said beside each such entry).
LAYERS = {
    "fedselect": 0,
    # the ground floor: one generator per component, atomic files; the registry of plug-in kinds
    "fedselect.common": 0,
    "fedselect.registry": 0,
    # the configuration: schema, fleet sections, presets, a comparison's methods
    "fedselect.config": 1,
    # data sets, partitions, models, device/network profiles, the federation built from a config
    "fedselect.world": 2,
    # selection maths on arrays and small nets (no round, no federation, no config)
    "fedselect.kernels": 3,
    # the round's vocabulary that local training shares with it: state and outcome types,
    # evaluation, client faults
    "fedselect.fl.types": 4,
    "fedselect.fl.evaluate": 4,
    "fedselect.fl.faults": 4,
    # local training: the training loop, jobs, the local-objective hook, the worker pool, the stacked path
    "fedselect.fl.local": 5,
    # THE round and what it is made of: jobs and transports, aggregation, cost, clocks, availability
    "fedselect.fl": 6,
    # the components: selectors and algorithms (they speak the round's vocabulary: fl.types, fl.work)
    "fedselect.selectors": 7,
    "fedselect.algorithms": 7,
    # the experiment layer's plan side, below the engines that read it: the resolved config
    # (Resolved, from the registries of components; each component's options checked), the
    # run's parts (make_trainer, services), the metrics columns the run records
    "fedselect.experiment.resolve": 8,
    "fedselect.experiment.options": 8,
    "fedselect.experiment.simulation": 8,
    "fedselect.experiment.metrics": 8,
    # the engines (registry: fedselect.registry.ENGINES): the interface, the simulator, and the
    # Flower engine plug-in with its node side
    "fedselect.engines": 9,
    "fedselect.flower.engine": 9,
    "fedselect.flower.client_app": 9,
    "fedselect.flower.settings": 9,
    "fedselect.flower.transport": 9,
    "fedselect.flower.wire": 9,
    "fedselect.flower.nodes": 9,
    "fedselect.flower.messaging": 9,
    "fedselect.flower.logs": 9,
    "fedselect.flower.shared": 9,
    "fedselect.flower.owndata": 9,
    # the experiment layer: plays a run on its engine; run files, checkpoints, provenance, TensorBoard
    "fedselect.experiment": 10,
    # reading finished runs: tables, plots, statistics, HTML, a sweep's table
    "fedselect.report": 11,
    # studies of several runs: comparisons, sweeps, the backends running their runs
    "fedselect.study": 12,
    # the report of a directory (comparison or sweep): it renders a sweep's table with the study's
    # build_sweep_table (study.sweep_table), and a comparison writes its report with it (study.compare)
    "fedselect.report.build": 12,
    # fedselect reproduce: runs comparisons and sweeps and judges them against the papers
    "fedselect.repro": 13,
    # the faces: the command line and what it prints, the Python API, Flower's own entry points
    # (ServerApp, strategy, runs on a given grid, deployments)
    "fedselect.cli": 14,
    "fedselect.api": 14,
    "fedselect.flower": 14,
}

#: what the top level of the package holds: the public face only
TOP_LEVEL = {"__init__.py", "api.py", "registry.py"}


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer(mod: str) -> int:
    best = max((p for p in LAYERS if mod == p or mod.startswith(p + ".")), key=len)
    return LAYERS[best]


def imports(path: Path) -> set[str]:
    """Every fedselect module imported anywhere in the file (function-level imports included)."""
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("fedselect")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fedselect"):
            out.add(node.module)
    return out


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}
WRITTEN = {m: {i for i in imports(p) if i != m} for m, p in MODULES.items()}


def plugin_modules(reg) -> set[str]:
    """The modules a registry imports by name at run time, from its declarations (nothing is
    imported here): its package (every module of it, or the module itself), and the module of
    each declared built-in."""
    pkg = {m for m in MODULES if reg.package and (m == reg.package or m.startswith(reg.package + "."))}
    return pkg | {path.partition(":")[0] for path in reg.declared.values()}


#: kind of :data:`fedselect.registry.REGISTRIES` -> the modules that look its components up by name
DRIVERS = {
    "selectors": {"fedselect.experiment.resolve", "fedselect.experiment.simulation", "fedselect.report.runs"},
    "algorithms": {"fedselect.experiment.resolve", "fedselect.experiment.simulation", "fedselect.report.runs"},
    "models": {"fedselect.world.models", "fedselect.fl.local.pool"},
    "datasets": {"fedselect.world.data.catalog"},
    "partitioners": {"fedselect.world.data.partition"},
    "engines": {"fedselect.experiment.run", "fedselect.cli.console"},  # play(): engine.session, session.connect
}


def _drivers() -> dict[str, set[str]]:
    from fedselect.registry import REGISTRIES

    out: dict[str, set[str]] = {}
    for kind, reg in REGISTRIES.items():
        for m in DRIVERS[kind]:
            out.setdefault(m, set()).update(plugin_modules(reg) - {m})
    return out


#: module -> the plug-ins it drives (loaded by name through a registry): edges of the graph too
PLUGIN_DRIVERS = _drivers()
GRAPH = {m: deps | PLUGIN_DRIVERS.get(m, set()) for m, deps in WRITTEN.items()}


def closure(m: str) -> set[str]:
    """Every fedselect module ``m`` imports, directly or through others (written imports)."""
    seen, todo = set(), [m]
    while todo:
        for d in WRITTEN.get(todo.pop(), ()):
            if d in MODULES and d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def test_every_module_has_a_layer():
    unplaced = [
        m
        for m in MODULES
        if m != "fedselect" and max((p for p in LAYERS if m == p or m.startswith(p + ".")), key=len) == "fedselect"
    ]
    assert unplaced == [], f"modules without a layer in LAYERS (add them): {unplaced}"


def test_imports_point_down_only():
    upward = [
        f"{m} (layer {layer(m)}) imports {i} (layer {layer(i)})"
        for m, deps in GRAPH.items()
        for i in deps
        if m != "fedselect" and layer(i) > layer(m)
    ]
    assert upward == []


def test_no_import_cycles():
    # package __init__ modules run when a submodule is imported: an edge to the package too
    def deps(m: str) -> set[str]:
        out = set()
        for i in GRAPH.get(m, ()):
            if i in MODULES:
                out.add(i)
            parent = i.rsplit(".", 1)[0]
            if parent != m and parent in MODULES and parent != "fedselect":
                out.add(parent)
        return out

    state: dict[str, int] = {}
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(deps(m)):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d) :] + [d] if d in stack else stack + [d])
            elif d not in state:
                visit(d, stack + [d])
        state[m] = 2

    for m in sorted(MODULES):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def test_the_top_level_is_the_public_face():
    """``src/fedselect`` holds the public face (the lazy API of ``__init__``, ``api``, the
    registry) and the layers' packages; every other module lives in the package of its layer."""
    files = {p.name for p in SRC.iterdir() if p.is_file() and p.suffix == ".py"}
    assert files == TOP_LEVEL
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    assert packages == {m.split(".")[1] for m in LAYERS if m.count(".") >= 1 and (SRC / m.split(".")[1]).is_dir()}


def test_every_registry_kind_has_its_drivers():
    """Every kind of the one registry names the modules that look it up (its plug-in edges)."""
    from fedselect.registry import REGISTRIES

    assert set(DRIVERS) == set(REGISTRIES)
    assert all(m in MODULES for ms in DRIVERS.values() for m in ms)


def test_the_plugin_edges_are_seen():
    """The engines, selectors and algorithms loaded by name are edges of the graph: the test
    would see an engine that imported the experiment layer (the loop it once had)."""
    assert {"fedselect.engines.simulator", "fedselect.flower.engine"} <= GRAPH["fedselect.experiment.run"]
    assert "fedselect.selectors.oort" in GRAPH["fedselect.experiment.simulation"]
    assert "fedselect.algorithms.fedprox" in GRAPH["fedselect.experiment.simulation"]


def test_no_engine_imports_the_experiment_layer():
    """An engine gives transports (and a session); it never runs an experiment itself: none of
    the modules an engine imports, directly or not, is the experiment layer that plays runs
    (:mod:`fedselect.experiment.run`, run files, checkpoints) or above. It reads the resolved
    config and builds its trainer with the plan side of that package (``experiment.resolve``,
    ``experiment.simulation``), which sits below the engines."""
    from fedselect.registry import ENGINES

    engines = plugin_modules(ENGINES)
    assert engines == {"fedselect.engines.simulator", "fedselect.flower.engine"}
    for m in engines:
        above = sorted(d for d in closure(m) | {m} if layer(d) >= layer("fedselect.experiment.run"))
        assert above == [], f"engine module {m} imports the experiment layer or above: {above}"


def test_config_is_a_schema_only():
    assert GRAPH["fedselect.config.schema"] <= {"fedselect.config.fleet", "fedselect.config.sections"}, (
        "config/schema.py imports only its own sections"
    )
    assert GRAPH["fedselect.config.sections"] <= {"fedselect.config.fleet"}, "config/sections.py imports only the fleet sections"
    assert GRAPH["fedselect.config.fleet"] == set(), "config/fleet.py must import no other part of fedselect"
    assert GRAPH["fedselect.config.overrides"] <= {"fedselect.config.schema"}, "config/overrides.py knows only ConfigError"
    assert GRAPH["fedselect.config.load"] <= {"fedselect.config.schema", "fedselect.config.overrides"}, (
        "config/load.py reads files into the schema"
    )
    assert GRAPH["fedselect.world.data.datasets"] <= {"fedselect.registry"}, "the data registry imports no loader"
    assert all(
        d.startswith(("fedselect.config", "fedselect.common", "fedselect.registry"))
        for m, deps in GRAPH.items()
        if m.startswith("fedselect.config")
        for d in deps
    )


def test_kernels_know_no_loop():
    for m, deps in GRAPH.items():
        if m.startswith("fedselect.kernels"):
            assert not {
                d
                for d in deps
                if d.startswith(
                    (
                        "fedselect.fl",
                        "fedselect.world.federation",
                        "fedselect.selectors",
                        "fedselect.algorithms",
                        "fedselect.config",
                    )
                )
            }, m


def test_the_promised_components_are_registered():
    from fedselect.algorithms import ALGORITHMS
    from fedselect.config.presets import PRESETS
    from fedselect.selectors import SELECTORS

    assert set(SELECTORS.builtin_names()) >= {
        "random",
        "all",
        "flashrl",
        "favor",
        "secretary",
        "online_random",
        "offline_best",
        "cefl_leaders",
        "oort",
        "power_of_choice",
        "fastest",
    }
    assert set(ALGORITHMS.builtin_names()) >= {
        "fedavg",
        "fedper",
        "cefl",
        "individual",
        "fedprox",
        "fedadam",
        "fedyogi",
        "fedadagrad",
        "scaffold",
    }
    assert set(PRESETS) >= {
        "fedavg",
        "full",
        "regular_fl",
        "flashrl",
        "favor",
        "cefl",
        "fedper",
        "individual",
        "budgeted_online",
        "online_random",
        "offline_best",
    }
    for p in PRESETS.values():
        assert p.selector in SELECTORS.builtin_names() and p.algorithm in ALGORITHMS.builtin_names(), p.name


@pytest.mark.parametrize("module", ["selectors", "algorithms"])
def test_one_file_per_component(module):
    """Every registered built-in lives in its own file named after it (shared bases start with _)."""
    from fedselect.algorithms import ALGORITHMS
    from fedselect.selectors import SELECTORS

    reg = SELECTORS if module == "selectors" else ALGORITHMS
    for name in reg.builtin_names():
        assert reg.get(name).__module__ == f"fedselect.{module}.{name}", name
