"""Command-line interface: ``fedselect run | compare | report``.

Every command documents its options in ``--help``.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

app = typer.Typer(
    add_completion=False, no_args_is_help=False, rich_markup_mode=None,
    help="fedselect: client selection for federated learning over heterogeneous fleets "
    "(FLASH-RL, CEFL, budgeted online selection and their baselines).",
)
console = Console()


@app.callback()
def _root() -> None:
    """fedselect: client selection for federated learning over heterogeneous fleets."""


def _overrides(rounds, seed, method) -> dict:
    out = {}
    if rounds is not None:
        out["rounds"] = rounds
    if seed is not None:
        out["seed"] = seed
    if method is not None:
        out["method"] = method
    return out


def _load(config: Optional[Path], overrides: dict):
    from fedselect.config import apply_overrides, load_config, parse_config

    if config is None:
        return parse_config(apply_overrides({"name": "default"}, overrides), "<embedded default>")
    return load_config(config, overrides)


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=console, transient=False,
    )


def _fmt(v, digits=4):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def print_summary(summary: dict, run_dir: Path) -> None:
    table = Table(title=f"{summary.get('name')} ({summary.get('method')}, seed {summary.get('seed')})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("final accuracy", _fmt(summary.get("final_accuracy"))), ("best accuracy", _fmt(summary.get("best_accuracy"))),
        ("final macro-F1", _fmt(summary.get("final_f1_macro"))),
        ("end-to-end latency (s)", _fmt(summary.get("e2e_latency_s"), 1)),
        ("rounds to target", _fmt(summary.get("rounds_to_target"))),
        ("latency to target (s)", _fmt(summary.get("latency_to_target_s"), 1)),
        ("communication (MB)", _fmt(summary.get("communication_mb"), 2)),
        ("rounds", _fmt(summary.get("rounds"))), ("wall time (s)", _fmt(summary.get("wall_s"), 1)),
    ]
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)
    console.print(f"run directory: {run_dir}")


def _fail(e: Exception) -> None:
    console.print(f"[red]error:[/red] {e}", highlight=False)
    raise typer.Exit(2)


@app.command()
def run(
    config: Optional[Path] = typer.Argument(None, help="experiment YAML; omitted: the embedded default (FedAvg on embedded MNIST, 20 clients, Dirichlet 0.5)"),
    rounds: Optional[int] = typer.Option(None, "--rounds", "-r", help="override the number of communication rounds T"),
    seed: Optional[int] = typer.Option(None, "--seed", "-s", help="override the experiment seed"),
    method: Optional[str] = typer.Option(None, "--method", "-m", help="override the method (fedavg, full, flashrl, favor, cefl, ...)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="run directory (default runs/<name>-<method>-s<seed>-<time>)"),
    resume: Optional[Path] = typer.Option(None, "--resume", help="continue the run in this directory from its last checkpoint"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
) -> None:
    """Run one experiment and write metrics.csv, summary.json, config.yaml and run.log."""
    from fedselect.runner import resume_experiment, run_experiment

    try:
        if resume is not None:
            if not (resume / "config.yaml").is_file():
                _fail(FileNotFoundError(f"--resume {resume}: no config.yaml there (not a run directory)"))
            run_dir, summary = resume, None
            with _progress() as prog:
                task = prog.add_task("resume", total=None, status="")
                summary = resume_experiment(resume, on_round=_advance(prog, task, quiet), rounds=rounds)
        else:
            cfg = _load(config, _overrides(rounds, seed, method))
            run_dir = out or Path("runs") / f"{cfg.name}-{cfg.method}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
            console.print(f"[bold]{cfg.name}[/bold]: {cfg.method} on {cfg.data.dataset}, N={cfg.data.num_clients}, U={cfg.clients_per_round}, T={cfg.rounds}, seed {cfg.seed}")
            with _progress() as prog:
                task = prog.add_task(cfg.method, total=cfg.rounds, status="preparing")
                summary = run_experiment(cfg, run_dir, on_round=_advance(prog, task, quiet))
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        _fail(e)
    print_summary(summary, run_dir)


def _advance(prog: Progress, task, quiet: bool):
    def cb(ev):
        acc, e2e = ev.row.get("accuracy"), ev.row.get("e2e_latency_s")
        prog.update(task, completed=ev.round, total=ev.rounds, status=f"round {ev.round}  acc {acc:.4f}  e2e {e2e:.1f} s", visible=not quiet)

    return cb


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except KeyboardInterrupt:
        console.print("interrupted: results written so far are kept; continue with --resume RUN_DIR")
        sys.exit(130)


if __name__ == "__main__":
    main()
