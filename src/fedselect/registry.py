"""The one registry of fedselect's plug-in kinds: selectors, algorithms, models, data sets,
partition schemes and engines (:data:`REGISTRIES`). Every kind is a :class:`Registry`, and a name
of any kind is looked up, in order, among:

1. components registered with :meth:`Registry.register` / :meth:`Registry.add` (the built-ins
   register themselves when their modules are imported, which happens on the first lookup; a
   user's module can call the decorators too, once it is imported: ``fedselect.register_selector``,
   ``register_algorithm``, ``register_model``, ``register_dataset``, ``register_partitioner``),
   and built-ins *declared* by module path (``declared={"flower": "fedselect.flower.engine:..."}``:
   imported when first looked up, so a built-in of an optional extra costs nothing until used,
   and the edge is a declaration that ``tests/test_architecture.py`` can read, not a string
   hidden in code);
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
    algorithms, partition schemes, engines) or callables registered under a name (model
    factories, data-set loaders).

    Args:
        kind: what is registered (``"selector"``, ``"partition scheme"``), for messages.
        package: the package (every module of it) or module whose import registers the
            built-ins (imported on first lookup).
        group: the entry-point group of third-party components.
        base: ``"module:Class"`` every entry must subclass (checked at lookup); None: every
            entry must be callable.
        builtin: module prefix of the built-ins (default ``package``), for :meth:`builtin_names`.
        declared: built-ins named by ``"module:Name"`` path, imported when first looked up
            (``package`` may then be None: nothing to import beforehand).
        needs: per declared name, what its import needs when it fails (an optional extra and how
            to install it), for the error message.
    """

    def __init__(
        self,
        kind: str,
        package: str | None,
        group: str,
        base: str | None = None,
        builtin: str | None = None,
        declared: dict[str, str] | None = None,
        needs: dict[str, str] | None = None,
    ):
        self.kind, self.package, self.group, self._base = kind, package, group, base
        self._builtin = builtin or package or ""
        self._path_form = "package.module:ClassName" if base else "package.module:Name"
        self._classes: dict[str, Any] = {}
        self._loaded = False
        #: built-ins declared by module path (name -> ``"module:Name"``), imported on first lookup
        self.declared: dict[str, str] = dict(declared or {})
        self._needs = dict(needs or {})

    @property
    def path_form(self) -> str:
        """How a user's own component is named: ``"package.module:ClassName"`` (a kind with a
        base class) or ``"package.module:Name"``."""
        return self._path_form

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
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(f"a {self.kind} name must be a non-empty string without ':', got {name!r}")
        other = self._classes.get(name)
        if other is not None and other is not obj and _where(other) != _where(obj):
            raise ValueError(f"{self.kind} name {name!r} is already taken by {'.'.join(_where(other))}")
        self._classes[name] = obj
        return obj

    def _load_builtins(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        if self.package is None:  # every built-in is declared by path
            return
        pkg = importlib.import_module(self.package)
        for info in pkgutil.iter_modules(getattr(pkg, "__path__", [])):  # a module has no submodules
            importlib.import_module(f"{self.package}.{info.name}")

    def _entry_points(self) -> dict[str, Any]:
        try:
            return {ep.name: ep for ep in metadata.entry_points(group=self.group)}
        except Exception:  # a broken third-party distribution must not break the built-ins
            return {}

    def names(self) -> list[str]:
        """Known names: registered, declared and entry points."""
        self._load_builtins()
        return sorted(set(self._classes) | set(self.declared) | set(self._entry_points()))

    def builtin_names(self) -> list[str]:
        """Names registered or declared by fedselect's own modules (a declared one is not imported)."""
        self._load_builtins()
        p = self._builtin
        inside = lambda module: module == p or module.startswith(p + ".")  # noqa: E731
        declared = {n for n, path in self.declared.items() if inside(path.partition(":")[0])}
        return sorted(declared | {n for n, c in self._classes.items() if inside(c.__module__)})

    def get(self, name: str) -> Any:
        """The component called ``name`` (module docstring for the lookup order).

        Raises:
            ValueError: unknown name, a module or object that cannot be imported, or an object
                that is not a subclass of the registry's base (not callable, without a base).
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}")
        self._load_builtins()
        if name in self._classes:
            return self._classes[name]
        if name in self.declared:
            cls = self._import_declared(name)
        elif ":" in name:
            cls = self._import(name)
        else:
            ep = self._entry_points().get(name)
            if ep is None:
                raise ValueError(f"unknown {self.kind} {name!r}; allowed: {self.names()} (or '{self._path_form}' for your own)")
            try:
                cls = ep.load()
            except Exception as e:
                raise ValueError(
                    f"{self.kind} {name!r}: entry point {ep.value!r} cannot be loaded ({type(e).__name__}: {e})"
                ) from None
        self._check(name, cls)
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
        if name not in self._classes or module == "__main__" or "<locals>" in qualname:
            return name
        if module == p or module.startswith(p + "."):
            return name
        return f"{module}:{qualname}"

    def _import_declared(self, name: str) -> Any:
        """The declared built-in ``name``, imported and kept (ValueError saying what it needs when
        its import fails)."""
        try:
            obj = self._import(self.declared[name])
        except ValueError as e:
            need = self._needs.get(name)
            if need is None:
                raise
            raise ValueError(f"{self.kind} {name!r} needs {need} ({e})") from None
        self._classes[name] = obj
        return obj

    def _import(self, path: str) -> Any:
        module_name, _, attr = path.partition(":")
        if not module_name or not attr:
            raise ValueError(f"{self.kind} {path!r}: expected '{self._path_form}'")
        if "" not in sys.path and "." not in sys.path:  # like `python -m`: the working directory counts
            sys.path.append("")
        try:
            module = importlib.import_module(module_name)
        except Exception as e:
            hint = (
                f"; it must be installed, on PYTHONPATH or in the working directory ({os.getcwd()})"
                if isinstance(e, ModuleNotFoundError)
                else ""
            )
            raise ValueError(
                f"{self.kind} {path!r}: cannot import module {module_name!r} ({type(e).__name__}: {e}){hint}"
            ) from None
        obj: Any = module
        for part in attr.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                raise ValueError(f"{self.kind} {path!r}: module {module_name!r} has no attribute {attr!r}")
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


#: WHOM to train each round (:class:`fedselect.selectors.base.Selector`; ``selector.name``)
SELECTORS = Registry("selector", "fedselect.selectors", "fedselect.selectors", base="fedselect.selectors.base:Selector")
#: WHAT happens to the selected clients' updates (:class:`fedselect.algorithms.base.Algorithm`;
#: ``algorithm.name``)
ALGORITHMS = Registry("algorithm", "fedselect.algorithms", "fedselect.algorithms", base="fedselect.algorithms.base:Algorithm")
#: model factories ``(input_shape, num_classes, **options) -> nn.Module`` (``model.name``;
#: :func:`fedselect.world.models.register_model`)
MODELS = Registry("model", "fedselect.world.models", "fedselect.models")
#: data-set loaders ``(seed=int, **options) -> (train, test)`` (``data.dataset``; the built-ins:
#: the loaders :mod:`fedselect.world.data.catalog` imports; :func:`fedselect.world.data.datasets.register_dataset`)
DATASETS = Registry("dataset", "fedselect.world.data.catalog", "fedselect.datasets", builtin="fedselect.world.data")
#: partition schemes (:class:`fedselect.world.data.partition_schemes.base.Partitioner`; ``data.partition.scheme``;
#: the built-ins: the modules of :mod:`fedselect.world.data.partition_schemes`)
PARTITIONERS = Registry(
    "partition scheme",
    "fedselect.world.data.partition_schemes",
    "fedselect.partitioners",
    base="fedselect.world.data.partition_schemes.base:Partitioner",
)
#: the engines: where the rounds of a run execute (:mod:`fedselect.engines`; docs/architecture.md,
#: "Adding an engine"). The built-ins are declared by module path, so nothing is imported until an
#: engine is looked up, and Flower (an optional extra) only when a run asks for it; users' own
#: engines are named ``"package.module:Name"``, registered with ``@ENGINES.register`` or published
#: under the entry-point group ``fedselect.engines``
ENGINES = Registry(
    "engine",
    None,
    "fedselect.engines",
    base="fedselect.engines:Engine",
    builtin="fedselect",
    declared={"simulator": "fedselect.engines.simulator:SimulatorEngine", "flower": "fedselect.flower.engine:FlowerEngine"},
    needs={"flower": "Flower: install the optional extra with `pip install fedselect[flower]` (or `make install-flower`)"},
)

#: every kind, by the suffix of its entry-point group (``fedselect.<key>``), in the order
#: ``fedselect list`` shows them
REGISTRIES: dict[str, Registry] = {
    r.group.removeprefix("fedselect."): r for r in (SELECTORS, ALGORITHMS, DATASETS, PARTITIONERS, MODELS, ENGINES)
}
