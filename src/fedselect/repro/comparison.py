"""A ``kind: compare`` entry: one comparison config run over seeds into ``<out>/<id>``, its
report rebuilt from the saved runs and each claim judged (:func:`judge_entry`)."""

from __future__ import annotations

import math
from typing import Any

from fedselect.repro.manifest import Claim, Entry, EntryResult, Job, Judged, _is_fraction, verdict
from fedselect.repro.record import _machines, _runs_wall, recorded_wall, session


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
    from fedselect.report.aggregate import paired_table, run_value
    from fedselect.report.stats import paired_interval

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
            vals = [run_value(r, key) for r in results if r.label == c.method]
            xs = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
            if xs:
                iv = paired_interval(xs)
                mean, low, high, n = iv.mean, iv.low, iv.high, iv.n
                if iv.spread == "none":  # every seed gave the same value: a zero-width interval
                    low = high = mean
        v, why = verdict(
            c.value, mean, low, high, relative, entry.substitute, entry.tolerance, _is_fraction(key), c.tolerance_pct
        )
        out.append(Judged(c, mean, low, high, n, v, why))
    return out


def with_method_options(cc: Any, options: dict[str, dict[str, Any]], where: str) -> Any:
    """The comparison ``cc`` with ``options[label]`` merged over each named method's
    ``method_options`` (validated again).

    Raises:
        ConfigError: a label that is not one of the comparison's, or an option its method refuses."""
    from fedselect.config.schema import ConfigError
    from fedselect.study.compare import parse_compare

    labels = [m.label for m in cc.methods]
    unknown = [k for k in options if k not in labels]
    if unknown:
        raise ConfigError(f"{where}: unknown method label(s) {unknown}; allowed: {labels}")
    doc = cc.model_dump(mode="json")
    for m in doc["methods"]:
        if m["label"] in options:
            m["method_options"] = {**(m.get("method_options") or {}), **options[m["label"]]}
    return parse_compare(doc, where)


def run_compare_entry(entry: Entry, job: Job) -> EntryResult:
    """Run (or finish, or keep) one entry's comparison in ``out/<id>`` and judge it. With
    ``run=False`` nothing runs: a comparison already in ``out/<id>`` is judged as it is (its
    incomplete runs listed), a missing one is returned with ``ran=False``.

    Raises:
        FileNotFoundError: the entry's config is missing. ConfigError: it is invalid.
    """
    from fedselect.report.build import build_report
    from fedselect.study.compare import check_comparison_runs, load_compare, run_comparison, run_dir_name

    out, quick, workers, run = job.out, job.quick, job.workers, job.run
    cfg_path = job.config_path(entry)
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
    resume = (d / "compare.json").is_file()
    if not run and not resume:
        return EntryResult(entry, d, cc.seeds, 0.0, 0.0, command=cmd, ran=False)
    done = resume and all((d / run_dir_name(m.label, sd) / "summary.json").is_file() for sd in cc.seeds for m in cc.methods)
    if run and not done:  # a finished comparison is kept as it is
        job.say(f"{entry.id}: {'continuing' if resume else 'running'} {len(cc.methods)} methods x {len(cc.seeds)} seeds")
        with session(d):
            run_comparison(cc, d, resume=resume)
    check_comparison_runs(d)
    rep = build_report(d)
    runs_wall = _runs_wall(d)
    res = EntryResult(entry, d, cc.seeds, recorded_wall(d) or runs_wall, runs_wall, judge_entry(entry, rep), command=cmd)
    res.incomplete = [x for e in rep["table"] for x in e["incomplete"]] + [
        f"{m['dir']} (missing)" for m in rep.get("missing") or []
    ]
    res.plots = [p for p in (d / "plots").glob("*.png") if p.stem in ("metric_vs_latency", "latency_vs_round", "metric_vs_round")]
    res.machines = _machines(d)
    res.test_decisions = [e["label"] for e in rep["table"] if e.get("test_decisions")]
    if entry.table:
        res.markdown = rep["markdown"]
    return res
