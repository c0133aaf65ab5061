"""The Python API, for notebooks and scripts: the same runs as the command line, from a config
object, a mapping or a YAML path.

::

    import fedselect

    res = fedselect.run({"method": "oort", "rounds": 20, "data": {"num_clients": 20}}, "runs/oort")
    res.summary["final_accuracy"], res.metrics[-1]["e2e_latency_s"]
    res = fedselect.run({"selector": {"name": "mypkg.selectors:MySelector"}, "algorithm": {"name": "fedper"}})
    fedselect.resume("runs/oort", rounds=40)

Users' own selectors and algorithms: subclass :class:`fedselect.Selector` /
:class:`fedselect.Algorithm`, then name them ``"package.module:ClassName"`` in the config, or
decorate them with :func:`fedselect.register_selector` / :func:`fedselect.register_algorithm`
(docs/architecture.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from fedselect.config import ExperimentConfig, apply_overrides, load_config, parse_config
from fedselect.experiment import RoundEvent, resume_experiment, run_experiment
from fedselect.federation import Federation
from fedselect.fl.metrics import read_csv_rows, read_json
from fedselect.resolve import resolve

__all__ = ["RunResult", "experiment_config", "load_run", "resume", "run"]


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


def experiment_config(config: ExperimentConfig | dict | str | Path | None = None, **overrides: Any) -> ExperimentConfig:
    """A resolved experiment config from a config object, a mapping, a YAML path, or None (the
    embedded default); ``overrides`` are dotted keys with ``__`` or ``.`` (``train__lr=0.1``).

    Raises:
        ConfigError: invalid config (every problem named). FileNotFoundError: no such YAML file.
    """
    over = {k.replace("__", "."): v for k, v in overrides.items()}
    if isinstance(config, ExperimentConfig):
        doc, source = config.model_dump(mode="json"), config.name
        cfg = parse_config(apply_overrides(doc, over), source)
    elif isinstance(config, (str, Path)):
        source, cfg = str(config), load_config(config, over)
    else:
        source = "<dict>" if config is not None else "<embedded default>"
        cfg = parse_config(apply_overrides(dict(config or {"name": "default", "metrics": {"target": 0.9}}), over), source)
    return resolve(cfg, source).config


def run(
    config: ExperimentConfig | dict | str | Path | None = None,
    out: str | Path | None = None,
    *,
    federation: Federation | None = None,
    overwrite: bool = False,
    on_round: Callable[[RoundEvent], None] | None = None,
    **overrides: Any,
) -> RunResult:
    """Run one experiment and return its result (the files are in ``out``).

    Args:
        config: see :func:`experiment_config`.
        out: run directory (default ``runs/<name>-<method>-s<seed>-<time>``).
        federation: reuse a federation built for the same data, model, system and seed.
        overwrite: replace a run already in ``out``.
        on_round: progress callback.
        overrides: dotted config keys (``rounds=10``, ``train__lr=0.1``).

    Raises:
        ConfigError, FileExistsError, DatasetNotFoundError: as ``fedselect run``.
    """
    cfg = experiment_config(config, **overrides)
    if out is None:
        method = (cfg.method or f"{cfg.selector.name}+{cfg.algorithm.name}").replace(":", "_").replace("/", "_")
        out = Path("runs") / f"{cfg.name}-{method}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_experiment(cfg, out, on_round=on_round, federation=federation, overwrite=overwrite)
    return load_run(out)


def resume(run_dir: str | Path, rounds: int | None = None, on_round: Callable[[RoundEvent], None] | None = None) -> RunResult:
    """Continue a killed or finished run exactly (``rounds`` may extend the budget)."""
    resume_experiment(run_dir, on_round=on_round, rounds=rounds)
    return load_run(run_dir)


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
