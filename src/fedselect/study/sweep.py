"""Parameter sweeps: a base experiment, several methods, a grid of dotted keys, seeds -> one table.

Written for the budgeted-online paper's grid (N x R x r2 of its Table VI;
``configs/budgeted-sweep*.yaml``) but generic. A sweep YAML::

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
    columns: [final_accuracy, candidates_evaluated, competitive_ratio, wall_s]   # optional
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
(:mod:`fedselect.study.backends`, ``fedselect sweep --backend ray``), with the same results. The table (``table.csv``, ``table.md``)
gives, per grid point and method, the mean and sample standard deviation over seeds of each
column (:func:`fedselect.report.stats.mean_std`: a seed whose summary lacks the column or holds null
there is left out; a column no seed has is left empty). With a ``baseline`` method,
each other method gets, per grid point, the mean paired difference over seeds against the
baseline's run of the same seed and point (same federation) with a 95% Student-t interval
(:mod:`fedselect.report.stats`). ``report.html`` beside the table shows all of it on one page.

Without ``columns`` the table shows the figures a comparison's table shows (accuracy, F1,
end-to-end latency, rounds and latency to target, communication, the method-specific ones such
as candidates evaluated and the competitive ratio, wall time), each only when some run has it,
so no column is empty. ``run_sweep`` (and ``fedselect report DIR``) also draws, per grid
point, the plots a comparison draws (:func:`fedselect.report.plots.make_plots`) into
``plots/<point>/`` (``plots/`` without a grid), from the runs' ``metrics.csv`` and the
federation files ``federations/<key>.json`` written beside the runs.
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

import fedselect.report.sweep_render as render
from fedselect.common.files import atomic_write, read_json, write_json_atomic
from fedselect.config.contenders import (
    BASE_REFUSED,
    SET_REFUSED,
    Layer,
    MethodSpec,
    clash_message,
    clashes,
    contender_problems,
    file_name,
    join_set,
    problems_of,
    validate_contenders,
)
from fedselect.config.schema import ConfigError, ExperimentConfig, apply_overrides, config_kind, read_yaml_file
from fedselect.experiment.resolve import Resolved, resolve_doc
from fedselect.experiment.run import check_saved_runs, with_pre_validation_values, with_validation_keys
from fedselect.report.aggregate import COLUMNS, OPTIONAL_COLUMNS
from fedselect.report.aggregate import TO_TARGET as _TO_TARGET
from fedselect.report.stats import mean_std, to_target

#: the columns a sweep without ``columns`` chooses from (those some run has): a comparison's
#: table columns and its method-specific ones (fedselect.report.aggregate), wall time last
AUTO_COLUMNS = [k for k, *_ in COLUMNS if k != "wall_s"] + [k for k, *_ in OPTIONAL_COLUMNS] + ["wall_s"]


class SweepMethod(MethodSpec):
    """One method of the sweep: label, what runs (a ``method`` preset and/or a ``selector`` and
    an ``algorithm``), options, other overrides (dotted keys) and the grid keys it depends on
    (None = all)."""

    overrides: dict[str, Any] = Field(default_factory=dict)
    grid_keys: list[str] | None = None

    def layers(self, i: int) -> list[Layer]:
        """Where this entry (``methods.<i>``) gives keys of its experiments, highest first."""
        return [Layer.of(f"methods.{i}", self.overrides, "overrides."), Layer(f"methods.{i}", self.given())]


class SweepPaperFigure(BaseModel):
    """A figure the paper reports for one method at one grid point, printed beside ours in
    ``table.md``: ``point`` (dotted grid key -> value; keys left out match any value) and
    ``figures`` (column -> the paper's value, e.g. ``{alpha: 367}``)."""

    model_config = ConfigDict(extra="forbid")
    method: str
    point: dict[str, Any] = Field(default_factory=dict)
    figures: dict[str, Any] = Field(min_length=1)


class SweepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)
    name: str = "sweep"
    base: dict[str, Any] = Field(default_factory=dict)
    methods: list[SweepMethod] = Field(min_length=1)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    columns: list[str] | None = Field(
        None, min_length=1, description="summary figures to table; omitted: those of AUTO_COLUMNS some run has"
    )
    comment: str | None = None
    paper: list[SweepPaperFigure] | None = Field(None, description="the paper's figures, printed beside ours in table.md")
    paper_source: str | None = None
    baseline: str | None = Field(
        None, description="method label: paired differences of every other method against it, per grid point"
    )
    set_: dict[str, Any] = Field(
        default_factory=dict, alias="set", description="dotted keys set in every run, over the methods' own (--set)"
    )

    @model_validator(mode="after")
    def _check(self) -> "SweepConfig":
        labels = [m.label for m in self.methods]
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
            bad = sorted(set(f.figures) - set(self.columns)) if self.columns is not None else []
            if bad:
                raise ValueError(f"paper[{i}].figures {bad} are not table columns {self.columns}")
        return self

    def points(self) -> list[dict[str, Any]]:
        """Every grid point (dotted key -> value), in the product order of ``grid``."""
        keys = list(self.grid)
        return [dict(zip(keys, vals)) for vals in itertools.product(*(self.grid[k] for k in keys))]

    def experiment_doc(self, m: SweepMethod, point: dict[str, Any], seed: int) -> dict[str, Any]:
        """The experiment mapping of ``m`` at ``point`` with ``seed``, in layers: the base, the
        method (what runs, its overrides), the grid point, then ``set``."""
        doc = m.apply(copy.deepcopy(self.base))
        doc.update(seed=seed, name=f"{self.name}/{m.label}")
        doc = apply_overrides(doc, m.overrides)
        doc = apply_overrides(doc, point)
        return apply_overrides(doc, self.set_)

    def resolved(self, m: SweepMethod, point: dict[str, Any], seed: int) -> Resolved:
        """The resolved experiment of method ``m`` at grid ``point`` with ``seed``: what its run is
        planned from.

        Raises:
            ConfigError: the experiment is invalid (names the method and point)."""
        return resolve_doc(self.experiment_doc(m, point, seed), f"{self.name}: {m.label} at {point or 'base'}, seed {seed}")

    def experiment(self, m: SweepMethod, point: dict[str, Any], seed: int) -> ExperimentConfig:
        """The resolved config of :meth:`resolved` (every default written out)."""
        return self.resolved(m, point, seed).config


def parse_sweep(doc: Any, source: str = "<dict>") -> SweepConfig:
    """Validate a sweep mapping and every experiment in it (before anything runs), all
    problems in one pass: each named by where it was given (``base.trian``,
    ``methods.1.method``, ``grid.clients_per_round``, ``set.train.lr``), once however many runs
    share it. Two runs whose directories would be one (labels, or grid points, that differ
    only in spaces, case or characters a file name cannot hold) are refused, naming both.

    Raises:
        ConfigError: naming every key that is wrong and what is allowed.
    """
    grid = doc.get("grid") if isinstance(doc, dict) and isinstance(doc.get("grid"), dict) else {}
    grid_keys = {k: f"a grid key of this sweep (grid.{k}); change its values in `grid:`" for k in grid}
    sc, entries, problems, seed = validate_contenders(
        SweepConfig,
        SweepMethod,
        doc,
        source,
        "sweep",
        {**SET_REFUSED, **grid_keys},
        "in the run directories runs/LABEL-<point>-s<seed>",
        grid={k: v for k, v in grid.items() if isinstance(v, list) and v},
    )
    runs, dirs = [], []
    for i, m in entries:
        for rp in _distinct(_restrict(p, m) for p in sc.points()):
            layers = [Layer.of("set", sc.set_), Layer.of("grid", rp), *m.layers(i), Layer.of("base", sc.base)]
            found = problems_of(lambda m=m, rp=rp: sc.experiment(m, rp, seed))
            runs.append((f"methods.{i} ({m.label!r}) at {rp or 'the base'}", layers, found))
            dirs.append((f"methods.{i} ({m.label!r}) at {rp}", run_dir_for(Path(), m.label, rp, seed).name))
    problems += contender_problems(runs)
    if not any(k.endswith(".label") for k, _ in problems):  # clashing labels clash at every point
        for a, b, na, nb in clashes(dirs):
            problems.append(
                (
                    "grid",
                    clash_message(
                        a,
                        b,
                        na,
                        nb,
                        "as run directories in runs/ (in a point, characters other than ASCII letters, digits and _ . = + - become _)",
                        "grid values",
                    ),
                )
            )
    if problems:
        raise ConfigError.listing(source, problems, "sweep")
    return sc


def _distinct(points) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in points:
        if p not in out:
            out.append(p)
    return out


def load_sweep(path: str | Path, overrides: dict[str, Any] | None = None) -> SweepConfig:
    """Read and validate a sweep YAML; ``overrides`` (dotted keys, the command line's
    ``--set``) join its ``set``: they apply to every run, over the methods' own values (a grid
    key is refused). Raises FileNotFoundError, ConfigError."""
    doc = read_yaml_file(path, "sweep")
    if "grid" not in (doc if isinstance(doc, dict) else {}) and config_kind(doc) == "compare":
        raise ConfigError(f"{path} is a comparison config (no grid): run it with `fedselect compare {path}`")
    if isinstance(doc, dict) and config_kind(doc) == "experiment" and "methods" not in doc and "base" not in doc:
        raise ConfigError(
            f"{path} is an experiment config (no base, methods or grid): run it with `fedselect run {path}`; "
            "a sweep config has `base:` (an experiment), `methods:`, `grid:` (dotted keys -> lists of values) and `seeds:` "
            "(e.g. configs/budgeted-sweep-small.yaml)"
        )
    return parse_sweep(join_set(doc, overrides, str(path), "sweep"), str(path))


def saved_sweep(directory: str | Path) -> SweepConfig:
    """The sweep a directory's ``sweep.json`` records.

    Raises:
        FileNotFoundError: no sweep.json there. ConfigError: it is invalid.
    """
    spec = read_json(Path(directory) / "sweep.json")
    spec.pop("runs", None)
    if isinstance(spec.get("base"), dict):  # saved before they were refused: they were not used then either
        spec["base"] = {k: v for k, v in spec["base"].items() if k not in BASE_REFUSED}
    spec["base"] = with_pre_validation_values(spec.get("base") or {})  # one saved before them lacks them
    return parse_sweep(spec, str(Path(directory) / "sweep.json"))


def _restrict(point: dict[str, Any], m: SweepMethod) -> dict[str, Any]:
    return {k: v for k, v in point.items() if m.grid_keys is None or k in m.grid_keys}


def _slug(point: dict[str, Any]) -> str:
    if not point:
        return "base"
    parts = [f"{k.split('.')[-1]}={v}" for k, v in point.items()]
    return re.sub(r"[^A-Za-z0-9_.=+-]", "_", ",".join(parts))


def run_dir_for(out: Path, label: str, rp: dict[str, Any], seed: int) -> Path:
    """A run's directory inside a sweep directory."""
    return Path(out) / "runs" / f"{file_name(label)}-{_slug(rp)}-s{seed}"


def _fed_key(cfg: ExperimentConfig) -> str:
    from fedselect.world.federation import federation_key

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
    sc = saved_sweep(d)
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
    plots: bool = True,
) -> dict[str, Any]:
    """Run every (method, restricted grid point, seed) once and write the table (and, with
    ``plots``, each grid point's plots).

    Finished runs (``summary.json``) are kept, interrupted ones continue from their last
    checkpoint (:func:`fedselect.study.backends.run_one`). ``backend``: a
    :class:`fedselect.study.backends.LocalBackend` (default; runs sharing a federation key share
    one federation) or :class:`fedselect.study.backends.RayBackend` (one Ray task per run).
    ``on_run(i, total, description)`` is called before each run starts (local) or when it is
    submitted (Ray). Returns the table (see :func:`build_sweep_table`)."""
    from fedselect.study.backends import LocalBackend, RunCallbacks, RunSpec

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
        r = sc.resolved(m, rp, seed)
        groups.setdefault(_fed_key(r.config), []).append((m, rp, seed, r))
    finished = [
        (run_dir_for(out, m.label, rp, seed), r.config)
        for members in groups.values()
        for m, rp, seed, r in members
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
        RunSpec(r, run_dir_for(out, m.label, rp, seed), f"{m.label} {rp or ''} seed {seed}", group)
        for group, members in groups.items()
        for m, rp, seed, r in members
    ]
    epochs = {group: members[0][3].config.train.local_epochs for group, members in groups.items()}

    def write_info(group: str, fed: Any) -> None:  # what the plots read of a federation
        from fedselect.report.federations import federation_info

        write_json_atomic(_federation_file(out, group), federation_info(fed, epochs[group]))

    cb = RunCallbacks(on_start=(lambda s, i, n: on_run(i, n, s.description)) if on_run else None, on_federation=write_info)
    (backend or LocalBackend()).run(specs, cb, resume=True, out_dir=out, marker="sweep.json")
    return build_sweep_table(out, sc, plots=plots)


def _federation_file(out: Path, key: str) -> Path:
    """Where a sweep keeps the description of the federation of ``key`` (a federation key)."""
    import hashlib

    return out / "federations" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def table_columns(out: str | Path, sc: SweepConfig) -> list[str]:
    """The sweep's table columns: ``sc.columns`` when given, else those of
    :data:`AUTO_COLUMNS` that some finished run reports as a number (then the paper's figures
    not among them), so that no column is empty."""
    if sc.columns is not None:
        return list(sc.columns)
    summaries = [
        s for p in sc.points() for m in sc.methods for s in _summaries(Path(out), m.label, _restrict(p, m), sc.seeds).values()
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
            rp = _restrict(p, m)
            ident = (m.label, json.dumps(rp, sort_keys=True))
            if ident in seen:
                continue
            seen.add(ident)
            by_seed = _summaries(out, m.label, rp, sc.seeds)
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
            rp = _restrict(p, m)
            for seed in sc.seeds:
                d = run_dir_for(out, m.label, rp, seed)
                if (d / "metrics.csv").exists():
                    results.append(load_run_summary(d, m.label, seed))
                    f = _federation_file(out, _fed_key(sc.experiment(m, rp, seed)))
                    if seed not in feds and f.is_file():
                        feds[seed] = {**read_json(f), "seed": seed}
        if not results:
            continue
        sub = "" if len(points) == 1 else _slug(p)
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
            same = _fed_key(sc.experiment(m, rp, sc.seeds[0])) == _fed_key(sc.experiment(base_m, brp, sc.seeds[0]))
            result.append({"label": m.label, "point": point, "seeds": seeds, "cells": cells, "same_federation": same})
    return result


def _html_runs(out: Path, sc: SweepConfig) -> tuple[dict[str, Path], dict[str, list[float]]]:
    """For report.html: each method's run at the first grid point (the first seed that has a
    config) and the wall times (s) of each method's finished runs."""
    first = sc.points()[0] if sc.points() else {}
    dirs, walls = {}, {}
    for m in sc.methods:
        rp = _restrict(first, m)
        candidates = [run_dir_for(out, m.label, rp, s) for s in sc.seeds]
        dirs[m.label] = next((d for d in candidates if (d / "config.yaml").exists()), candidates[0])
        run_dirs = {run_dir_for(out, m.label, _restrict(p, m), s) for p in sc.points() for s in sc.seeds}
        found = [read_json(d / "summary.json").get("wall_s") for d in sorted(run_dirs) if (d / "summary.json").exists()]
        walls[m.label] = [w for w in found if isinstance(w, (int, float))]
    return dirs, walls
