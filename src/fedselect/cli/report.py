"""``fedselect report``: the tables, plots and report.html of a comparison, a sweep or a run,
rebuilt from its saved metrics without running anything."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from fedselect.cli import console as ui


def report(
    directory: Path = typer.Argument(
        ..., help="a comparison directory (compare.json), a sweep directory (sweep.json) or a run directory (metrics.csv)"
    ),
    no_plots: bool = typer.Option(False, "--no-plots", help="do not redraw plots/ (report.html embeds the plots already there)"),
    window: Optional[int] = typer.Option(
        None, "--window", min=1, help="k of the 'mean last k' column (default: each run's metrics.summary_window, 10)"
    ),
) -> None:
    """Rebuild table.md, table.csv, paired.csv, plots/ and report.html from saved metrics,
    without re-running anything.

    report.html is one self-contained page (plots embedded, no script): the table with the
    paired 95% intervals, every plot, the paper's figures, each method's resolved config, the
    federation and the wall times. Incomplete runs (interrupted) are reported with the rounds
    they have.
    """
    from fedselect.report.build import build_report
    from fedselect.study.compare import check_comparison_runs
    from fedselect.study.sweep import check_sweep_runs

    try:
        check_comparison_runs(directory)  # never a table that mixes results of different configs
        check_sweep_runs(directory)
        rep = build_report(directory, plots=not no_plots, window=window)
    except (OSError, ValueError) as e:
        ui.fail(e)
    if rep.get("kind") == "sweep":
        ui.print_sweep(rep)
        ui.console.print(
            f"wrote {directory / 'table.md'}, {directory / 'table.csv'}"
            + (f", {len(rep['plots'])} plots in {directory / 'plots'}" if rep["plots"] else "")
            + f" and {directory / 'report.html'}",
            highlight=False,
        )
        return
    ui.print_table(rep)
    ui.console.print(
        f"wrote {directory / 'table.md'}, {directory / 'table.csv'}"
        + (f", {len(rep['plots'])} plots in {directory / 'plots'}" if rep["plots"] else "")
        + f" and {directory / 'report.html'}"
    )
