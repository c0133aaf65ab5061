"""Name -> class registries for pluggable components (selectors, algorithms).

A name is looked up, in order, among:

1. classes registered with :meth:`Registry.register` (the built-ins register themselves when
   their package's modules are imported, which happens on the first lookup; a user's module
   can call the decorator too, once it is imported);
2. entry points of the registry's group (``[project.entry-points."fedselect.selectors"]`` in a
   user package's ``pyproject.toml``: ``myname = "mypkg.module:MySelector"``);
3. ``"package.module:ClassName"``: the class is imported from the user's module (which must be
   importable: installed, or on ``PYTHONPATH`` / the current directory).

Every lookup error names what was asked for and lists the known names.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from importlib import metadata
from typing import Any


class Registry:
    """A registry of component classes, each with a class attribute ``name``.

    Args:
        kind: what is registered (``"selector"``), for messages.
        package: the package whose modules hold the built-ins (imported on first lookup).
        group: the entry-point group of third-party components.
        base: ``"module:Class"`` every class must subclass (checked at lookup).
    """

    def __init__(self, kind: str, package: str, group: str, base: str):
        self.kind, self.package, self.group, self._base = kind, package, group, base
        self._classes: dict[str, type] = {}
        self._loaded = False

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
        other = self._classes.get(name)
        if (
            other is not None
            and other is not cls
            and (other.__module__, other.__qualname__) != (cls.__module__, cls.__qualname__)
        ):
            raise ValueError(f"{self.kind} name {name!r} is already taken by {other.__module__}.{other.__qualname__}")
        self._classes[name] = cls
        return cls

    def _load_builtins(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        pkg = importlib.import_module(self.package)
        for info in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"{self.package}.{info.name}")

    def _entry_points(self) -> dict[str, Any]:
        try:
            return {ep.name: ep for ep in metadata.entry_points(group=self.group)}
        except Exception:  # a broken third-party distribution must not break the built-ins
            return {}

    def names(self) -> list[str]:
        """Known names: registered and entry points."""
        self._load_builtins()
        return sorted(set(self._classes) | set(self._entry_points()))

    def builtin_names(self) -> list[str]:
        """Names registered by fedselect's own modules."""
        self._load_builtins()
        return sorted(n for n, c in self._classes.items() if c.__module__.startswith(self.package + "."))

    def get(self, name: str) -> type:
        """The class called ``name`` (module docstring for the lookup order).

        Raises:
            ValueError: unknown name, a module or class that cannot be imported, or a class
                that is not a subclass of the registry's base.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}")
        self._load_builtins()
        if name in self._classes:
            return self._classes[name]
        if ":" in name:
            cls = self._import(name)
        else:
            ep = self._entry_points().get(name)
            if ep is None:
                raise ValueError(
                    f"unknown {self.kind} {name!r}; allowed: {self.names()} (or 'package.module:ClassName' for your own)"
                )
            try:
                cls = ep.load()
            except Exception as e:
                raise ValueError(
                    f"{self.kind} {name!r}: entry point {ep.value!r} cannot be loaded ({type(e).__name__}: {e})"
                ) from None
        self._check(name, cls)
        return cls

    def _import(self, path: str) -> type:
        module_name, _, attr = path.partition(":")
        if not module_name or not attr:
            raise ValueError(f"{self.kind} {path!r}: expected 'package.module:ClassName'")
        if "" not in sys.path and "." not in sys.path:  # like `python -m`: the working directory counts
            sys.path.append("")
        try:
            module = importlib.import_module(module_name)
        except Exception as e:
            raise ValueError(f"{self.kind} {path!r}: cannot import module {module_name!r} ({type(e).__name__}: {e})") from None
        obj: Any = module
        for part in attr.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                raise ValueError(f"{self.kind} {path!r}: module {module_name!r} has no attribute {attr!r}")
        return obj

    def _check(self, name: str, cls: Any) -> None:
        mod, _, attr = self._base.partition(":")
        base = getattr(importlib.import_module(mod), attr)
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise ValueError(f"{self.kind} {name!r} is {cls!r}, not a subclass of {base.__module__}.{base.__qualname__}")
