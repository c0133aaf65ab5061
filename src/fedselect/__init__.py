"""fedselect: client selection for federated learning over heterogeneous fleets.

Python API (imported on first use, so ``import fedselect`` stays cheap)::

    import fedselect
    res = fedselect.run({"method": "flashrl", "rounds": 30})          # -> fedselect.api.RunResult
    res = fedselect.run({"selector": {"name": "oort"}, "algorithm": {"name": "fedper"}})
    cmp = fedselect.compare("configs/selectors-small.yaml", seeds=[0, 1, 2], out="runs/cmp")
    cmp.table, cmp.run_dirs                                          # -> fedselect.api.ComparisonResult

``fedselect.compare`` is also the module :mod:`fedselect.compare` (comparison configs,
``run_comparison``) once that is imported; calling it runs :func:`fedselect.api.compare`.

Your own components (selectors, algorithms, models, data sets, partition schemes) are named
``"package.module:Name"`` in a config, registered with ``fedselect.register_selector`` /
``register_algorithm`` / ``register_model`` / ``register_dataset`` / ``register_partitioner``,
or published under the entry-point group ``fedselect.<kind>s`` (:mod:`fedselect.registry`).

Layers (arrows point down only; docs/architecture.md)::

    cli / api -> compare / sweep / report / plots -> experiment -> engines / runfiles / simulation
        -> resolve -> selectors / algorithms -> fl / kernels -> federation -> data / models / system
        -> config / presets / registry / seeding
"""

import importlib
import sys
import types

__version__ = "0.1.0"

_LAZY = {
    "run": "fedselect.api",
    "resume": "fedselect.api",
    "load_run": "fedselect.api",
    "experiment_config": "fedselect.api",
    "RunResult": "fedselect.api",
    "ComparisonResult": "fedselect.api",
    "Selector": "fedselect.selectors.base",
    "Selection": "fedselect.selectors.base",
    "register_selector": "fedselect.selectors",
    "Algorithm": "fedselect.algorithms.base",
    "register_algorithm": "fedselect.algorithms",
    "register_model": "fedselect.models",
    "register_dataset": "fedselect.data.datasets",
    "register_partitioner": "fedselect.data.partition",
    "Partitioner": "fedselect.data.partition",
    "ArrayDataset": "fedselect.data.datasets",
}

__all__ = ["__version__", "compare", *_LAZY]


class _ComparisonModule(types.ModuleType):
    """The module :mod:`fedselect.compare`, callable: ``fedselect.compare(config, seeds=...,
    out=...)`` is :func:`fedselect.api.compare`. Importing a submodule makes it an attribute of
    its package, so ``fedselect.compare`` names the module once anything has imported it; the
    call then still runs the comparison."""

    def __call__(self, *args, **kwargs):
        return importlib.import_module("fedselect.api").compare(*args, **kwargs)


class _Package(types.ModuleType):
    """This package: its submodule ``compare`` is made callable as it is bound here."""

    def __setattr__(self, name, value):
        if name == "compare" and type(value) is types.ModuleType:
            value.__class__ = _ComparisonModule
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    if name == "compare":  # the module, callable (imported here, bound by the import system)
        return importlib.import_module("fedselect.compare")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fedselect' has no attribute {name!r}")
