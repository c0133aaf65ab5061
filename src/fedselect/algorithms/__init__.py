"""Algorithms: WHAT happens to the selected clients' updates. One file per algorithm, each a
small subclass of :class:`fedselect.algorithms.base.Algorithm`; :data:`ALGORITHMS` (the
algorithm kind of :mod:`fedselect.registry`) maps config names to classes (users' own:
``"package.module:ClassName"``, :func:`register_algorithm`, or the entry-point group
``fedselect.algorithms``; docs/architecture.md)."""

from __future__ import annotations

from fedselect.registry import ALGORITHMS

__all__ = ["ALGORITHMS", "register_algorithm"]

#: class decorator registering an algorithm under its ``name`` (:meth:`fedselect.registry.Registry.register`)
register_algorithm = ALGORITHMS.register
