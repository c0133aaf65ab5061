"""Command-line interface: ``fedselect run | compare | report | sweep | list``.

Every command documents its options in ``--help``. The commands turn options into config
overrides and print; where runs go and which directories are refused is
:mod:`fedselect.api`'s policy (the same for ``fedselect.run``), the progress bars and tables are
:mod:`fedselect.cli.console`'s.
"""

from __future__ import annotations

import logging
import shlex
import sys
from pathlib import Path
from typing import Optional

import click
import typer

from fedselect.cli import console as ui
from fedselect.registry import ENGINES

app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    rich_markup_mode=None,
    help="fedselect: client selection for federated learning over heterogeneous fleets "
    "(FLASH-RL, CEFL, budgeted online selection and their baselines).",
)


def _print_version(value: bool) -> None:
    if value:
        from fedselect import __version__

        ui.console.print(f"fedselect {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="print the version of fedselect and exit"
    ),
) -> None:
    """fedselect: client selection for federated learning over heterogeneous fleets."""


def _parse_sets(sets: list[str] | None) -> dict:
    """``["train.lr=0.1", "data.options.path=/data/x"]`` -> dotted overrides (values parsed as YAML).

    Raises:
        ValueError: an item that is not KEY=VALUE, a value that is not YAML, or a key given twice.
    """
    import yaml

    out = {}
    for item in sets or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE with a dotted key, e.g. --set train.lr=0.1")
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError as e:
            raise ValueError(f"--set {item!r}: the value is not valid YAML ({e})") from None
        if key in out:
            raise ValueError(f"--set {key}: given twice ({key}={out[key]!r} and {item!r}); give it once")
        out[key] = parsed
    return out


def _parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]`` for --seeds.

    Raises:
        ValueError: not distinct comma-separated integers >= 0 (or nothing given).
    """
    try:
        seeds = [int(x) for x in text.split(",")]
    except ValueError:
        seeds = []
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ValueError(f"--seeds {text!r}: expected distinct comma-separated integers >= 0, like 0,1,2")
    return seeds


def _workers(n: int | None) -> int | None:
    if n is not None and n < 0:
        raise ValueError(f"--workers must be >= 0 (0 = train the clients in this process), got {n}")
    return n


def _backend(backend: str, address, cpus_per_run, ray_cpus, workers):
    from fedselect.study.backends import make_backend

    cpus = cpus_per_run if cpus_per_run is not None else 1
    return make_backend(backend, address=address, cpus_per_run=cpus, workers=_workers(workers), num_cpus=ray_cpus)


def _ray_note(runner_backend, address) -> None:
    if runner_backend.name == "ray":
        ui.console.print(f"backend: Ray ({address or 'local instance'}), one task per run", highlight=False)


def _refuse_with_resume(what: str, options: dict, tail: str = "") -> None:
    """--resume takes what it continues from its directory: any of ``options`` given is an error."""
    given = [n for n, v in options.items() if v is not None and v is not False and not (isinstance(v, (list, tuple)) and not v)]
    if given:
        raise ValueError(f"--resume {what}; it cannot be combined with {', '.join(given)}{tail}")


#: the named options and the config key each one sets (--log tensorboard: log.tensorboard)
FLAG_KEYS = {
    "--rounds": "rounds",
    "--seed": "seed",
    "--method": "method",
    "--selector": "selector.name",
    "--algorithm": "algorithm.name",
    "--device": "train.device",
    "--engine": "engine",
}


def _overrides(rounds, seed, method, sets=None, selector=None, algorithm=None, device=None, engine=None, log=None) -> dict:
    """Dotted overrides from the command line: each named option is the key it stands for
    (:data:`FLAG_KEYS`; ``--log tensorboard`` is ``log.tensorboard: true``), with the ``--set``
    keys beside them; a key given by an option and by ``--set`` is refused. How ``method``,
    ``selector.name`` and ``algorithm.name`` switch components is :func:`fedselect.api.plan_run`'s.

    Raises:
        ValueError: a bad --set or --log, or a key given twice.
    """
    given = dict(zip(FLAG_KEYS, (rounds, seed, method, selector, algorithm, device, engine)))
    flags = {FLAG_KEYS[f]: v for f, v in given.items() if v is not None}
    for what in log or []:  # --log tensorboard is --set log.tensorboard=true
        if what != "tensorboard":
            raise ValueError(f"--log {what!r}: allowed: 'tensorboard'")
        flags["log.tensorboard"] = True
    out = _parse_sets(sets)
    for key in flags:
        if key in out:
            flag = next((f for f, k in FLAG_KEYS.items() if k == key), "--log")
            raise ValueError(f"{flag} and --set {key}={out[key]!r} both set {key}; give it once")
    return {**flags, **out}


SET_HELP = "override a config key, e.g. --set train.lr=0.1 --set data.options.path=/data/MobiAct (repeatable; values are YAML; a key an option or another --set also gives is refused)"
SET_EVERY_RUN_HELP = "; sets the key in every run, over the methods' own values (not seed, name, method, selector, algorithm or their names: the methods say what runs; options are fine)"
WORKERS_HELP = "worker processes training the clients of a round side by side, one torch thread each (default: train.workers, else FEDSELECT_WORKERS, else the usable cores where the run's work repays starting them and none where it does not, docs/performance.md#start-up; 0 = in this process; more than the usable cores start only those); results are identical for any value"
DEVICE_HELP = "where clients train: auto (a GPU when one is available; default), cpu, cuda or cuda:N (sets train.device)"
LOG_HELP = "live logs: --log tensorboard writes TensorBoard event files into <run dir>/tb every round (sets log.tensorboard; needs the extra fedselect[tensorboard])"


def _default_first(names: list[str]) -> list[str]:
    """Engine names with the default engine, ``simulator``, first."""
    return sorted(names, key=lambda n: (n != "simulator", n))


ENGINE_HELP = (
    f"where the rounds run (sets engine): {', '.join(_default_first(ENGINES.builtin_names()))} (simulator: this process and its "
    "worker pool, the default; flower: Flower's simulation engine, one node per client, needs the extra "
    "fedselect[flower]), an engine of the entry-point group fedselect.engines, or your own as "
    "package.module:ClassName (`fedselect list`, docs/architecture.md); results are identical"
)
BACKEND_HELP = "where the runs execute: local (this process, one after the other; default) or ray (one Ray task per run)"
ADDRESS_HELP = "with --backend ray: HOST:PORT of a running Ray cluster (`ray start --head` prints it); omitted: a local Ray instance is started for the command"
CPUS_PER_RUN_HELP = "with --backend ray: CPUs each run reserves (also its worker processes unless --workers is given)"
RAY_CPUS_HELP = "with --backend ray and no --address: CPUs of the local Ray instance (default: all cores)"
RUN_RESUME_HELP = "continue the run in this directory from its last checkpoint (with its saved config and engine; only --rounds may extend the budget)"
COMPARE_RESUME_HELP = "finish an interrupted comparison in this directory: finished runs are kept, interrupted ones continue from their checkpoints, missing ones run"
COMPARE_CONFIG_HELP = "comparison YAML (base experiment + methods + seeds), or a plain experiment YAML; omitted: FedAvg vs FLASH-RL vs FAVOR on embedded MNIST"
METHOD_HELP = "override the method preset (fedavg, full, flashrl, favor, cefl, oort, ...; see `fedselect list`): it names the selector and the algorithm (the config's sections stay where they name the same ones); refine with --set selector.options.KEY=V or algorithm.options.KEY=V"


class EngineName(click.ParamType):
    """``--engine``: a name of the engine registry (:data:`fedselect.registry.ENGINES`: the
    built-ins and entry points, what shell completion offers) or ``package.module:ClassName``;
    the resolve step then checks that it loads and is an engine."""

    name = "engine"

    def get_metavar(self, param, ctx=None) -> str:
        return "[" + "|".join(_default_first(ENGINES.builtin_names())) + "|package.module:ClassName]"

    def convert(self, value, param, ctx):
        if isinstance(value, str) and (":" in value or value in ENGINES.names()):
            return value
        self.fail(
            f"{value!r} is not an engine; allowed: {', '.join(_default_first(ENGINES.names()))}, or package.module:ClassName "
            "for your own",
            param,
            ctx,
        )

    def shell_complete(self, ctx, param, incomplete):
        from click.shell_completion import CompletionItem

        return [CompletionItem(n) for n in ENGINES.names() if n.startswith(incomplete)]


ENGINE = EngineName()


@app.command()
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
    """Run one experiment and write metrics.csv, summary.json, model.pt, config.yaml and run.log.

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
            _refuse_with_resume(
                f"continues the run with the config saved in {resume}", given, " (only --rounds, to extend the budget)"
            )
            with ui.progress() as prog:
                task = prog.add_task("resume", total=None, status="", visible=not quiet)
                res = api.resume(resume, rounds=rounds, on_round=ui.advance(prog, task, quiet), workers=_workers(workers))
                ui.finish(prog, task, res.summary)
        else:
            over = _overrides(rounds, seed, method, sets, selector, algorithm, device, engine, log)
            plan = api.plan_run(config, out, overwrite=overwrite, sets=over)
            cfg = plan.config
            ui.console.print(
                f"[bold]{cfg.name}[/bold]: {plan.method} (selector {cfg.selector.name}, algorithm {cfg.algorithm.name}) on "
                f"{cfg.data.dataset}, N={cfg.data.num_clients}, U={cfg.clients_per_round}, T={cfg.rounds}, seed {cfg.seed}",
                highlight=False,
            )
            with ui.progress() as prog:
                task = prog.add_task(plan.method, total=cfg.rounds, status="preparing", visible=not quiet)
                res = api.run_plan(plan, on_round=ui.advance(prog, task, quiet), workers=_workers(workers))
                ui.finish(prog, task, res.summary)
    except KeyboardInterrupt:
        d = resume if resume is not None else (plan.run_dir if plan else None)
        ui.interrupted(d, f"continue with: fedselect run --resume {d}")
    except (OSError, ValueError, RuntimeError) as e:
        ui.fail(e)
    ui.print_summary(res.summary, res.run_dir)


@app.command()
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
        runner_backend = _backend(backend, address, cpus_per_run, ray_cpus, workers)
        over = _overrides(rounds, None, None, sets, device=device, engine=engine, log=log) or None
        if resume is not None:
            given = {"CONFIG": config, "--rounds": rounds, "--seeds": seeds, "--out": out, "--set": sets}
            given.update({"--device": device, "--engine": engine, "--log": log})
            _refuse_with_resume(f"finishes the comparison saved in {resume}", given)
            cc = saved_compare(resume)
        else:
            cc = load_compare(config, over)  # in every run, methods' own values included
        if seeds is not None:
            cc.seeds = _parse_seeds(seeds)
        out_dir = api.output_dir("comparison", cc.name, out, resume)
        ui.console.print(f"[bold]{cc.name}[/bold]: {', '.join(m.label for m in cc.methods)}; seeds {cc.seeds}; output {out_dir}")
        with ui.progress() as prog:
            _ray_note(runner_backend, address)
            run_comparison(cc, out_dir, resume=resume is not None, backend=runner_backend, **ui.compare_callbacks(prog, quiet))
        rep = build_report(out_dir, plots=False)
    except KeyboardInterrupt:
        ray = " --backend ray" if backend == "ray" else ""
        ui.interrupted(out_dir, f"finish it with: fedselect compare --resume {out_dir}{ray}")
    except (OSError, ValueError, RuntimeError) as e:
        ui.fail(e)
    ui.print_table(rep)
    ui.console.print(f"comparison directory: {out_dir} (table.md, table.csv, plots/; open report.html in a browser)")


@app.command()
def report(
    directory: Path = typer.Argument(
        ..., help="a comparison directory (compare.json), a sweep directory (sweep.json) or a run directory (metrics.csv)"
    ),
    no_plots: bool = typer.Option(False, "--no-plots", help="do not redraw plots/ (report.html embeds the plots already there)"),
    window: Optional[int] = typer.Option(
        None, "--window", min=1, help="k of the 'mean last k' column (default: each run's metrics.summary_window, 10)"
    ),
) -> None:
    """Rebuild table.md, table.csv, paired.csv, plots/ and report.html from saved metrics,
    without re-running anything.

    report.html is one self-contained page (plots embedded, no script): the table with the
    paired 95% intervals, every plot, the paper's figures, each method's resolved config, the
    federation and the wall times. Incomplete runs (interrupted) are reported with the rounds
    they have.
    """
    from fedselect.report.build import build_report
    from fedselect.study.compare import check_comparison_runs
    from fedselect.study.sweep import check_sweep_runs

    try:
        check_comparison_runs(directory)  # never a table that mixes results of different configs
        check_sweep_runs(directory)
        rep = build_report(directory, plots=not no_plots, window=window)
    except (OSError, ValueError) as e:
        ui.fail(e)
    if rep.get("kind") == "sweep":
        ui.print_sweep(rep)
        ui.console.print(
            f"wrote {directory / 'table.md'}, {directory / 'table.csv'}"
            + (f", {len(rep['plots'])} plots in {directory / 'plots'}" if rep["plots"] else "")
            + f" and {directory / 'report.html'}",
            highlight=False,
        )
        return
    ui.print_table(rep)
    ui.console.print(
        f"wrote {directory / 'table.md'}, {directory / 'table.csv'}"
        + (f", {len(rep['plots'])} plots in {directory / 'plots'}" if rep["plots"] else "")
        + f" and {directory / 'report.html'}"
    )


@app.command()
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
    saved runs and judged figure by figure against the paper: reproduced, direction only, not
    reproduced, reference only (substitute data) or not judged. A `kind: sweep` entry runs a
    `fedselect sweep` grid instead and is summarised (mean and best cells, differences to the
    baseline, plots); a `kind: alpha` entry computes the budgeted-online alpha* table (Table II).
    Each entry's directory records the machine its runs were made on (reproduce.json), which
    the document names. Writes <out>/reproduction.md (docs/comparisons.md explains it).
    """
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
        counts: dict[str, int] = {}
        for j in r.judged:
            counts[j.verdict] = counts.get(j.verdict, 0) + 1
        what = ", ".join(f"{n} {v}" for v, n in counts.items()) or (
            f"grid of {r.grid['cells']} points summarised" if r.grid else "no figures"
        )
        ui.console.print(f"{r.entry.id}: " + (what if r.ran else "not run yet"))
    ui.console.print(f"wrote {target}")


@app.command()
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
        runner_backend = _backend(backend, address, cpus_per_run, ray_cpus, workers)
        sc = load_sweep(config, _overrides(rounds, None, None, sets, device=device, engine=engine, log=log) or None)
        if seeds is not None:
            sc.seeds = _parse_seeds(seeds)
        if table_only:
            if out is None or not (out / "sweep.json").is_file():
                raise FileNotFoundError(
                    "--table-only rebuilds the table of an existing sweep: give its directory with --out "
                    + (f"({out} holds no sweep.json)" if out is not None else "(none given)")
                )
            out_dir = out
            rep = build_sweep_table(out_dir, sc)
        else:
            out_dir = api.output_dir("sweep", sc.name, out)
            grid = sc.grid or "-"
            ui.console.print(
                f"[bold]{sc.name}[/bold]: {', '.join(m.label for m in sc.methods)}; grid {grid}; seeds {sc.seeds}; output {out_dir}"
            )
            _ray_note(runner_backend, address)
            on_run = None if quiet else lambda i, n, d: ui.console.print(f"[{i}/{n}] {d}", highlight=False, markup=False)
            rep = run_sweep(sc, out_dir, on_run=on_run, backend=runner_backend)
    except KeyboardInterrupt:
        again = [f"--seeds {seeds}"] * (seeds is not None) + [f"--rounds {rounds}"] * (rounds is not None)
        again += [f"--set {shlex.quote(x)}" for x in sets or []] + [f"--device {device}"] * (device is not None)
        again += [f"--engine {engine}"] * (engine is not None) + [f"--log {x}" for x in log or []]
        again += ["--backend ray"] * (backend == "ray")
        ui.interrupted(out_dir, f"continue with: fedselect sweep {config} --out {out_dir}" + "".join(" " + a for a in again))
    except (OSError, ValueError, RuntimeError) as e:
        ui.fail(e)
    ui.print_sweep(rep)
    ui.console.print(f"sweep directory: {out_dir} (table.md, table.csv, report.html, plots/, runs/)", highlight=False)


@app.command("list")
def list_components() -> None:
    """List the method presets, selectors, algorithms, data sets and models, with their options
    (defaults), then the fleet settings and the partition schemes.

    A config names a preset (`method: NAME`) or a selector and an algorithm
    (`selector: {name, options}`, `algorithm: {name, options}`), a data set
    (`data: {dataset, options}`) and a model (`model: {name, options}`); your own are named
    `package.module:Name`. docs/selectors.md and docs/architecture.md describe them.
    """
    ui.print_components()


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for h in logging.getLogger().handlers:  # the console shows warnings; run.log gets everything
        h.setLevel(logging.WARNING)
    try:
        app()
    except KeyboardInterrupt:
        ui.console.print("interrupted: results written so far are kept; continue with --resume RUN_DIR")
        sys.exit(130)
