"""Keep the light files of saved reproduction runs in the repository.

``fedselect reproduce`` writes each entry's comparison (or sweep) into ``OUT/<id>``, models and
checkpoints included. This copies what ``fedselect report`` and ``fedselect reproduce --no-run``
read — every ``metrics.csv``, ``config.yaml``, ``summary.json``, ``inputs.json``,
``timing.csv`` and the comparison's ``compare.json`` / ``federation-s*.json`` / tables — into
``DST/<id>``, leaving out models, checkpoints, logs and the plots and HTML the report rebuilds
(``docs/reproduction/runs``: about 0.6 MB per 15-run comparison).

Usage::

    python tools/save_runs.py runs/reproduce docs/reproduction/runs [ID ...] [--finished-only]
    fedselect reproduce --no-run --out docs/reproduction/runs --doc docs/reproduction.md

An entry already in ``DST`` is replaced.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

#: what the report rebuilds or does not need
LEFT_OUT = ("*.pt", "*.pt.tmp", "run.log", "report.html", "plots", "tb", "reproduction.md")


def _ignore(runs: Path, finished_only: bool):
    """copytree's ignore: the files of LEFT_OUT, and with ``finished_only`` the run directories
    under ``runs`` that have no ``summary.json`` yet."""
    left_out = shutil.ignore_patterns(*LEFT_OUT)

    def ignore(directory: str, names: list[str]) -> set[str]:
        skip = set(left_out(directory, names))
        if finished_only and Path(directory) == runs:
            skip |= {n for n in names if not (runs / n / "summary.json").is_file()}
        return skip

    return ignore


def save(src: Path, dst: Path, ids: list[str] | None = None, finished_only: bool = False) -> list[str]:
    """Copy the entries ``ids`` (default: every directory of ``src`` holding a
    ``compare.json`` or ``sweep.json``) from ``src`` to ``dst``; returns the ids copied.
    ``finished_only``: leave out the runs still in progress (no ``summary.json`` yet), so a
    comparison saved half-way lists them as missing instead of counting their first rounds.

    Raises:
        FileNotFoundError: ``src`` or a named entry does not exist.
    """
    if not src.is_dir():
        raise FileNotFoundError(f"{src}: no such directory")
    names = ids or sorted(
        p.name for p in src.iterdir() if p.is_dir() and any((p / f).is_file() for f in ("compare.json", "sweep.json"))
    )
    for name in names:
        if not (src / name).is_dir():
            raise FileNotFoundError(f"{src / name}: no such entry directory")
        target = dst / name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(src / name, target, ignore=_ignore(src / name / "runs", finished_only))
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path, help="the --out of fedselect reproduce (e.g. runs/reproduce)")
    ap.add_argument("dst", type=Path, help="where the light copies go (e.g. docs/reproduction/runs)")
    ap.add_argument("ids", nargs="*", help="entry ids (default: every entry directory in SRC)")
    ap.add_argument("--finished-only", action="store_true", help="leave out runs still in progress (no summary.json)")
    a = ap.parse_args(argv)
    try:
        copied = save(a.src, a.dst, a.ids or None, a.finished_only)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"copied {len(copied)} entr{'y' if len(copied) == 1 else 'ies'}: {', '.join(copied)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
