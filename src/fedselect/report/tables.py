"""Tables from saved metrics: per-run summaries (:func:`load_run_summary`), the mean ± std
table over seeds (:func:`aggregate_table`, with :func:`fedselect.report.stats.mean_std`), paired differences
against the baseline (:func:`paired_table`), and their Markdown / CSV renderings (used by
:mod:`fedselect.report.build`, :mod:`fedselect.study.sweep` and :mod:`fedselect.report.html`)."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedselect.common.files import read_csv_rows, read_json
from fedselect.experiment.metrics import PER_ROUND_KEYS, read_metrics, summarize
from fedselect.report.stats import ToTarget, mean_std, to_target

#: table columns: key, header, digits, "higher is better"
COLUMNS = [
    ("final_accuracy", "final acc", 4, True),
    ("best_accuracy", "best acc", 4, True),
    ("final_f1_macro", "final F1", 4, True),
    ("e2e_latency_s", "e2e latency (s)", 1, False),
    ("rounds_to_target", "rounds to target", 1, False),
    ("latency_to_target_s", "latency to target (s)", 1, False),
    ("communication_mb", "comm (MB)", 1, False),
    ("wall_s", "wall (s)", 1, False),
]
#: method-specific summary figures, shown only when some run in the report has them
OPTIONAL_COLUMNS = [
    ("latency_sum_s", "latency sum (s)", 1, False),  # every participant's latency over the run (none: runs saved before it)
    ("candidates_evaluated", "candidates evaluated", 1, False),
    ("competitive_ratio", "competitive ratio", 3, True),
    # fairness (fedselect.fl.fairness): participation over the run, the final model per client
    ("participation_jain", "Jain (participation)", 3, True),
    ("participation_gini", "Gini (participation)", 3, False),
    ("never_selected_share", "never selected", 3, False),
    ("client_accuracy_mean", "client acc mean", 4, True),
    ("client_accuracy_worst10", "client acc worst 10%", 4, True),
    ("client_accuracy_std", "client acc std", 4, False),
]
#: figures that runs saved by an earlier fedselect may lack (their metrics.csv has no such
#: column): a mean over only some of a method's seeds is marked, and no change vs the baseline
#: is given unless every seed on both sides has the figure
LATER_KEYS = {
    "latency_sum_s",
    "participation_jain",
    "participation_gini",
    "never_selected_share",
    "client_accuracy_mean",
    "client_accuracy_worst10",
    "client_accuracy_std",
}
#: keys whose change vs the baseline is reported in points (x100), not percent
POINT_KEYS = {"final_accuracy", "best_accuracy", "final_f1_macro"}
#: times to the target, and the summary figure a run that never reached it is censored at
#: (:func:`fedselect.report.stats.to_target`: a mean only when every run reached it, else the
#: Kaplan-Meier median)
TO_TARGET = {"rounds_to_target": "rounds", "latency_to_target_s": "e2e_latency_s"}


@dataclass
class RunSummary:
    """One run of a comparison or sweep as its tables and figures read it
    (:func:`load_run_summary`): its method label and seed, its ``metrics.csv`` rows and the
    figures summarised from them (not :class:`fedselect.api.RunResult`, a run's config, summary
    and metrics as the Python API returns them).

    Attributes:
        label, seed: the method's label and the seed. dir: the run directory.
        rows: ``metrics.csv`` rows as dicts of strings. summary: the figures of the table
            (:func:`fedselect.experiment.metrics.summarize`, the final ones from ``summary.json`` once
            finished). complete: it finished (``summary.json``). rounds_planned: the config's T.
        extra: the rest of ``summary.json``.
    """

    label: str
    seed: int
    dir: Path
    rows: list[dict[str, str]]
    summary: dict[str, Any]
    complete: bool
    rounds_planned: int | None
    extra: dict[str, Any] = field(default_factory=dict)
    metric: str = "accuracy"  # the config's metrics.metric: "accuracy" or "f1_macro"
    #: why the rounds' scores are not the clients' own models (the algorithm's round_scores), or None
    round_scores: str | None = None
    #: the config's ``mode``: "sync" (a row per round) or "async" (a row per server version)
    mode: str = "sync"
    #: the set the run's decisions read model quality on (``validation`` / ``test``), None: none does
    selection_eval: str | None = None


def round_scores_of(cfg: dict[str, Any]) -> str | None:
    """The ``round_scores`` reason of the algorithm a run's resolved ``config.yaml`` names (None:
    its rounds score every client's own model, or the algorithm cannot be looked up here)."""
    from fedselect.algorithms import ALGORITHMS

    name = (cfg.get("algorithm") or {}).get("name") if isinstance(cfg.get("algorithm"), dict) else None
    if not isinstance(name, str) or not name:
        return None
    try:
        return getattr(ALGORITHMS.get(name), "round_scores", None)
    except ValueError:  # a user's algorithm that is not importable here: nothing is known
        return None


def selection_eval_of(cfg: dict[str, Any]) -> str | None:
    """The set a run's choices read model quality on, from its resolved ``config.yaml`` (for
    runs whose summary does not say it): its ``selection_eval`` (``test`` when the config lacks
    it: saved before the option existed, its decisions read the test set) if its selector's
    choices depend on model quality (:func:`fedselect.selectors.base.decides_on_quality`), else
    None; None too for a selector that cannot be looked up here."""
    from fedselect.selectors import SELECTORS
    from fedselect.selectors.base import decides_on_quality

    name = (cfg.get("selector") or {}).get("name") if isinstance(cfg.get("selector"), dict) else None
    if not isinstance(name, str) or not name:
        return None
    try:
        sel = SELECTORS.get(name)
    except ValueError:  # a user's selector that is not importable here: nothing is known
        return None
    return str(cfg.get("selection_eval", "test")) if decides_on_quality(sel) else None


def run_selection_eval(run_dir: Path) -> str | None:
    """The set a saved run's decisions read model quality on: its ``summary.json``'s
    ``selection_eval`` where it says it, else :func:`selection_eval_of` its ``config.yaml``
    (None without either)."""
    from fedselect.config.load import read_yaml_file

    if (run_dir / "summary.json").is_file():
        saved = read_json(run_dir / "summary.json")
        if isinstance(saved, dict) and "selection_eval" in saved:
            return saved["selection_eval"]
    cfg = read_yaml_file(run_dir / "config.yaml", "run config") if (run_dir / "config.yaml").is_file() else None
    return selection_eval_of(cfg) if isinstance(cfg, dict) else None


def load_run_summary(
    run_dir: Path,
    label: str,
    seed: int,
    target: float | None = None,
    metric: str = "accuracy",
    window: int = 10,
    window_override: int | None = None,
) -> RunSummary:
    """Summarise one run directory from its ``metrics.csv`` and ``timing.csv`` (final figures
    and wall time from ``summary.json`` when the run finished); the target, metric and summary
    window come from its ``config.yaml`` when it has one (``window_override`` replaces the
    window).

    A run of an algorithm whose rounds do not score the clients' own models
    (``round_scores``: CEFL) has the figures read off the rounds (:data:`PER_ROUND_KEYS`) blank,
    and, while it has not finished (no transfer yet), its final figures too."""
    rows = read_metrics(run_dir / "metrics.csv") if (run_dir / "metrics.csv").exists() else []
    planned, note, mode = None, None, "sync"
    if (run_dir / "config.yaml").exists():
        from fedselect.config.load import read_yaml_file

        cfg = read_yaml_file(run_dir / "config.yaml", "run config") or {}
        if not isinstance(cfg, dict):
            raise ValueError(f"{run_dir / 'config.yaml'}: expected a mapping (a run's config), got {type(cfg).__name__}")
        planned = cfg.get("rounds")
        note = round_scores_of(cfg)
        target = cfg.get("metrics", {}).get("target", target) if target is None else target
        metric = cfg.get("metrics", {}).get("metric", metric)
        window = cfg.get("metrics", {}).get("summary_window", window)
        mode = cfg.get("mode") or "sync"
    if window_override is not None:
        if window_override < 1:
            raise ValueError(f"summary window must be >= 1, got {window_override}")
        window = window_override
    s = summarize(rows, target, metric, window) if rows else {"rounds": 0, "summary_window": window}
    timing = run_dir / "timing.csv"
    trows = read_csv_rows(timing) if timing.exists() else []
    s["wall_s"] = float(trows[-1]["cum_wall_s"]) if trows else None
    summary_path = run_dir / "summary.json"
    complete = summary_path.exists()
    extra = {}
    if complete:
        saved = read_json(summary_path)
        if not isinstance(saved, dict):
            raise ValueError(f"{summary_path}: expected a JSON object (a run's summary), got {type(saved).__name__}")
        if isinstance(saved.get("wall_s"), (int, float)):  # includes the method's finish()
            s["wall_s"] = saved["wall_s"]
        # communication: a method may add bytes after the last round (CEFL's transfer to members)
        for key in ("final_accuracy", "final_f1_macro", "communication_mb", "upload_mb", "download_mb"):
            if key in saved:
                s[key] = saved[key]
        note = saved.get("round_scores") if isinstance(saved.get("round_scores"), str) else note
        extra = {k: v for k, v in saved.items() if k not in s}
    if note:  # the rounds scored other models than the clients': no figure is read off them
        s.update({k: None for k in PER_ROUND_KEYS}, summary_window_rounds=None)
        if not complete:  # not finished: the last round's figures are not the clients' models either
            s["final_accuracy"] = s["final_f1_macro"] = None
        for k in PER_ROUND_KEYS:
            extra.pop(k, None)
    extra.pop("selection_eval", None)
    return RunSummary(label, seed, run_dir, rows, s, complete, planned, extra, metric, note, mode, run_selection_eval(run_dir))


def _value(r: RunSummary, key: str):
    v = r.summary.get(key, r.extra.get(key))
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _to_target(rs: list[RunSummary], key: str) -> ToTarget:
    """Rounds / latency to target of ``rs`` (:data:`TO_TARGET`): a run without a target, or whose
    rounds do not score the clients' own models (``round_scores``), is left out."""
    keep = [r for r in rs if r.summary.get("target") is not None and not r.round_scores]
    return to_target([_value(r, key) for r in keep], [_value(r, TO_TARGET[key]) for r in keep])


def summary_window(results: list[RunSummary]) -> int | None:
    """The ``metrics.summary_window`` k of the runs (None when they differ or there are none)."""
    ks = {r.summary.get("summary_window") for r in results}
    return ks.pop() if len(ks) == 1 else None


def metric_of(results: list[RunSummary]) -> str:
    """The runs' ``metrics.metric`` (that of the first run)."""
    return results[0].metric if results else "accuracy"


def _short(metric: str) -> str:
    return "F1" if metric == "f1_macro" else "acc"


def last_k_column(results: list[RunSummary]) -> tuple[str, str, int, bool]:
    """The stable-summary column: the metric's mean over the last k evaluated rounds; its
    header says k (``acc mean last 10``)."""
    metric, k = metric_of(results), summary_window(results)
    return (f"last_k_{metric}", f"{_short(metric)} mean last {k if k else 'k'}", 4, True)


def columns_for(results: list[RunSummary]) -> list[tuple[str, str, int, bool]]:
    """The standard columns, the last-k mean of the metric (after best acc) and the optional
    columns some run reports."""
    cols = list(COLUMNS)
    cols.insert(2, last_k_column(results))
    return cols + [c for c in OPTIONAL_COLUMNS if any(_value(r, c[0]) is not None for r in results)]


def aggregate_table(results: list[RunSummary], labels: list[str], baseline: str | None, columns=None) -> list[dict[str, Any]]:
    """Per label: mean and spread (sample std) over seeds of every column
    (:func:`fedselect.report.stats.mean_std`; ``<key>_n`` seeds have a value, e.g. the runs reaching
    the target), and the change vs ``baseline`` (percent; accuracy/F1 in points)."""
    columns = columns or columns_for(results)
    table = []
    for lab in labels:
        rs = [r for r in results if r.label == lab]
        entry: dict[str, Any] = {
            "label": lab,
            "seeds": len(rs),
            "seed_list": sorted(r.seed for r in rs),
            # each run against its own planned rounds (methods may run different numbers)
            "incomplete": [
                f"{r.dir.name} ({r.summary.get('rounds', 0)} of {r.rounds_planned} rounds"
                + ("; not transferred yet, no final figures" if r.round_scores else "")
                + ")"
                for r in rs
                if not r.complete
            ],
            "rounds_planned": sorted(
                {
                    int(r.rounds_planned)
                    for r in rs
                    if isinstance(r.rounds_planned, int) and not isinstance(r.rounds_planned, bool)
                }
            ),
            "round_scores": next((r.round_scores for r in rs if r.round_scores), None),
            "test_decisions": any(r.selection_eval == "test" for r in rs),
        }
        for key, *_ in columns:
            mean, std, n = mean_std(_value(r, key) for r in rs)
            entry[key], entry[key + "_std"], entry[key + "_n"] = mean, std, n
            if key in TO_TARGET:  # runs that never reached the target are censored, not left out
                tt = entry[key + "_to_target"] = _to_target(rs, key)
                if tt.censored:
                    entry[key], entry[key + "_std"] = tt.value, None
        table.append(entry)
    base = next((e for e in table if e["label"] == baseline), None)
    for e in table:
        # the change vs the baseline compares the same seeds on both sides: when a run is missing
        # on one side, both means are taken over the seeds both have (vs_seeds says which)
        common = sorted(set(e["seed_list"]) & set(base["seed_list"])) if base is not None and e is not base else []
        e["vs_seeds"] = common
        e["vs_partial"] = base is not None and e is not base and (common != e["seed_list"] or common != base["seed_list"])
        ours_rs = [r for r in results if r.label == e["label"] and r.seed in common]
        base_rs = [r for r in results if base is not None and r.label == base["label"] and r.seed in common]
        for key, *_ in columns:
            e[key + "_vs"] = None
            if base is None or e is base:
                continue
            if key in LATER_KEYS and (e[key + "_n"] < e["seeds"] or base[key + "_n"] < base["seeds"]):
                continue  # some runs predate the figure: their means cover different seeds
            e[key + "_vs_medians"] = key in TO_TARGET and (e[key + "_to_target"].censored or base[key + "_to_target"].censored)
            if e[key + "_vs_medians"]:
                mine, theirs = _to_target(ours_rs, key).median, _to_target(base_rs, key).median
            elif e["vs_partial"]:
                mine, theirs = mean_std(_value(r, key) for r in ours_rs)[0], mean_std(_value(r, key) for r in base_rs)[0]
            else:
                mine, theirs = e[key], base[key]
            if mine is None or theirs is None:
                continue
            if key in POINT_KEYS or key.startswith("last_k_"):
                e[key + "_vs"] = 100.0 * (mine - theirs)
            elif theirs != 0:
                e[key + "_vs"] = 100.0 * (mine - theirs) / theirs
    return table


def missing_runs(directory: str | Path) -> list[dict[str, Any]]:
    """The runs a comparison's ``compare.json`` lists that are not there: no run directory, or
    one without ``metrics.csv`` (never started, deleted, not copied). ``[{"label", "seed",
    "dir"}]`` in compare.json's order; [] for a run or sweep directory."""
    d = Path(directory)
    if not (d / "compare.json").is_file():
        return []
    try:
        runs = read_json(d / "compare.json")["runs"]
        listed = [(r["label"], int(r["seed"]), r["dir"]) for r in runs]
    except (KeyError, TypeError, ValueError):
        return []  # collect() reports a damaged compare.json
    return [{"label": lab, "seed": seed, "dir": rd} for lab, seed, rd in listed if not (d / rd / "metrics.csv").is_file()]


def missing_note(missing: list[dict[str, Any]], baseline: str | None, directory: str | Path = "DIR") -> str | None:
    """The line under the table naming the missing runs (None when none is missing)."""
    if not missing:
        return None
    names = ", ".join(f"{m['label']}-s{m['seed']} ({m['dir']})" for m in missing)
    vs = f"; every difference vs {baseline} uses only the seeds both methods have" if baseline else ""
    return (
        f"Caution: {len(missing)} run{'s' if len(missing) > 1 else ''} missing (no run directory or no metrics.csv), "
        f"left out of the table{vs}: {names}. Run {'them' if len(missing) > 1 else 'it'} with "
        f"`fedselect compare --resume {directory}`."
    )


def rounds_note(table: list[dict[str, Any]]) -> str | None:
    """The line under the table when methods ran different numbers of rounds (their own
    ``rounds``): what each column then compares (None when every method ran the same)."""
    per = {e["label"]: e.get("rounds_planned") or [] for e in table}
    if len({tuple(v) for v in per.values() if v}) <= 1:
        return None
    desc = ", ".join(f"{lab} {'/'.join(map(str, v))}" for lab, v in per.items() if v)
    return (
        f"Methods ran different numbers of rounds ({desc}): `final` is each method's own last round (after its finish, "
        f"e.g. CEFL's transfer), `e2e latency` and `comm` are each method's own totals; best, the last-k mean and the "
        f"rounds / latency to target are taken over each method's own rounds (a method with fewer rounds had fewer "
        f"chances to reach the target). Paired differences pair the runs of a seed, never round r of one method with "
        f"round r of another; the per-round plots give each method its own range of rounds."
    )


def censored_note(table: list[dict[str, Any]]) -> str | None:
    """The line under the table when some run never reached the target (None otherwise): how
    the rounds / latency to target of such a method are given (:func:`fedselect.report.stats.to_target`)."""
    if not any(e.get(k + "_to_target") is not None and e[k + "_to_target"].censored for e in table for k in TO_TARGET):
        return None
    return (
        "Rounds / latency to target: where some runs never reached the target, the cell is the Kaplan-Meier median "
        "with the count that reached it, each run that did not censored at its last round (its end-to-end latency); "
        "`> T`: fewer than half reached it, so the median lies beyond the longest run T. A mean over the runs that "
        "reached it would leave out exactly the slow ones; changes vs the baseline then compare medians, and the "
        "paired differences leave such a quantity blank."
    )


def round_scores_notes(table: list[dict[str, Any]], columns=COLUMNS) -> list[str]:
    """One line per reason why some methods' per-round figures are blank (their algorithm's
    ``round_scores``, e.g. CEFL's: members are scored with their leader's model during the rounds)."""
    heads = [f"`{h}`" for k, h, _, _ in columns if k in PER_ROUND_KEYS or k.startswith("last_k_")]
    by_reason: dict[str, list[str]] = {}
    for e in table:
        if e.get("round_scores"):
            by_reason.setdefault(e["round_scores"], []).append(e["label"])
    return [f"{', '.join(heads)} are blank (-) for {', '.join(labels)}: {reason}." for reason, labels in by_reason.items()]


def selection_eval_note(table: list[dict[str, Any]]) -> str | None:
    """The caution line under a table whose methods' decisions read the test set
    (``selection_eval: test``, the papers' protocol; None when none did)."""
    labels = [e["label"] for e in table if e.get("test_decisions")]
    if not labels:
        return None
    return (
        f"Caution: the decisions of {', '.join(labels)} read the test set (selection_eval: test, the papers' protocol): "
        f"their rewards or candidate scores came from the set these figures are measured on, so their test figures are "
        f"not those of unseen data (selection_eval: validation decides on the server's validation set instead)."
    )


def _cell(e: dict[str, Any], key: str, digits: int) -> str:
    m, s, n = e[key], e[key + "_std"], e[key + "_n"]
    tt = e.get(key + "_to_target")
    if tt is not None and tt.censored:  # some run never reached the target: the Kaplan-Meier median
        reached = f"({tt.reached}/{tt.runs} reached)"
        return f"median {m:.{digits}f} {reached}" if m is not None else f"> {tt.beyond:.{digits}f} {reached}"
    if m is None:
        return "-"
    txt = f"{m:.{digits}f}"
    if e["seeds"] > 1:
        txt += f" ± {s:.{digits}f}"
        if key in LATER_KEYS and n < e["seeds"]:
            txt += f" ({n}/{e['seeds']} runs have it)"
    return txt


def relative_phrases(e: dict[str, Any], baseline: str, window: int | None = None) -> list[str]:
    """Paper-style phrases, e.g. ``accuracy (mean last 10) +0.4 pts vs FedAvg``, ``final
    accuracy +0.2 pts vs FedAvg``, ``latency -24.8% vs FedAvg``. The first uses the stable
    summary (the metric's mean over the last ``window`` evaluated rounds)."""
    k = f"mean last {window}" if window else "mean last k"
    names = {
        "last_k_accuracy": f"accuracy ({k})",
        "last_k_f1_macro": f"F1 ({k})",
        "final_accuracy": "final accuracy",
        "final_f1_macro": "final F1",
        "e2e_latency_s": "latency",
        "rounds_to_target": "rounds to target",
        "communication_mb": "communication",
    }
    out = []
    for key, name in names.items():
        v = e.get(key + "_vs")
        if v is None:
            continue
        if e.get(key + "_vs_medians"):
            name += " (medians: not every run reached it)"
        out.append(
            f"{name} {v:+.1f} pts vs {baseline}"
            if key in POINT_KEYS or key.startswith("last_k_")
            else f"{name} {v:+.1f}% vs {baseline}"
        )
    if out and e.get("vs_partial"):
        n = len(e["vs_seeds"])
        out.append(
            f"all over the {n} seed{'s' if n != 1 else ''} both ran ({', '.join(map(str, e['vs_seeds']))}; runs are missing)"
        )
    return out


#: quantities of the paired comparison: key (``{metric}`` = the config's metrics.metric), name, unit
PAIRED = [
    ("last_k_{metric}", "{name} mean last {k}", "pts"),
    ("final_{metric}", "final {name}", "pts"),
    ("e2e_latency_s", "e2e latency", "%"),
    ("rounds_to_target", "rounds to target", "%"),
    ("latency_to_target_s", "latency to target", "%"),
    ("communication_mb", "comm", "%"),
]


def paired_quantities(metric: str, window: int | None) -> list[tuple[str, str, str]]:
    """``(key, header, unit)`` of the paired comparison for ``metric``."""
    name = "F1" if metric == "f1_macro" else "acc"
    return [(k.format(metric=metric), h.format(name=name, k=window or "k"), u) for k, h, u in PAIRED]


def paired_table(
    results: list[RunSummary], labels: list[str], baseline: str | None, quantities=None, confidence: float = 0.95
) -> list[dict[str, Any]]:
    """Per method but the baseline: for each quantity the per-seed differences against the
    baseline run of the same seed (same federation) and their mean with a ``confidence``
    Student-t interval (:func:`fedselect.report.stats.paired_interval`).

    Returns ``[{"label", "seeds": [...], "cells": {key: {"diffs": {seed: d}, "interval":
    PairedInterval, "unit"}}}]``; empty without a baseline among ``labels``.
    """
    from fedselect.report.stats import paired_differences, paired_interval

    if baseline is None or baseline not in labels:
        return []
    quantities = quantities or paired_quantities(metric_of(results), summary_window(results))
    base = {r.seed: r for r in results if r.label == baseline}
    out = []
    for lab in labels:
        if lab == baseline:
            continue
        ours = {r.seed: r for r in results if r.label == lab}
        seeds = sorted(set(ours) & set(base))
        cells = {}
        for key, _, unit in quantities:
            a, b = {s: _value(ours[s], key) for s in seeds}, {s: _value(base[s], key) for s in seeds}
            if key in TO_TARGET:  # a seed where one side never reached the target has a censored difference
                cut = [s for s in seeds if any(_to_target([r], key).censored for r in (ours[s], base[s]))]
                if cut:
                    cells[key] = {"diffs": {}, "interval": paired_interval([], confidence), "unit": unit, "censored": cut}
                    continue
            diffs = paired_differences(a, b, unit)
            exact = is_exact(
                key, [a[s] for s in diffs], [b[s] for s in diffs], [ours[s] for s in diffs], [base[s] for s in diffs]
            )
            cells[key] = {"diffs": diffs, "interval": paired_interval(diffs.values(), confidence, exact=exact), "unit": unit}
        out.append({"label": lab, "seeds": seeds, "cells": cells})
    return out


#: quantities that can be exactly deterministic: the bytes a method moves depend only on how many
#: models it sends (U per round, the warm-up's N, CEFL's transfer), not on the seed, as long as no
#: client fails (a failure changes what is transferred)
EXACT_KEYS = ("communication_mb", "upload_mb", "download_mb")


def _selection_sizes(r: RunSummary) -> tuple[int, ...]:
    return tuple(len([k for k in (row.get("selected") or "").split(";") if k]) for row in r.rows)


def _has_failures(r: RunSummary) -> bool:
    if any(row.get("failed") for row in r.rows):
        return True
    return bool((r.extra or {}).get("client_failures")) or bool((r.extra or {}).get("failed_rounds"))


def is_exact(key: str, ours: list, base: list, ours_runs: list | None = None, base_runs: list | None = None) -> bool:
    """Whether identical paired differences of ``key`` are exact rather than a coincidence of few
    seeds: ``key`` is a byte count (:data:`EXACT_KEYS`), each side has the same value in every
    paired seed, and (when the runs are given) no client failed and every seed selected the same
    number of clients in every round on each side. Then a zero-width interval is the truth."""
    if key not in EXACT_KEYS or len(ours) < 2 or len(set(ours)) != 1 or len(set(base)) != 1:
        return False
    for runs in (ours_runs, base_runs):
        if runs is None:
            continue
        if any(_has_failures(r) for r in runs) or len({_selection_sizes(r) for r in runs}) > 1:
            return False
    return True


def paired_cell(cell: dict[str, Any], nseeds: int) -> str:
    """A paired-difference cell: ``+2.00 [-0.48, +4.48]``, ``*`` when the interval excludes 0,
    ``(2/3 seeds)`` when some seeds have no pair (a run missing on one side); for rounds /
    latency to target with a seed where one side never reached the target, no difference at all
    (``- (censored: in 1 of 3 seeds one side never reached the target)``): that seed's difference is
    only a bound, and the mean of the others would leave out exactly the slow runs."""
    from fedselect.report.stats import format_interval

    iv = cell["interval"]
    digits = 2 if cell["unit"] == "pts" else 1
    if cell.get("censored"):
        return f"- (censored: in {len(cell['censored'])} of {nseeds} seeds one side never reached the target)"
    if iv.mean is None:
        return "-"
    if nseeds <= 1:  # the section says that no interval is possible
        return f"{iv.mean:+.{digits}f}"
    txt = format_interval(iv, cell["unit"], digits).replace("(1 seed: no interval)", "(1 pair: no interval)")
    return txt + (f" ({iv.n}/{nseeds} seeds)" if iv.n < nseeds else "")


def paired_intro(baseline: str, nseeds: int, confidence: float = 0.95) -> str:
    """The sentence above the paired table (one seed: why there is no interval)."""
    if nseeds <= 1:
        return (
            f"One seed: no interval is possible (an interval needs the differences of at least two seeds; run with "
            f"--seeds 0,1,2). The cells give that seed's difference against {baseline}."
        )
    return (
        f"For each seed a method and {baseline} ran on the same federation; a cell is the mean over the seeds of the "
        f"difference (method - {baseline}) with its {confidence:.0%} confidence interval [low, high] (Student t, "
        f"n - 1 degrees of freedom). `*`: the interval excludes 0, the difference is larger than the seed-to-seed noise. "
        f"`no spread to judge`: every seed gave the same difference, which for a quantity that varies by seed is a "
        f"coincidence of few seeds, not certainty (no interval, no `*`); `(exact)`: the same bytes on each side in every "
        f"seed (no failures, the same number of clients per round), so the difference is exact. "
        f"pts = accuracy points (x100); % = percent of {baseline}'s value in the same seed (negative = less latency, "
        f"fewer rounds, fewer MB)."
    )


def render_paired(paired: list[dict[str, Any]], baseline: str, quantities, nseeds: int) -> list[str]:
    """Markdown lines of the paired section."""
    if not paired:
        return []
    heads = ["method"] + [f"{h} ({u})" for _, h, u in quantities]
    lines = [
        "",
        f"## Paired differences vs {baseline}" + (f" ({nseeds} seeds, 95% CI)" if nseeds > 1 else " (1 seed)"),
        "",
        paired_intro(baseline, nseeds),
        "",
        "| " + " | ".join(heads) + " |",
        "|" + "---|" * len(heads),
    ]
    for p in paired:
        lines.append("| " + " | ".join([p["label"]] + [paired_cell(p["cells"][k], nseeds) for k, _, _ in quantities]) + " |")
    return lines


def render_markdown(
    title: str,
    table: list[dict[str, Any]],
    baseline: str | None,
    paper: dict | None = None,
    paper_source: str | None = None,
    columns=COLUMNS,
    window: int | None = None,
    paired: list[dict[str, Any]] | None = None,
    quantities=None,
    caveat: str | None = None,
    missing: str | None = None,
) -> str:
    heads = ["method"] + [h for _, h, _, _ in columns]
    lines = [f"# {title}", "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for e in table:
        lines.append("| " + " | ".join([e["label"]] + [_cell(e, k, d) for k, _, d, _ in columns]) + " |")
    lines.append("")
    seeds = max((e["seeds"] for e in table), default=0)
    fewer = [f"{e['label']}: {e['seeds']}" for e in table if e["seeds"] < seeds]
    lines.append(
        f"Mean over {seeds} seed(s)"
        + (" ± sample standard deviation" if seeds > 1 else "")
        + (f" (fewer where runs are missing: {', '.join(fewer)})" if fewer else "")
        + "."
    )
    if missing:
        lines.append(missing)
    if selection_eval_note(table):
        lines.append(selection_eval_note(table))
    lastk = next((h for k, h, _, _ in columns if k.startswith("last_k_")), None)
    if lastk:
        lines.append(
            f"`{lastk}`: the mean of the metric over each run's last {window or 'k'} evaluated rounds "
            f"(metrics.summary_window; all of them when a run has fewer), steadier than the final round's value."
        )
        if caveat:
            lines.append(caveat)
    for note in [rounds_note(table), censored_note(table), *round_scores_notes(table, columns)]:
        if note:
            lines.append(note)
    if baseline:
        lines += [
            "",
            f"Relative to {baseline}" + (f" (accuracy: {lastk}; final: after the last round)" if lastk else "") + ":",
            "",
        ]
        for e in table:
            if e["label"] != baseline:
                lines.append(f"- {e['label']}: " + (", ".join(relative_phrases(e, baseline, window)) or "no comparable figures"))
    if paired and baseline:
        lines += render_paired(paired, baseline, quantities, seeds)
    incomplete = [x for e in table for x in e["incomplete"]]
    if incomplete:
        lines += ["", "Incomplete runs (their existing rounds are used): " + ", ".join(incomplete)]
    if paper:
        lines += [
            "",
            "## Ours vs the paper" + (f" ({paper_source})" if paper_source else ""),
            "",
            "| method | figure | ours | paper |",
            "|---|---|---|---|",
        ]
        ours = {e["label"]: e for e in table}
        for lab, figs in paper.items():
            for key, val in figs.items():
                o = ours.get(lab, {}).get(key)
                lines.append(f"| {lab} | {key} | {'-' if o is None else f'{o:.4g}'} | {val} |")
    return "\n".join(lines) + "\n"


def render_csv(table: list[dict[str, Any]], columns=COLUMNS) -> str:
    """``table.csv``: the columns in table order, except the last-k mean, which comes last so
    that the earlier columns keep their positions."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    keys = [k for k, *_ in columns if not k.startswith("last_k_")] + [k for k, *_ in columns if k.startswith("last_k_")]
    w.writerow(["method", "seeds"] + [x for k in keys for x in (k, k + "_std", k + "_vs_baseline")])
    fmt = lambda v: "" if v is None else repr(float(v))  # noqa: E731
    for e in table:
        w.writerow([e["label"], e["seeds"]] + [x for k in keys for x in (fmt(e[k]), fmt(e[k + "_std"]), fmt(e[k + "_vs"]))])
    return buf.getvalue()


def render_paired_csv(paired: list[dict[str, Any]], quantities) -> str:
    """``paired.csv``: one row per method and quantity: unit, pairs n, mean difference, sd,
    interval low/high (empty with fewer than two pairs), whether it excludes 0, and the
    per-seed differences (``seed:value`` separated by ``;``)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["method", "quantity", "unit", "n", "mean", "sd", "low", "high", "excludes_zero", "per_seed", "note"])
    fmt = lambda v: "" if v is None else repr(float(v))  # noqa: E731
    for p in paired:
        for key, _, unit in quantities:
            c = p["cells"][key]
            iv = c["interval"]
            sig = "" if iv.significant is None else str(int(iv.significant))
            w.writerow(
                [
                    p["label"],
                    key,
                    unit,
                    iv.n,
                    fmt(iv.mean),
                    fmt(iv.sd),
                    fmt(iv.low),
                    fmt(iv.high),
                    sig,
                    ";".join(f"{s}:{d!r}" for s, d in c["diffs"].items()),
                    f"censored: seeds {';'.join(map(str, c['censored']))} did not reach the target on one side"
                    if c.get("censored")
                    else {"none": "no spread to judge", "exact": "exact"}.get(iv.spread, ""),
                ]
            )
    return buf.getvalue()


def collect(
    directory: Path, window: int | None = None
) -> tuple[str, list[RunSummary], list[str], str | None, dict | None, str | None, list[dict]]:
    """Results of a comparison directory or of a single run directory (``window`` overrides
    each run's metrics.summary_window)."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"{directory} is a file; give a comparison, sweep or run directory")
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such directory (give a comparison, sweep or run directory)")
    if (directory / "compare.json").exists():
        spec = read_json(directory / "compare.json")
        try:
            labels = [m["label"] for m in spec["methods"]]
            runs = [(directory / r["dir"], r["label"], int(r["seed"])) for r in spec["runs"]]
            name = spec["name"]
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(
                f"{directory / 'compare.json'}: not a comparison record fedselect wrote (bad or missing {e}); "
                "was it edited? Restore it or rerun the comparison"
            ) from None
        results = [load_run_summary(d, label, seed, window_override=window) for d, label, seed in runs if d.exists()]
        return (
            name,
            results,
            labels,
            spec.get("baseline"),
            spec.get("paper"),
            spec.get("paper_source"),
            load_federations(directory),
        )
    if (directory / "metrics.csv").exists():
        from fedselect.config.load import read_yaml_file

        cfg = (read_yaml_file(directory / "config.yaml", "run config") or {}) if (directory / "config.yaml").exists() else {}
        if not isinstance(cfg, dict):
            raise ValueError(f"{directory / 'config.yaml'}: expected a mapping (a run's config), got {type(cfg).__name__}")
        label = cfg.get("method", directory.name)
        return (
            cfg.get("name", directory.name),
            [load_run_summary(directory, label, cfg.get("seed", 0), window_override=window)],
            [label],
            None,
            None,
            None,
            [],
        )
    raise FileNotFoundError(
        f"{directory}: neither a comparison directory (compare.json), a sweep directory (sweep.json) nor a run directory "
        "(metrics.csv)"
    )


def partition_params(fed: Any) -> dict[str, Any]:
    """The partition scheme with every parameter in effect (the resolved config writes the
    defaults out; the partitioner's bounds on retries, ``max_*``, are left out)."""
    params = {k: v for k, v in fed.data.partition.params().items() if not k.startswith(("max_", "_"))}
    return {"scheme": fed.data.partition.scheme, **params}


def federation_info(fed: Any, local_epochs: int) -> dict[str, Any]:
    """Per-client facts for reports: samples, label counts, profiles and the expected latency
    (s) at the profiles' mean frequency and bandwidth for ``local_epochs`` epochs, uploading the
    whole model (also split into its compute and upload parts) of ``fed`` (a
    :class:`fedselect.world.federation.Federation`) in its latency model, as ``federation-s<seed>.json`` holds it
    (:func:`load_federations` reads it back)."""
    import numpy as np

    from fedselect.fl.cost import CostModel
    from fedselect.world.system import BYTES_PER_FLOAT

    model = fed.new_model()
    model_bytes = sum(v.numel() for v in model.state_dict().values()) * BYTES_PER_FLOAT
    fl = fed.fleet
    cost = CostModel.of_federation(fed, local_epochs, (model_bytes, 0))  # the upload only
    compute, upload = cost.expected_compute_s(), cost.expected_transmit_s(model_bytes)
    expected = cost.expected_latency_s()
    return {
        "num_clients": fed.num_clients,
        "num_classes": fed.num_classes,
        "class_names": fed.train_set.class_names,
        "dataset": fed.data.dataset,
        "partition": partition_params(fed),
        "num_samples": [c.num_samples for c in fed.clients],
        "label_counts": fed.label_counts().tolist(),
        "device": [d.name for d in fl.devices],
        "network": [n.name for n in fl.networks],
        "expected_latency_s": [float(x) for x in expected],
        "expected_compute_s": [float(x) for x in compute],
        "expected_upload_s": [float(x) for x in upload],
        "train_indices_hash": [
            int(np.bitwise_xor.reduce(c.train_indices * 2654435761 % (2**31))) if len(c.train_indices) else 0 for c in fed.clients
        ],
    }


def load_federations(directory: Path) -> list[dict[str, Any]]:
    """The ``federation-s<seed>.json`` files of a comparison, in seed order, each with its
    ``seed`` added."""
    feds = []
    for p in Path(directory).glob("federation-s*.json"):
        m = re.fullmatch(r"federation-s(\d+)\.json", p.name)
        if m:
            feds.append({**read_json(p), "seed": int(m.group(1))})
    return sorted(feds, key=lambda f: f["seed"])


def window_caveat(results: list[RunSummary]) -> str | None:
    """A warning when the last-k window covers more than half of some run's evaluated rounds:
    the mean then includes the early learning phase (None otherwise)."""
    wide = []
    for r in results:
        n_eval = sum(1 for row in r.rows if int(row["round"]) >= 1 and row.get(r.metric) not in ("", None, "nan"))
        w = r.summary.get("summary_window_rounds")
        if n_eval and w and w > n_eval / 2:
            wide.append((w, n_eval))
    if not wide:
        return None
    w, n = max(wide, key=lambda x: x[0] / x[1])
    return (
        f"Caution: in {len(wide)} of {len(results)} runs the window covers more than half of the evaluated rounds "
        f"(up to {w} of {n}), early rounds included, so the last-k mean also measures how fast a method learned, not only "
        f"where it ended. For the end state use a shorter window: fedselect report DIR --window {max(1, n // 3)} "
        f"(or metrics.summary_window), or more rounds."
    )
