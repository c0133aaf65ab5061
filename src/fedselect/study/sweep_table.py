"""A sweep's table from its finished runs, without running anything (:func:`build_sweep_table`):
per grid point and method the mean and sample std over seeds of each column (``table.csv``,
``table.md``), the paired differences against the baseline per grid point
(:func:`sweep_paired`), the plots of each grid point (:func:`sweep_plots`) and ``report.html``
(rendered by :mod:`fedselect.report.sweep_render`). The sweep and where its runs are:
:mod:`fedselect.study.sweep`."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path
from typing import Any

import fedselect.report.sweep_render as render
from fedselect.common.files import atomic_write, read_json
from fedselect.report.aggregate import COLUMNS, OPTIONAL_COLUMNS
from fedselect.report.aggregate import TO_TARGET as _TO_TARGET
from fedselect.report.stats import mean_std, to_target
from fedselect.study.sweep import (
    SweepConfig,
    federation_file,
    federation_key_of,
    point_slug,
    restrict,
    run_dir_for,
    run_summaries,
    saved_sweep,
)

#: the columns a sweep without ``columns`` chooses from (those some run has): a comparison's
#: table columns and its method-specific ones (fedselect.report.aggregate), wall time last
AUTO_COLUMNS = [k for k, *_ in COLUMNS if k != "wall_s"] + [k for k, *_ in OPTIONAL_COLUMNS] + ["wall_s"]


def table_columns(out: str | Path, sc: SweepConfig) -> list[str]:
    """The sweep's table columns: ``sc.columns`` when given, else those of
    :data:`AUTO_COLUMNS` that some finished run reports as a number (then the paper's figures
    not among them), so that no column is empty."""
    if sc.columns is not None:
        return list(sc.columns)
    summaries = [
        s for p in sc.points() for m in sc.methods for s in run_summaries(Path(out), m.label, restrict(p, m), sc.seeds).values()
    ]

    def some(c: str) -> bool:
        return any(isinstance(s.get(c), (int, float)) and not isinstance(s.get(c), bool) for s in summaries)

    cols = [c for c in AUTO_COLUMNS if some(c)] or ["final_accuracy"]
    return cols + [c for f in sc.paper or [] for c in f.figures if c not in cols]


def build_sweep_table(out_dir: str | Path, sc: SweepConfig | None = None, plots: bool = False) -> dict[str, Any]:
    """Rebuild ``table.csv`` / ``table.md`` / ``report.html`` from the run directories'
    ``summary.json`` (with ``plots``, also each grid point's plots: :func:`sweep_plots`).

    One row per (restricted grid point, method): the grid values (``-`` where the method does
    not depend on a key), the method label, ``seeds`` (runs found) and per column
    (:func:`table_columns`) its mean and sample std over seeds. The result also holds the
    table's ``heads`` and ``cells`` (the console prints them) and the paired table's.
    """
    out = Path(out_dir)
    if sc is None:
        if not (out / "sweep.json").is_file():
            raise FileNotFoundError(f"{out}: no sweep.json (not a sweep directory)")
        sc = saved_sweep(out)
    keys = list(sc.grid)
    columns = table_columns(out, sc)
    rows, seen = [], set()
    for p in sc.points():
        for m in sc.methods:
            rp = restrict(p, m)
            ident = (m.label, json.dumps(rp, sort_keys=True))
            if ident in seen:
                continue
            seen.add(ident)
            by_seed = run_summaries(out, m.label, rp, sc.seeds)
            summaries = list(by_seed.values())
            row: dict[str, Any] = {k: rp.get(k, "-") for k in keys}
            row.update(method=m.label, seeds=len(summaries))
            for c in columns:
                mean, std, _ = mean_std(s.get(c) for s in summaries)
                row[c], row[c + "_std"] = mean, std
                if c in _TO_TARGET:  # a run that never reached the target is censored (fedselect.report.stats.to_target)
                    ends = [s.get(_TO_TARGET[c]) if s.get("target") is not None else None for s in summaries]
                    tt = row[c + "_to_target"] = to_target([s.get(c) for s in summaries], ends)
                    if tt.censored:
                        row[c], row[c + "_std"] = tt.value, None
            rows.append(row)
    header = keys + ["method", "seeds"] + [x for c in columns for x in (c, c + "_std")]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    for r in rows:
        w.writerow(["" if r[h] is None else r[h] for h in header])
    atomic_write(out / "table.csv", lambda fh: fh.write(buf.getvalue()))

    table = render.table_cells(sc, rows, columns)
    paired = sweep_paired(out, sc, columns=columns)
    ptable = render.paired_cells(sc, paired, columns)
    from fedselect.report.tables import selection_eval_note

    caution = selection_eval_note([{"label": lab, "test_decisions": True} for lab in labels_deciding_on_test(out, sc)])
    md = render.markdown(sc, rows, table, ptable, paired, caution)
    atomic_write(out / "table.md", lambda fh: fh.write(md))
    drawn = sweep_plots(out, sc) if plots else []
    html = render.write_html(out, sc, rows, paired, columns, table, ptable, *_html_runs(out, sc))
    return {
        "rows": rows,
        "markdown": md,
        "columns": header,
        "written": time.strftime("%Y-%m-%d %H:%M:%S"),
        "paired": paired,
        "html": html,
        "title": sc.name,
        "seeds": sc.seeds,
        "heads": table[0],
        "cells": table[1],
        "paper_rows": render.paper_rows(sc, rows),
        "paper_source": sc.paper_source,
        "baseline": sc.baseline,
        "paired_heads": ptable[0],
        "paired_cells": ptable[1],
        "paired_notes": render.paired_notes(sc, paired),
        "plots": drawn,
    }


def _censored(summary: dict[str, Any], key: str) -> bool:
    """The run has a target and never reached it (its ``key``, a time to target, is censored)."""
    return summary.get("target") is not None and summary.get(key) is None and summary.get(_TO_TARGET[key]) is not None


def sweep_plots(out: str | Path, sc: SweepConfig) -> list[str]:
    """Per grid point, the plots of a comparison of the methods there
    (:func:`fedselect.report.plots.make_plots`: metric and latency per round, time to accuracy, and
    with the federation file the selection and partition plots) into ``plots/<point>/``
    (``plots/`` for a sweep without a grid); returns the files written, relative to ``plots/``."""
    from fedselect.report.plots import make_plots
    from fedselect.report.runs import load_run_summary

    out = Path(out)
    points = sc.points()
    written = []
    for p in points:
        results, feds = [], {}
        for m in sc.methods:
            rp = restrict(p, m)
            for seed in sc.seeds:
                d = run_dir_for(out, m.label, rp, seed)
                if (d / "metrics.csv").exists():
                    results.append(load_run_summary(d, m.label, seed))
                    f = federation_file(out, federation_key_of(sc.experiment(m, rp, seed)))
                    if seed not in feds and f.is_file():
                        feds[seed] = {**read_json(f), "seed": seed}
        if not results:
            continue
        sub = "" if len(points) == 1 else point_slug(p)
        labels = [m.label for m in sc.methods if any(r.label == m.label for r in results)]
        files = make_plots(out / "plots" / sub, results, labels, [feds[s] for s in sorted(feds)])
        written += [f"{sub}/{f}" if sub else f for f in files]
    return written


def labels_deciding_on_test(out: str | Path, sc: SweepConfig) -> list[str]:
    """The methods of the sweep in ``out`` some of whose runs decided on the test set
    (``selection_eval: test``; :func:`fedselect.report.runs.run_selection_eval`), in method order."""
    from fedselect.report.runs import run_selection_eval

    return [
        m.label
        for m in sc.methods
        if any(
            run_selection_eval(run_dir_for(Path(out), m.label, restrict(p, m), sd)) == "test"
            for p in sc.points()
            for sd in sc.seeds
        )
    ]


def sweep_paired(
    out: str | Path, sc: SweepConfig, confidence: float = 0.95, columns: list[str] | None = None
) -> list[dict[str, Any]]:
    """Paired differences against ``sc.baseline`` per grid point (empty without a baseline).

    For every grid point and method other than the baseline: per seed, the method's run at
    its (restricted) point against the baseline's run at the baseline's (restricted) point,
    for every table column (``columns``, default :func:`table_columns`; points for accuracy/F1 columns, percent of the baseline's value
    otherwise), and their mean with a ``confidence`` Student-t interval. Rows with the same
    pair of runs are listed once; ``point`` gives the grid values either side depends on
    (``-`` for the others); ``same_federation`` is False when the two runs differ in data,
    model or system settings (the baseline ignores a grid key that changes them), so that the
    pair does not share a federation.
    """
    from fedselect.report.aggregate import is_exact
    from fedselect.report.stats import paired_differences, paired_interval

    if sc.baseline is None:
        return []
    out = Path(out)
    columns = table_columns(out, sc) if columns is None else columns
    base_m = next(m for m in sc.methods if m.label == sc.baseline)
    result, seen = [], set()
    for p in sc.points():
        brp = restrict(p, base_m)
        base = run_summaries(out, base_m.label, brp, sc.seeds)
        for m in sc.methods:
            if m.label == sc.baseline:
                continue
            rp = restrict(p, m)
            ident = (m.label, json.dumps(rp, sort_keys=True), json.dumps(brp, sort_keys=True))
            if ident in seen:
                continue
            seen.add(ident)
            ours = run_summaries(out, m.label, rp, sc.seeds)
            seeds = sorted(set(ours) & set(base))
            cells = {}
            failures = any(x.get("client_failures") or x.get("failed_rounds") for d in (ours, base) for x in d.values())
            for c in columns:
                unit = render.unit(c)
                a, b = {s: ours[s].get(c) for s in seeds}, {s: base[s].get(c) for s in seeds}
                cut = [s for s in seeds if c in _TO_TARGET and any(_censored(x[s], c) for x in (ours, base))]
                if cut:  # a seed where one side never reached the target: only a bound (fedselect.report.tables.paired_cell)
                    cells[c] = {"diffs": {}, "interval": paired_interval([], confidence), "unit": unit, "censored": cut}
                    continue
                diffs = paired_differences(a, b, unit)
                exact = not failures and is_exact(c, [a[s] for s in diffs], [b[s] for s in diffs])
                iv = paired_interval(diffs.values(), confidence, exact=exact)
                cells[c] = {"diffs": diffs, "interval": iv, "unit": unit}
            point = {k: (rp[k] if k in rp else brp.get(k, "-")) for k in sc.grid}
            same = federation_key_of(sc.experiment(m, rp, sc.seeds[0])) == federation_key_of(
                sc.experiment(base_m, brp, sc.seeds[0])
            )
            result.append({"label": m.label, "point": point, "seeds": seeds, "cells": cells, "same_federation": same})
    return result


def _html_runs(out: Path, sc: SweepConfig) -> tuple[dict[str, Path], dict[str, list[float]]]:
    """For report.html: each method's run at the first grid point (the first seed that has a
    config) and the wall times (s) of each method's finished runs."""
    first = sc.points()[0] if sc.points() else {}
    dirs, walls = {}, {}
    for m in sc.methods:
        rp = restrict(first, m)
        candidates = [run_dir_for(out, m.label, rp, s) for s in sc.seeds]
        dirs[m.label] = next((d for d in candidates if (d / "config.yaml").exists()), candidates[0])
        run_dirs = {run_dir_for(out, m.label, restrict(p, m), s) for p in sc.points() for s in sc.seeds}
        found = [read_json(d / "summary.json").get("wall_s") for d in sorted(run_dirs) if (d / "summary.json").exists()]
        walls[m.label] = [w for w in found if isinstance(w, (int, float))]
    return dirs, walls
