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
(:mod:`fedselect.study.backends`, ``fedselect sweep --backend ray``), with the same results.
This module holds the sweep's config and where its runs are; :func:`fedselect.study.sweep_run.run_sweep`
runs them and :func:`fedselect.study.sweep_table.build_sweep_table` makes the table. The table (``table.csv``, ``table.md``)
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
import itertools
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fedselect.common.files import read_json
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
from fedselect.config.load import config_kind, read_yaml_file
from fedselect.config.overrides import apply_overrides
from fedselect.config.schema import ConfigError, ExperimentConfig
from fedselect.experiment.resolve import Resolved, resolve_doc
from fedselect.experiment.resume import check_saved_runs, with_pre_validation_values


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
        for rp in _distinct(restrict(p, m) for p in sc.points()):
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


def restrict(point: dict[str, Any], m: SweepMethod) -> dict[str, Any]:
    """``point`` restricted to the grid keys method ``m`` depends on (its ``grid_keys``; all without them)."""
    return {k: v for k, v in point.items() if m.grid_keys is None or k in m.grid_keys}


def point_slug(point: dict[str, Any]) -> str:
    """A grid point as part of a directory name: ``num_clients=100,r2=1`` (the last part of each
    dotted key; characters other than ASCII letters, digits and ``_ . = + -`` become ``_``),
    ``base`` for no point."""
    if not point:
        return "base"
    parts = [f"{k.split('.')[-1]}={v}" for k, v in point.items()]
    return re.sub(r"[^A-Za-z0-9_.=+-]", "_", ",".join(parts))


def run_dir_for(out: Path, label: str, rp: dict[str, Any], seed: int) -> Path:
    """A run's directory inside a sweep directory."""
    return Path(out) / "runs" / f"{file_name(label)}-{point_slug(rp)}-s{seed}"


def federation_key_of(cfg: ExperimentConfig) -> str:
    """The federation key of a run's config (:func:`fedselect.world.federation.federation_key`):
    runs with the same key share one federation."""
    from fedselect.world.federation import federation_key

    return federation_key(cfg)


def federation_file(out: Path, key: str) -> Path:
    """Where a sweep keeps the description of the federation of ``key`` (a federation key)."""
    import hashlib

    return out / "federations" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def run_summaries(out: Path, label: str, rp: dict[str, Any], seeds: list[int]) -> dict[int, dict[str, Any]]:
    """seed -> summary.json of the finished runs of (label, restricted point)."""
    found = {}
    for seed in seeds:
        f = run_dir_for(out, label, rp, seed) / "summary.json"
        if f.exists():
            found[seed] = read_json(f)
    return found


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
                rp = restrict(p, m)
                run_dir = run_dir_for(d, m.label, rp, seed)
                if (run_dir / "summary.json").exists():
                    items.append((run_dir, sc.experiment(m, rp, seed)))
    check_saved_runs(
        items,
        f"sweep directory {d}",
        "The table would mix results of different configs: re-run the sweep into another --out",
        inputs=False,  # a report reads saved metrics only
    )
