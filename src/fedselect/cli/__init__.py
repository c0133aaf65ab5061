"""Command-line interface: ``fedselect run | compare | report | reproduce | sweep | list``.

This module makes the ``fedselect`` command (the entry point :func:`main`) and registers the
commands, one module per command or group: :mod:`~fedselect.cli.run`, :mod:`~fedselect.cli.study`
(``compare``, ``sweep``), :mod:`~fedselect.cli.report`, :mod:`~fedselect.cli.reproduce` and
:mod:`~fedselect.cli.components` (``list``); the options they share are in
:mod:`fedselect.cli.options`. Every command documents its options in ``--help``. The commands turn
options into config overrides and print; where runs go and which directories are refused is
:mod:`fedselect.api`'s policy (the same for ``fedselect.run``), the progress bars and tables are
:mod:`fedselect.cli.console`'s. Nothing heavy is imported before a command runs, so
``fedselect --help`` stays fast.
"""

from __future__ import annotations

import logging
import sys

import typer

from fedselect.cli import components, report, reproduce, run, study
from fedselect.cli import console as ui

app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    rich_markup_mode=None,
    help="fedselect: client selection for federated learning over heterogeneous fleets "
    "(FLASH-RL, CEFL, budgeted online selection and their baselines).",
)


def _print_version(value: bool) -> None:
    if value:
        from fedselect import __version__

        ui.console.print(f"fedselect {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="print the version of fedselect and exit"
    ),
) -> None:
    """fedselect: client selection for federated learning over heterogeneous fleets."""


# the commands, in the order --help lists them (one module per command or group of commands)
app.command()(run.run)
app.command()(study.compare)
app.command()(report.report)
app.command()(reproduce.reproduce)
app.command()(study.sweep)
app.command("list")(components.list_components)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for h in logging.getLogger().handlers:  # the console shows warnings; run.log gets everything
        h.setLevel(logging.WARNING)
    try:
        app()
    except KeyboardInterrupt:
        ui.console.print("interrupted: results written so far are kept; continue with --resume RUN_DIR")
        sys.exit(130)
