"""``fedselect run``: one experiment into its run directory, or ``--resume`` of one."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from fedselect.cli import console as ui
from fedselect.cli.options import (
    DEVICE_HELP,
    ENGINE,
    ENGINE_HELP,
    LOG_HELP,
    SET_HELP,
    WORKERS_HELP,
    check_workers,
    option_overrides,
    refuse_with_resume,
)

RUN_RESUME_HELP = "continue the run in this directory from its last checkpoint (with its saved config and engine; only --rounds may extend the budget)"
METHOD_HELP = "override the method preset (fedavg, full, flashrl, favor, cefl, oort, ...; see `fedselect list`): it names the selector and the algorithm (the config's sections stay where they name the same ones); refine with --set selector.options.KEY=V or algorithm.options.KEY=V"


def run(
    config: Optional[Path] = typer.Argument(
        None, help="experiment YAML; omitted: the embedded default (FedAvg on embedded MNIST, 20 clients, Dirichlet 0.5)"
    ),
    rounds: Optional[int] = typer.Option(None, "--rounds", "-r", help="override the number of communication rounds T"),
    seed: Optional[int] = typer.Option(None, "--seed", "-s", help="override the experiment seed"),
    method: Optional[str] = typer.Option(None, "--method", "-m", help=METHOD_HELP),
    selector: Optional[str] = typer.Option(
        None,
        "--selector",
        help="set selector.name (random, flashrl, oort, power_of_choice, ... or package.module:Class); another selector than the config's drops its options, the config's method still names the algorithm",
    ),
    algorithm: Optional[str] = typer.Option(
        None,
        "--algorithm",
        help="set algorithm.name (fedavg, fedper, cefl, fedprox, ... or package.module:Class); another algorithm than the config's drops its options, the config's method still names the selector",
    ),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="run directory (default runs/<name>-<method>-s<seed>-<time>)"),
    resume: Optional[Path] = typer.Option(None, "--resume", help=RUN_RESUME_HELP),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="replace a run already in --out (its config, metrics, checkpoints and summary are deleted)"
    ),
    sets: Optional[list[str]] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", help=WORKERS_HELP),
    device: Optional[str] = typer.Option(None, "--device", help=DEVICE_HELP),
    engine: Optional[str] = typer.Option(None, "--engine", click_type=ENGINE, help=ENGINE_HELP),
    log: Optional[list[str]] = typer.Option(None, "--log", help=LOG_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
) -> None:
    """Run one experiment and write metrics.csv (a row per round), timing.csv, summary.json, model.pt,
    config.yaml, run.log and, unless checkpoint_every is 0, checkpoint.pt / checkpoint.prev.pt (for
    --resume) into its directory.

    An --out directory that already holds a run is refused unless --resume or --overwrite.
    """
    from fedselect import api

    plan = None
    try:
        if resume is not None:
            given = {"CONFIG": config, "--seed": seed, "--method": method, "--selector": selector, "--algorithm": algorithm}
            given.update(
                {"--out": out, "--set": sets, "--device": device, "--engine": engine, "--overwrite": overwrite, "--log": log}
            )
            refuse_with_resume(
                f"continues the run with the config saved in {resume}", given, " (only --rounds, to extend the budget)"
            )
            with ui.progress() as prog:
                task = prog.add_task("resume", total=None, status="", visible=not quiet)
                res = api.resume(resume, rounds=rounds, on_round=ui.advance(prog, task, quiet), workers=check_workers(workers))
                ui.finish(prog, task, res.summary)
        else:
            over = option_overrides(rounds, seed, method, sets, selector, algorithm, device, engine, log)
            plan = api.plan_run(config, out, overwrite=overwrite, sets=over)
            cfg = plan.config
            ui.console.print(
                f"[bold]{cfg.name}[/bold]: {plan.method} (selector {cfg.selector.name}, algorithm {cfg.algorithm.name}) on "
                f"{cfg.data.dataset}, N={cfg.data.num_clients}, U={cfg.clients_per_round}, T={cfg.rounds}, seed {cfg.seed}",
                highlight=False,
            )
            with ui.progress() as prog:
                task = prog.add_task(plan.method, total=cfg.rounds, status="preparing", visible=not quiet)
                res = api.run_plan(plan, on_round=ui.advance(prog, task, quiet), workers=check_workers(workers))
                ui.finish(prog, task, res.summary)
    except KeyboardInterrupt:
        d = resume if resume is not None else (plan.run_dir if plan else None)
        ui.interrupted(d, f"continue with: fedselect run --resume {d}")
    except (OSError, ValueError, RuntimeError) as e:
        ui.fail(e)
    ui.print_summary(res.summary, res.run_dir)
