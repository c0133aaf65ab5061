"""A safe unpickler for data files: only the globals a data file needs are resolved.

CIFAR-10's "python version" batches and FedScale's client maps are pickles. A pickle can name
any global and so run any code; :class:`SafeUnpickler` resolves only an allowed list
(:data:`CIFAR_GLOBALS` by default: NumPy's array reconstruction) and refuses every other global
with a :class:`~fedselect.world.data.file_errors.DataFileError` naming the file and the global,
before anything is called. :func:`safe_pickle_load` reads a file with it (any failure names the
file) and reports the read to :func:`~fedselect.world.data.provenance.note_read`.
"""

from __future__ import annotations

import io
import pickle
import sys
from pathlib import Path
from typing import Any

from fedselect.world.data.file_errors import DataFileError, naming_file
from fedselect.world.data.provenance import note_read

__all__ = ["CIFAR_GLOBALS", "SafeUnpickler", "global_exists", "safe_pickle_load"]


#: the globals a CIFAR-10 "python version" batch needs: NumPy's array reconstruction, and
#: ``_codecs.encode`` (how a protocol-2 pickle written by Python 3 stores ``bytes``; it only
#: turns a string into bytes)
CIFAR_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }
)


def global_exists(module: str, name: str) -> bool:
    """Whether ``module.name`` (``name`` may be dotted) is an attribute of a module already
    imported, as a pickle's global is written (``posix``, ``system``). Nothing is imported to
    find out: a name of a module not loaded counts as not existing. A refused global that does
    not exist is damage to the file, not a request for code."""
    head, _, rest = module.partition(".")
    parts = [head, *(rest.split(".") if rest else []), *name.split(".")]
    for i in range(len(parts) - 1, 0, -1):  # the longest imported module prefix
        obj: Any = sys.modules.get(".".join(parts[:i]))
        if obj is None:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part, None)
            if obj is None:
                return False
        return True
    return False


class SafeUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the globals in ``allowed`` (module, name) and refuses
    every other one with a :class:`DataFileError` naming the file and the global, before
    anything is called. Plain containers, numbers, strings and bytes need no global."""

    def __init__(self, fh, path: str | Path, allowed: frozenset[tuple[str, str]] = CIFAR_GLOBALS, **kwargs):
        super().__init__(fh, **kwargs)
        self.path, self.allowed = Path(path), allowed

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.allowed:
            if not global_exists(module, name):  # damage: a flipped byte in a module or class name
                raise DataFileError(self.path, f"corrupted (the pickle names {module}.{name}, which does not exist)")
            raise DataFileError(
                self.path,
                f"refused to load: the pickle asks for {module}.{name}, which a data file never needs "
                f"(allowed: {sorted(f'{m}.{n}' for m, n in self.allowed)}); nothing in the file was run",
            )
        if module == "numpy.core.multiarray":  # NumPy 2 moved it; avoid the deprecated alias
            import numpy._core.multiarray as ma  # noqa: F401

            return getattr(ma, name)
        return super().find_class(module, name)


def safe_pickle_load(
    path: str | Path, allowed: frozenset[tuple[str, str]] = CIFAR_GLOBALS, what: str = "pickle", **kwargs
) -> Any:
    """Unpickle ``path`` with :class:`SafeUnpickler` (``kwargs``, e.g. ``encoding="bytes"``,
    go to the unpickler). Any failure (truncation, corruption, a refused global) is a
    :class:`DataFileError` naming the file."""
    p = Path(path)
    with naming_file(p, what), open(p, "rb") as fh:
        data = fh.read()
    note_read(p, data)
    with naming_file(p, what):
        return SafeUnpickler(io.BytesIO(data), p, allowed, **kwargs).load()
