"""What the command line prints: progress bars, a run's summary, the comparison tables, the
component lists and the error / interruption messages with their exit codes
(:mod:`fedselect.cli` parses the options and calls these)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

# typer 0.17-0.20 (the versions flwr 1.42 allows) escape "[default: ...]" / "[required]" for rich
# even with rich markup off, which plain --help then shows with a stray backslash; the escape only
# serves HTML export of help, which fedselect does not use.
try:
    from typer import rich_utils as _typer_rich_utils

    if hasattr(_typer_rich_utils, "escape_before_html_export"):
        _typer_rich_utils.escape_before_html_export = lambda text: text.strip()
except ImportError:  # typer without rich
    pass

console = Console()
# to a file or a pipe, lines are written whole (no newlines inserted at 80 columns); a terminal
# wraps them itself
console.soft_wrap = not console.is_terminal


def show(renderable: Any) -> None:
    """Print a table (or any rich renderable): in a terminal fitted to its width (rich shares
    the width out and wraps the cells); to a file or a pipe at its natural width, so that no
    cell is cut or wrapped and the table stays whole."""
    if console.is_terminal or console.is_jupyter:
        console.print(renderable)
        return
    width = console.measure(renderable, options=console.options.update_width(10**6)).maximum
    Console(file=console.file, width=max(width, 1), color_system=None, soft_wrap=False).print(renderable)


def fail(e: Exception) -> None:
    """Print ``error: <e>`` and exit with status 2 (a user error)."""
    from rich.markup import escape

    console.print(f"[red]error:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
    raise SystemExit(2)


def interrupted(where: Path | None, how: str) -> None:
    """Ctrl-C: say what is kept in ``where`` and ``how`` to continue; exit with status 130."""
    console.print(
        f"interrupted: results written so far are kept in {where}; {how}" if where else "interrupted before anything was written"
    )
    raise SystemExit(130)


class _Bars(Progress):
    """Rich's progress display that, when an error ends the block, drops the bars of the tasks
    that did nothing (a ``resume`` refused before its first round leaves no empty bar above
    the error)."""

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and not issubclass(exc_type, KeyboardInterrupt):
            for task in self.tasks:
                if not task.completed:
                    self.update(task.id, visible=False)
        return super().__exit__(exc_type, exc, tb)


def progress() -> Progress:
    """The progress bars of ``run`` and ``compare`` (round, accuracy, end-to-end latency)."""
    return _Bars(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def fmt(v: Any, digits: int = 4) -> str:
    """A table cell: ``-`` for None, floats with ``digits`` decimals."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _round_status(ev) -> str:
    """A bar's status after round ``ev.round``. An algorithm whose rounds do not score the
    clients' own models (``ev.round_scores``, CEFL: members are scored with their leader's model
    until the transfer) shows no accuracy until its end, as its summary and tables do."""
    acc, e2e = ev.row.get("accuracy"), ev.row.get("e2e_latency_s")
    if getattr(ev, "round_scores", None):
        return f"round {ev.round}  e2e {fmt(e2e, 1)} s  (acc at the end)"
    return f"round {ev.round}  acc {fmt(acc)}  e2e {fmt(e2e, 1)} s"


def done_status(summary: dict) -> str:
    """A bar's status once its run has finished: the summary's final accuracy and end-to-end
    latency (for CEFL after the transfer), the figures its summary table and the comparison's
    table show."""
    return f"done  acc {fmt(summary.get('final_accuracy'))}  e2e {fmt(summary.get('e2e_latency_s'), 1)} s"


def advance(prog: Progress, task, quiet: bool):
    """``on_round`` callback of one run: moves its bar."""

    def cb(ev):
        prog.update(task, completed=ev.round, total=ev.rounds, status=_round_status(ev), visible=not quiet)

    return cb


def finish(prog: Progress, task, summary: dict) -> None:
    """Ends one run's bar with its summary's figures (:func:`done_status`)."""
    prog.update(task, completed=summary.get("rounds"), status=done_status(summary))


def compare_callbacks(prog: Progress, quiet: bool) -> dict[str, Any]:
    """``on_start`` / ``on_round`` / ``on_done`` of :func:`fedselect.study.compare.run_comparison`:
    one bar per (method, seed)."""
    tasks = {}

    def on_start(label, seed, total):
        tasks[(label, seed)] = prog.add_task(f"{label} seed {seed}", total=total, status="preparing", visible=not quiet)

    def on_round(label, seed, ev):
        prog.update(tasks[(label, seed)], completed=ev.round, status=_round_status(ev))

    def on_done(label, seed, summary):
        finish(prog, tasks[(label, seed)], summary)

    return {"on_start": on_start, "on_round": on_round, "on_done": on_done}


def print_summary(summary: dict, run_dir: Path) -> None:
    """The table that ends ``fedselect run``."""
    table = Table(title=f"{summary.get('name')} ({summary.get('method')}, seed {summary.get('seed')})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("final accuracy", fmt(summary.get("final_accuracy"))),
        ("best accuracy", fmt(summary.get("best_accuracy"))),
        ("final macro-F1", fmt(summary.get("final_f1_macro"))),
        ("end-to-end latency (s)", fmt(summary.get("e2e_latency_s"), 1)),
        ("rounds to target", fmt(summary.get("rounds_to_target"))),
        ("latency to target (s)", fmt(summary.get("latency_to_target_s"), 1)),
        ("communication (MB)", fmt(summary.get("communication_mb"), 2)),
        ("rounds", fmt(summary.get("rounds"))),
        ("wall time (s)", fmt(summary.get("wall_s"), 1)),
    ]
    for k, v in rows:
        table.add_row(k, v)
    show(table)
    console.print(f"run directory: {run_dir}", highlight=False)


def print_table(rep: dict) -> None:
    """A comparison's table, its "relative to" lines and its paired differences
    (:func:`fedselect.report.build.build_report`'s result)."""
    from fedselect.report.tables import paired_cell, paired_intro, relative_phrases, table_cell

    table = Table(title=rep["title"])
    table.add_column("method")
    for _, head, _, _ in rep["columns"]:
        table.add_column(head, justify="right")
    for e in rep["table"]:
        table.add_row(e["label"], *[table_cell(e, k, d) for k, _, d, _ in rep["columns"]])
    show(table)
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
        show(pt)
        if nseeds <= 1:
            console.print(paired_intro(name, nseeds), markup=False, highlight=False)
    from fedselect.report.tables import censored_note, round_scores_notes, rounds_note

    for line in [rounds_note(rep["table"]), censored_note(rep["table"]), *round_scores_notes(rep["table"], rep["columns"])]:
        if line:  # what the columns mean when methods ran different rounds, and why some cells are blank
            console.print(line, markup=False, highlight=False)
    for line in rep["markdown"].splitlines():
        if line.startswith(("Incomplete runs", "Caution:")):
            console.print(line, style="yellow", markup=False, highlight=False)


def print_sweep(rep: dict) -> None:
    """A sweep's table (:func:`fedselect.study.sweep_table.build_sweep_table`'s result), the paper's
    figures beside ours and the paired differences, as tables fitted to the terminal."""
    table = Table(title=f"{rep['title']}: mean ± sample std over seeds {rep['seeds']}")
    heads = rep["heads"]
    first = heads.index("method") + 1 if "method" in heads else 0
    for j, h in enumerate(heads):
        table.add_column(h, justify="right" if j >= first else "left")
    for row in rep["cells"]:
        table.add_row(*map(Text, row))  # cells as text: a label or value holding "[...]" is no markup
    show(table)
    if rep.get("paper_rows"):
        pt = Table(title="ours vs the paper" + (f" ({rep['paper_source']})" if rep.get("paper_source") else ""))
        for h in ("method", "point", "figure", "ours", "paper"):
            pt.add_column(h, justify="right" if h in ("ours", "paper") else "left")
        for row in rep["paper_rows"]:
            pt.add_row(*(Text(str(c)) for c in row))
        show(pt)
    if rep.get("paired_cells"):
        pt = Table(title=f"paired differences vs {rep['baseline']}")
        first = rep["paired_heads"].index("method") + 1
        for j, h in enumerate(rep["paired_heads"]):
            pt.add_column(h, justify="right" if j >= first else "left")
        for row in rep["paired_cells"]:
            pt.add_row(*map(Text, row))
        show(pt)
        for note in rep.get("paired_notes", []):
            console.print(note, markup=False, highlight=False)


def first_sentence(doc: str) -> str:
    """The first sentence of a docstring's first paragraph, reST roles and literals made plain."""
    para = " ".join(doc.strip().split("\n\n")[0].split())
    para = re.sub(r":\w+:`~?([^`]+)`", r"\1", para).replace("``", "")
    return re.split(r"(?<=\.)\s", para, maxsplit=1)[0]


#: how ``fedselect list`` shows each kind of :data:`fedselect.registry.REGISTRIES`: its title
#: (where the name goes in a config) and the decorator that registers one's own (None: none yet)
KIND_TABLES: dict[str, tuple[str, str | None]] = {
    "selectors": ("selectors (selector: {name, options})", "register_selector"),
    "algorithms": ("algorithms (algorithm: {name, options})", "register_algorithm"),
    "datasets": ("data sets (data: {dataset, options})", "register_dataset"),
    "partitioners": ("partition schemes (data.partition: {scheme, ...its parameters})", "register_partitioner"),
    "models": ("models (model: {name, options})", "register_model"),
    "engines": ("engines (engine: NAME, --engine NAME): where the rounds run; the results are the same on each", None),
}


def print_components() -> None:
    """``fedselect list``: the method presets, then every kind of the registry
    (:data:`fedselect.registry.REGISTRIES`: selectors, algorithms, data sets, partition schemes,
    models, engines) with their options, then the fleet settings."""
    from fedselect.config.presets import PRESETS
    from fedselect.registry import REGISTRIES

    t = Table(title="method presets (method: NAME)")
    for c in ("method", "selector", "algorithm", "what it is"):
        t.add_column(c)
    for p in PRESETS.values():
        extra = f" ({', '.join(f'{k}: {v}' for k, v in p.algorithm_options.items())})" if p.algorithm_options else ""
        t.add_row(p.name, p.selector, p.algorithm + extra, p.description)
    show(t)
    for key in REGISTRIES:
        show(kind_table(key))
    show(fleet_table())


def engine_table() -> Table:
    """The engines of the registry (:data:`fedselect.registry.ENGINES`): where the rounds run,
    each with its one-line summary, or what it needs when its optional extra is missing."""
    from rich.markup import escape

    from fedselect.registry import ENGINES

    t = Table(
        title=KIND_TABLES["engines"][0],
        caption=f"your own: engine 'package.module:ClassName', @ENGINES.register, or the entry-point group {ENGINES.group} "
        "(docs/architecture.md, Adding an engine)",
    )
    t.add_column("name")
    t.add_column("what it is")
    for name in ENGINES.builtin_names():
        try:
            cls = ENGINES.get(name)
            t.add_row(name, escape(cls.summary or first_sentence(cls.__doc__ or "")))
        except ValueError as e:  # an optional extra that is not installed
            t.add_row(name, escape(str(e)))
    return t


def kind_table(key: str) -> Table:
    """The built-in components of the registry kind ``key`` (a key of
    :data:`fedselect.registry.REGISTRIES`) with their options and defaults, read from each one's
    ``Options`` model, else its signature (what :mod:`fedselect.experiment.resolve` validates), a one-line
    summary (its ``summary``, else its docstring's first sentence), and how to bring one's own.
    The engines: :func:`engine_table`.

    Raises:
        KeyError: an unknown kind.
    """
    from rich.markup import escape

    from fedselect.experiment.options import DATASET_ARGS, MODEL_ARGS, option_defaults, options_model
    from fedselect.registry import REGISTRIES

    if key == "engines":
        return engine_table()
    reg = REGISTRIES[key]
    title, register = KIND_TABLES.get(key, (key, None))
    caption = (
        f"your own: {reg.kind} '{reg.path_form}', fedselect.{register}, or the entry-point group {reg.group} "
        "(docs/architecture.md)"
        if register
        else None
    )
    t = Table(title=title, caption=caption)
    for c in ("name", "parameters (default)" if key == "partitioners" else "options (default)", "what it is"):
        t.add_column(c)
    for name in reg.builtin_names():
        try:
            obj = reg.get(name)
        except ValueError as e:  # a declared built-in whose optional extra is not installed
            t.add_row(name, "-", escape(str(e)))
            continue
        if key in ("selectors", "algorithms") and options_model(obj) is None:
            options, more = {}, False  # options only through an Options model
        else:
            options, more = option_defaults(obj, {"datasets": DATASET_ARGS, "models": MODEL_ARGS}.get(key, ()))
        if key == "partitioners":  # the retry bounds are not the scheme's parameters
            options = {k: v for k, v in options.items() if not k.startswith("max_")}
        model = options_model(obj) if key in ("selectors", "algorithms") else None
        shown = ", ".join(f"{k}={v!r}" + _choices(model, k) for k, v in options.items()) + (
            ", ... (see its docs)" if more else ""
        )
        doc = getattr(obj, "summary", "") or first_sentence(obj.__doc__ or "")
        if getattr(obj, "round_scores", None):  # e.g. CEFL: members scored with their leader's model
            doc += "; only its final figures are tabled (its rounds do not score every client's own model)"
        t.add_row(name, escape(shown.removeprefix(", ")) or "-", escape(doc))
    return t


def _choices(model: Any, name: str) -> str:
    """``" (paper|tuned|code)"``: the values an option declared as a ``Literal`` allows ("" for
    other options or without an options model)."""
    from typing import Literal, get_args, get_origin

    field = getattr(model, "model_fields", {}).get(name) if model is not None else None
    found: list[Any] = []

    def walk(tp: Any) -> None:
        if get_origin(tp) is Literal:
            found.extend(get_args(tp))
        else:
            for arg in get_args(tp):
                walk(arg)

    if field is not None:
        walk(field.annotation)
    return f" ({'|'.join(map(str, found))})" if found else ""


def fleet_table() -> Table:
    """The fleet keys (docs/fleets.md) with their defaults and meaning, read from the schema
    (``fedselect.config.fleet`` and the top-level fields), so the list cannot drift from it."""
    from fedselect.config.fleet import (
        AVAILABILITY_KEYS,
        CAPACITY_KEYS,
        RULE_KEYS,
        STALENESS_KEYS,
        AsyncConfig,
        AvailabilityConfig,
        CapacityConfig,
        DeadlineConfig,
        StalenessConfig,
    )
    from fedselect.config.schema import ExperimentConfig
    from fedselect.config.sections import SystemConfig

    t = Table(title="fleet settings (docs/fleets.md) and mode: async (docs/async.md)")
    for c in ("key", "default", "applies to", "meaning"):
        t.add_column(c)

    def row(key: str, f, applies: str = "") -> None:
        default = "required" if f.is_required() else ("{}" if f.default_factory is not None else repr(f.default))
        t.add_row(key, default, applies, f.description or "")

    for top in ("overselect", "straggler"):
        row(top, ExperimentConfig.model_fields[top])
    for name in ("latency_model", "profiles", "cycles_per_bit", "count_download", "profiles_file"):
        row(f"system.{name}", SystemConfig.model_fields[name])
    for prefix, cls, keys in (
        ("availability", AvailabilityConfig, AVAILABILITY_KEYS),
        ("system.capacity", CapacityConfig, CAPACITY_KEYS),
    ):
        row(f"{prefix}.model", cls.model_fields["model"])
        for name, f in cls.model_fields.items():
            if name != "model":
                row(f"{prefix}.{name}", f, ", ".join(m for m, ks in keys.items() if name in ks))
    row("system.round_deadline_s", SystemConfig.model_fields["round_deadline_s"])
    for name, f in DeadlineConfig.model_fields.items():
        row(f"system.adaptive_deadline.{name}", f)
    row("mode", ExperimentConfig.model_fields["mode"])  # docs/async.md
    for name, f in AsyncConfig.model_fields.items():
        if name != "staleness":
            rules = [r for r, ks in RULE_KEYS.items() if name in ks]
            row(f"async.{name}", f, f"rule {', '.join(rules)}" if rules else "mode: async")
    for name, f in StalenessConfig.model_fields.items():
        applies = "" if name == "function" else ", ".join(fn for fn, ks in STALENESS_KEYS.items() if name in ks)
        row(f"async.staleness.{name}", f, applies or "mode: async")
    return t
