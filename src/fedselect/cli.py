"""Command-line interface: ``fedselect run | compare | report | sweep``.

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

# typer 0.17-0.20 (the versions flwr 1.42 allows) escape "[default: ...]" / "[required]" for rich
# even with rich markup off, which plain --help then shows with a stray backslash; the escape only
# serves HTML export of help, which fedselect does not use.
try:
    from typer import rich_utils as _typer_rich_utils

    if hasattr(_typer_rich_utils, "escape_before_html_export"):
        _typer_rich_utils.escape_before_html_export = lambda text: text.strip()
except ImportError:  # typer without rich
    pass

app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    rich_markup_mode=None,
    help="fedselect: client selection for federated learning over heterogeneous fleets "
    "(FLASH-RL, CEFL, budgeted online selection and their baselines).",
)
console = Console()


@app.callback()
def _root() -> None:
    """fedselect: client selection for federated learning over heterogeneous fleets."""


def _parse_sets(sets: list[str] | None) -> dict:
    """``["train.lr=0.1", "data.options.path=/data/x"]`` -> dotted overrides (values parsed as YAML)."""
    import yaml

    out = {}
    for item in sets or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set {item!r}: expected KEY=VALUE with a dotted key, e.g. --set train.lr=0.1")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as e:
            raise ValueError(f"--set {item!r}: the value is not valid YAML ({e})") from None
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


def _threads(n: int | None) -> None:
    """--threads is gone (hidden, ignored): results no longer depend on thread counts."""
    if n is not None:
        console.print(
            "note: --threads is no longer needed and is ignored: every client trains on one thread in a worker "
            "process and results are the same for any thread count; use --workers N for the number of workers",
            highlight=False,
        )


def _workers(n: int | None) -> int | None:
    if n is not None and n < 0:
        raise ValueError(f"--workers must be >= 0 (0 = train the clients in this process), got {n}")
    return n


BACKEND_HELP = "where the runs execute: local (this process, one after the other; default) or ray (one Ray task per run)"
ADDRESS_HELP = "with --backend ray: HOST:PORT of a running Ray cluster (`ray start --head` prints it); omitted: a local Ray instance is started for the command"
CPUS_PER_RUN_HELP = "with --backend ray: CPUs each run reserves (also its worker processes unless --workers is given)"
RAY_CPUS_HELP = "with --backend ray and no --address: CPUs of the local Ray instance (default: all cores)"


def _backend(backend: str, address, cpus_per_run, ray_cpus, workers):
    from fedselect.backends import make_backend

    return make_backend(
        backend,
        address=address,
        cpus_per_run=cpus_per_run if cpus_per_run is not None else 1,
        workers=_workers(workers),
        num_cpus=ray_cpus,
    )


SET_HELP = "override a config key, e.g. --set train.lr=0.1 --set data.options.path=/data/MobiAct (repeatable; values are YAML)"
WORKERS_HELP = (
    "worker processes training the clients of a round side by side, one torch thread each (default: train.workers, "
    "else FEDSELECT_WORKERS, else the usable cores; 0 = in this process; more than the usable cores start only those); "
    "results are identical for any value"
)
DEVICE_HELP = "where clients train: auto (a GPU when one is available; default), cpu, cuda or cuda:N (sets train.device)"


def _overrides(rounds, seed, method, sets=None, selector=None, algorithm=None, device=None) -> dict:
    """Dotted overrides from the command line. ``--method`` replaces the config's method,
    selector and algorithm; ``--selector`` / ``--algorithm`` replace those parts (and, without
    ``--method``, the config's method preset)."""
    out = _parse_sets(sets)
    if rounds is not None:
        out["rounds"] = rounds
    if seed is not None:
        out["seed"] = seed
    if method is not None:
        out.update(method=method, selector=None, algorithm=None)
    elif selector is not None or algorithm is not None:
        out["method"] = None
    if selector is not None:
        out["selector"] = {"name": selector}
    if algorithm is not None:
        out["algorithm"] = {"name": algorithm}
    if device is not None:
        out["train.device"] = device
    return out


def _load(config: Optional[Path], overrides: dict):
    """The resolved experiment of CONFIG (or of the embedded default) with ``overrides``."""
    from fedselect.config import apply_overrides, load_config, parse_config
    from fedselect.resolve import resolve

    if config is None:
        source = "<embedded default>"
        cfg = parse_config(apply_overrides({"name": "default", "metrics": {"target": 0.9}}, overrides), source)
    else:
        source, cfg = str(config), load_config(config, overrides)
    return resolve(cfg, source)


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
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
        ("final accuracy", _fmt(summary.get("final_accuracy"))),
        ("best accuracy", _fmt(summary.get("best_accuracy"))),
        ("final macro-F1", _fmt(summary.get("final_f1_macro"))),
        ("end-to-end latency (s)", _fmt(summary.get("e2e_latency_s"), 1)),
        ("rounds to target", _fmt(summary.get("rounds_to_target"))),
        ("latency to target (s)", _fmt(summary.get("latency_to_target_s"), 1)),
        ("communication (MB)", _fmt(summary.get("communication_mb"), 2)),
        ("rounds", _fmt(summary.get("rounds"))),
        ("wall time (s)", _fmt(summary.get("wall_s"), 1)),
    ]
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)
    console.print(f"run directory: {run_dir}")


def _fail(e: Exception) -> None:
    from rich.markup import escape

    console.print(f"[red]error:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
    raise SystemExit(2)


def _interrupted(where: Path | None, how: str) -> None:
    console.print(
        f"interrupted: results written so far are kept in {where}; {how}" if where else "interrupted before anything was written"
    )
    raise SystemExit(130)


@app.command()
def run(
    config: Optional[Path] = typer.Argument(
        None, help="experiment YAML; omitted: the embedded default (FedAvg on embedded MNIST, 20 clients, Dirichlet 0.5)"
    ),
    rounds: Optional[int] = typer.Option(None, "--rounds", "-r", help="override the number of communication rounds T"),
    seed: Optional[int] = typer.Option(None, "--seed", "-s", help="override the experiment seed"),
    method: Optional[str] = typer.Option(
        None,
        "--method",
        "-m",
        help="override the method preset (fedavg, full, flashrl, favor, cefl, oort, ...; see `fedselect list`)",
    ),
    selector: Optional[str] = typer.Option(
        None, "--selector", help="override the selector (random, flashrl, oort, power_of_choice, ... or package.module:Class)"
    ),
    algorithm: Optional[str] = typer.Option(
        None, "--algorithm", help="override the algorithm (fedavg, fedper, cefl, individual, or package.module:Class)"
    ),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="run directory (default runs/<name>-<method>-s<seed>-<time>)"),
    resume: Optional[Path] = typer.Option(
        None,
        "--resume",
        help="continue the run in this directory from its last checkpoint (with its saved config; only --rounds may extend the budget)",
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="replace a run already in --out (its config, metrics, checkpoints and summary are deleted)"
    ),
    sets: Optional[list[str]] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", help=WORKERS_HELP),
    device: Optional[str] = typer.Option(None, "--device", help=DEVICE_HELP),
    threads: Optional[int] = typer.Option(None, "--threads", hidden=True, help="ignored (results no longer depend on threads)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
) -> None:
    """Run one experiment and write metrics.csv, summary.json, model.pt, config.yaml and run.log.

    An --out directory that already holds a run is refused unless --resume or --overwrite.
    """
    from fedselect.experiment import check_run_dir, resume_experiment, run_experiment

    try:
        _threads(threads)
        if resume is not None:
            given = [
                n
                for n, v in (
                    ("CONFIG", config),
                    ("--seed", seed),
                    ("--method", method),
                    ("--selector", selector),
                    ("--algorithm", algorithm),
                    ("--out", out),
                    ("--set", sets),
                    ("--device", device),
                )
                if v
            ]
            if overwrite:
                given.append("--overwrite")
            if given:
                raise ValueError(
                    f"--resume continues the run with the config saved in {resume}; it cannot be combined with "
                    f"{', '.join(given)} (only --rounds, to extend the budget)"
                )
            run_dir, summary = resume, None
            with _progress() as prog:
                task = prog.add_task("resume", total=None, status="", visible=not quiet)
                summary = resume_experiment(
                    resume, on_round=_advance(prog, task, quiet), rounds=rounds, workers=_workers(workers)
                )
        else:
            r = _load(config, _overrides(rounds, seed, method, sets, selector, algorithm, device))
            cfg = r.config
            slug = r.method.replace(":", "_").replace("/", "_")
            run_dir = out or Path("runs") / f"{cfg.name}-{slug}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
            check_run_dir(run_dir, overwrite)
            console.print(
                f"[bold]{cfg.name}[/bold]: {r.method} (selector {cfg.selector.name}, algorithm {cfg.algorithm.name}) on "
                f"{cfg.data.dataset}, N={cfg.data.num_clients}, U={cfg.clients_per_round}, T={cfg.rounds}, seed {cfg.seed}",
                highlight=False,
            )
            with _progress() as prog:
                task = prog.add_task(r.method, total=cfg.rounds, status="preparing", visible=not quiet)
                summary = run_experiment(
                    cfg, run_dir, on_round=_advance(prog, task, quiet), overwrite=overwrite, workers=_workers(workers)
                )
    except KeyboardInterrupt:
        d = resume if resume is not None else locals().get("run_dir")
        _interrupted(d, f"continue with: fedselect run --resume {d}")
    except (OSError, ValueError, RuntimeError) as e:
        _fail(e)
    print_summary(summary, run_dir)


def _advance(prog: Progress, task, quiet: bool):
    def cb(ev):
        acc, e2e = ev.row.get("accuracy"), ev.row.get("e2e_latency_s")
        prog.update(
            task,
            completed=ev.round,
            total=ev.rounds,
            status=f"round {ev.round}  acc {acc:.4f}  e2e {e2e:.1f} s",
            visible=not quiet,
        )

    return cb


@app.command()
def compare(
    config: Optional[Path] = typer.Argument(
        None,
        help="comparison YAML (base experiment + methods + seeds), or a plain experiment YAML; omitted: FedAvg vs FLASH-RL vs FAVOR on embedded MNIST",
    ),
    rounds: Optional[int] = typer.Option(None, "--rounds", "-r", help="override the rounds of every run"),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="comma-separated seeds, e.g. 0,1,2 (overrides the config)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="comparison directory (default runs/<name>-<time>)"),
    sets: Optional[list[str]] = typer.Option(
        None, "--set", metavar="KEY=VALUE", help=SET_HELP + "; applies to the base experiment"
    ),
    resume: Optional[Path] = typer.Option(
        None,
        "--resume",
        help="finish an interrupted comparison in this directory: finished runs are kept, interrupted ones continue from their checkpoints, missing ones run",
    ),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", help=WORKERS_HELP),
    device: Optional[str] = typer.Option(None, "--device", help=DEVICE_HELP),
    threads: Optional[int] = typer.Option(None, "--threads", hidden=True, help="ignored (results no longer depend on threads)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
    backend: str = typer.Option("local", "--backend", help=BACKEND_HELP),
    address: Optional[str] = typer.Option(None, "--address", help=ADDRESS_HELP),
    cpus_per_run: Optional[float] = typer.Option(None, "--cpus-per-run", help=CPUS_PER_RUN_HELP),
    ray_cpus: Optional[int] = typer.Option(None, "--ray-cpus", help=RAY_CPUS_HELP),
) -> None:
    """Run several methods (and seeds) on one shared federation; write table and plots.

    Every method sees the same partition, device profiles, per-round draws and test set.
    Output: <out>/table.md, table.csv, paired.csv (differences vs the baseline over seeds with
    95% intervals), plots/*.png, report.html (everything on one offline page) and
    runs/<method>-s<seed>/ (one run directory each).
    With --backend ray every run is a Ray task; the results are the same, byte for byte, as
    with the local backend.
    """
    from fedselect.compare import DEFAULT_COMPARE, load_compare, parse_compare, run_comparison
    from fedselect.experiment import check_output_dir
    from fedselect.fl.metrics import read_json
    from fedselect.report import build_report

    try:
        _threads(threads)
        runner_backend = _backend(backend, address, cpus_per_run, ray_cpus, workers)
        over = _overrides(rounds, None, None, sets, device=device) or None
        if resume is not None:
            given = [
                n
                for n, v in (
                    ("CONFIG", config),
                    ("--rounds", rounds),
                    ("--seeds", seeds),
                    ("--out", out),
                    ("--set", sets),
                    ("--device", device),
                )
                if v
            ]
            if given:
                raise ValueError(
                    f"--resume finishes the comparison saved in {resume}; it cannot be combined with {', '.join(given)}"
                )
            if not (resume / "compare.json").is_file():
                raise FileNotFoundError(f"--resume {resume}: no compare.json there (not a comparison directory)")
            spec = read_json(resume / "compare.json")
            cc = parse_compare({k: v for k, v in spec.items() if k != "runs"}, str(resume / "compare.json"))
        elif config is None:
            from fedselect.config import apply_overrides

            doc = {**DEFAULT_COMPARE, "base": apply_overrides(DEFAULT_COMPARE["base"], over or {})}
            cc = parse_compare(doc, "<embedded default comparison>")
        else:
            cc = load_compare(config, over)
        if seeds is not None:
            cc.seeds = _parse_seeds(seeds)
        out_dir = resume or out or Path("runs") / f"{cc.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        if resume is None and (out_dir / "compare.json").exists():
            raise FileExistsError(
                f"{out_dir} already holds a comparison; finish it with --resume {out_dir} or choose another --out (results there are kept)"
            )
        if resume is None:
            check_output_dir(out_dir, "comparison")
        console.print(f"[bold]{cc.name}[/bold]: {', '.join(m.label for m in cc.methods)}; seeds {cc.seeds}; output {out_dir}")
        with _progress() as prog:
            tasks = {}

            def on_start(label, seed, total):
                tasks[(label, seed)] = prog.add_task(f"{label} seed {seed}", total=total, status="preparing", visible=not quiet)

            def on_round(label, seed, ev):
                acc, e2e = ev.row.get("accuracy"), ev.row.get("e2e_latency_s")
                prog.update(tasks[(label, seed)], completed=ev.round, status=f"round {ev.round}  acc {acc:.4f}  e2e {e2e:.1f} s")

            def on_done(label, seed, summary):
                acc, e2e = summary.get("final_accuracy"), summary.get("e2e_latency_s")
                prog.update(
                    tasks[(label, seed)], completed=summary.get("rounds"), status=f"done  acc {_fmt(acc)}  e2e {_fmt(e2e, 1)} s"
                )

            if runner_backend.name == "ray":
                console.print(f"backend: Ray ({address or 'local instance'}), one task per run", highlight=False)
            run_comparison(
                cc,
                out_dir,
                on_start=on_start,
                on_round=on_round,
                on_done=on_done,
                resume=resume is not None,
                backend=runner_backend,
            )
        rep = build_report(out_dir, plots=False)
    except KeyboardInterrupt:
        d = locals().get("out_dir")
        _interrupted(d, f"finish it with: fedselect compare --resume {d}" + (" --backend ray" if backend == "ray" else ""))
    except (OSError, ValueError, RuntimeError) as e:
        _fail(e)
    print_table(rep)
    console.print(f"comparison directory: {out_dir} (table.md, table.csv, plots/; open report.html in a browser)")


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
    from fedselect.compare import check_comparison_runs
    from fedselect.report import build_report
    from fedselect.sweep import check_sweep_runs

    try:
        check_comparison_runs(directory)  # never a table that mixes results of different configs
        check_sweep_runs(directory)
        rep = build_report(directory, plots=not no_plots, window=window)
    except (OSError, ValueError) as e:
        _fail(e)
    if rep.get("kind") == "sweep":
        console.print(rep["markdown"], highlight=False, markup=False)
        console.print(f"wrote {directory / 'table.md'}, {directory / 'table.csv'} and {directory / 'report.html'}")
        return
    print_table(rep)
    console.print(
        f"wrote {directory / 'table.md'}, {directory / 'table.csv'}"
        + (f", {len(rep['plots'])} plots in {directory / 'plots'}" if rep["plots"] else "")
        + f" and {directory / 'report.html'}"
    )


def print_table(rep: dict) -> None:
    from fedselect.tables import _cell, relative_phrases

    wide = Console(width=max(console.width, 160))
    table = Table(title=rep["title"])
    table.add_column("method")
    for _, head, _, _ in rep["columns"]:
        table.add_column(head, justify="right")
    for e in rep["table"]:
        table.add_row(e["label"], *[_cell(e, k, d) for k, _, d, _ in rep["columns"]])
    wide.print(table)
    name = rep.get("baseline")
    if name and len(rep["table"]) > 1:
        console.print(f"Relative to {name}:", markup=False, highlight=False)
        for e in rep["table"]:
            if e["label"] != name:
                console.print(
                    f"  {e['label']}: " + (", ".join(relative_phrases(e, name, rep.get("window"))) or "no comparable figures"),
                    markup=False,
                    highlight=False,
                )
    if rep.get("paired"):
        from fedselect.tables import paired_cell, paired_intro

        nseeds = max(len(p["seeds"]) for p in rep["paired"])
        pt = Table(
            title=f"paired differences vs {name}"
            + (f" over {nseeds} seeds: mean [95% CI], * = excludes 0" if nseeds > 1 else " (1 seed: no interval possible)")
        )
        pt.add_column("method")
        for _, head, unit in rep["quantities"]:
            pt.add_column(f"{head} ({unit})", justify="right")
        for p in rep["paired"]:
            pt.add_row(p["label"], *[paired_cell(p["cells"][k], nseeds) for k, _, _ in rep["quantities"]])
        wide.print(pt)
        if nseeds <= 1:
            console.print(paired_intro(name, nseeds), markup=False, highlight=False)
    for line in rep["markdown"].splitlines():
        if line.startswith(("Incomplete runs", "Caution:")):
            console.print(f"[yellow]{line}[/yellow]")


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
    table_only: bool = typer.Option(False, "--table-only", help="only rebuild table.md / table.csv from the runs in --out"),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", help=WORKERS_HELP),
    threads: Optional[int] = typer.Option(None, "--threads", hidden=True, help="ignored (results no longer depend on threads)"),
    backend: str = typer.Option("local", "--backend", help=BACKEND_HELP),
    address: Optional[str] = typer.Option(None, "--address", help=ADDRESS_HELP),
    cpus_per_run: Optional[float] = typer.Option(None, "--cpus-per-run", help=CPUS_PER_RUN_HELP),
    ray_cpus: Optional[int] = typer.Option(None, "--ray-cpus", help=RAY_CPUS_HELP),
) -> None:
    """Run a grid of experiments (every method x grid point x seed) and write one table.

    Output: <out>/table.md and table.csv (mean and std over seeds per grid point and method:
    final accuracy, candidates evaluated, competitive ratio, wall time by default; with
    `baseline:` in the config, paired differences vs that method over seeds with 95%
    intervals), report.html (one offline page) and runs/<label>-<point>-s<seed>/ per run. Runs sharing data, model and seed share one federation.
    Finished runs are kept and interrupted ones continue from their checkpoints when the same
    --out is given again. With --backend ray every run is a Ray task (the same results, byte
    for byte, as the local backend).
    """
    from fedselect.experiment import check_output_dir
    from fedselect.sweep import build_sweep_table, load_sweep, run_sweep

    try:
        _threads(threads)
        runner_backend = _backend(backend, address, cpus_per_run, ray_cpus, workers)
        sc = load_sweep(config)
        if seeds is not None:
            sc.seeds = _parse_seeds(seeds)
        out_dir = out or Path("runs") / f"{sc.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        if table_only:
            if out is None or not (out / "sweep.json").is_file():
                raise FileNotFoundError(
                    "--table-only rebuilds the table of an existing sweep: give its directory with --out "
                    + (f"({out} holds no sweep.json)" if out is not None else "(none given)")
                )
            rep = build_sweep_table(out_dir, sc)
        else:
            check_output_dir(out_dir, "sweep")
            console.print(
                f"[bold]{sc.name}[/bold]: {', '.join(m.label for m in sc.methods)}; grid {sc.grid or '-'}; seeds {sc.seeds}; output {out_dir}"
            )
            if runner_backend.name == "ray":
                console.print(f"backend: Ray ({address or 'local instance'}), one task per run", highlight=False)
            rep = run_sweep(
                sc,
                out_dir,
                on_run=lambda i, n, d: console.print(f"[{i}/{n}] {d}", highlight=False, markup=False),
                backend=runner_backend,
            )
    except KeyboardInterrupt:
        d = locals().get("out_dir")
        _interrupted(d, f"continue with: fedselect sweep {config} --out {d}" + (" --backend ray" if backend == "ray" else ""))
    except (OSError, ValueError, RuntimeError) as e:
        _fail(e)
    console.print(rep["markdown"], highlight=False, markup=False)
    console.print(f"sweep directory: {out_dir} (table.md, table.csv, report.html, runs/)")


def _first_sentence(doc: str) -> str:
    """The first sentence of a docstring's first paragraph, reST roles and literals made plain."""
    import re

    para = " ".join(doc.strip().split("\n\n")[0].split())
    para = re.sub(r":\w+:`~?([^`]+)`", r"\1", para).replace("``", "")
    return re.split(r"(?<=\.)\s", para, maxsplit=1)[0]


@app.command("list")
def list_components() -> None:
    """List the method presets, selectors and algorithms, with their options (defaults).

    A config names a preset (`method: NAME`) or a selector and an algorithm
    (`selector: {name, options}`, `algorithm: {name, options}`); docs/selectors.md and
    docs/architecture.md describe them.
    """
    from fedselect.algorithms import ALGORITHMS
    from fedselect.presets import PRESETS
    from fedselect.selectors import SELECTORS

    wide = Console(width=max(console.width, 160))
    t = Table(title="method presets (method: NAME)")
    for c in ("method", "selector", "algorithm", "what it is"):
        t.add_column(c)
    for p in PRESETS.values():
        extra = f" ({', '.join(f'{k}: {v}' for k, v in p.algorithm_options.items())})" if p.algorithm_options else ""
        t.add_row(p.name, p.selector, p.algorithm + extra, p.description)
    wide.print(t)
    for title, reg in (
        ("selectors (selector: {name, options})", SELECTORS),
        ("algorithms (algorithm: {name, options})", ALGORITHMS),
    ):
        t = Table(title=title)
        t.add_column("name")
        t.add_column("options (default)")
        t.add_column("what it is")
        for name in reg.builtin_names():
            cls = reg.get(name)
            opts = getattr(cls, "Options", None)
            fields = ", ".join(f"{k}={v.default!r}" for k, v in opts.model_fields.items()) if opts is not None else ""
            doc = getattr(cls, "summary", "") or _first_sentence(cls.__doc__ or "")
            t.add_row(name, fields or "-", doc)
        wide.print(t)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for h in logging.getLogger().handlers:  # the console shows warnings; run.log gets everything
        h.setLevel(logging.WARNING)
    try:
        app()
    except KeyboardInterrupt:
        console.print("interrupted: results written so far are kept; continue with --resume RUN_DIR")
        sys.exit(130)


if __name__ == "__main__":
    main()
