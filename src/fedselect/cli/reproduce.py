"""``fedselect reproduce``: the papers' headline experiments run over seeds, judged against the
papers, and the reproduction document written."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from fedselect.cli import console as ui
from fedselect.cli.options import WORKERS_HELP


def reproduce(
    paper: Optional[str] = typer.Argument(None, help="flashrl, cefl or budgeted (default: all three)"),
    quick: bool = typer.Option(False, "--quick", help="the small variant of every table (2 seeds, a few minutes on 2 cores)"),
    out: Path = typer.Option(Path("runs/reproduce"), "--out", "-o", help="where the comparisons go (kept; rerunning continues)"),
    doc: Optional[Path] = typer.Option(
        None, "--doc", help="also write the document here, e.g. docs/reproduction.md (plots go to its img/reproduction/)"
    ),
    manifest: Path = typer.Option(Path("configs/reproduce.yaml"), "--manifest", help="the reproduction manifest"),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", help=WORKERS_HELP),
    no_run: bool = typer.Option(
        False, "--no-run", help="run nothing: write the document from the comparisons already in --out (the rest: not run yet)"
    ),
) -> None:
    """Run the papers' headline experiments over seeds and write the reproduction document.

    Every entry of the manifest is a comparison (configs/repro/, configs/paper/); each is run
    into <out>/<id> (a finished one is kept, an interrupted one continues), rebuilt from its
    saved runs and judged figure by figure against the paper: reproduced, direction only,
    inconclusive (more seeds needed), not reproduced, reference only (substitute data) or not
    judged (docs/comparisons.md gives the rules). A `kind: sweep` entry runs a
    `fedselect sweep` grid instead and is summarised (mean and best cells, differences to the
    baseline, plots); a `kind: alpha` entry computes the budgeted-online alpha* table (Table II).
    Each entry's directory records the machine its runs were made on (reproduce.json), which
    the document names. Writes <out>/reproduction.md (docs/comparisons.md explains it).
    """
    from fedselect.repro.manifest import count_verdicts
    from fedselect.repro.reproduce import reproduce as run_reproduction

    if not manifest.is_file():
        ui.fail(FileNotFoundError(f"--manifest {manifest}: no such file (run from the repository root, or give --manifest)"))
    try:
        target, results = run_reproduction(
            manifest,
            out,
            [paper] if paper else None,
            quick,
            doc,
            on_progress=lambda m: ui.console.print(m),
            workers=workers,
            run=not no_run,
        )
    except KeyboardInterrupt:
        ui.interrupted(out, "run the same command again to continue")
    except (OSError, ValueError, RuntimeError) as e:
        ui.fail(e)
    for r in results:
        what = count_verdicts([j.verdict for j in r.judged]) or (
            f"grid of {r.grid['cells']} points summarised" if r.grid else "no figures"
        )
        ui.console.print(f"{r.entry.id}: " + (what if r.ran else "not run yet"))
    ui.console.print(f"wrote {target}")
