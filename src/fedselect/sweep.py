"""Parameter sweeps: a base experiment, several methods, a grid of dotted keys, seeds -> one table.

Written for the budgeted-online paper's grid (N x R x r2, SPEC 3; ``configs/budgeted-sweep*.yaml``)
but generic. A sweep YAML::

    name: budgeted-paper-grid
    base: {...}                       # an experiment (as for `fedselect run`)
    methods:
      - {label: secretary, method: budgeted_online}
      - {label: online random, method: online_random, grid_keys: [data.num_clients, clients_per_round]}
    grid:                             # dotted key -> values; the product is swept
      data.num_clients: [100, 200]
      clients_per_round: [10, 20]
      method_options.r2: [1, 2, 3]
    seeds: [0, 1]
    columns: [final_accuracy, candidates_evaluated, competitive_ratio, wall_s]
    baseline: online random           # optional: paired differences per grid point (seeds > 1)
    paper_source: "..."               # optional: the paper's figures, printed beside ours
    paper:                            # (point keys left out match any value)
      - {method: secretary, point: {method_options.r2: 1}, figures: {alpha: 367}}

``grid_keys`` lists the grid keys a method depends on (default: all): a baseline that ignores
``r2`` runs once per (N, R) and its row shows ``-`` for r2. Runs sharing data, model, system
and seed share one federation (built once; so the budgeted-online candidate evaluations are
computed once and reused by every method and every R, r2 on it). Each run writes
``<out>/runs/<label>-<point>-s<seed>/``; a run whose ``summary.json`` exists is not run again
and an interrupted run continues from its last checkpoint, so an interrupted sweep continues
where it stopped. The runs execute in this process or as Ray tasks
(:mod:`fedselect.backends`, ``fedselect sweep --backend ray``), with the same results. The table (``table.csv``, ``table.md``)
gives, per grid point and method, the mean and sample standard deviation over seeds of each
column (:func:`fedselect.stats.mean_std`: a seed whose summary lacks the column or holds null
there is left out; a column no seed has is left empty). With a ``baseline`` method,
each other method gets, per grid point, the mean paired difference over seeds against the
baseline's run of the same seed and point (same federation) with a 95% Student-t interval
(:mod:`fedselect.stats`). ``report.html`` beside the table shows all of it on one page.
"""

from __future__ import annotations

import copy
import csv
import io
import itertools
import json
import re
import time
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fedselect.config import (
    ConfigError,
    ExperimentConfig,
    MethodSpec,
    apply_overrides,
    config_kind,
    read_yaml_file,
    validate_model,
)
from fedselect.experiment import check_saved_runs, with_pre_validation_values, with_validation_keys
from fedselect.fl.metrics import atomic_write, read_json, write_json_atomic
from fedselect.resolve import parse_experiment
from fedselect.stats import mean_std

DEFAULT_COLUMNS = ["final_accuracy", "candidates_evaluated", "competitive_ratio", "wall_s"]


class SweepMethod(MethodSpec):
    """One method of the sweep: label, what runs (a ``method`` preset and/or a ``selector`` and
    an ``algorithm``), options, other overrides (dotted keys) and the grid keys it depends on
    (None = all)."""

    overrides: dict[str, Any] = Field(default_factory=dict)
    grid_keys: list[str] | None = None


class SweepPaperFigure(BaseModel):
    """A figure the paper reports for one method at one grid point, printed beside ours in
    ``table.md``: ``point`` (dotted grid key -> value; keys left out match any value) and
    ``figures`` (column -> the paper's value, e.g. ``{alpha: 367}``)."""

    model_config = ConfigDict(extra="forbid")
    method: str
    point: dict[str, Any] = Field(default_factory=dict)
    figures: dict[str, Any] = Field(min_length=1)


class SweepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "sweep"
    base: dict[str, Any] = Field(default_factory=dict)
    methods: list[SweepMethod] = Field(min_length=1)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    columns: list[str] = Field(default_factory=lambda: list(DEFAULT_COLUMNS), min_length=1)
    comment: str | None = None
    paper: list[SweepPaperFigure] | None = Field(None, description="the paper's figures, printed beside ours in table.md")
    paper_source: str | None = None
    baseline: str | None = Field(
        None, description="method label: paired differences of every other method against it, per grid point"
    )

    @model_validator(mode="after")
    def _check(self) -> "SweepConfig":
        labels = [m.label for m in self.methods]
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise ValueError(f"methods: duplicate labels {dup}; give each a distinct `label`")
        if self.baseline is not None and self.baseline not in labels:
            raise ValueError(f"baseline {self.baseline!r} is not one of the method labels {labels}")
        for k, vals in self.grid.items():
            if not vals:
                raise ValueError(f"grid.{k}: needs at least one value")
        for m in self.methods:
            unknown = sorted(set(m.grid_keys or []) - set(self.grid))
            if unknown:
                raise ValueError(f"methods[{m.label}].grid_keys {unknown} are not grid keys {sorted(self.grid)}")
        if len(set(self.seeds)) != len(self.seeds) or any(s < 0 for s in self.seeds):
            raise ValueError(f"seeds must be distinct and >= 0, got {self.seeds}")
        for i, f in enumerate(self.paper or []):
            if f.method not in labels:
                raise ValueError(f"paper[{i}].method {f.method!r} is not one of the method labels {labels}")
            bad = sorted(set(f.point) - set(self.grid))
            if bad:
                raise ValueError(f"paper[{i}].point keys {bad} are not grid keys {sorted(self.grid)}")
            bad = sorted(set(f.figures) - set(self.columns))
            if bad:
                raise ValueError(f"paper[{i}].figures {bad} are not table columns {self.columns}")
        return self

    def points(self) -> list[dict[str, Any]]:
        """Every grid point (dotted key -> value), in the product order of ``grid``."""
        keys = list(self.grid)
        return [dict(zip(keys, vals)) for vals in itertools.product(*(self.grid[k] for k in keys))]

    def experiment(self, m: SweepMethod, point: dict[str, Any], seed: int) -> ExperimentConfig:
        doc = m.apply(copy.deepcopy(self.base))
        doc.update(seed=seed, name=f"{self.name}/{m.label}")
        doc = apply_overrides(doc, m.overrides)
        doc = apply_overrides(doc, point)
        return parse_experiment(doc, f"{self.name}: {m.label} at {point or 'base'}, seed {seed}")


def parse_sweep(doc: Any, source: str = "<dict>") -> SweepConfig:
    """Validate a sweep mapping and every experiment in it (before anything runs).

    Raises:
        ConfigError: naming the key and what is allowed.
    """
    sc = validate_model(SweepConfig, doc, source, "sweep")
    for m in sc.methods:
        for p in sc.points():
            sc.experiment(m, _restrict(p, m), sc.seeds[0])
    return sc


def load_sweep(path: str | Path) -> SweepConfig:
    """Read and validate a sweep YAML. Raises FileNotFoundError, ConfigError."""
    doc = read_yaml_file(path, "sweep")
    if "grid" not in (doc if isinstance(doc, dict) else {}) and config_kind(doc) == "compare":
        raise ConfigError(f"{path} is a comparison config (no grid): run it with `fedselect compare {path}`")
    if isinstance(doc, dict) and config_kind(doc) == "experiment" and "methods" not in doc and "base" not in doc:
        raise ConfigError(
            f"{path} is an experiment config (no base, methods or grid): run it with `fedselect run {path}`; "
            "a sweep config has `base:` (an experiment), `methods:`, `grid:` (dotted keys -> lists of values) and `seeds:` "
            "(e.g. configs/budgeted-sweep-small.yaml)"
        )
    return parse_sweep(doc, str(path))


def _restrict(point: dict[str, Any], m: SweepMethod) -> dict[str, Any]:
    return {k: v for k, v in point.items() if m.grid_keys is None or k in m.grid_keys}


def _slug(point: dict[str, Any]) -> str:
    if not point:
        return "base"
    parts = [f"{k.split('.')[-1]}={v}" for k, v in point.items()]
    return re.sub(r"[^A-Za-z0-9_.=+-]", "_", ",".join(parts))


def run_dir_for(out: Path, label: str, rp: dict[str, Any], seed: int) -> Path:
    """A run's directory inside a sweep directory."""
    return Path(out) / "runs" / f"{label.replace(' ', '_')}-{_slug(rp)}-s{seed}"


def _fed_key(cfg: ExperimentConfig) -> str:
    from fedselect.federation import federation_key

    return federation_key(cfg)


def check_sweep_runs(directory: str | Path) -> None:
    """Before reporting on a sweep directory: every finished run's saved config must be the one
    its ``sweep.json`` would run now (defaults included).

    Raises:
        ValueError: naming every differing run and key.
    """
    d = Path(directory)
    if not (d / "sweep.json").is_file() or (d / "compare.json").exists():
        return
    spec = read_json(d / "sweep.json")
    spec = {**spec, "base": with_pre_validation_values(spec.get("base") or {})}  # one saved before them lacks them
    sc = parse_sweep({k: v for k, v in spec.items() if k != "runs"}, str(d / "sweep.json"))
    items = []
    for seed in sc.seeds:
        for p in sc.points():
            for m in sc.methods:
                rp = _restrict(p, m)
                run_dir = run_dir_for(d, m.label, rp, seed)
                if (run_dir / "summary.json").exists():
                    items.append((run_dir, sc.experiment(m, rp, seed)))
    check_saved_runs(
        items,
        f"sweep directory {d}",
        "The table would mix results of different configs: re-run the sweep into another --out",
        inputs=False,  # a report reads saved metrics only
    )


def run_sweep(
    sc: SweepConfig,
    out_dir: str | Path,
    on_run: Callable[[int, int, str], None] | None = None,
    backend: Any = None,
) -> dict[str, Any]:
    """Run every (method, restricted grid point, seed) once and write the table.

    Finished runs (``summary.json``) are kept, interrupted ones continue from their last
    checkpoint (:func:`fedselect.backends.run_one`). ``backend``: a
    :class:`fedselect.backends.LocalBackend` (default; runs sharing a federation key share
    one federation) or :class:`fedselect.backends.RayBackend` (one Ray task per run).
    ``on_run(i, total, description)`` is called before each run starts (local) or when it is
    submitted (Ray). Returns the table (see :func:`build_sweep_table`)."""
    from fedselect.backends import LocalBackend, RunCallbacks, RunSpec

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jobs: dict[tuple, tuple[SweepMethod, dict[str, Any], int]] = {}
    for seed in sc.seeds:
        for p in sc.points():
            for m in sc.methods:
                rp = _restrict(p, m)
                jobs.setdefault((m.label, json.dumps(rp, sort_keys=True), seed), (m, rp, seed))
    groups: dict[str, list] = {}
    for _key, (m, rp, seed) in jobs.items():
        cfg = sc.experiment(m, rp, seed)
        groups.setdefault(_fed_key(cfg), []).append((m, rp, seed, cfg))
    finished = [
        (run_dir_for(out, m.label, rp, seed), cfg)
        for members in groups.values()
        for m, rp, seed, cfg in members
        if (run_dir_for(out, m.label, rp, seed) / "summary.json").exists()
    ]
    check_saved_runs(
        finished,
        f"sweep directory {out}",
        "Restore the sweep config, or run the sweep into another --out (or delete those runs to run them again)",
    )
    spec = sc.model_dump(mode="json")
    write_json_atomic(out / "sweep.json", {**spec, "base": with_validation_keys(spec["base"]), "runs": len(jobs)})
    specs = [
        RunSpec(cfg, run_dir_for(out, m.label, rp, seed), f"{m.label} {rp or ''} seed {seed}", group)
        for group, members in groups.items()
        for m, rp, seed, cfg in members
    ]
    cb = RunCallbacks(on_start=(lambda s, i, n: on_run(i, n, s.description)) if on_run else None)
    (backend or LocalBackend()).run(specs, cb, resume=True, out_dir=out, marker="sweep.json")
    return build_sweep_table(out, sc)


def build_sweep_table(out_dir: str | Path, sc: SweepConfig | None = None) -> dict[str, Any]:
    """Rebuild ``table.csv`` / ``table.md`` from the run directories' ``summary.json``.

    One row per (restricted grid point, method): the grid values (``-`` where the method does
    not depend on a key), the method label, ``seeds`` (runs found) and per column its mean
    and sample std over seeds.
    """
    out = Path(out_dir)
    if sc is None:
        if not (out / "sweep.json").is_file():
            raise FileNotFoundError(f"{out}: no sweep.json (not a sweep directory)")
        saved = read_json(out / "sweep.json")
        saved.pop("runs", None)
        sc = parse_sweep(saved, str(out / "sweep.json"))
    keys = list(sc.grid)
    rows, seen = [], set()
    for p in sc.points():
        for m in sc.methods:
            rp = _restrict(p, m)
            ident = (m.label, json.dumps(rp, sort_keys=True))
            if ident in seen:
                continue
            seen.add(ident)
            by_seed = _summaries(out, m.label, rp, sc.seeds)
            summaries = list(by_seed.values())
            row: dict[str, Any] = {k: rp.get(k, "-") for k in keys}
            row.update(method=m.label, seeds=len(summaries))
            for c in sc.columns:
                mean, std, _ = mean_std(s.get(c) for s in summaries)
                row[c], row[c + "_std"] = mean, std
            rows.append(row)
    header = keys + ["method", "seeds"] + [x for c in sc.columns for x in (c, c + "_std")]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    for r in rows:
        w.writerow(["" if r[h] is None else r[h] for h in header])
    atomic_write(out / "table.csv", lambda fh: fh.write(buf.getvalue()))

    def cell(r, c):
        m, s = r[c], r[c + "_std"]
        if m is None:
            return "-"
        d = 1 if c in ("candidates_evaluated", "wall_s", "alpha") else 4
        return f"{m:.{d}f} ± {s:.{d}f}" if r["seeds"] > 1 else f"{m:.{d}f}"

    heads = [k.split(".")[-1] for k in keys] + ["method", "seeds"] + sc.columns
    from fedselect.tables import selection_eval_note

    caution = selection_eval_note([{"label": lab, "test_decisions": True} for lab in labels_deciding_on_test(out, sc)])
    lines = [
        f"# {sc.name}",
        "",
        f"mean ± sample std over seeds {sc.seeds}",
        "",
        *([caution, ""] if caution else []),
        "| " + " | ".join(heads) + " |",
        "|" + "---|" * len(heads),
    ]
    for r in rows:
        lines.append(
            "| "
            + " | ".join([str(r[k]) for k in keys] + [r["method"], str(r["seeds"])] + [cell(r, c) for c in sc.columns])
            + " |"
        )
    if sc.paper:
        lines += [
            "",
            "## Ours vs the paper" + (f" ({sc.paper_source})" if sc.paper_source else ""),
            "",
            "| method | point | figure | ours | paper |",
            "|---|---|---|---|---|",
        ]
        for f in sc.paper:
            match = [r for r in rows if r["method"] == f.method and all(r[k] == v or r[k] == "-" for k, v in f.point.items())]
            where = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in f.point.items()) or "all"
            for c, val in f.figures.items():
                ours = "; ".join(cell(r, c) for r in match) if match else "- (point not in this sweep)"
                lines.append(f"| {f.method} | {where} | {c} | {ours} | {val} |")
    paired = sweep_paired(out, sc)
    lines += _paired_markdown(sc, paired)
    md = "\n".join(lines) + "\n"
    atomic_write(out / "table.md", lambda fh: fh.write(md))
    html = _write_html(out, sc, rows, cell, paired)
    return {
        "rows": rows,
        "markdown": md,
        "columns": header,
        "written": time.strftime("%Y-%m-%d %H:%M:%S"),
        "paired": paired,
        "html": html,
    }


def labels_deciding_on_test(out: str | Path, sc: SweepConfig) -> list[str]:
    """The methods of the sweep in ``out`` some of whose runs decided on the test set
    (``selection_eval: test``; :func:`fedselect.tables.run_selection_eval`), in method order."""
    from fedselect.tables import run_selection_eval

    return [
        m.label
        for m in sc.methods
        if any(
            run_selection_eval(run_dir_for(Path(out), m.label, _restrict(p, m), sd)) == "test"
            for p in sc.points()
            for sd in sc.seeds
        )
    ]


def _summaries(out: Path, label: str, rp: dict[str, Any], seeds: list[int]) -> dict[int, dict[str, Any]]:
    """seed -> summary.json of the finished runs of (label, restricted point)."""
    found = {}
    for seed in seeds:
        f = run_dir_for(out, label, rp, seed) / "summary.json"
        if f.exists():
            found[seed] = read_json(f)
    return found


def _unit(column: str) -> str:
    from fedselect.tables import POINT_KEYS

    return "pts" if column in POINT_KEYS or column.startswith(("last_k_", "best_")) else "%"


def sweep_paired(out: str | Path, sc: SweepConfig, confidence: float = 0.95) -> list[dict[str, Any]]:
    """Paired differences against ``sc.baseline`` per grid point (empty without a baseline).

    For every grid point and method other than the baseline: per seed, the method's run at
    its (restricted) point against the baseline's run at the baseline's (restricted) point,
    for every table column (points for accuracy/F1 columns, percent of the baseline's value
    otherwise), and their mean with a ``confidence`` Student-t interval. Rows with the same
    pair of runs are listed once; ``point`` gives the grid values either side depends on
    (``-`` for the others); ``same_federation`` is False when the two runs differ in data,
    model or system settings (the baseline ignores a grid key that changes them), so that the
    pair does not share a federation.
    """
    from fedselect.stats import paired_differences, paired_interval
    from fedselect.tables import is_exact

    if sc.baseline is None:
        return []
    out = Path(out)
    base_m = next(m for m in sc.methods if m.label == sc.baseline)
    result, seen = [], set()
    for p in sc.points():
        brp = _restrict(p, base_m)
        base = _summaries(out, base_m.label, brp, sc.seeds)
        for m in sc.methods:
            if m.label == sc.baseline:
                continue
            rp = _restrict(p, m)
            ident = (m.label, json.dumps(rp, sort_keys=True), json.dumps(brp, sort_keys=True))
            if ident in seen:
                continue
            seen.add(ident)
            ours = _summaries(out, m.label, rp, sc.seeds)
            seeds = sorted(set(ours) & set(base))
            cells = {}
            failures = any(x.get("client_failures") or x.get("failed_rounds") for d in (ours, base) for x in d.values())
            for c in sc.columns:
                unit = _unit(c)
                a, b = {s: ours[s].get(c) for s in seeds}, {s: base[s].get(c) for s in seeds}
                diffs = paired_differences(a, b, unit)
                exact = not failures and is_exact(c, [a[s] for s in diffs], [b[s] for s in diffs])
                iv = paired_interval(diffs.values(), confidence, exact=exact)
                cells[c] = {"diffs": diffs, "interval": iv, "unit": unit}
            point = {k: (rp[k] if k in rp else brp.get(k, "-")) for k in sc.grid}
            same = _fed_key(sc.experiment(m, rp, sc.seeds[0])) == _fed_key(sc.experiment(base_m, brp, sc.seeds[0]))
            result.append({"label": m.label, "point": point, "seeds": seeds, "cells": cells, "same_federation": same})
    return result


def _paired_markdown(sc: SweepConfig, paired: list[dict[str, Any]]) -> list[str]:
    from fedselect.tables import paired_cell, paired_intro

    if not sc.baseline or not paired:
        return []
    n = len(sc.seeds)
    keys = list(sc.grid)
    heads = [k.split(".")[-1] for k in keys] + ["method"] + [f"{c} ({_unit(c)})" for c in sc.columns]
    lines = [
        "",
        f"## Paired differences vs {sc.baseline}" + (f" ({n} seeds, 95% CI)" if n > 1 else " (1 seed)"),
        "",
        paired_intro(sc.baseline, n).replace("accuracy points", "accuracy/F1 points"),
        "",
        "| " + " | ".join(heads) + " |",
        "|" + "---|" * len(heads),
    ]
    for p in paired:
        lines.append(
            "| "
            + " | ".join(
                [str(p["point"][k]) for k in keys] + [_paired_label(p)] + [paired_cell(p["cells"][c], n) for c in sc.columns]
            )
            + " |"
        )
    if not all(p["same_federation"] for p in paired):
        lines += ["", FED_NOTE]
    return lines


#: footnote for paired rows whose runs do not share a federation
FED_NOTE = (
    "†: the baseline's run of this row has other data, model or system settings (it does not depend on a grid key that "
    "changes them), so the two runs of a seed do not share a federation: the difference also contains that change."
)


def _paired_label(p: dict[str, Any]) -> str:
    return p["label"] + ("" if p["same_federation"] else " †")


def _write_html(out: Path, sc: SweepConfig, rows: list[dict[str, Any]], cell, paired: list[dict[str, Any]]) -> Path:
    from fedselect.html_report import read_configs, write_sweep_html
    from fedselect.tables import paired_cell, paired_intro

    keys = list(sc.grid)
    heads = [k.split(".")[-1] for k in keys] + ["method", "seeds"] + sc.columns
    trows = [[str(r[k]) for k in keys] + [r["method"], r["seeds"]] + [cell(r, c) for c in sc.columns] for r in rows]
    note = f"Mean ± sample std over seeds {sc.seeds}; '-' for a grid key the method does not depend on."
    ptab = None
    if sc.baseline and paired:
        n = len(sc.seeds)
        pheads = [k.split(".")[-1] for k in keys] + ["method"] + [f"{c} ({_unit(c)})" for c in sc.columns]
        prows = [
            [str(p["point"][k]) for k in keys] + [_paired_label(p)] + [paired_cell(p["cells"][c], n) for c in sc.columns]
            for p in paired
        ]
        pcls = [
            [""] * (len(keys) + 1) + ["sig" if p["cells"][c]["interval"].significant else "" for c in sc.columns] for p in paired
        ]
        intro = paired_intro(sc.baseline, n).replace("accuracy points", "accuracy/F1 points")
        ptab = (intro + ("" if all(p["same_federation"] for p in paired) else " " + FED_NOTE), pheads, prows, pcls)
    paper = None
    if sc.paper:
        prow = []
        for f in sc.paper:
            match = [r for r in rows if r["method"] == f.method and all(r[k] == v or r[k] == "-" for k, v in f.point.items())]
            where = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in f.point.items()) or "all"
            for c, val in f.figures.items():
                prow.append(
                    [f.method, where, c, "; ".join(cell(r, c) for r in match) if match else "- (point not in this sweep)", val]
                )
        paper = (sc.paper_source, prow)
    first = sc.points()[0] if sc.points() else {}
    dirs = {}
    for m in sc.methods:
        rp = _restrict(first, m)
        dirs[m.label] = next(
            (run_dir_for(out, m.label, rp, s) for s in sc.seeds if (run_dir_for(out, m.label, rp, s) / "config.yaml").exists()),
            run_dir_for(out, m.label, rp, sc.seeds[0]),
        )
    configs = read_configs(dirs)
    wrows = []
    for m in sc.methods:
        run_dirs = {run_dir_for(out, m.label, _restrict(p, m), s) for p in sc.points() for s in sc.seeds}
        walls = [read_json(d / "summary.json").get("wall_s") for d in sorted(run_dirs) if (d / "summary.json").exists()]
        walls = [w for w in walls if isinstance(w, (int, float))]
        wrows.append([m.label, len(walls), f"{sum(walls):.1f}", f"{(sum(walls) / len(walls)) if walls else 0:.1f}"])
    wall = (["method", "finished runs", "total wall (s)", "mean per run (s)"], wrows)
    return write_sweep_html(
        out,
        sc.name,
        note + (f" Configs below: at the first grid point {first}." if keys else ""),
        (heads, trows),
        ptab,
        paper,
        configs,
        sc.baseline,
        wall,
    )
