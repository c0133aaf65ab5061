"""Methods: one file per method, each a small subclass of :class:`fedselect.methods.base.Method`
that states only how it differs from FedAvg. The registry maps config names to classes."""

from __future__ import annotations

import importlib
import pkgutil

METHODS: dict[str, type] = {}


def register_method(cls):
    """Class decorator adding a Method subclass under ``cls.name``."""
    METHODS[cls.name] = cls
    return cls


def import_methods() -> None:
    """Import every module of this package so that their decorators fill :data:`METHODS`."""
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
