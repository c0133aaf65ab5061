"""Tables and plots from saved metrics, without re-running anything.

``build_report(DIR)`` works on a comparison directory (``compare.json``) or a single run
directory (``metrics.csv``). Everything is computed from ``metrics.csv`` / ``timing.csv`` (and
``summary.json`` where a method's ``finish`` produced final figures), so re-running it gives
byte-identical tables. A run without ``summary.json`` is reported as incomplete, with the
rounds it has.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedselect.fl.metrics import atomic_write, read_csv_rows, summarize

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
    ("client_accuracy_std", "client acc std", 4, False),
    ("candidates_evaluated", "candidates evaluated", 1, False),
    ("competitive_ratio", "competitive ratio", 3, True),
]
#: keys whose change vs the baseline is reported in points (x100), not percent
POINT_KEYS = {"final_accuracy", "best_accuracy", "final_f1_macro"}


@dataclass
class RunResult:
    label: str
    seed: int
    dir: Path
    rows: list[dict[str, str]]
    summary: dict[str, Any]
    complete: bool
    rounds_planned: int | None
    extra: dict[str, Any] = field(default_factory=dict)
    metric: str = "accuracy"  # the config's metrics.metric: "accuracy" or "f1_macro"


def load_run(run_dir: Path, label: str, seed: int, target: float | None = None, metric: str = "accuracy") -> RunResult:
    """Summarise one run directory from its metrics (see module docstring)."""
    rows = read_csv_rows(run_dir / "metrics.csv") if (run_dir / "metrics.csv").exists() else []
    planned = None
    if (run_dir / "config.yaml").exists():
        import yaml

        cfg = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
        planned = cfg.get("rounds")
        target = cfg.get("metrics", {}).get("target", target) if target is None else target
        metric = cfg.get("metrics", {}).get("metric", metric)
    s = summarize(rows, target, metric) if rows else {"rounds": 0}
    timing = run_dir / "timing.csv"
    trows = read_csv_rows(timing) if timing.exists() else []
    s["wall_s"] = float(trows[-1]["cum_wall_s"]) if trows else None
    summary_path = run_dir / "summary.json"
    complete = summary_path.exists()
    extra = {}
    if complete:
        saved = json.loads(summary_path.read_text())
        if isinstance(saved.get("wall_s"), (int, float)):  # includes the method's finish()
            s["wall_s"] = saved["wall_s"]
        # communication: a method may add bytes after the last round (CEFL's transfer to members)
        for key in ("final_accuracy", "final_f1_macro", "communication_mb", "upload_mb", "download_mb"):
            if key in saved:
                s[key] = saved[key]
        extra = {k: v for k, v in saved.items() if k not in s}
    return RunResult(label, seed, run_dir, rows, s, complete, planned, extra, metric)


def _mean_std(values: list[float | None]) -> tuple[float | None, float | None, int]:
    xs = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not xs:
        return None, None, 0
    return float(np.mean(xs)), float(np.std(xs, ddof=1)) if len(xs) > 1 else 0.0, len(xs)


def _value(r: RunResult, key: str):
    v = r.summary.get(key, r.extra.get(key))
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def columns_for(results: list[RunResult]) -> list[tuple[str, str, int, bool]]:
    """The standard columns plus the optional ones some run reports."""
    return COLUMNS + [c for c in OPTIONAL_COLUMNS if any(_value(r, c[0]) is not None for r in results)]


def aggregate_table(results: list[RunResult], labels: list[str], baseline: str | None, columns=None) -> list[dict[str, Any]]:
    """Per label: mean and spread (sample std) over seeds of every column, the runs reaching
    the target, and the change vs ``baseline`` (percent; accuracy/F1 in points)."""
    columns = columns or columns_for(results)
    table = []
    for lab in labels:
        rs = [r for r in results if r.label == lab]
        entry: dict[str, Any] = {"label": lab, "seeds": len(rs), "incomplete": [f"{r.dir.name} ({r.summary.get('rounds', 0)} of {r.rounds_planned} rounds)" for r in rs if not r.complete]}
        for key, *_ in columns:
            mean, std, n = _mean_std([_value(r, key) for r in rs])
            entry[key], entry[key + "_std"], entry[key + "_n"] = mean, std, n
        table.append(entry)
    base = next((e for e in table if e["label"] == baseline), None)
    for e in table:
        for key, *_ in columns:
            e[key + "_vs"] = None
            if base is None or e is base or e[key] is None or base[key] is None:
                continue
            if key in POINT_KEYS:
                e[key + "_vs"] = 100.0 * (e[key] - base[key])
            elif base[key] != 0:
                e[key + "_vs"] = 100.0 * (e[key] - base[key]) / base[key]
    return table


def _cell(e: dict[str, Any], key: str, digits: int) -> str:
    m, s, n = e[key], e[key + "_std"], e[key + "_n"]
    if m is None:
        return "-"
    txt = f"{m:.{digits}f}"
    if e["seeds"] > 1:
        txt += f" ± {s:.{digits}f}"
        if key in ("rounds_to_target", "latency_to_target_s") and n < e["seeds"]:
            txt += f" ({n}/{e['seeds']} reached)"
    return txt


def relative_phrases(e: dict[str, Any], baseline: str) -> list[str]:
    """Paper-style phrases, e.g. ``latency -24.8% vs FedAvg``, ``accuracy +0.4 pts vs FedAvg``."""
    names = {"final_accuracy": "accuracy", "final_f1_macro": "F1", "e2e_latency_s": "latency", "rounds_to_target": "rounds to target", "communication_mb": "communication"}
    out = []
    for key, name in names.items():
        v = e.get(key + "_vs")
        if v is None:
            continue
        out.append(f"{name} {v:+.1f} pts vs {baseline}" if key in POINT_KEYS else f"{name} {v:+.1f}% vs {baseline}")
    return out


def render_markdown(title: str, table: list[dict[str, Any]], baseline: str | None, paper: dict | None = None, paper_source: str | None = None, columns=COLUMNS) -> str:
    heads = ["method"] + [h for _, h, _, _ in columns]
    lines = [f"# {title}", "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for e in table:
        lines.append("| " + " | ".join([e["label"]] + [_cell(e, k, d) for k, _, d, _ in columns]) + " |")
    lines.append("")
    seeds = max((e["seeds"] for e in table), default=0)
    lines.append(f"Mean over {seeds} seed(s)" + (" ± sample standard deviation." if seeds > 1 else "."))
    if baseline:
        lines += ["", f"Relative to {baseline}:", ""]
        for e in table:
            if e["label"] != baseline:
                lines.append(f"- {e['label']}: " + (", ".join(relative_phrases(e, baseline)) or "no comparable figures"))
    incomplete = [x for e in table for x in e["incomplete"]]
    if incomplete:
        lines += ["", "Incomplete runs (their existing rounds are used): " + ", ".join(incomplete)]
    if paper:
        lines += ["", "## Ours vs the paper" + (f" ({paper_source})" if paper_source else ""), "", "| method | figure | ours | paper |", "|---|---|---|---|"]
        ours = {e["label"]: e for e in table}
        for lab, figs in paper.items():
            for key, val in figs.items():
                o = ours.get(lab, {}).get(key)
                lines.append(f"| {lab} | {key} | {'-' if o is None else f'{o:.4g}'} | {val} |")
    return "\n".join(lines) + "\n"


def render_csv(table: list[dict[str, Any]], columns=COLUMNS) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    keys = [k for k, *_ in columns]
    w.writerow(["method", "seeds"] + [x for k in keys for x in (k, k + "_std", k + "_vs_baseline")])
    fmt = lambda v: "" if v is None else repr(float(v))  # noqa: E731
    for e in table:
        w.writerow([e["label"], e["seeds"]] + [x for k in keys for x in (fmt(e[k]), fmt(e[k + "_std"]), fmt(e[k + "_vs"]))])
    return buf.getvalue()


def collect(directory: Path) -> tuple[str, list[RunResult], list[str], str | None, dict | None, str | None, list[dict]]:
    """Results of a comparison directory or of a single run directory."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such directory (give a comparison or run directory)")
    if (directory / "compare.json").exists():
        spec = json.loads((directory / "compare.json").read_text())
        labels = [m["label"] for m in spec["methods"]]
        results = [load_run(directory / r["dir"], r["label"], r["seed"]) for r in spec["runs"] if (directory / r["dir"]).exists()]
        feds = [json.loads(p.read_text()) for p in sorted(directory.glob("federation-s*.json"))]
        return spec["name"], results, labels, spec.get("baseline"), spec.get("paper"), spec.get("paper_source"), feds
    if (directory / "metrics.csv").exists():
        import yaml

        cfg = yaml.safe_load((directory / "config.yaml").read_text()) if (directory / "config.yaml").exists() else {}
        label = cfg.get("method", directory.name)
        return cfg.get("name", directory.name), [load_run(directory, label, cfg.get("seed", 0))], [label], None, None, None, []
    raise FileNotFoundError(f"{directory}: neither a comparison directory (compare.json) nor a run directory (metrics.csv)")


def build_report(directory: str | Path, plots: bool = True) -> dict[str, Any]:
    """Write ``table.md``, ``table.csv`` and ``plots/*.png`` into ``directory``; return the table.

    Raises:
        FileNotFoundError: ``directory`` is not a run or comparison directory.
    """
    directory = Path(directory)
    title, results, labels, baseline, paper, paper_source, feds = collect(directory)
    columns = columns_for(results)
    table = aggregate_table(results, labels, baseline, columns)
    md = render_markdown(title, table, baseline, paper, paper_source, columns)
    atomic_write(directory / "table.md", lambda fh: fh.write(md))
    atomic_write(directory / "table.csv", lambda fh: fh.write(render_csv(table, columns)), newline="")
    files = []
    if plots:
        from fedselect.plots import make_plots

        files = make_plots(directory / "plots", results, labels, feds)
    return {"title": title, "table": table, "markdown": md, "plots": files, "columns": columns}
