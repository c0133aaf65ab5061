"""``fedselect compare`` and ``fedselect sweep``: several runs on one federation (the methods of a
comparison over seeds; a grid of them), executed here or as Ray tasks, and their table."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

import typer

from fedselect.cli import console as ui
from fedselect.cli.options import (
    ADDRESS_HELP,
    BACKEND_HELP,
    CPUS_PER_RUN_HELP,
    DEVICE_HELP,
    ENGINE,
    ENGINE_HELP,
    LOG_HELP,
    RAY_CPUS_HELP,
    SET_EVERY_RUN_HELP,
    SET_HELP,
    WORKERS_HELP,
    backend_from_options,
    option_overrides,
    parse_seeds,
    ray_note,
    refuse_with_resume,
)

COMPARE_RESUME_HELP = "finish an interrupted comparison in this directory: finished runs are kept, interrupted ones continue from their checkpoints, missing ones run"
COMPARE_CONFIG_HELP = "comparison YAML (base experiment + methods + seeds), or a plain experiment YAML; omitted: FedAvg vs FLASH-RL vs FAVOR on embedded MNIST"


def compare(
    config: Optional[Path] = typer.Argument(None, help=COMPARE_CONFIG_HELP),
    rounds: Optional[int] = typer.Option(
        None,
        "--rounds",
        "-r",
        help="override the rounds of every run, methods' own `rounds` included (the same as --set rounds=N)",
    ),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="comma-separated seeds, e.g. 0,1,2 (overrides the config)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="comparison directory (default runs/<name>-<time>)"),
    sets: Optional[list[str]] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP + SET_EVERY_RUN_HELP),
    resume: Optional[Path] = typer.Option(None, "--resume", help=COMPARE_RESUME_HELP),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", help=WORKERS_HELP),
    device: Optional[str] = typer.Option(None, "--device", help=DEVICE_HELP),
    engine: Optional[str] = typer.Option(None, "--engine", click_type=ENGINE, help=ENGINE_HELP),
    log: Optional[list[str]] = typer.Option(None, "--log", help=LOG_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
    backend: str = typer.Option("local", "--backend", help=BACKEND_HELP),
    address: Optional[str] = typer.Option(None, "--address", help=ADDRESS_HELP),
    cpus_per_run: Optional[float] = typer.Option(None, "--cpus-per-run", help=CPUS_PER_RUN_HELP),
    ray_cpus: Optional[int] = typer.Option(None, "--ray-cpus", help=RAY_CPUS_HELP),
) -> None:
    """Run several methods (and seeds) on one shared federation; write table and plots.

    Every method sees the same partition, device profiles, per-round draws, validation set and test set.
    A method entry may run its own number of rounds (`rounds: N` in the entry, e.g. CEFL 100
    beside Regular FL 350); the table then takes each method's own last round and totals.
    Output: <out>/table.md, table.csv, paired.csv (differences vs the baseline over seeds with
    95% intervals), plots/*.png, report.html (everything on one offline page) and
    runs/<method>-s<seed>/ (one run directory each).
    With --backend ray every run is a Ray task; the results are the same, byte for byte, as
    with the local backend.
    """
    from fedselect import api
    from fedselect.report.build import build_report
    from fedselect.study.compare import load_compare, run_comparison, saved_compare

    out_dir = None
    try:
        runner_backend = backend_from_options(backend, address, cpus_per_run, ray_cpus, workers)
        over = option_overrides(rounds, None, None, sets, device=device, engine=engine, log=log) or None
        if resume is not None:
            given = {"CONFIG": config, "--rounds": rounds, "--seeds": seeds, "--out": out, "--set": sets}
            given.update({"--device": device, "--engine": engine, "--log": log})
            refuse_with_resume(f"finishes the comparison saved in {resume}", given)
            cc = saved_compare(resume)
        else:
            cc = load_compare(config, over)  # in every run, methods' own values included
        if seeds is not None:
            cc.seeds = parse_seeds(seeds)
        out_dir = api.output_dir("comparison", cc.name, out, resume)
        ui.console.print(f"[bold]{cc.name}[/bold]: {', '.join(m.label for m in cc.methods)}; seeds {cc.seeds}; output {out_dir}")
        with ui.progress() as prog:
            ray_note(runner_backend, address)
            run_comparison(cc, out_dir, resume=resume is not None, backend=runner_backend, **ui.compare_callbacks(prog, quiet))
        rep = build_report(out_dir, plots=False)
    except KeyboardInterrupt:
        ray = " --backend ray" if backend == "ray" else ""
        ui.interrupted(out_dir, f"finish it with: fedselect compare --resume {out_dir}{ray}")
    except (OSError, ValueError, RuntimeError) as e:
        ui.fail(e)
    ui.print_table(rep)
    ui.console.print(f"comparison directory: {out_dir} (table.md, table.csv, plots/; open report.html in a browser)")


def sweep(
    config: Path = typer.Argument(
        ..., help="sweep YAML: base experiment, methods, grid of dotted keys, seeds (e.g. configs/budgeted-sweep.yaml)"
    ),
    out: Optional[Path] = typer.Option(
        None,
        "--out",
        "-o",
        help="sweep directory (default runs/<name>-<time>); an existing one is continued, finished runs are kept",
    ),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="comma-separated seeds, e.g. 0,1,2 (overrides the config)"),
    rounds: Optional[int] = typer.Option(
        None,
        "--rounds",
        "-r",
        help="override the rounds of every run (the same as --set rounds=N; not when rounds is a grid key)",
    ),
    sets: Optional[list[str]] = typer.Option(
        None, "--set", metavar="KEY=VALUE", help=SET_HELP + SET_EVERY_RUN_HELP + "; not a grid key"
    ),
    table_only: bool = typer.Option(False, "--table-only", help="only rebuild table.md / table.csv from the runs in --out"),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", help=WORKERS_HELP),
    device: Optional[str] = typer.Option(None, "--device", help=DEVICE_HELP),
    engine: Optional[str] = typer.Option(None, "--engine", click_type=ENGINE, help=ENGINE_HELP),
    log: Optional[list[str]] = typer.Option(None, "--log", help=LOG_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress lines (one per run)"),
    backend: str = typer.Option("local", "--backend", help=BACKEND_HELP),
    address: Optional[str] = typer.Option(None, "--address", help=ADDRESS_HELP),
    cpus_per_run: Optional[float] = typer.Option(None, "--cpus-per-run", help=CPUS_PER_RUN_HELP),
    ray_cpus: Optional[int] = typer.Option(None, "--ray-cpus", help=RAY_CPUS_HELP),
) -> None:
    """Run a grid of experiments (every method x grid point x seed) and write one table.

    Output: <out>/table.md and table.csv (mean and std over seeds per grid point and method of
    the config's `columns`, by default every figure a comparison tables that some run has:
    accuracy, F1, end-to-end latency, rounds and latency to target, communication, candidates
    evaluated and competitive ratio for budgeted online, wall time; with `baseline:` in the
    config, paired differences vs that method over seeds with 95% intervals), plots/<point>/
    (per grid point, the plots `compare` draws), report.html (one offline page) and
    runs/<label>-<point>-s<seed>/ per run. Runs sharing data, model and seed share one federation.
    Finished runs are kept and interrupted ones continue from their checkpoints when the same
    --out is given again (with the same --rounds / --set / --device: a run made with other
    values is refused, naming them). With --backend ray every run is a Ray task (the same
    results, byte for byte, as the local backend).
    """
    from fedselect import api
    from fedselect.study.sweep import load_sweep
    from fedselect.study.sweep_run import run_sweep
    from fedselect.study.sweep_table import build_sweep_table

    out_dir = None
    try:
        runner_backend = backend_from_options(backend, address, cpus_per_run, ray_cpus, workers)
        sc = load_sweep(config, option_overrides(rounds, None, None, sets, device=device, engine=engine, log=log) or None)
        if seeds is not None:
            sc.seeds = parse_seeds(seeds)
        if table_only:
            _check_table_only(out)
            out_dir = out
            rep = build_sweep_table(out_dir, sc)
        else:
            out_dir = api.output_dir("sweep", sc.name, out)
            grid = sc.grid or "-"
            ui.console.print(
                f"[bold]{sc.name}[/bold]: {', '.join(m.label for m in sc.methods)}; grid {grid}; seeds {sc.seeds}; output {out_dir}"
            )
            ray_note(runner_backend, address)
            on_run = None if quiet else lambda i, n, d: ui.console.print(f"[{i}/{n}] {d}", highlight=False, markup=False)
            rep = run_sweep(sc, out_dir, on_run=on_run, backend=runner_backend)
    except KeyboardInterrupt:
        again = _options_again(seeds, rounds, sets, device, engine, log, backend)
        ui.interrupted(out_dir, f"continue with: fedselect sweep {config} --out {out_dir}" + "".join(" " + a for a in again))
    except (OSError, ValueError, RuntimeError) as e:
        ui.fail(e)
    ui.print_sweep(rep)
    ui.console.print(f"sweep directory: {out_dir} (table.md, table.csv, report.html, plots/, runs/)", highlight=False)


def _check_table_only(out: Path | None) -> None:
    """``--table-only`` needs the directory of an existing sweep.

    Raises:
        FileNotFoundError: no --out, or no sweep.json in it.
    """
    if out is None or not (out / "sweep.json").is_file():
        raise FileNotFoundError(
            "--table-only rebuilds the table of an existing sweep: give its directory with --out "
            + (f"({out} holds no sweep.json)" if out is not None else "(none given)")
        )


def _options_again(seeds, rounds, sets, device, engine, log, backend) -> list[str]:
    """The options an interrupted sweep was given that its continuation must repeat (the same
    seeds, rounds, --set keys, device, engine, logs and backend; a run made with other values is
    refused)."""
    again = [f"--seeds {seeds}"] * (seeds is not None) + [f"--rounds {rounds}"] * (rounds is not None)
    again += [f"--set {shlex.quote(x)}" for x in sets or []] + [f"--device {device}"] * (device is not None)
    again += [f"--engine {engine}"] * (engine is not None) + [f"--log {x}" for x in log or []]
    again += ["--backend ray"] * (backend == "ray")
    return again
