"""Figures over seeds: the table's columns (:data:`COLUMNS`, :func:`columns_for`); per method
the mean ± std over its seeds and the change vs the baseline (:func:`aggregate_table`, with
:func:`fedselect.report.stats.mean_std`); per method and seed the paired difference against the
baseline's run of the same seed, with its interval (:func:`paired_table`). Reads the runs of
:mod:`fedselect.report.runs`; :mod:`fedselect.report.tables` renders the result."""

from __future__ import annotations

from typing import Any

from fedselect.report.runs import RunSummary
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


def run_value(r: RunSummary, key: str):
    """The number run ``r`` has for ``key`` (its summary's figure, else the rest of its
    ``summary.json``); None when it has none or it is not a number (a bool is not one)."""
    v = r.summary.get(key, r.extra.get(key))
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _to_target(rs: list[RunSummary], key: str) -> ToTarget:
    """Rounds / latency to target of ``rs`` (:data:`TO_TARGET`): a run without a target, or whose
    rounds do not score the clients' own models (``round_scores``), is left out."""
    keep = [r for r in rs if r.summary.get("target") is not None and not r.round_scores]
    return to_target([run_value(r, key) for r in keep], [run_value(r, TO_TARGET[key]) for r in keep])


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
    return cols + [c for c in OPTIONAL_COLUMNS if any(run_value(r, c[0]) is not None for r in results)]


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
            mean, std, n = mean_std(run_value(r, key) for r in rs)
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
                mine, theirs = mean_std(run_value(r, key) for r in ours_rs)[0], mean_std(run_value(r, key) for r in base_rs)[0]
            else:
                mine, theirs = e[key], base[key]
            if mine is None or theirs is None:
                continue
            if key in POINT_KEYS or key.startswith("last_k_"):
                e[key + "_vs"] = 100.0 * (mine - theirs)
            elif theirs != 0:
                e[key + "_vs"] = 100.0 * (mine - theirs) / theirs
    return table


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
            a, b = {s: run_value(ours[s], key) for s in seeds}, {s: run_value(base[s], key) for s in seeds}
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
