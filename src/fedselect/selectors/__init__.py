"""Selectors: WHOM to train each round. One file per selector, each a small subclass of
:class:`fedselect.selectors.base.Selector`; :data:`SELECTORS` (the selector kind of
:mod:`fedselect.registry`) maps config names to classes.

Users' own selectors need no change to fedselect: name them ``"package.module:ClassName"`` in a
config, decorate them with :func:`register_selector` in a module the user imports, or publish
them under the entry-point group ``fedselect.selectors`` (docs/architecture.md).
"""

from __future__ import annotations

from fedselect.registry import SELECTORS

__all__ = ["SELECTORS", "register_selector"]

#: class decorator registering a selector under its ``name`` (:meth:`fedselect.registry.Registry.register`)
register_selector = SELECTORS.register
