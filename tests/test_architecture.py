"""The rooms of the code base: every import points to the same or a lower layer, the module
import graph has no cycle, and every component the docs promise is registered.

The graph holds the imports written in the code (function-level ones included) and the edges of
the plug-ins that registries load by name at run time (:data:`PLUGIN_DRIVERS`): read from the
registries' declarations, not from ``importlib`` strings, so an engine that called back into the
experiment layer that drives it shows as a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "fedselect"

#: layer of each module prefix (longest prefix wins); lower layers never import higher ones
LAYERS = {
    "fedselect": 0,
    "fedselect.seeding": 0,
    "fedselect.config": 0,
    "fedselect.config_fleet": 0,  # the fleet sections of the schema (config re-exports them)
    "fedselect.contenders": 0,  # the methods of a comparison or sweep: labels, file names, where a problem was given
    "fedselect.presets": 0,
    "fedselect.registry": 0,
    "fedselect.system": 1,
    "fedselect.profile_presets": 1,  # named fleets (system.profiles): the paper's tables, the FLASH-RL authors' fleet
    "fedselect.models": 1,
    "fedselect.data": 1,
    "fedselect.federation": 2,
    "fedselect.fl": 3,
    "fedselect.inputs": 3,  # digests of the input files and of the federation (reads data/federation)
    "fedselect.kernels": 3,
    "fedselect.stats": 3,
    "fedselect.fedscale": 4,  # converters of FedScale fleet files (reads data.files, fl.metrics)
    "fedselect.selectors": 4,
    "fedselect.algorithms": 4,
    "fedselect.resolve": 5,
    "fedselect.simulation": 6,
    "fedselect.engines": 6,  # the engine plug-in interface and the simulator's engine (registry: fedselect.registry.ENGINES)
    "fedselect.runfiles": 6,
    "fedselect.tblog": 6,  # the TensorBoard event files runfiles writes beside metrics.csv
    "fedselect.experiment": 7,
    "fedselect.api": 9,  # the Python API: a face like the command line (runs, comparisons with progress)
    "fedselect.compare": 8,
    "fedselect.sweep": 8,
    "fedselect.sweep_render": 8,  # how a sweep's table reads (cells, table.md, report.html)
    "fedselect.report": 8,
    "fedselect.reproduce": 8,
    "fedselect.repro": 8,  # the parts of fedselect.reproduce (its public face)
    "fedselect.plots": 8,
    "fedselect.html_report": 8,
    "fedselect.tables": 8,
    "fedselect.backends": 8,  # compare and sweep hand their runs to a backend
    "fedselect.flower": 9,  # Flower's front ends: ServerApp, strategy, runs on a given grid, deployments
    # the Flower engine plug-in and its node side: below the experiment layer that drives it
    "fedselect.flower.engine": 6,
    "fedselect.flower.client_app": 6,
    "fedselect.flower.settings": 6,
    "fedselect.flower.transport": 6,
    "fedselect.flower.wire": 6,
    "fedselect.flower.nodes": 6,
    "fedselect.flower.messaging": 6,
    "fedselect.flower.logs": 6,
    "fedselect.flower.shared": 6,
    "fedselect.cli": 9,
    "fedselect.console": 9,  # what the command line prints
}


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
    imported here): every module of its package, and the module of each declared built-in."""
    pkg = {m for m in MODULES if reg.package and m.startswith(reg.package + ".")}
    return pkg | {path.partition(":")[0] for path in reg.declared.values()}


def _drivers() -> dict[str, set[str]]:
    from fedselect.algorithms import ALGORITHMS
    from fedselect.registry import ENGINES
    from fedselect.selectors import SELECTORS

    return {
        "fedselect.experiment": plugin_modules(ENGINES),  # play(): engine.session, session.connect
        "fedselect.simulation": plugin_modules(SELECTORS) | plugin_modules(ALGORITHMS),  # their classes, built per run
    }


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


def test_the_plugin_edges_are_seen():
    """The engines, selectors and algorithms loaded by name are edges of the graph: the test
    would see an engine that imported the experiment layer (the loop it once had)."""
    assert {"fedselect.engines", "fedselect.flower.engine"} <= GRAPH["fedselect.experiment"]
    assert "fedselect.selectors.oort" in GRAPH["fedselect.simulation"]
    assert "fedselect.algorithms.fedprox" in GRAPH["fedselect.simulation"]


def test_no_engine_imports_the_experiment_layer():
    """An engine gives transports (and a session); it never runs an experiment itself: none of
    the modules an engine imports, directly or not, is the experiment layer or above."""
    from fedselect.registry import ENGINES

    engines = plugin_modules(ENGINES)
    assert engines == {"fedselect.engines", "fedselect.flower.engine"}
    for m in engines:
        above = sorted(d for d in closure(m) | {m} if layer(d) >= layer("fedselect.experiment"))
        assert above == [], f"engine module {m} imports the experiment layer or above: {above}"


def test_config_is_a_schema_only():
    assert GRAPH["fedselect.config"] <= {"fedselect.config_fleet"}, "config.py imports only its own fleet sections"
    assert GRAPH["fedselect.config_fleet"] == set(), "config_fleet.py must import no other part of fedselect"
    assert GRAPH["fedselect.data.datasets"] <= {"fedselect.registry"}, "the data registry imports no loader"


def test_kernels_know_no_loop():
    for m, deps in GRAPH.items():
        if m.startswith("fedselect.kernels"):
            assert not {
                d
                for d in deps
                if d.startswith(
                    ("fedselect.fl", "fedselect.federation", "fedselect.selectors", "fedselect.algorithms", "fedselect.config")
                )
            }, m


def test_the_promised_components_are_registered():
    from fedselect.algorithms import ALGORITHMS
    from fedselect.presets import PRESETS
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
