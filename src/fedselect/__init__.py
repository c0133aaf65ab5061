"""fedselect: client selection for federated learning over heterogeneous fleets.

Python API (imported on first use, so ``import fedselect`` stays cheap)::

    import fedselect
    res = fedselect.run({"method": "flashrl", "rounds": 30})          # -> fedselect.api.RunResult
    res = fedselect.run({"selector": {"name": "oort"}, "algorithm": {"name": "fedper"}})

Layers (arrows point down only; docs/architecture.md)::

    cli -> compare / sweep / report / plots -> experiment / api -> runner / runfiles / simulation
        -> resolve -> selectors / algorithms -> fl / kernels -> federation -> data / models / system
        -> config / presets / registry / seeding
"""

__version__ = "0.1.0"

_LAZY = {
    "run": "fedselect.api",
    "resume": "fedselect.api",
    "load_run": "fedselect.api",
    "experiment_config": "fedselect.api",
    "RunResult": "fedselect.api",
    "Selector": "fedselect.selectors.base",
    "Selection": "fedselect.selectors.base",
    "register_selector": "fedselect.selectors",
    "Algorithm": "fedselect.algorithms.base",
    "register_algorithm": "fedselect.algorithms",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fedselect' has no attribute {name!r}")
