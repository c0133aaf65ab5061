"""Tables, plots and ``report.html`` from saved metrics, without re-running anything.

``build_report(DIR)`` works on a comparison directory (``compare.json``), a single run
directory (``metrics.csv``) or a sweep directory (``sweep.json``, handed to
:func:`fedselect.study.sweep_table.build_sweep_table`). Everything is computed from ``metrics.csv`` /
``timing.csv`` (and ``summary.json`` where a method's ``finish`` produced final figures), so
re-running it gives byte-identical tables. A run without ``summary.json`` is reported as
incomplete, with the rounds it has.

Besides the seed means, the table gives the mean of the metric over the last k evaluated rounds
(``metrics.summary_window``), which the "vs baseline" lines use, and, per method, the paired
differences against the baseline over seeds with a 95% Student-t interval
(:mod:`fedselect.report.stats`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from fedselect.common.files import atomic_write
from fedselect.report.aggregate import aggregate_table, columns_for, metric_of, paired_quantities, paired_table, summary_window
from fedselect.report.runs import collect, missing_runs
from fedselect.report.tables import missing_note, render_csv, render_markdown, render_paired_csv, window_caveat

log = logging.getLogger("fedselect.report")


def build_report(directory: str | Path, plots: bool = True, window: int | None = None) -> dict[str, Any]:
    """Write ``table.md``, ``table.csv``, ``plots/*.png`` and ``report.html`` into
    ``directory``; return the table. A sweep directory (``sweep.json``) gets its sweep table,
    page and plots per grid point (:func:`fedselect.study.sweep_table.build_sweep_table`; ``"kind": "sweep"``
    in the result).

    ``plots=False`` keeps the plots already in ``plots/`` (report.html embeds those).
    ``window`` overrides the runs' ``metrics.summary_window`` (the last-k mean).

    Raises:
        FileNotFoundError: ``directory`` is not a run, comparison or sweep directory.
    """
    directory = Path(directory)
    if (directory / "sweep.json").is_file() and not (directory / "compare.json").exists():
        from fedselect.study.sweep_table import build_sweep_table

        if window is not None:
            raise ValueError(
                f"{directory} is a sweep directory: its table takes the runs' summary.json as they are, so a "
                f"summary window cannot be changed here (set metrics.summary_window in the sweep's base)"
            )
        return {"kind": "sweep", **build_sweep_table(directory, plots=plots)}
    title, results, labels, baseline, paper, paper_source, feds = collect(directory, window)
    missing = missing_runs(directory)
    note = missing_note(missing, baseline, directory)
    if note:  # on the console too: the table alone would not show that a run is absent
        log.warning("%s: %s", directory, note.removeprefix("Caution: "))
    columns = columns_for(results)
    table = aggregate_table(results, labels, baseline, columns)
    window = summary_window(results)
    caveat = window_caveat(results)
    quantities = paired_quantities(metric_of(results), window)
    paired = paired_table(results, labels, baseline, quantities)
    md = render_markdown(title, table, baseline, paper, paper_source, columns, window, paired, quantities, caveat, note)
    atomic_write(directory / "table.md", lambda fh: fh.write(md))
    atomic_write(directory / "table.csv", lambda fh: fh.write(render_csv(table, columns)), newline="")
    if paired:
        atomic_write(directory / "paired.csv", lambda fh: fh.write(render_paired_csv(paired, quantities)), newline="")
    files = []
    if plots:
        from fedselect.report.plots import make_plots

        files = make_plots(directory / "plots", results, labels, feds)
    rep = {
        "kind": "compare",
        "title": title,
        "table": table,
        "markdown": md,
        "plots": files,
        "columns": columns,
        "baseline": baseline,
        "paired": paired,
        "quantities": quantities,
        "window": window,
        "results": results,
        "labels": labels,
        "paper": paper,
        "paper_source": paper_source,
        "federations": feds,
        "caveat": caveat,
        "missing": missing,
        "missing_note": note,
    }
    from fedselect.report.compare_html import write_compare_html

    rep["html"] = write_compare_html(directory, rep)
    return rep
