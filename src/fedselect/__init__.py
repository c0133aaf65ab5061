"""fedselect: client selection for federated learning over heterogeneous fleets.

Python API (imported on first use, so ``import fedselect`` stays cheap)::

    import fedselect
    res = fedselect.run({"method": "flashrl", "rounds": 30})          # -> fedselect.api.RunResult
    res = fedselect.run({"selector": {"name": "oort"}, "algorithm": {"name": "fedper"}})
    cmp = fedselect.compare("configs/selectors-small.yaml", seeds=[0, 1, 2], out="runs/cmp")
    cmp.table, cmp.run_dirs                                          # -> fedselect.api.ComparisonResult

Your own components (selectors, algorithms, models, data sets, partition schemes) are named
``"package.module:Name"`` in a config, registered with ``fedselect.register_selector`` /
``register_algorithm`` / ``register_model`` / ``register_dataset`` / ``register_partitioner``,
or published under the entry-point group ``fedselect.<kind>s`` (:mod:`fedselect.registry`).

Layers, one package each (arrows point down only; docs/architecture.md)::

    cli / api -> repro -> study -> report -> experiment -> engines / flower
        -> selectors / algorithms -> fl (the round) -> fl.local (local training) -> kernels
        -> world (federation, fleet, models, data) -> config -> common / registry
"""

import importlib

__version__ = "0.1.0"

_LAZY = {
    "run": "fedselect.api",
    "resume": "fedselect.api",
    "load_run": "fedselect.api",
    "experiment_config": "fedselect.api",
    "RunResult": "fedselect.api",
    "ComparisonResult": "fedselect.api",
    "compare": "fedselect.api",
    "Selector": "fedselect.selectors.base",
    "Selection": "fedselect.selectors.base",
    "register_selector": "fedselect.selectors",
    "Algorithm": "fedselect.algorithms.base",
    "register_algorithm": "fedselect.algorithms",
    "register_model": "fedselect.world.models",
    "register_dataset": "fedselect.world.data.datasets",
    "register_partitioner": "fedselect.world.data.partition_schemes.base",
    "Partitioner": "fedselect.world.data.partition_schemes.base",
    "ArrayDataset": "fedselect.world.data.datasets",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fedselect' has no attribute {name!r}")
