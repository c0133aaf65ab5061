"""Algorithms: WHAT happens to the selected clients' updates. One file per algorithm, each a
small subclass of :class:`fedselect.algorithms.base.Algorithm`; :data:`ALGORITHMS` maps config
names to classes (users' own: ``"package.module:ClassName"``, :func:`register_algorithm`, or the
entry-point group ``fedselect.algorithms``; docs/architecture.md)."""

from __future__ import annotations

from fedselect.registry import Registry

#: the algorithm registry (built-ins load on first lookup)
ALGORITHMS = Registry("algorithm", __name__, "fedselect.algorithms", base="fedselect.algorithms.base:Algorithm")
register_algorithm = ALGORITHMS.register
