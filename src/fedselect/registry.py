"""The one registry of fedselect's plug-in kinds: selectors, algorithms, models, data sets,
partition schemes and engines (:data:`REGISTRIES`). Every kind is a :class:`Registry`, and a name
of any kind is looked up, in order, among:

1. components registered with :meth:`Registry.register` / :meth:`Registry.add` (the built-ins
   register themselves when their modules are imported, which happens on the first lookup; a
   user's module can call the decorators too, once it is imported: ``fedselect.register_selector``,
   ``register_algorithm``, ``register_model``, ``register_dataset``, ``register_partitioner``),
   and built-ins named by :meth:`Registry.add_lazy` (``module:attr``, imported only when looked up:
   the engines, whose modules need optional extras);
2. entry points of the kind's group (``[project.entry-points."fedselect.selectors"]`` in a
   user package's ``pyproject.toml``: ``myname = "mypkg.module:MySelector"``; the groups are
   ``fedselect.`` + the keys of :data:`REGISTRIES`);
3. ``"package.module:Name"``: the object is imported from the user's module (which must be
   importable: installed, on ``PYTHONPATH`` / the current directory).

Every lookup error names the kind, what was asked for and the allowed names. This module imports
nothing of fedselect: each kind names the package that registers its built-ins, imported on the
first lookup, so ``fedselect --help`` and config validation import only the kinds they use.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from importlib import metadata
from typing import Any


class Registry:
    """The components of one kind by name: classes with a class attribute ``name`` (selectors,
    algorithms, partition schemes) or callables registered under a name (model factories,
    data-set loaders, engines).

    Args:
        kind: what is registered (``"selector"``, ``"partition scheme"``), for messages.
        package: the package (every module of it) or module whose import registers the
            built-ins (imported on first lookup); None: the built-ins are all :meth:`add_lazy`.
        group: the entry-point group of third-party components (``"fedselect.selectors"``).
        base: ``"module:Class"`` every entry must subclass (checked at lookup); None: every
            entry must be callable.
        builtin: module prefix of the built-ins (default ``package``), for :meth:`builtin_names`.
    """

    def __init__(self, kind: str, package: str | None, group: str, base: str | None = None, builtin: str | None = None):
        self.kind, self.package, self.group, self._base = kind, package, group, base
        self._builtin = builtin or package or "fedselect"
        self.path_form = "package.module:ClassName" if base else "package.module:Name"
        self._classes: dict[str, Any] = {}
        self._lazy: dict[str, tuple[str, str, str | None]] = {}  # name -> (module:attr, summary, needs)
        self._loaded = package is None

    def register(self, cls: type) -> type:
        """Class decorator: add ``cls`` under ``cls.name``.

        Raises:
            ValueError: no ``name``, a name with ``:`` (reserved for module paths), or another
                class already under that name.
        """
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(
                f"{self.kind} class {cls.__qualname__} needs a class attribute `name` (a non-empty string without ':')"
            )
        return self.add(name, cls)

    def add(self, name: str, obj: Any) -> Any:
        """Add ``obj`` under ``name`` and return it (registering the same definition again, as
        a re-imported module does, is allowed).

        Raises:
            ValueError: an empty name, a name with ``:`` (reserved for module paths), or
                another object already under that name.
        """
        self._check_name(name)
        other = self._classes.get(name)
        if other is not None and other is not obj and _where(other) != _where(obj):
            raise ValueError(f"{self.kind} name {name!r} is already taken by {'.'.join(_where(other))}")
        if name in self._lazy and _where(obj) != _split(self._lazy[name][0]):
            raise ValueError(f"{self.kind} name {name!r} is already taken by {self._lazy[name][0]}")
        self._classes[name] = obj
        return obj

    def add_lazy(self, name: str, path: str, summary: str, needs: str | None = None) -> None:
        """Name the component ``path`` (``"module:attr"``) ``name`` without importing it: it is
        imported on its first :meth:`get`, so listing the names (``fedselect list``, the CLI's
        choices) imports nothing of it.

        Args:
            summary: one line saying what it is (what ``fedselect list`` shows without importing).
            needs: what to install when its module cannot be imported (an optional extra, e.g.
                ``"Flower: install the optional extra with `pip install fedselect[flower]`"``);
                the lookup then raises ImportError saying so.

        Raises:
            ValueError: a bad name (as :meth:`add`), a path without ``module:attr``, or a name
                already taken.
        """
        self._check_name(name)
        if not all(_split(path)):
            raise ValueError(f"{self.kind} {name!r}: expected 'module:attr', got {path!r}")
        if name in self._classes or self._lazy.get(name, (path,))[0] != path:
            raise ValueError(f"{self.kind} name {name!r} is already taken")
        self._lazy[name] = (path, summary, needs)

    def _check_name(self, name: str) -> None:
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(f"a {self.kind} name must be a non-empty string without ':', got {name!r}")

    def _load_builtins(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        pkg = importlib.import_module(self.package)
        for info in pkgutil.iter_modules(getattr(pkg, "__path__", [])):  # a module has no submodules
            importlib.import_module(f"{self.package}.{info.name}")

    def _entry_points(self) -> dict[str, Any]:
        try:
            return {ep.name: ep for ep in metadata.entry_points(group=self.group)}
        except Exception:  # a broken third-party distribution must not break the built-ins
            return {}

    def names(self) -> list[str]:
        """Known names: registered, lazy built-ins and entry points."""
        self._load_builtins()
        return sorted(set(self._classes) | set(self._lazy) | set(self._entry_points()))

    def builtin_names(self) -> list[str]:
        """Names registered by fedselect's own modules (lazy ones included, not imported)."""
        self._load_builtins()
        p = self._builtin
        mine = {n for n, c in self._classes.items() if c.__module__ == p or c.__module__.startswith(p + ".")}
        return sorted(mine | set(self._lazy))

    def summary(self, name: str) -> str | None:
        """The one-line summary a lazy built-in was added with (None for any other name), read
        without importing it."""
        return self._lazy[name][1] if name in self._lazy else None

    def get(self, name: str) -> Any:
        """The component called ``name`` (module docstring for the lookup order).

        Raises:
            ValueError: unknown name (names the kind and the allowed names), a module or object
                that cannot be imported, or an object that is not a subclass of the registry's
                base (not callable, without a base).
            ImportError: a lazy built-in whose optional extra is not installed (says what to install).
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}")
        self._load_builtins()
        if name in self._classes:
            return self._classes[name]
        if name in self._lazy:
            path, _, needs = self._lazy[name]
            cls = self._import(path, needs=needs, name=name)
        elif ":" in name:
            cls = self._import(name)
        else:
            ep = self._entry_points().get(name)
            if ep is None:
                raise ValueError(f"unknown {self.kind} {name!r}; allowed: {self.names()} (or '{self.path_form}' for your own)")
            try:
                cls = ep.load()
            except Exception as e:
                raise ValueError(
                    f"{self.kind} {name!r}: entry point {ep.value!r} cannot be loaded ({type(e).__name__}: {e})"
                ) from None
        self._check(name, cls)
        if name in self._lazy:
            self._classes[name] = cls
        return cls

    def path_of(self, name: str) -> str:
        """A name of the same component that another process resolves without first importing
        the module that registered it (worker processes, Ray tasks): ``"module:qualname"`` for a
        component registered by a user's importable module; ``name`` itself for built-ins,
        entry points, module paths and components defined in ``__main__`` or inside a function.

        Raises:
            ValueError: as :meth:`get`.
        """
        obj = self.get(name)
        module, qualname = _where(obj)
        p = self._builtin
        if name not in self._classes or name in self._lazy or module == "__main__" or "<locals>" in qualname:
            return name
        if module == p or module.startswith(p + "."):
            return name
        return f"{module}:{qualname}"

    def _import(self, path: str, needs: str | None = None, name: str | None = None) -> Any:
        module_name, attr = _split(path)
        what = f"{self.kind} {path!r}" if name is None else f"{self.kind} {name!r} ({path})"
        if not module_name or not attr:
            raise ValueError(f"{self.kind} {path!r}: expected '{self.path_form}'")
        if "" not in sys.path and "." not in sys.path:  # like `python -m`: the working directory counts
            sys.path.append("")
        try:
            module = importlib.import_module(module_name)
        except Exception as e:
            if needs is not None and isinstance(e, ImportError):
                raise ImportError(f"{self.kind} {name!r} needs {needs} ({e})") from None
            hint = (
                f"; it must be installed, on PYTHONPATH or in the working directory ({os.getcwd()})"
                if isinstance(e, ModuleNotFoundError)
                else ""
            )
            raise ValueError(f"{what}: cannot import module {module_name!r} ({type(e).__name__}: {e}){hint}") from None
        obj: Any = module
        for part in attr.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                raise ValueError(f"{what}: module {module_name!r} has no attribute {attr!r}")
        return obj

    def _check(self, name: str, cls: Any) -> None:
        if self._base is None:
            if not callable(cls):
                raise ValueError(f"{self.kind} {name!r} is {cls!r}, which is not callable")
            return
        mod, _, attr = self._base.partition(":")
        base = getattr(importlib.import_module(mod), attr)
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise ValueError(f"{self.kind} {name!r} is {cls!r}, not a subclass of {base.__module__}.{base.__qualname__}")


def _where(obj: Any) -> tuple[str, str]:
    """``(module, qualname)`` of a registered object (what identifies its definition)."""
    return getattr(obj, "__module__", "") or "", getattr(obj, "__qualname__", repr(obj))


def _split(path: str) -> tuple[str, str]:
    """``("module", "attr")`` of ``"module:attr"``."""
    module, _, attr = path.partition(":")
    return module, attr


#: WHOM to train each round (:class:`fedselect.selectors.base.Selector`; ``selector.name``)
SELECTORS = Registry("selector", "fedselect.selectors", "fedselect.selectors", base="fedselect.selectors.base:Selector")
#: WHAT happens to the selected clients' updates (:class:`fedselect.algorithms.base.Algorithm`;
#: ``algorithm.name``)
ALGORITHMS = Registry("algorithm", "fedselect.algorithms", "fedselect.algorithms", base="fedselect.algorithms.base:Algorithm")
#: model factories ``(input_shape, num_classes, **options) -> nn.Module`` (``model.name``;
#: :func:`fedselect.models.register_model`)
MODELS = Registry("model", "fedselect.models", "fedselect.models")
#: data-set loaders ``(seed=int, **options) -> (train, test)`` (``data.dataset``; the built-ins:
#: the loaders :mod:`fedselect.data.catalog` imports; :func:`fedselect.data.datasets.register_dataset`)
DATASETS = Registry("dataset", "fedselect.data.catalog", "fedselect.datasets", builtin="fedselect.data")
#: partition schemes (:class:`fedselect.data.partition.Partitioner`; ``data.partition.scheme``)
PARTITIONERS = Registry(
    "partition scheme", "fedselect.data.partition", "fedselect.partitioners", base="fedselect.data.partition:Partitioner"
)
#: where the rounds run (``engine``): a function with the signature of
#: :func:`fedselect.experiment.run_experiment`, imported on first use (Flower is an optional extra)
ENGINES = Registry("engine", None, "fedselect.engines")
ENGINES.add_lazy("simulator", "fedselect.experiment:run_on_simulator", "this process and its worker pool (the reference engine)")
ENGINES.add_lazy(
    "flower",
    "fedselect.flower.engine:run_experiment",
    "Flower's simulation engine, one SuperNode per client (docs/flower.md)",
    needs="Flower: install the optional extra with `pip install fedselect[flower]` (or `make install-flower`)",
)

#: every kind, by the suffix of its entry-point group (``fedselect.<key>``), in the order
#: ``fedselect list`` shows them
REGISTRIES: dict[str, Registry] = {
    r.group.removeprefix("fedselect."): r for r in (SELECTORS, ALGORITHMS, DATASETS, PARTITIONERS, MODELS, ENGINES)
}
