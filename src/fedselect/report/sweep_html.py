"""A sweep's ``report.html`` (:func:`write_sweep_html`): its table, the paired differences per
grid point, the paper's figures, the plots (those of each grid point while there are few), the
methods' resolved configs and the wall times. Made of the parts of :mod:`fedselect.report.html`;
its cells come from :mod:`fedselect.report.sweep_render`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedselect.common.files import atomic_write
from fedselect.report.html import config_html, esc, page, plots_html, table_html

#: grid points whose plots a sweep's report.html embeds (beyond that it names the directories)
MAX_EMBEDDED_POINTS = 8


def _sweep_plot_sections(plot_dir: Path) -> list[tuple[str, str, str]]:
    """The plots section of a sweep's page: ``plots/*.png``, then ``plots/<point>/*.png``."""
    if not plot_dir.is_dir():
        return []
    out = []
    if any(plot_dir.glob("*.png")):
        plots, n = plots_html(plot_dir)
        out.append(("plots", f"Plots ({n})", plots))
    points = sorted(d for d in plot_dir.iterdir() if d.is_dir() and any(d.glob("*.png")))
    if points and len(points) <= MAX_EMBEDDED_POINTS:
        parts = [(f"<h3>{esc(d.name)}</h3>", *plots_html(d)) for d in points]
        html_ = "\n".join(head + body for head, body, _ in parts)
        out.append(("points", f"Plots per grid point ({sum(n for _, _, n in parts)})", html_))
    elif points:
        out.append(
            (
                "points",
                "Plots per grid point",
                f'<p class="note">{len(points)} grid points: the plots of each are in <code>plots/&lt;point&gt;/</code> '
                "(not embedded, to keep this page small).</p>",
            )
        )
    return out


def write_sweep_html(
    directory: Path,
    title: str,
    markdown_note: str,
    table: tuple[list[str], list[list[Any]]],
    paired: tuple[str, list[str], list[list[Any]], list[list[str]]] | None,
    paper: tuple[str | None, list[list[Any]]] | None,
    configs: dict[str, dict[str, Any]],
    baseline: str | None,
    wall: tuple[list[str], list[list[Any]]],
) -> Path:
    """Write ``directory/report.html`` for a sweep: its table, the paired differences per grid
    point (when the sweep has a baseline), the paper's figures, the methods' resolved configs
    (at the first grid point) and the wall times. Any PNG in ``directory/plots`` is embedded,
    and those of each grid point's ``plots/<point>/`` when there are at most
    :data:`MAX_EMBEDDED_POINTS` points (else the page says where they are)."""
    directory = Path(directory)
    heads, rows = table
    first_num = heads.index("method") + 1 if "method" in heads else 0
    sections = [
        (
            "results",
            "Results",
            f'<p class="note">{esc(markdown_note)}</p>' + table_html(heads, rows, num_from=first_num, cls="results"),
        )
    ]
    if paired is not None:
        intro, pheads, prows, pcls = paired
        pnum = pheads.index("method") + 1 if "method" in pheads else 0
        sections.append(
            (
                "paired",
                f"Paired differences vs {baseline}",
                f'<p class="note">{esc(intro).replace("`*`", "<code>*</code>")} Highlighted: the interval excludes 0.</p>'
                + table_html(pheads, prows, num_from=pnum, classes=pcls, cls="paired"),
            )
        )
    if paper is not None:
        src, prow = paper
        sections.append(
            (
                "paper",
                "Ours vs the paper",
                (f'<p class="note">Source: {esc(src)}.</p>' if src else "")
                + table_html(["method", "point", "figure", "ours", "paper"], prow, num_from=3),
            )
        )
    sections += _sweep_plot_sections(directory / "plots")
    sections.append(("config", "Configuration of each method", config_html(configs, baseline)))
    sections.append(("wall", "Wall times", table_html(*wall)))
    meta = (
        f'<p class="meta">Sweep directory <code>{esc(directory.resolve().name)}</code>; rebuilt from the runs\' summary.json by '
        f"<code>fedselect report {esc(directory.resolve().name)}</code> (or <code>fedselect sweep CONFIG --out DIR --table-only</code>).</p>"
    )
    doc = page(title, sections, meta)
    path = directory / "report.html"
    atomic_write(path, lambda fh: fh.write(doc))
    return path
