"""The rooms of the code base: every import points to the same or a lower layer, the module
import graph has no cycle, and every component the docs promise is registered."""

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
    "fedselect.flower": 9,
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
GRAPH = {m: {i for i in imports(p) if i != m} for m, p in MODULES.items()}


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
