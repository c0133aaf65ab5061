"""Tables rendered: a comparison's Markdown table with the lines under it (missing runs,
different numbers of rounds, censored times to target, blank per-round figures, decisions on the
test set, a wide last-k window), its paired-differences section (:func:`render_markdown`),
``table.csv`` and ``paired.csv`` (:func:`render_csv`, :func:`render_paired_csv`), and the cells
and phrases the console and :mod:`fedselect.report.compare_html` reuse. The figures come from
:mod:`fedselect.report.aggregate` (used by :mod:`fedselect.report.build`)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from fedselect.experiment.metrics import PER_ROUND_KEYS
from fedselect.report.aggregate import COLUMNS, LATER_KEYS, POINT_KEYS, TO_TARGET
from fedselect.report.runs import RunSummary


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


def table_cell(e: dict[str, Any], key: str, digits: int) -> str:
    """The cell of column ``key`` for the entry ``e`` of
    :func:`fedselect.report.aggregate.aggregate_table`: the mean with ``digits`` decimals, ``± std``
    over several seeds (and how many runs have a figure that older runs lack), ``-`` without a
    value; where some run never reached the target, the Kaplan-Meier median (``> T`` beyond the
    longest run) with the count that reached it."""
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
        lines.append("| " + " | ".join([e["label"]] + [table_cell(e, k, d) for k, _, d, _ in columns]) + " |")
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
