"""The Python API, for notebooks and scripts: the same runs as the command line, from a config
object, a mapping or a YAML path.

::

    import fedselect

    res = fedselect.run({"method": "oort", "rounds": 20, "data": {"num_clients": 20}}, "runs/oort")
    res.summary["final_accuracy"], res.metrics[-1]["e2e_latency_s"]
    res = fedselect.run({"selector": {"name": "mypkg.selectors:MySelector"}, "algorithm": {"name": "fedper"}})
    fedselect.resume("runs/oort", rounds=40)

The command line (:mod:`fedselect.cli`) runs through this module, so both follow one policy:
a run without ``out`` goes to ``runs/<name>-<method>-s<seed>-<time>`` (:func:`default_run_dir`),
a comparison or a sweep to ``runs/<name>-<time>`` (:func:`output_dir`), and an ``out`` that
already holds a run is refused, before anything is built or written, unless it is resumed
(:func:`resume`, ``fedselect run --resume``) or replaced (``overwrite``).

Comparisons: :func:`compare` (``fedselect.compare(config, seeds=[0, 1, 2], out="runs/cmp")``)
runs several methods on one shared federation as ``fedselect compare`` does, with the same
progress bars, and returns the table as a pandas DataFrame with the run directories
(:class:`ComparisonResult`).

Users' own components: subclass :class:`fedselect.Selector` / :class:`fedselect.Algorithm`,
write a model factory or a data-set loader, then name them ``"package.module:Name"`` in the
config, or register them with :func:`fedselect.register_selector`,
:func:`fedselect.register_algorithm`, :func:`fedselect.register_model`,
:func:`fedselect.register_dataset` (docs/architecture.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from fedselect.common.files import read_csv_rows, read_json
from fedselect.config.contenders import switch_components
from fedselect.config.load import load_config, read_experiment
from fedselect.config.overrides import apply_overrides
from fedselect.config.schema import ConfigError, ExperimentConfig
from fedselect.experiment.output_dir import check_output_dir
from fedselect.experiment.resolve import Resolved, resolve_doc
from fedselect.experiment.run import RoundEvent, RunPlan, play, resume_experiment
from fedselect.experiment.run import plan as plan_in
from fedselect.world.federation import Federation

if TYPE_CHECKING:
    import pandas as pd

    from fedselect.study.compare import CompareConfig

__all__ = [
    "ComparisonResult",
    "RunPlan",
    "RunResult",
    "compare",
    "default_run_dir",
    "experiment_config",
    "load_run",
    "output_dir",
    "plan_run",
    "resume",
    "run",
    "run_plan",
]

#: the embedded default experiment (``fedselect run`` without CONFIG, ``fedselect.run()``): a
#: config file like any other (``configs/default.yaml`` in the repository is this file)
DEFAULT_EXPERIMENT = Path(__file__).parent / "config" / "defaults" / "default.yaml"
#: how errors name it
DEFAULT_SOURCE = "the embedded default (configs/default.yaml)"


@dataclass(frozen=True)
class RunResult:
    """A finished (or loaded) run.

    Attributes:
        run_dir: its directory. config: the resolved config (every default written out).
        summary: ``summary.json``'s content (empty for a run that did not finish).
        metrics: ``metrics.csv`` rows as dicts of strings (round 0 first).
    """

    run_dir: Path
    config: ExperimentConfig
    summary: dict[str, Any]
    metrics: list[dict[str, str]]

    def frame(self):
        """``metrics.csv`` as a pandas DataFrame (numbers parsed)."""
        import pandas as pd

        return pd.read_csv(self.run_dir / "metrics.csv")


def _timestamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def default_run_dir(name: str, method: str, seed: int) -> Path:
    """``runs/<name>-<method>-s<seed>-<YYYYmmdd-HHMMSS>``: a run's directory when none is given
    (``method``: the resolved display name; the ``:`` and ``/`` of a ``package.module:Class``
    become ``_``)."""
    slug = method.replace(":", "_").replace("/", "_")
    return Path("runs") / f"{name}-{slug}-s{seed}-{_timestamp()}"


def _resolve(config: ExperimentConfig | dict | str | Path | None, over: dict[str, Any]) -> Resolved:
    """The config resolved with the overrides ``over`` on top (a ``method``, ``selector.name``
    or ``algorithm.name`` among them switches that part: :func:`fedselect.config.contenders.switch_components`),
    every problem in one pass."""
    if isinstance(config, ExperimentConfig):
        doc, source = config.model_dump(mode="json"), config.name
    elif isinstance(config, (str, Path)):
        doc, source = read_experiment(config), str(config)
    elif config is None:
        doc, source = read_experiment(DEFAULT_EXPERIMENT), DEFAULT_SOURCE
    else:
        doc, source = dict(config), "<dict>"
    return resolve_doc(apply_overrides(switch_components(doc, over), over, f"overrides of {source}"), source)


def _dotted(sets: Mapping[str, Any] | None, overrides: dict[str, Any]) -> dict[str, Any]:
    """``sets`` and the keyword ``overrides`` (``__`` for ``.``) as one mapping of dotted keys.

    Raises:
        ConfigError: a key given in both."""
    named = {k.replace("__", "."): v for k, v in overrides.items()}
    both = sorted(set(sets or {}) & set(named))
    if both:
        raise ConfigError(f"invalid overrides: {', '.join(both)} given twice (in sets and as a keyword); give each once")
    return {**(sets or {}), **named}


def experiment_config(config: ExperimentConfig | dict | str | Path | None = None, **overrides: Any) -> ExperimentConfig:
    """A resolved experiment config from a config object, a mapping, a YAML path, or None (the
    embedded default, :data:`DEFAULT_EXPERIMENT`; ``{}`` is the schema's defaults alone, as a
    YAML file with no other key would be); ``overrides`` are dotted keys with ``__`` or ``.``
    (``train__lr=0.1``), set over the config's values: ``method=`` replaces the config's
    method and the parts it names differently, ``selector__name=`` / ``algorithm__name=`` that
    part (a section naming the same component keeps its options), and keys inside a section
    refine it (``algorithm__options__mu=0.5``).

    Raises:
        ConfigError: invalid config (every problem named). FileNotFoundError: no such YAML file.
    """
    return _resolve(config, _dotted(None, overrides)).config


def plan_run(
    config: ExperimentConfig | dict | str | Path | None = None,
    out: str | Path | None = None,
    *,
    overwrite: bool = False,
    sets: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> RunPlan:
    """Resolve a run (once: the plan carries the :class:`~fedselect.experiment.resolve.Resolved` to the
    round) and choose its directory, refusing a conflict before anything is built or written:
    ``out`` (default :func:`default_run_dir`) must not hold a comparison or a sweep, nor a run
    unless ``overwrite`` (continue one with :func:`resume` instead). The plan's ``config`` is the
    resolved config, its ``method`` the display name, its ``run_dir`` where it goes
    (:class:`fedselect.experiment.run.RunPlan`).

    Args:
        config, overrides: see :func:`experiment_config`. sets: dotted overrides taken as they
            are (the command line's flags and ``--set``), together with ``overrides`` (a key
            in both is an error).

    Raises:
        ConfigError, FileNotFoundError: see :func:`experiment_config`. FileExistsError: ``out``
        holds a run (the message says to resume or overwrite it), a comparison or a sweep.
        ValueError, PermissionError, NotADirectoryError: ``out`` cannot be a run directory.
    """
    r = _resolve(config, _dotted(sets, overrides))
    run_dir = Path(out) if out is not None else default_run_dir(r.config.name, r.method, r.config.seed)
    return plan_in(r, run_dir, overwrite=overwrite)


def run_plan(
    plan: RunPlan,
    *,
    federation: Federation | None = None,
    on_round: Callable[[RoundEvent], None] | None = None,
    workers: int | None = None,
) -> RunResult:
    """Run a :func:`plan_run` plan on its engine and return its result (``workers``: see :func:`run`)."""
    play(plan, on_round=on_round, federation=federation, workers=workers)
    return load_run(plan.run_dir)


def run(
    config: ExperimentConfig | dict | str | Path | None = None,
    out: str | Path | None = None,
    *,
    federation: Federation | None = None,
    overwrite: bool = False,
    on_round: Callable[[RoundEvent], None] | None = None,
    workers: int | None = None,
    **overrides: Any,
) -> RunResult:
    """Run one experiment and return its result (the files are in ``out``).

    Args:
        config: see :func:`experiment_config`.
        out: run directory (default :func:`default_run_dir`: ``runs/<name>-<method>-s<seed>-<time>``).
        federation: reuse a federation built for the same data, model, system and seed.
        overwrite: replace a run already in ``out``.
        on_round: progress callback.
        workers: worker processes training the clients (default ``train.workers``); results
            are the same for any number.
        overrides: dotted config keys (``rounds=10``, ``train__lr=0.1``, ``engine="flower"``).

    Raises:
        ConfigError, FileExistsError, DatasetNotFoundError: as ``fedselect run`` (see :func:`plan_run`).
    """
    plan = plan_run(config, out, overwrite=overwrite, **overrides)
    return run_plan(plan, federation=federation, on_round=on_round, workers=workers)


def resume(
    run_dir: str | Path,
    rounds: int | None = None,
    on_round: Callable[[RoundEvent], None] | None = None,
    workers: int | None = None,
) -> RunResult:
    """Continue a killed or finished run exactly, with the config saved in ``run_dir`` (its
    engine too); only ``rounds`` may change (extend the budget), ``workers`` is how it runs."""
    resume_experiment(run_dir, on_round=on_round, rounds=rounds, workers=workers)
    return load_run(run_dir)


def output_dir(kind: str, name: str, out: str | Path | None = None, resume: str | Path | None = None) -> Path:
    """The directory of a comparison or a sweep (``kind``: ``"comparison"`` or ``"sweep"``):
    ``resume``, else ``out``, else ``runs/<name>-<YYYYmmdd-HHMMSS>``, checked before anything
    is written. A new comparison is refused where one already is (finish that one with
    ``--resume``); a sweep directory given again is continued (its finished runs are kept).

    Raises:
        FileExistsError: a comparison there already (and not ``resume``), or another kind of
        output. ValueError, PermissionError, NotADirectoryError: see
        :func:`fedselect.experiment.output_dir.check_output_dir`.
    """
    if resume is not None:
        return Path(resume)
    d = Path(out) if out is not None else Path("runs") / f"{name}-{_timestamp()}"
    if kind == "comparison" and (d / "compare.json").exists():
        raise FileExistsError(
            f"{d} already holds a comparison; finish it with --resume {d} or choose another --out (results there are kept)"
        )
    check_output_dir(d, kind)
    return d


def load_run(run_dir: str | Path) -> RunResult:
    """A run directory's config, summary and metrics, without running anything.

    Raises:
        FileNotFoundError: no config.yaml in ``run_dir``.
    """

    d = Path(run_dir)
    cfg = load_config(d / "config.yaml")
    summary = read_json(d / "summary.json") if (d / "summary.json").exists() else {}
    metrics = read_csv_rows(d / "metrics.csv") if (d / "metrics.csv").exists() else []
    return RunResult(d, cfg, summary, metrics)


@dataclass(frozen=True)
class ComparisonResult:
    """A finished comparison (:func:`compare`).

    Attributes:
        directory: the comparison directory (``compare.json``, ``table.md`` / ``table.csv``,
            ``paired.csv``, ``plots/``, ``report.html``, ``runs/``; docs/comparisons.md).
        table: ``table.csv`` as a DataFrame indexed by method label, one row per method: each
            figure's mean over the seeds (``final_accuracy``, ``e2e_latency_s`` in s,
            ``communication_mb`` in MB, ``rounds_to_target`` ...), ``<figure>_std`` its standard
            deviation and ``<figure>_vs_baseline`` its change against the baseline method
            (points for accuracies, % otherwise).
        paired: ``paired.csv`` as a DataFrame: per method and quantity, the paired difference
            against the baseline over the seeds (``mean``, 95% interval ``low`` .. ``high``,
            ``excludes_zero``, ``per_seed``); no rows when only the baseline ran.
        run_dirs: ``(label, seed)`` -> that run's directory (``metrics.csv``, ``summary.json`` ...).
    """

    directory: Path
    table: "pd.DataFrame"
    paired: "pd.DataFrame"
    run_dirs: dict[tuple[str, int], Path]

    def run(self, label: str, seed: int | None = None) -> RunResult:
        """The run of method ``label`` with ``seed`` (default: the comparison's first seed).

        Raises:
            KeyError: no such method or seed (names the ones there are)."""
        seed = min(s for _, s in self.run_dirs) if seed is None else seed
        if (label, seed) not in self.run_dirs:
            raise KeyError(f"no run {label!r} with seed {seed} in {self.directory}; runs: {sorted(self.run_dirs)}")
        return load_run(self.run_dirs[(label, seed)])


def compare(
    config: "CompareConfig | dict | str | Path | None" = None,
    out: str | Path | None = None,
    *,
    seeds: Sequence[int] | None = None,
    rounds: int | None = None,
    resume: str | Path | None = None,
    backend: Any = "local",
    workers: int | None = None,
    progress: bool = True,
    sets: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> ComparisonResult:
    """Run a comparison, as ``fedselect compare`` does: every method and seed on one shared
    federation per seed, then the table, paired differences, plots and ``report.html``.

    Args:
        config: a comparison (``base``, ``methods``, ``seeds`` ...) as a mapping, a
            :class:`fedselect.study.compare.CompareConfig` or a YAML path (a plain experiment YAML is
            a one-method comparison); None: the embedded default (FedAvg vs FLASH-RL vs FAVOR).
        out: the comparison directory (default ``runs/<name>-<time>``); one already holding a
            comparison is refused (finish that one with ``resume``).
        seeds: the seeds (replace the config's). rounds: every method's T (their own
            ``rounds`` included, as ``--rounds``).
        resume: finish the interrupted comparison in this directory (its saved config; give
            nothing else that changes it).
        backend: ``"local"`` (this process; default), ``"ray"``, or a backend object
            (:func:`fedselect.study.backends.make_backend`).
        workers: worker processes per run (default ``train.workers``); results do not depend on it.
        progress: show the command line's progress bars (one per method and seed).
        sets, overrides: dotted keys of the base experiment, as ``--set`` (``sets={"train.lr":
            0.1}``, or ``train__lr=0.1``).

    Returns:
        :class:`ComparisonResult`: the table as a DataFrame, the paired differences, the run
        directories.

    Raises:
        ConfigError: an invalid comparison (every problem named). FileExistsError: ``out``
        holds a comparison already, or another kind of output. ValueError: ``resume`` combined
        with a config or any option changing it, an unknown backend.
        DatasetNotFoundError: data missing.
    """
    import pandas as pd

    from fedselect.cli import console as ui
    from fedselect.study.backends import make_backend
    from fedselect.study.compare import run_comparison, run_dir_name

    cc = _comparison_config(config, out, seeds, rounds, resume, _dotted(sets, overrides))
    if not isinstance(backend, str) and workers is not None:
        raise ValueError("workers: a backend object has its own; give workers to make_backend(...) instead")
    runner = make_backend(backend, workers=workers) if isinstance(backend, str) else backend
    out_dir = output_dir("comparison", cc.name, out, resume)
    if progress:
        ui.console.print(f"[bold]{cc.name}[/bold]: {', '.join(m.label for m in cc.methods)}; seeds {cc.seeds}; output {out_dir}")
        with ui.progress() as prog:
            run_comparison(cc, out_dir, resume=resume is not None, backend=runner, **ui.compare_callbacks(prog, False))
    else:
        run_comparison(cc, out_dir, resume=resume is not None, backend=runner)
    paired = out_dir / "paired.csv"
    return ComparisonResult(
        out_dir,
        pd.read_csv(out_dir / "table.csv", index_col="method"),
        pd.read_csv(paired) if paired.is_file() and paired.stat().st_size else pd.DataFrame(),
        {(e.label, s): out_dir / run_dir_name(e.label, s) for s in cc.seeds for e in cc.methods},
    )


def _comparison_config(
    config: "CompareConfig | dict | str | Path | None",
    out: str | Path | None,
    seeds: Sequence[int] | None,
    rounds: int | None,
    resume: str | Path | None,
    over: dict[str, Any],
) -> "CompareConfig":
    """The comparison :func:`compare` runs: the one saved in ``resume`` (nothing else given),
    else ``config`` (a YAML path, None for the default, a mapping or a
    :class:`fedselect.study.compare.CompareConfig`) with the dotted keys ``over`` set in its
    base, then ``rounds`` and ``seeds``.

    Raises:
        ValueError: ``resume`` with anything that changes the config. ConfigError: it is invalid."""
    from fedselect.study.compare import load_compare, parse_compare, saved_compare

    if resume is not None:
        given = [k for k, v in (("config", config), ("out", out), ("seeds", seeds), ("rounds", rounds)) if v is not None]
        if given or over:
            raise ValueError(
                f"resume={str(resume)!r} finishes the comparison saved there with its own config; "
                f"it cannot be combined with {', '.join(given + sorted(over))}"
            )
        cc = saved_compare(resume)
    elif isinstance(config, (str, Path)) or config is None:
        cc = load_compare(config, over or None)
    else:
        doc = config.model_dump(mode="json") if not isinstance(config, Mapping) else dict(config)
        doc["base"] = apply_overrides(dict(doc.get("base") or {}), over)
        cc = parse_compare(doc, getattr(config, "name", None) or "<dict>")
    if resume is None and rounds is not None:
        cc = cc.with_rounds(rounds)
    if resume is None and seeds is not None:
        cc = parse_compare({**cc.model_dump(mode="json"), "seeds": list(seeds)}, f"{cc.name} (seeds={list(seeds)!r})")
    return cc
