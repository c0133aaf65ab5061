"""Selectors: WHOM to train each round. One file per selector, each a small subclass of
:class:`fedselect.selectors.base.Selector`; :data:`SELECTORS` maps config names to classes.

Users' own selectors need no change to fedselect: name them ``"package.module:ClassName"`` in a
config, decorate them with :func:`register_selector` in a module the user imports, or publish
them under the entry-point group ``fedselect.selectors`` (docs/architecture.md).
"""

from __future__ import annotations

from fedselect.registry import Registry

#: the selector registry (built-ins load on first lookup)
SELECTORS = Registry("selector", __name__, "fedselect.selectors", base="fedselect.selectors.base:Selector")
register_selector = SELECTORS.register
