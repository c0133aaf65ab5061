"""``fedselect list``: the components a config can name (presets, selectors, algorithms, data
sets, models), with their options, then the fleet settings and the partition schemes."""

from __future__ import annotations

from fedselect.cli import console as ui


def list_components() -> None:
    """List the method presets, selectors, algorithms, data sets and models, with their options
    (defaults), then the fleet settings and the partition schemes.

    A config names a preset (`method: NAME`) or a selector and an algorithm
    (`selector: {name, options}`, `algorithm: {name, options}`), a data set
    (`data: {dataset, options}`) and a model (`model: {name, options}`); your own are named
    `package.module:Name`. docs/selectors.md and docs/architecture.md describe them.
    """
    ui.print_components()
