"""The reproduction document: every entry of the manifest run (or read back) and rendered as
Markdown (:func:`render`), written by :func:`reproduce`."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

from fedselect.common.files import atomic_write
from fedselect.repro.alpha import render_alpha, run_alpha_entry
from fedselect.repro.comparison import run_compare_entry
from fedselect.repro.grid import render_sweep, run_sweep_entry
from fedselect.repro.manifest import PAPERS, Entry, EntryResult, Job, _is_fraction, count_verdicts, load_manifest
from fedselect.repro.record import decisions_caution, finding_text, where

#: the runner of each entry kind
RUNNERS = {"compare": run_compare_entry, "sweep": run_sweep_entry, "alpha": run_alpha_entry}


def run_entry(
    entry: Entry,
    root: Path,
    out: Path,
    quick: bool,
    on_progress: Callable[[str], None] | None = None,
    workers: int | None = None,
    run: bool = True,
) -> EntryResult:
    """Run (or finish, or keep) one entry in ``out/<id>`` by its kind and read its results back.
    With ``run=False`` nothing runs: what is in ``out/<id>`` is read as it is, a missing entry
    returned with ``ran=False``.

    Raises:
        FileNotFoundError: the entry's config is missing. ConfigError: it is invalid.
    """
    return RUNNERS[entry.kind](entry, Job(root, out, quick, on_progress, workers, run))


def _whole_table(markdown: str) -> list[str]:
    """The comparison's table.md under the entry: its title dropped, its sections one level
    below the entry's heading."""
    lines = markdown.strip().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return (
        [
            "The comparison's whole table (its `table.md`; mean ± sample sd over seeds; its "
            "'Ours vs the paper' gives a `_vs` figure as the change of the means, which can differ a "
            "little from the mean of the paired differences judged above):",
            "",
        ]
        + ["##" + x if x.startswith("## ") else x for x in lines]
        + [""]
    )


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
                    lines += [finding_text(e, quick), ""]
                continue
            if e.kind == "sweep":
                lines += render_sweep(r, quick, image_dir)
                continue
            if e.kind == "alpha":
                lines += render_alpha(r, quick)
                continue
            lines += _render_compare(r, image_dir, quick)
    return "\n".join(lines).rstrip() + "\n"


def _render_compare(r: EntryResult, image_dir: str | None, quick: bool = False) -> list[str]:
    """The part of a comparison entry that ran: its claims judged (paper, ours with the 95%
    interval, verdict), the count of verdicts, the finding, the comparison's whole table, where
    its runs were made, the commands that make it again and its plots."""
    e = r.entry
    lines: list[str] = []
    if r.incomplete:
        lines += ["Caution, incomplete runs (their existing rounds are used): " + ", ".join(r.incomplete), ""]
    lines += decisions_caution(r)
    lines += ["| method | figure | paper | ours (95% interval) | seeds | verdict |", "|---|---|---|---|---|---|"]
    for j in r.judged:
        ours = _fmt(j.mean, j.claim.figure)
        if j.low is not None and j.high is not None and j.mean is not None:
            ours += f" [{_fmt(j.low, j.claim.figure)}, {_fmt(j.high, j.claim.figure)}]"
        pv = j.claim.value if isinstance(j.claim.value, str) else _fmt(float(j.claim.value), j.claim.figure)
        fig = f"`{j.claim.figure}`" + (f" vs {j.claim.vs}" if j.claim.vs else "")
        lines.append(f"| {j.claim.method} | {fig} | {pv} | {ours} | {j.n} | **{j.verdict}**: {j.why} |")
    lines.append("")
    lines.append(
        "Verdict: "
        + (count_verdicts([j.verdict for j in r.judged]) or "no figures to judge")
        + "."
        + (" Substitute data: the paper's absolute figures are another data set's." if e.substitute else "")
    )
    if e.finding:
        lines += ["", finding_text(e, quick)]
    if r.markdown:
        lines += [""] + _whole_table(r.markdown)
    lines += [
        "",
        f"Config `{e.config}`, seeds {', '.join(map(str, r.seeds))}; {where(r)}. Directory `{r.directory}`.",
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
    return lines


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
