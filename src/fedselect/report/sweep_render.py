"""How a sweep's table reads: the cells, ``table.md``, the paired-differences table and
``report.html``, from the rows :func:`fedselect.study.sweep_table.build_sweep_table` computes (this module
reads no run directory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: columns shown with one decimal (the others with four)
ONE_DECIMAL = {
    "candidates_evaluated",
    "wall_s",
    "alpha",
    "e2e_latency_s",
    "rounds_to_target",
    "latency_to_target_s",
    "communication_mb",
    "latency_sum_s",
}

#: footnote for paired rows whose runs do not share a federation
FED_NOTE = (
    "†: the baseline's run of this row has other data, model or system settings (it does not depend on a grid key that "
    "changes them), so the two runs of a seed do not share a federation: the difference also contains that change."
)


def cell(row: dict[str, Any], column: str) -> str:
    """A table cell: ``mean ± std`` over the row's seeds (the mean alone for one seed), ``-``
    when no seed has the figure."""
    m, s = row[column], row[column + "_std"]
    tt = row.get(column + "_to_target")
    if tt is not None and tt.censored:  # the Kaplan-Meier median, or beyond the longest run
        return (f"median {m:.1f}" if m is not None else f"> {tt.beyond:.1f}") + f" ({tt.reached}/{tt.runs} reached)"
    if m is None:
        return "-"
    d = 1 if column in ONE_DECIMAL else 4
    return f"{m:.{d}f} ± {s:.{d}f}" if row["seeds"] > 1 else f"{m:.{d}f}"


def unit(column: str) -> str:
    """The unit of a paired difference of ``column``: accuracy points or percent."""
    from fedselect.report.aggregate import POINT_KEYS

    return "pts" if column in POINT_KEYS or column.startswith(("last_k_", "best_")) else "%"


def table_cells(sc: Any, rows: list[dict[str, Any]], columns: list[str]) -> tuple[list[str], list[list[str]]]:
    """Heads and cells of the table: the grid keys, method, seeds, then ``columns``."""
    keys = list(sc.grid)
    heads = [k.split(".")[-1] for k in keys] + ["method", "seeds"] + columns
    return heads, [[str(r[k]) for k in keys] + [r["method"], str(r["seeds"])] + [cell(r, c) for c in columns] for r in rows]


def paired_label(p: dict[str, Any]) -> str:
    return p["label"] + ("" if p["same_federation"] else " †")


def paired_cells(sc: Any, paired: list[dict[str, Any]], columns: list[str]) -> tuple[list[str], list[list[str]]]:
    """Heads and cells of the paired-differences table (empty without a baseline)."""
    from fedselect.report.tables import paired_cell

    if not sc.baseline or not paired:
        return [], []
    keys, n = list(sc.grid), len(sc.seeds)
    heads = [k.split(".")[-1] for k in keys] + ["method"] + [f"{c} ({unit(c)})" for c in columns]
    cells = [
        [str(p["point"][k]) for k in keys] + [paired_label(p)] + [paired_cell(p["cells"][c], n) for c in columns] for p in paired
    ]
    return heads, cells


def paper_rows(sc: Any, rows: list[dict[str, Any]]) -> list[list[Any]]:
    """``[method, point, figure, ours, paper]`` for every figure of the sweep's ``paper``."""
    out = []
    for f in sc.paper or []:
        match = [r for r in rows if r["method"] == f.method and all(r[k] == v or r[k] == "-" for k, v in f.point.items())]
        where = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in f.point.items()) or "all"
        for c, val in f.figures.items():
            out.append(
                [f.method, where, c, "; ".join(cell(r, c) for r in match) if match else "- (point not in this sweep)", val]
            )
    return out


def _intro(sc: Any) -> str:
    from fedselect.report.tables import paired_intro

    return paired_intro(sc.baseline, len(sc.seeds)).replace("accuracy points", "accuracy/F1 points")


def paired_notes(sc: Any, paired: list[dict[str, Any]]) -> list[str]:
    """What the paired table's cells mean, and the footnote of rows across federations."""
    if not sc.baseline or not paired:
        return []
    return [_intro(sc)] + ([] if all(p["same_federation"] for p in paired) else [FED_NOTE])


def markdown(
    sc: Any,
    rows: list[dict[str, Any]],
    table: tuple[list[str], list[list[str]]],
    ptable: tuple[list[str], list[list[str]]],
    paired: list[dict[str, Any]],
    caution: str | None = None,
) -> str:
    """``table.md``: the table (after the ``caution`` line, when decisions read the test set),
    the paper's figures beside ours, the paired differences."""
    heads, cells = table
    lines = [f"# {sc.name}", "", f"mean ± sample std over seeds {sc.seeds}", ""]
    lines += [caution, ""] if caution else []
    lines += ["| " + " | ".join(heads) + " |"]
    lines += ["|" + "---|" * len(heads)] + ["| " + " | ".join(c) + " |" for c in cells]
    if sc.paper:
        lines += [
            "",
            "## Ours vs the paper" + (f" ({sc.paper_source})" if sc.paper_source else ""),
            "",
            "| method | point | figure | ours | paper |",
            "|---|---|---|---|---|",
        ]
        lines += ["| " + " | ".join(map(str, r)) + " |" for r in paper_rows(sc, rows)]
    pheads, pcells = ptable
    if sc.baseline and paired:
        n = len(sc.seeds)
        lines += ["", f"## Paired differences vs {sc.baseline}" + (f" ({n} seeds, 95% CI)" if n > 1 else " (1 seed)")]
        intro, *fed_note = paired_notes(sc, paired)
        lines += ["", intro, "", "| " + " | ".join(pheads) + " |", "|" + "---|" * len(pheads)]
        lines += ["| " + " | ".join(c) + " |" for c in pcells]
        lines += [x for note in fed_note for x in ("", note)]
    return "\n".join(lines) + "\n"


def write_html(
    out: Path,
    sc: Any,
    rows: list[dict[str, Any]],
    paired: list[dict[str, Any]],
    columns: list[str],
    table: tuple[list[str], list[list[str]]],
    ptable: tuple[list[str], list[list[str]]],
    run_dirs: dict[str, Path],
    walls: dict[str, list[float]],
) -> Path:
    """``report.html`` (:func:`fedselect.report.sweep_html.write_sweep_html`): ``run_dirs`` gives each
    method's run whose config is shown (at the first grid point), ``walls`` the wall times of
    each method's finished runs."""
    from fedselect.report.html import read_configs
    from fedselect.report.sweep_html import write_sweep_html

    note = f"Mean ± sample std over seeds {sc.seeds}; '-' for a grid key the method does not depend on."
    ptab = None
    if sc.baseline and paired:
        keys = list(sc.grid)
        pcls = [
            [""] * (len(keys) + 1) + ["sig" if p["cells"][c]["interval"].significant else "" for c in columns] for p in paired
        ]
        ptab = (" ".join(paired_notes(sc, paired)), *ptable, pcls)
    paper = (sc.paper_source, paper_rows(sc, rows)) if sc.paper else None
    first = sc.points()[0] if sc.points() else {}
    wrows = [[m, len(w), f"{sum(w):.1f}", f"{(sum(w) / len(w)) if w else 0:.1f}"] for m, w in walls.items()]
    return write_sweep_html(
        out,
        sc.name,
        note + (f" Configs below: at the first grid point {first}." if sc.grid else ""),
        table,
        ptab,
        paper,
        read_configs(run_dirs),
        sc.baseline,
        (["method", "finished runs", "total wall (s)", "mean per run (s)"], wrows),
    )
