"""A ``kind: sweep`` entry: the budgeted-online paper's Table VI grid run with ``fedselect sweep``
into ``<out>/<id>`` and summarised, not judged (:func:`sweep_grid_summary`), with the paper's
plots (:func:`sweep_plots`) and its part of the document (:func:`render_sweep`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedselect.repro.manifest import Entry, EntryResult, Job
from fedselect.repro.record import _machines, _runs_wall, decisions_caution, finding_text, recorded_wall, session, where

#: axis titles of the budgeted-online grid keys in the sweep plots
AXIS_TITLES = {
    "data.num_clients": "N (candidate clients)",
    "clients_per_round": "R (clients selected)",
    "method_options.r2": "r2 (record window)",
}
#: per-cell figures a sweep entry summarises (mean over seeds, then over the grid's cells)
GRID_KEYS = ("final_accuracy", "fat_selected_share", "candidates_evaluated", "competitive_ratio", "wall_s")


def _sweep_config(entry: Entry, job: Job):
    from fedselect.config.overrides import apply_overrides
    from fedselect.study.sweep import load_sweep, parse_sweep

    quick, workers = job.quick, job.workers
    cfg_path = job.config_path(entry)
    sc = load_sweep(cfg_path)
    doc = sc.model_dump(mode="json")
    if quick:
        doc["base"] = apply_overrides(doc["base"], dict(entry.quick))
        if entry.quick_grid is not None:
            doc["grid"] = {k: list(v) for k, v in entry.quick_grid.items()}
        if entry.quick_methods:
            doc["methods"] = [m for m in doc["methods"] if m["label"] in set(entry.quick_methods)]
    if workers is not None:
        doc["base"] = apply_overrides(doc["base"], {"train.workers": workers})
    doc["seeds"] = list(entry.quick_seeds if quick else entry.seeds)
    return parse_sweep(doc, str(cfg_path))


def sweep_grid_summary(directory: str | Path, sc: Any, baseline: str | None = None) -> dict[str, Any]:
    """What a sweep entry's document shows, from the runs in ``directory`` (a sweep directory
    of ``sc``).

    Per method (``methods``): for every cell (grid point restricted to the keys it depends on)
    the mean over seeds of :data:`GRID_KEYS`; ``mean`` of each key over the grid's points (a
    method that ignores a key counts its cell once per value of that key, i.e. averaged over
    the same full grid as the others) and ``best`` (the cell of highest final accuracy).
    ``differences`` (with a ``baseline`` label, default the sweep's): per other method, the
    final-accuracy difference to the baseline per cell (the grid keys either side depends on;
    e.g. (N, R, r2) for the secretary rule against online random, (N, R) for offline best) in
    points (100 x the difference of the seed means), with their mean, best and worst cell and
    how many cells are above 0. ``axes``: per grid key with more than one value, the mean final accuracy and fat
    share per method at each value, averaged over the other keys (the paper's accuracy vs N,
    R, r2). ``cells``: the number of full grid points; ``runs``: finished runs found.
    """
    baseline = baseline if baseline is not None else sc.baseline
    values, runs = _cell_means(Path(directory), sc)
    methods = {label: _method_summary(rows) for label, rows in values.items()}
    differences = _differences(values, baseline) if baseline is not None and baseline in values else {}
    axes = {}
    for key, grid_values in sc.grid.items():
        if len(grid_values) < 2:
            continue
        per = {}
        for label, rows in values.items():
            per[label] = {
                what: [_mean_of([r for r in rows if r[0][key] == v], what) for v in grid_values]
                for what in ("final_accuracy", "fat_selected_share")
            }
        axes[key] = {"values": list(grid_values), "methods": per}
    return {
        "methods": methods,
        "differences": differences,
        "baseline": baseline,
        "axes": axes,
        "cells": len(sc.points()),
        "runs": runs,
    }


def _cell_means(d: Path, sc: Any) -> tuple[dict[str, list[tuple[dict, dict, dict]]], int]:
    """label -> [(full grid point, the point restricted to the method's keys, {key of
    :data:`GRID_KEYS`: mean over the seeds' finished runs, None without one})] in grid order, and
    the number of finished runs found (each restricted point's once)."""
    import numpy as np

    from fedselect.study.sweep import restrict, run_summaries

    values: dict[str, list[tuple[dict, dict, dict]]] = {}  # label -> [(full point, restricted, {key: mean})]
    runs = 0
    seen_runs: set[tuple[str, str]] = set()
    for m in sc.methods:
        rows = []
        for p in sc.points():
            rp = restrict(p, m)
            summ = run_summaries(d, m.label, rp, sc.seeds)
            ident = (m.label, repr(sorted(rp.items())))
            if ident not in seen_runs:
                seen_runs.add(ident)
                runs += len(summ)
            cell = {}
            for key in GRID_KEYS:
                xs = [
                    float(s[key])
                    for s in summ.values()
                    if isinstance(s.get(key), (int, float)) and not isinstance(s.get(key), bool)
                ]
                cell[key] = float(np.mean(xs)) if xs else None
            rows.append((p, rp, cell))
        values[m.label] = rows
    return values, runs


def _mean_of(rows, key):
    """The mean of ``key`` over the cells of ``rows`` that have it (None when none has)."""
    import numpy as np

    xs = [c[key] for _, _, c in rows if c[key] is not None]
    return float(np.mean(xs)) if xs else None


def _method_summary(rows) -> dict[str, Any]:
    """A method's ``mean`` of each key over the grid, its ``best`` cell (highest final accuracy)
    and the number of its cells with a final accuracy."""
    found = [(rp, c) for _, rp, c in rows if c["final_accuracy"] is not None]
    best = max(found, key=lambda x: x[1]["final_accuracy"], default=None)
    return {
        "mean": {key: _mean_of(rows, key) for key in GRID_KEYS},
        "best": {"point": best[0], **best[1]} if best else None,
        "cells": len({repr(sorted(rp.items())) for _, rp, c in rows if c["final_accuracy"] is not None}),
    }


def _differences(values: dict[str, list[tuple[dict, dict, dict]]], baseline: str) -> dict[str, dict[str, Any]]:
    """Per method but ``baseline``: its final-accuracy differences (points) to the baseline per
    cell of the keys either side depends on, their mean, best and worst cell and how many are above 0."""
    import numpy as np

    differences = {}
    for label, rows in values.items():
        if label == baseline:
            continue
        diffs, seen = [], set()
        for (p, rp, c), (_, brp, b) in zip(rows, values[baseline]):
            cell = {k: v for k, v in p.items() if k in rp or k in brp}  # the keys either side depends on
            if repr(sorted(cell.items())) in seen:
                continue
            seen.add(repr(sorted(cell.items())))
            if c["final_accuracy"] is not None and b["final_accuracy"] is not None:
                diffs.append((cell, 100.0 * (c["final_accuracy"] - b["final_accuracy"])))
        if diffs:
            xs = [x for _, x in diffs]
            hi, lo = max(diffs, key=lambda t: t[1]), min(diffs, key=lambda t: t[1])
            differences[label] = {
                "mean": float(np.mean(xs)),
                "best": {"point": hi[0], "points": hi[1]},
                "worst": {"point": lo[0], "points": lo[1]},
                "above": sum(1 for x in xs if x > 0),
                "cells": len(xs),
            }
    return differences


def sweep_plots(grid: dict[str, Any], plot_dir: str | Path) -> list[Path]:
    """The budgeted-online paper's plots of a sweep entry (matplotlib PNGs in ``plot_dir``):
    final accuracy vs each grid axis (``accuracy_vs_<key>.png``, averaged over the other axes)
    and the share of fat clients among the selected per method (``fat_selected_share.png``,
    mean over the grid; only when the runs report ``fat_selected_share``). Returns the files."""
    from fedselect.report.plots import _plt

    plt = _plt()
    out = Path(plot_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for key, ax in grid["axes"].items():
        fig, a = plt.subplots(figsize=(5.5, 3.6))
        for label, per in ax["methods"].items():
            ys = [float("nan") if y is None else y for y in per["final_accuracy"]]
            a.plot(ax["values"], ys, marker="o", label=label)
        a.set_xlabel(AXIS_TITLES.get(key, key))
        a.set_ylabel("final test accuracy (fraction)")
        a.set_title(f"accuracy vs {key.split('.')[-1]} (mean over the other grid axes)", fontsize=9)
        if key == "data.num_clients" and min(ax["values"]) > 0 and max(ax["values"]) / min(ax["values"]) >= 4:
            a.set_xscale("log", base=2)
        a.set_xticks(ax["values"], [str(v) for v in ax["values"]])
        a.minorticks_off()
        a.legend(fontsize=8)
        fig.tight_layout()
        p = out / f"accuracy_vs_{key.split('.')[-1]}.png"
        fig.savefig(p)
        plt.close(fig)
        files.append(p)
    shares = {label: m["mean"]["fat_selected_share"] for label, m in grid["methods"].items()}
    if any(v is not None for v in shares.values()):
        fig, a = plt.subplots(figsize=(5.5, 3.6))
        labels = list(shares)
        a.bar(labels, [v if v is not None else 0.0 for v in shares.values()], color=[f"C{i}" for i in range(len(labels))])
        a.set_ylabel("fat clients among the selected (fraction)")
        a.set_ylim(0, 1)
        a.set_title("share of fat clients selected (mean over the grid)", fontsize=9)
        fig.tight_layout()
        p = out / "fat_selected_share.png"
        fig.savefig(p)
        plt.close(fig)
        files.append(p)
    return files


def run_sweep_entry(entry: Entry, job: Job) -> EntryResult:
    """Run (or finish, or keep) one sweep entry in ``out/<id>`` with ``fedselect sweep``
    (:func:`fedselect.study.sweep_run.run_sweep`: finished runs are kept) and summarise its grid
    (:func:`sweep_grid_summary`, :func:`sweep_plots` into ``out/<id>/plots``). With
    ``run=False`` a sweep already there is summarised as it is, a missing one returned with
    ``ran=False``.

    Raises:
        FileNotFoundError: the entry's config is missing. ConfigError: it is invalid.
    """
    from fedselect.study.sweep import check_sweep_runs, restrict
    from fedselect.study.sweep_run import run_sweep
    from fedselect.study.sweep_table import build_sweep_table, labels_deciding_on_test

    out, quick, run = job.out, job.quick, job.run
    sc = _sweep_config(entry, job)
    d = out / entry.id
    seeds = ",".join(map(str, sc.seeds))
    cmd = (
        f"fedselect reproduce {entry.paper} --quick --out {out}"
        if quick
        else f"fedselect sweep {entry.config} --seeds {seeds} --out {d}"
    )
    present = (d / "sweep.json").is_file()
    if not run and not present:
        return EntryResult(entry, d, sc.seeds, 0.0, 0.0, command=cmd, ran=False)
    if run:
        job.say(
            f"{entry.id}: {'continuing' if present else 'running'} the sweep ({len(sc.points())} grid points x {len(sc.seeds)} seeds)"
        )
        before = _runs_wall(d)
        with session(d, worked=lambda: _runs_wall(d) != before):  # a finished sweep only rebuilds its table
            run_sweep(sc, d, plots=False)  # the entry draws the paper's plots (sweep_plots below)
    else:
        check_sweep_runs(d)
        build_sweep_table(d, sc)
    runs_wall = _runs_wall(d)
    res = EntryResult(entry, d, sc.seeds, recorded_wall(d) or runs_wall, runs_wall, command=cmd)
    res.grid = sweep_grid_summary(d, sc)
    res.plots = sweep_plots(res.grid, d / "plots")
    res.machines = _machines(d)
    res.test_decisions = labels_deciding_on_test(d, sc)
    expected = len(
        {(m.label, repr(sorted(restrict(p, m).items())), s) for p in sc.points() for m in sc.methods for s in sc.seeds}
    )
    if res.grid["runs"] < expected:
        res.incomplete = [f"{expected - res.grid['runs']} of {expected} runs not finished"]
    return res


def _point(p: dict[str, Any]) -> str:
    return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in p.items()) or "base"


def render_sweep(r: EntryResult, quick: bool, image_dir: str | None) -> list[str]:
    e, g = r.entry, r.grid or {}
    lines = []
    if r.incomplete:
        lines += ["Caution, incomplete sweep: " + ", ".join(r.incomplete) + " (the cells use the runs there are).", ""]
    lines += decisions_caution(r)

    def f(v, d=4):
        return "-" if v is None else f"{v:.{d}f}"

    lines += [
        f"The grid: {g.get('cells', 0)} points, {g.get('runs', 0)} runs; per cell the mean over seeds "
        f"{', '.join(map(str, r.seeds))}. Mean: over every grid point (a method that ignores a grid key, e.g. a "
        "baseline for r2, counts its run at every value of it). Best: the cell of highest final accuracy.",
        "",
        "| method | cells | mean final acc | best final acc (cell) | mean fat share selected | mean candidates evaluated "
        "| mean competitive ratio | mean wall (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, m in g.get("methods", {}).items():
        mean, best = m["mean"], m["best"]
        b = f"{f(best['final_accuracy'])} ({_point(best['point'])})" if best else "-"
        lines.append(
            f"| {label} | {m['cells']} | {f(mean['final_accuracy'])} | {b} | {f(mean['fat_selected_share'], 3)} "
            f"| {f(mean['candidates_evaluated'], 1)} | {f(mean['competitive_ratio'], 3)} | {f(mean['wall_s'], 1)} |"
        )
    lines.append("")
    if g.get("differences"):
        lines += [
            f"Final-accuracy difference against {g['baseline']} per grid point (points; 100 x the difference of the seed means):",
            "",
            "| method | mean over cells | best cell | worst cell | cells above 0 |",
            "|---|---|---|---|---|",
        ]
        for label, x in g["differences"].items():
            lines.append(
                f"| {label} - {g['baseline']} | {x['mean']:+.2f} | {x['best']['points']:+.2f} ({_point(x['best']['point'])}) "
                f"| {x['worst']['points']:+.2f} ({_point(x['worst']['point'])}) | {x['above']} of {x['cells']} |"
            )
        lines.append("")
    if e.finding:
        lines += [finding_text(e, quick), ""]
    lines += [
        f"Config `{e.config}`, seeds {', '.join(map(str, r.seeds))}; {where(r)}. "
        f"Directory `{r.directory}` (table.md, report.html).",
        "",
        "```",
        r.command,
    ]
    if not quick:  # the quick grid is not the config's: its table is rebuilt by the command above
        lines.append(f"fedselect sweep {e.config} --table-only --out {r.directory}")
    lines += ["```", ""]
    for p in r.plots:
        src = f"{image_dir}/{e.id}-{p.name}" if image_dir else str(p)
        lines += [f"![{e.id} {p.stem.replace('_', ' ')}]({src})", ""]
    return lines
