"""``fedselect reproduce``: the papers' headline figures, run over seeds, judged, written up.

A manifest (default ``configs/reproduce.yaml``) lists *entries*: one comparison config each
(the configs of ``configs/paper/`` and friends), the seeds (at least 5 for the full variant),
the dotted-key overrides of its small ``--quick`` variant, and the paper's figures to set
ours against (default: the comparison's own ``paper:`` section). For every entry the command
runs the comparison into ``OUT/<id>`` (a finished one is kept; an interrupted one resumes),
rebuilds its report from the saved run directories (:func:`fedselect.report.build_report`)
and judges each figure:

* ``<key>_vs`` (the change against the comparison's baseline, or against the claim's ``vs``
  label: accuracy in points, latency, rounds and communication in percent): ours is the mean of
  the per-seed paired differences with its 95% Student-t interval (the comparison's
  ``paired.csv`` for the baseline);
* any other key (e.g. ``final_accuracy`` as a fraction): the mean over seeds with its 95%
  Student-t interval.

Verdicts (:func:`verdict`): **reproduced** (a change: the paper's value lies inside our
interval and the interval excludes 0, or the paper's change is negligible, under 1 point / 1%,
and our interval is no wider than +-2; an absolute accuracy: within ``tolerance`` of our mean, or inside an interval
no wider than +-0.05; a direction claim ``"> 0"``: our interval lies above 0; a bound ``"<= -98"``:
our whole interval lies at or below -98), **direction
only** (a change of the paper's sign whose interval excludes 0, but not the paper's size),
**inconclusive** (the interval holds both the paper's value and no change, or is too wide),
**not reproduced** (the interval holds 0 where the paper reports a change, or the sign is the
opposite, or an absolute value outside it), **reference only** (substitute data: the paper's
absolute values are another data set's), **not judged** (fewer than 2 seeds, no value, or a
text claim).

A ``kind: sweep`` entry (the budgeted-online paper's Table VI grid) runs ``fedselect sweep``
(:func:`fedselect.sweep.run_sweep`) into ``OUT/<id>`` instead (``quick_grid``: the tiny grid of
``--quick``) and is summarised, not judged: per method the mean over the grid's cells and the
best cell (final accuracy, share of fat clients selected, candidates evaluated, competitive
ratio), the final-accuracy difference of every method to the sweep's baseline per cell (mean,
best, worst, cells above 0), the time, the command, and the paper's plots: accuracy vs N, R
and r2 (each averaged over the other axes) and the share of fat clients selected per method
(:func:`sweep_grid_summary`, :func:`sweep_plots`).

A claim with ``vs: LABEL`` is judged on the per-seed paired differences against that method
instead of the baseline, and ``"> X"`` / ``"<= X"`` ... states a bound (``"> -2"`` with
``vs: offline best``: within 2 points of it; an interval holding X is inconclusive).

The result is ``OUT/reproduction.md`` (and, with ``doc=``, a copy such as
``docs/reproduction.md``): per entry the paper's figure, ours with its interval, the verdict,
the config and the command that made it, the seeds, the machine and the time it took, and
the entry's plots (copied next to the document).
"""

from __future__ import annotations

import math
import os
import platform
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from fedselect.runfiles import atomic_write

__all__ = ["Claim", "Entry", "Manifest", "Judged", "load_manifest", "verdict", "judge_entry", "reproduce", "render"]

PAPERS = ("flashrl", "cefl", "budgeted")
#: a paper's change this small (points or percent) is "no change" ...
NEGLIGIBLE = 1.0
#: ... and ours agrees when its interval lies within +-TIGHT (points or percent)
TIGHT = 2.0
#: an absolute fraction's interval wider than +-WIDE says too little to call it reproduced
WIDE = 0.05
#: figures given as fractions (accuracy, F1): a tolerance in the same unit applies to them
FRACTION_PREFIXES = ("final_accuracy", "best_accuracy", "final_f1", "last_k_")


class Claim(BaseModel):
    """One figure of a paper: ``method`` (a label of the comparison), ``figure`` (a table key,
    ``<key>_vs`` for the change against the baseline, or against ``vs``, another label of the
    comparison) and the paper's ``value``: a number in the table's units, ``"> 0"`` / ``"< 0"``
    for a claim of direction only (e.g. "secretary above online random"), a bound ``"<= -98"``
    / ``">= 5"`` / ``"< x"`` / ``"> x"`` (our whole interval must lie beyond it: e.g. CEFL's
    communication at most 2% of Regular FL's), or another text, printed as is and not judged."""

    model_config = ConfigDict(extra="forbid")
    method: str
    figure: str
    value: float | str
    vs: str | None = Field(None, description="a `_vs` figure against this label instead of the comparison's baseline")
    note: str | None = None


class Entry(BaseModel):
    """One reproduced table or experiment (module docstring)."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$", description="directory name under --out")
    kind: Literal["compare", "sweep"] = Field(
        "compare", description="compare: a comparison judged claim by claim; sweep: a `fedselect sweep` grid, summarised"
    )
    quick_grid: dict[str, list[Any]] | None = Field(None, description="sweep entries: the grid --quick runs instead")
    paper: Literal["flashrl", "cefl", "budgeted"]
    title: str
    config: str = Field(description="comparison (or sweep) config, relative to the manifest's directory's parent or absolute")
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2, 3, 4], min_length=1)
    quick: dict[str, Any] = Field(
        default_factory=dict,
        description="dotted-key overrides of the base for --quick; `rounds` sets every method's, its own included",
    )
    quick_seeds: list[int] = Field(default_factory=lambda: [0, 1], min_length=1)
    quick_methods: list[str] | None = Field(None, description="labels kept in --quick (default all)")
    quick_method_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="label -> method_options merged over that method's in --quick (e.g. a shorter transfer)"
    )
    claims: list[Claim] | None = Field(None, description="default: the comparison's paper: section")
    substitute: bool = Field(False, description="substitute data: absolute figures are a reference only")
    tolerance: float = Field(0.01, ge=0, description="accuracy fractions within this of ours count as reproduced")
    finding: str | None = Field(None, description="what we found, printed under the entry's table")
    table: bool = Field(
        False,
        description="also show the comparison's whole table (every method's figures, mean +- sd, and the paired "
        "differences against the baseline with 95% intervals), e.g. for methods the paper has no figure for",
    )


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = "The papers' results, reproduced"
    entries: list[Entry] = Field(min_length=1)


def load_manifest(path: str | Path) -> tuple[Manifest, Path]:
    """The manifest at ``path`` and the directory its config paths are relative to (the
    repository root: the manifest's directory's parent for ``configs/reproduce.yaml``).

    Raises:
        FileNotFoundError: no such file. ConfigError: an invalid manifest (names the key).
    """
    from fedselect.config import read_yaml_file, validate_model

    p = Path(path)
    doc = read_yaml_file(p, "reproduction manifest") or {}
    m = validate_model(Manifest, doc, str(p), "reproduction manifest")
    ids = [e.id for e in m.entries]
    if len(set(ids)) != len(ids):
        from fedselect.config import ConfigError

        raise ConfigError(
            f"invalid reproduction manifest {p}:\n  entries: duplicate ids {sorted({i for i in ids if ids.count(i) > 1})}"
        )
    return m, p.resolve().parent.parent


@dataclass
class Judged:
    """One claim with our figure: ``mean``, ``low``/``high`` (95% interval or None), ``n``
    seeds, the ``verdict`` and its ``why``."""

    claim: Claim
    mean: float | None
    low: float | None
    high: float | None
    n: int
    verdict: str
    why: str


@dataclass
class EntryResult:
    entry: Entry
    directory: Path
    seeds: list[int]
    wall_s: float
    runs_wall_s: float
    judged: list[Judged] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    command: str = ""
    ran: bool = True
    incomplete: list[str] = field(default_factory=list)
    grid: dict[str, Any] | None = None  # sweep entries: :func:`sweep_grid_summary`
    machines: list[str] = field(default_factory=list)  # where the runs were made (RECORD), oldest first
    markdown: str | None = None  # the comparison's own table.md (entries with ``table: true``)


def _is_fraction(key: str) -> bool:
    return key.startswith(FRACTION_PREFIXES)


_BOUND = re.compile(r"^\s*(<=|>=|<|>)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")


def parse_bound(value: float | str) -> tuple[str, float] | None:
    """``("<=", -98.0)`` for the claim ``"<= -98"`` (also ``<``, ``>``, ``>=``; ``"> 0"`` is the
    direction claim); None for a number or any other text."""
    if not isinstance(value, str):
        return None
    m = _BOUND.match(value)
    return (m.group(1), float(m.group(2))) if m else None


def verdict(
    value: float | str,
    mean: float | None,
    low: float | None,
    high: float | None,
    relative: bool,
    substitute: bool,
    tolerance: float,
) -> tuple[str, str]:
    """``(verdict, why)`` for one figure (module docstring): ``value`` the paper's, ``mean``
    and ``[low, high]`` ours (None: no interval), ``relative`` for a change against the
    baseline, ``substitute`` for another data set than the paper's."""
    bound = parse_bound(value)
    if isinstance(value, str) and bound is None:
        return "not judged", "the paper states it as text, not one experiment's number"
    if mean is None:
        return "not judged", "we have no value (the target was never reached, or the method did not run)"
    if low is None or high is None:
        return "not judged", "fewer than 2 seeds (no interval)"
    if bound is not None and bound[1] == 0 and bound[0] in ("<", ">"):  # a claim of direction only
        direction = f"{bound[0]} 0"
        if (direction == "> 0" and low > 0) or (direction == "< 0" and high < 0):
            return "reproduced", f"the paper's direction ({direction}) with our interval excluding 0"
        if low <= 0 <= high:
            return "not reproduced", "our interval holds 0: no difference we can tell from seed-to-seed noise"
        return "not reproduced", "the opposite direction, with an interval excluding 0"
    if bound is not None:  # a bound: our whole interval beyond it
        op, c = bound
        text = f"{op} {c:g}"
        inside = {"<": high < c, "<=": high <= c, ">": low > c, ">=": low >= c}[op]
        outside = {"<": low >= c, "<=": low > c, ">": high <= c, ">=": high < c}[op]
        if inside:
            return "reproduced", f"our whole 95% interval is {text}"
        if outside:
            return "not reproduced", f"our whole 95% interval is on the other side of {c:g}"
        return "inconclusive", f"our interval holds {c:g}: more seeds needed to tell whether it is {text}"
    if substitute and not relative:
        return "reference only", "substitute data: the paper's absolute figure is another data set's"
    if relative and low <= value <= high:
        if not low <= 0 <= high:
            return "reproduced", "the paper's value lies inside our 95% interval, which excludes 0"
        if abs(value) <= NEGLIGIBLE and high - low <= 2 * TIGHT:
            return "reproduced", "no change beyond the seed-to-seed noise, as in the paper"
        return "inconclusive", "our interval holds both the paper's change and no change: more seeds needed"
    if not relative and abs(mean - value) <= tolerance:
        return "reproduced", f"within {tolerance:g} of our mean"
    if not relative and low <= value <= high:
        if high - low <= 2 * WIDE:
            return "reproduced", "the paper's value lies inside our 95% interval"
        return "inconclusive", f"our interval is wider than +-{WIDE:g}: more seeds needed"
    if relative:
        if value != 0 and (low > 0 or high < 0) and math.copysign(1, mean) == math.copysign(1, value):
            return "direction only", "the same direction with an interval excluding 0, but not the paper's size"
        if low <= 0 <= high:
            return "not reproduced", "our interval holds 0: no change we can tell from seed-to-seed noise"
        return "not reproduced", "the opposite direction"
    return "not reproduced", f"ours {mean:.4g} [{low:.4g}, {high:.4g}] against the paper's {value:g}"


def _claims(entry: Entry, rep: dict[str, Any]) -> list[Claim]:
    if entry.claims is not None:
        return entry.claims
    out = []
    for label, figs in (rep.get("paper") or {}).items():
        for key, val in figs.items():
            out.append(Claim(method=label, figure=key, value=val))
    return out


def judge_entry(entry: Entry, rep: dict[str, Any]) -> list[Judged]:
    """Each claim of ``entry`` against the comparison report ``rep`` (:func:`build_report`)."""
    from fedselect.stats import paired_interval
    from fedselect.tables import _value, paired_table

    results, baseline = rep["results"], rep["baseline"]
    pairs = {baseline: {p["label"]: p for p in rep.get("paired") or []}}
    out = []
    ran = set(rep["labels"])
    for c in _claims(entry, rep):
        against = c.vs or baseline
        if c.method not in ran or against not in ran:  # e.g. a method left out of the quick variant
            continue
        if against not in pairs:  # the paired differences against another label than the baseline
            pairs[against] = {p["label"]: p for p in paired_table(results, rep["labels"], against, rep.get("quantities"))}
        paired = pairs[against]
        relative = c.figure.endswith("_vs")
        key = c.figure[: -len("_vs")] if relative else c.figure
        mean = low = high = None
        n = 0
        if relative:
            cell = None if c.method == against else paired.get(c.method, {}).get("cells", {}).get(key)
            if cell is not None:
                iv = cell["interval"]
                mean, low, high, n = iv.mean, iv.low, iv.high, iv.n
        else:
            vals = [_value(r, key) for r in results if r.label == c.method]
            xs = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
            if xs:
                iv = paired_interval(xs)
                mean, low, high, n = iv.mean, iv.low, iv.high, iv.n
                if iv.spread == "none":  # every seed gave the same value: a zero-width interval
                    low = high = mean
        v, why = verdict(c.value, mean, low, high, relative, entry.substitute, entry.tolerance)
        out.append(Judged(c, mean, low, high, n, v, why))
    return out


def _machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    try:  # the CPU's model name where Linux tells it
        names = [x.split(":", 1)[1].strip() for x in Path("/proc/cpuinfo").read_text().splitlines() if x.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs ({cpu}), torch {torch.__version__}, {torch.get_num_threads()} threads"


#: the file in an entry's directory that says on which machines its runs were made
RECORD = "reproduce.json"


def record_session(directory: Path, machine: str, started: float, wall_s: float) -> None:
    """Append one session (the machine, its start as a UTC ISO time, its wall seconds) to
    ``directory/RECORD`` (written atomically), so that the document rebuilt later, elsewhere,
    still names the hardware the runs were made on."""
    from datetime import datetime, timezone

    from fedselect.runfiles import write_json_atomic

    sessions = read_sessions(directory)
    sessions.append(
        {
            "machine": machine,
            "started": datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="seconds"),
            "wall_s": round(wall_s, 1),
        }
    )
    write_json_atomic(directory / RECORD, {"sessions": sessions})


def read_sessions(directory: Path) -> list[dict[str, Any]]:
    """The sessions recorded in ``directory/RECORD`` (empty when there is none or it is unreadable)."""
    import json

    try:
        doc = json.loads((directory / RECORD).read_text())
    except (OSError, ValueError):
        return []
    sessions = doc.get("sessions") if isinstance(doc, dict) else None
    return [x for x in sessions or [] if isinstance(x, dict) and isinstance(x.get("machine"), str)]


def _machines(directory: Path) -> list[str]:
    return list(dict.fromkeys(x["machine"] for x in read_sessions(directory)))


def _runs_wall(directory: Path) -> float:
    import json

    total = 0.0
    for s in (directory / "runs").glob("*/summary.json"):
        try:
            total += float(json.loads(s.read_text()).get("wall_s") or 0.0)
        except (OSError, ValueError):
            continue
    return total


def with_method_options(cc: Any, options: dict[str, dict[str, Any]], where: str) -> Any:
    """The comparison ``cc`` with ``options[label]`` merged over each named method's
    ``method_options`` (validated again).

    Raises:
        ConfigError: a label that is not one of the comparison's, or an option its method refuses."""
    from fedselect.compare import parse_compare
    from fedselect.config import ConfigError

    labels = [m.label for m in cc.methods]
    unknown = [k for k in options if k not in labels]
    if unknown:
        raise ConfigError(f"{where}: unknown method label(s) {unknown}; allowed: {labels}")
    doc = cc.model_dump(mode="json")
    for m in doc["methods"]:
        if m["label"] in options:
            m["method_options"] = {**(m.get("method_options") or {}), **options[m["label"]]}
    return parse_compare(doc, where)


def run_entry(
    entry: Entry,
    root: Path,
    out: Path,
    quick: bool,
    on_progress: Callable[[str], None] | None = None,
    workers: int | None = None,
    run: bool = True,
) -> EntryResult:
    """Run (or finish, or keep) one entry's comparison in ``out/<id>`` and judge it. With
    ``run=False`` nothing runs: a comparison already in ``out/<id>`` is judged as it is (its
    incomplete runs listed), a missing one is returned with ``ran=False``.

    Raises:
        FileNotFoundError: the entry's config is missing. ConfigError: it is invalid.
    """
    if entry.kind == "sweep":
        return run_sweep_entry(entry, root, out, quick, on_progress, workers, run)
    from fedselect.compare import check_comparison_runs, load_compare, run_comparison, run_dir_name
    from fedselect.report import build_report

    cfg_path = Path(entry.config) if Path(entry.config).is_absolute() else root / entry.config
    overrides = dict(entry.quick) if quick else {}
    quick_rounds = overrides.pop("rounds", None)  # every method's, its own `rounds` included
    if workers is not None:
        overrides["train.workers"] = workers
    cc = load_compare(cfg_path, overrides or None)
    if quick_rounds is not None:
        cc = cc.with_rounds(quick_rounds)
    cc.seeds = list(entry.quick_seeds if quick else entry.seeds)
    if quick and entry.quick_method_options:
        cc = with_method_options(cc, entry.quick_method_options, f"entry {entry.id!r}: quick_method_options")
    if quick and entry.quick_methods:
        keep = set(entry.quick_methods)
        cc.methods = [m for m in cc.methods if m.label in keep]
    d = out / entry.id
    seeds = ",".join(map(str, cc.seeds))
    sets = " ".join(f"--rounds {v}" if k == "rounds" else f"--set {k}={v}" for k, v in (entry.quick.items() if quick else []))
    cmd = f"fedselect compare {entry.config} --seeds {seeds}" + (f" {sets}" if sets else "") + f" --out {d}"
    if quick and entry.quick_method_options:  # not a command-line option: said beside the command
        cmd += "  # with method_options " + "; ".join(f"{k}: {v}" for k, v in entry.quick_method_options.items())
    t0 = time.perf_counter()
    resume = (d / "compare.json").is_file()
    if not run and not resume:
        return EntryResult(entry, d, cc.seeds, 0.0, 0.0, command=cmd, ran=False)
    done = resume and all((d / run_dir_name(m.label, sd) / "summary.json").is_file() for sd in cc.seeds for m in cc.methods)
    if run and not done:  # a finished comparison is kept as it is
        if on_progress:
            on_progress(f"{entry.id}: {'continuing' if resume else 'running'} {len(cc.methods)} methods x {len(cc.seeds)} seeds")
        started = time.time()
        run_comparison(cc, d, resume=resume)
        record_session(d, _machine(), started, time.perf_counter() - t0)
    check_comparison_runs(d)
    rep = build_report(d)
    runs_wall = _runs_wall(d)
    res = EntryResult(
        entry, d, cc.seeds, time.perf_counter() - t0 if run else runs_wall, runs_wall, judge_entry(entry, rep), command=cmd
    )
    res.incomplete = [x for e in rep["table"] for x in e["incomplete"]] + [
        f"{m['dir']} (missing)" for m in rep.get("missing") or []
    ]
    res.plots = [p for p in (d / "plots").glob("*.png") if p.stem in ("metric_vs_latency", "latency_vs_round", "metric_vs_round")]
    res.machines = _machines(d)
    if entry.table:
        res.markdown = rep["markdown"]
    return res


#: axis titles of the budgeted-online grid keys in the sweep plots
AXIS_TITLES = {
    "data.num_clients": "N (candidate clients)",
    "clients_per_round": "R (clients selected)",
    "method_options.r2": "r2 (record window)",
}
#: per-cell figures a sweep entry summarises (mean over seeds, then over the grid's cells)
GRID_KEYS = ("final_accuracy", "fat_selected_share", "candidates_evaluated", "competitive_ratio", "wall_s")


def _sweep_config(entry: Entry, root: Path, quick: bool, workers: int | None):
    from fedselect.config import apply_overrides
    from fedselect.sweep import load_sweep, parse_sweep

    cfg_path = Path(entry.config) if Path(entry.config).is_absolute() else root / entry.config
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
    import numpy as np

    from fedselect.sweep import _restrict, _summaries

    d = Path(directory)
    baseline = baseline if baseline is not None else sc.baseline
    points = sc.points()
    values: dict[str, list[tuple[dict, dict, dict]]] = {}  # label -> [(full point, restricted, {key: mean})]
    runs = 0
    seen_runs: set[tuple[str, str]] = set()
    for m in sc.methods:
        rows = []
        for p in points:
            rp = _restrict(p, m)
            summ = _summaries(d, m.label, rp, sc.seeds)
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

    def mean_of(rows, key):
        xs = [c[key] for _, _, c in rows if c[key] is not None]
        return float(np.mean(xs)) if xs else None

    methods = {}
    for label, rows in values.items():
        found = [(rp, c) for _, rp, c in rows if c["final_accuracy"] is not None]
        best = max(found, key=lambda x: x[1]["final_accuracy"], default=None)
        methods[label] = {
            "mean": {key: mean_of(rows, key) for key in GRID_KEYS},
            "best": {"point": best[0], **best[1]} if best else None,
            "cells": len({repr(sorted(rp.items())) for _, rp, c in rows if c["final_accuracy"] is not None}),
        }
    differences = {}
    if baseline is not None and baseline in values:
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
    axes = {}
    for key, grid_values in sc.grid.items():
        if len(grid_values) < 2:
            continue
        per = {}
        for label, rows in values.items():
            per[label] = {
                what: [mean_of([r for r in rows if r[0][key] == v], what) for v in grid_values]
                for what in ("final_accuracy", "fat_selected_share")
            }
        axes[key] = {"values": list(grid_values), "methods": per}
    return {
        "methods": methods,
        "differences": differences,
        "baseline": baseline,
        "axes": axes,
        "cells": len(points),
        "runs": runs,
    }


def sweep_plots(grid: dict[str, Any], plot_dir: str | Path) -> list[Path]:
    """The budgeted-online paper's plots of a sweep entry (matplotlib PNGs in ``plot_dir``):
    final accuracy vs each grid axis (``accuracy_vs_<key>.png``, averaged over the other axes)
    and the share of fat clients among the selected per method (``fat_selected_share.png``,
    mean over the grid; only when the runs report ``fat_selected_share``). Returns the files."""
    from fedselect.plots import _plt

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


def run_sweep_entry(
    entry: Entry,
    root: Path,
    out: Path,
    quick: bool,
    on_progress: Callable[[str], None] | None = None,
    workers: int | None = None,
    run: bool = True,
) -> EntryResult:
    """Run (or finish, or keep) one sweep entry in ``out/<id>`` with ``fedselect sweep``
    (:func:`fedselect.sweep.run_sweep`: finished runs are kept) and summarise its grid
    (:func:`sweep_grid_summary`, :func:`sweep_plots` into ``out/<id>/plots``). With
    ``run=False`` a sweep already there is summarised as it is, a missing one returned with
    ``ran=False``.

    Raises:
        FileNotFoundError: the entry's config is missing. ConfigError: it is invalid.
    """
    from fedselect.sweep import _restrict, build_sweep_table, check_sweep_runs, run_sweep

    sc = _sweep_config(entry, root, quick, workers)
    d = out / entry.id
    seeds = ",".join(map(str, sc.seeds))
    cmd = (
        f"fedselect reproduce {entry.paper} --quick --out {out}"
        if quick
        else f"fedselect sweep {entry.config} --seeds {seeds} --out {d}"
    )
    t0 = time.perf_counter()
    present = (d / "sweep.json").is_file()
    if not run and not present:
        return EntryResult(entry, d, sc.seeds, 0.0, 0.0, command=cmd, ran=False)
    if run:
        if on_progress:
            on_progress(
                f"{entry.id}: {'continuing' if present else 'running'} the sweep ({len(sc.points())} grid points x {len(sc.seeds)} seeds)"
            )
        started = time.time()
        before = _runs_wall(d)
        run_sweep(sc, d)
        if _runs_wall(d) != before:  # something ran (a finished sweep only rebuilds its table)
            record_session(d, _machine(), started, time.perf_counter() - t0)
    else:
        check_sweep_runs(d)
        build_sweep_table(d, sc)
    runs_wall = _runs_wall(d)
    res = EntryResult(entry, d, sc.seeds, time.perf_counter() - t0 if run else runs_wall, runs_wall, command=cmd)
    res.grid = sweep_grid_summary(d, sc)
    res.plots = sweep_plots(res.grid, d / "plots")
    res.machines = _machines(d)
    expected = len(
        {(m.label, repr(sorted(_restrict(p, m).items())), s) for p in sc.points() for m in sc.methods for s in sc.seeds}
    )
    if res.grid["runs"] < expected:
        res.incomplete = [f"{expected - res.grid['runs']} of {expected} runs not finished"]
    return res


def _where(r: EntryResult) -> str:
    """Where and how long: ``"12.3 min on Linux x86_64, 2 CPUs ..."`` from the entry's record."""
    on = "on " + "; then on ".join(r.machines) if r.machines else "on a machine not recorded (runs made before reproduce.json)"
    return f"{r.wall_s / 60:.1f} min {on} (runs' own wall time {r.runs_wall_s / 60:.1f} min)"


def _whole_table(markdown: str) -> list[str]:
    """The comparison's table.md under the entry: its title dropped, its sections one level
    below the entry's heading."""
    lines = markdown.strip().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return (
        ["The comparison's whole table (its `table.md`; mean ± sample sd over seeds):", ""]
        + ["#" + x if x.startswith("## ") else x for x in lines]
        + [""]
    )


def _point(p: dict[str, Any]) -> str:
    return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in p.items()) or "base"


def _render_sweep(r: EntryResult, quick: bool, image_dir: str | None) -> list[str]:
    e, g = r.entry, r.grid or {}
    lines = []
    if r.incomplete:
        lines += ["Caution, incomplete sweep: " + ", ".join(r.incomplete) + " (the cells use the runs there are).", ""]

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
        lines += [e.finding.strip(), ""]
    lines += [
        f"Config `{e.config}`, seeds {', '.join(map(str, r.seeds))}; {_where(r)}. "
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


def _fmt(v: float | None, key: str) -> str:
    if v is None:
        return "-"
    if _is_fraction(key) and not key.endswith("_vs"):
        return f"{v:.4f}"
    return f"{v:+.2f}" if key.endswith("_vs") else f"{v:.4g}"


def render(title: str, results: list[EntryResult], quick: bool, image_dir: str | None = None) -> str:
    """The reproduction document (Markdown) for ``results``."""
    lines = [f"# {title}", ""]
    lines += [
        "Made by `fedselect reproduce" + (" --quick" if quick else "") + "` (docs/comparisons.md explains the tables). "
        "Every number below comes from a saved comparison directory that `fedselect report DIR` rebuilds; "
        "the command under each table makes it again. Ours: the mean over seeds with its 95% Student-t "
        "interval; for a `_vs` figure the mean of the per-seed paired differences against the baseline "
        "(accuracy in points, latency / rounds / communication in percent). Under each table: the machine its "
        "runs were made on (recorded in the directory's `reproduce.json`) and the time they took.",
        "",
    ]
    if quick:
        lines += [
            "**Quick variant**: small federations, few rounds and 2 seeds, to check the plumbing. Its numbers are not "
            "the papers' settings and its verdicts mean nothing about the papers.",
            "",
        ]
    for paper in PAPERS:
        rs = [r for r in results if r.entry.paper == paper]
        if not rs:
            continue
        lines += [f"## {dict(flashrl='FLASH-RL', cefl='CEFL', budgeted='Budgeted online selection')[paper]}", ""]
        for r in rs:
            e = r.entry
            lines += [f"### {e.title}", ""]
            if not r.ran:
                lines += [
                    f"**Not run yet** (config `{e.config}`, seeds {', '.join(map(str, r.seeds))}). To run it:",
                    "",
                    "```",
                    f"fedselect reproduce {e.paper}" + (" --quick" if quick else ""),
                    "```",
                    "",
                ]
                if e.finding:
                    lines += [e.finding.strip(), ""]
                continue
            if e.kind == "sweep":
                lines += _render_sweep(r, quick, image_dir)
                continue
            if r.incomplete:
                lines += ["Caution, incomplete runs (their existing rounds are used): " + ", ".join(r.incomplete), ""]
            lines += ["| method | figure | paper | ours (95% interval) | seeds | verdict |", "|---|---|---|---|---|---|"]
            for j in r.judged:
                ours = _fmt(j.mean, j.claim.figure)
                if j.low is not None and j.high is not None and j.mean is not None:
                    ours += f" [{_fmt(j.low, j.claim.figure)}, {_fmt(j.high, j.claim.figure)}]"
                pv = j.claim.value if isinstance(j.claim.value, str) else _fmt(float(j.claim.value), j.claim.figure)
                fig = f"`{j.claim.figure}`" + (f" vs {j.claim.vs}" if j.claim.vs else "")
                lines.append(f"| {j.claim.method} | {fig} | {pv} | {ours} | {j.n} | **{j.verdict}**: {j.why} |")
            lines.append("")
            counts = {v: sum(1 for j in r.judged if j.verdict == v) for v in dict.fromkeys(j.verdict for j in r.judged)}
            lines.append(
                "Verdict: "
                + (", ".join(f"{n} {v}" for v, n in counts.items()) or "no figures to judge")
                + "."
                + (" Substitute data: the paper's absolute figures are another data set's." if e.substitute else "")
            )
            if e.finding:
                lines += ["", e.finding.strip()]
            if r.markdown:
                lines += [""] + _whole_table(r.markdown)
            lines += [
                "",
                f"Config `{e.config}`, seeds {', '.join(map(str, r.seeds))}; {_where(r)}. Directory `{r.directory}`.",
                "",
                "```",
                r.command,
                f"fedselect report {r.directory}",
                "```",
                "",
            ]
            for p in r.plots:
                src = f"{image_dir}/{e.id}-{p.name}" if image_dir else str(p)
                lines += [f"![{e.id} {p.stem.replace('_', ' ')}]({src})", ""]
    return "\n".join(lines).rstrip() + "\n"


def reproduce(
    manifest: str | Path,
    out: str | Path,
    papers: list[str] | None = None,
    quick: bool = False,
    doc: str | Path | None = None,
    on_progress: Callable[[str], None] | None = None,
    workers: int | None = None,
    run: bool = True,
) -> tuple[Path, list[EntryResult]]:
    """Run every entry of ``manifest`` (of ``papers``, default all) into ``out``; write
    ``out/reproduction.md`` and, with ``doc``, a copy there with the plots in ``doc``'s
    ``img/reproduction/``. ``run=False``: run nothing, write the document from the comparisons
    already in ``out`` (the others listed as not run yet). Returns the document's path and the
    results.

    Raises:
        ValueError: an unknown paper name. FileNotFoundError, ConfigError: a bad manifest or config.
    """
    for p in papers or []:
        if p not in PAPERS:
            raise ValueError(f"unknown paper {p!r}; allowed: {', '.join(PAPERS)}")
    m, root = load_manifest(manifest)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    entries = [e for e in m.entries if not papers or e.paper in papers]
    results = [run_entry(e, root, out, quick, on_progress, workers, run) for e in entries]
    text = render(m.title, results, quick)
    target = out / "reproduction.md"
    atomic_write(target, lambda fh: fh.write(text))
    if doc is not None:
        doc = Path(doc)
        img = doc.parent / "img" / "reproduction"
        img.mkdir(parents=True, exist_ok=True)
        for r in results:
            for p in r.plots:
                shutil.copyfile(p, img / f"{r.entry.id}-{p.name}")
        text = render(m.title, results, quick, image_dir="img/reproduction")
        atomic_write(doc, lambda fh: fh.write(text))
        target = doc
    return target, results
