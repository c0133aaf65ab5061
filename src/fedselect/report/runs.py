"""Finished runs as a report reads them: one run directory as a :class:`RunSummary`
(:func:`load_run_summary`: its ``metrics.csv`` rows and the figures summarised from them), the
runs of a comparison or run directory (:func:`collect`) and the runs a ``compare.json`` lists
that are missing (:func:`missing_runs`). Their figures over seeds are computed by
:mod:`fedselect.report.aggregate` and rendered by :mod:`fedselect.report.tables`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedselect.common.files import read_csv_rows, read_json
from fedselect.experiment.metrics import PER_ROUND_KEYS, read_metrics, summarize
from fedselect.report.federations import load_federations


@dataclass
class RunSummary:
    """One run of a comparison or sweep as its tables and figures read it
    (:func:`load_run_summary`): its method label and seed, its ``metrics.csv`` rows and the
    figures summarised from them (not :class:`fedselect.api.RunResult`, a run's config, summary
    and metrics as the Python API returns them).

    Attributes:
        label, seed: the method's label and the seed. dir: the run directory.
        rows: ``metrics.csv`` rows as dicts of strings. summary: the figures of the table
            (:func:`fedselect.experiment.metrics.summarize`, the final ones from ``summary.json`` once
            finished). complete: it finished (``summary.json``). rounds_planned: the config's T.
        extra: the rest of ``summary.json``.
    """

    label: str
    seed: int
    dir: Path
    rows: list[dict[str, str]]
    summary: dict[str, Any]
    complete: bool
    rounds_planned: int | None
    extra: dict[str, Any] = field(default_factory=dict)
    metric: str = "accuracy"  # the config's metrics.metric: "accuracy" or "f1_macro"
    #: why the rounds' scores are not the clients' own models (the algorithm's round_scores), or None
    round_scores: str | None = None
    #: the config's ``mode``: "sync" (a row per round) or "async" (a row per server version)
    mode: str = "sync"
    #: the set the run's decisions read model quality on (``validation`` / ``test``), None: none does
    selection_eval: str | None = None


def round_scores_of(cfg: dict[str, Any]) -> str | None:
    """The ``round_scores`` reason of the algorithm a run's resolved ``config.yaml`` names (None:
    its rounds score every client's own model, or the algorithm cannot be looked up here)."""
    from fedselect.algorithms import ALGORITHMS

    name = (cfg.get("algorithm") or {}).get("name") if isinstance(cfg.get("algorithm"), dict) else None
    if not isinstance(name, str) or not name:
        return None
    try:
        return getattr(ALGORITHMS.get(name), "round_scores", None)
    except ValueError:  # a user's algorithm that is not importable here: nothing is known
        return None


def selection_eval_of(cfg: dict[str, Any]) -> str | None:
    """The set a run's choices read model quality on, from its resolved ``config.yaml`` (for
    runs whose summary does not say it): its ``selection_eval`` (``test`` when the config lacks
    it: saved before the option existed, its decisions read the test set) if its selector's
    choices depend on model quality (:func:`fedselect.selectors.base.decides_on_quality`), else
    None; None too for a selector that cannot be looked up here."""
    from fedselect.selectors import SELECTORS
    from fedselect.selectors.base import decides_on_quality

    name = (cfg.get("selector") or {}).get("name") if isinstance(cfg.get("selector"), dict) else None
    if not isinstance(name, str) or not name:
        return None
    try:
        sel = SELECTORS.get(name)
    except ValueError:  # a user's selector that is not importable here: nothing is known
        return None
    return str(cfg.get("selection_eval", "test")) if decides_on_quality(sel) else None


def run_selection_eval(run_dir: Path) -> str | None:
    """The set a saved run's decisions read model quality on: its ``summary.json``'s
    ``selection_eval`` where it says it, else :func:`selection_eval_of` its ``config.yaml``
    (None without either)."""
    from fedselect.config.load import read_yaml_file

    if (run_dir / "summary.json").is_file():
        saved = read_json(run_dir / "summary.json")
        if isinstance(saved, dict) and "selection_eval" in saved:
            return saved["selection_eval"]
    cfg = read_yaml_file(run_dir / "config.yaml", "run config") if (run_dir / "config.yaml").is_file() else None
    return selection_eval_of(cfg) if isinstance(cfg, dict) else None


def load_run_summary(
    run_dir: Path,
    label: str,
    seed: int,
    target: float | None = None,
    metric: str = "accuracy",
    window: int = 10,
    window_override: int | None = None,
) -> RunSummary:
    """Summarise one run directory from its ``metrics.csv`` and ``timing.csv`` (final figures
    and wall time from ``summary.json`` when the run finished); the target, metric and summary
    window come from its ``config.yaml`` when it has one (``window_override`` replaces the
    window).

    A run of an algorithm whose rounds do not score the clients' own models
    (``round_scores``: CEFL) has the figures read off the rounds (:data:`PER_ROUND_KEYS`) blank,
    and, while it has not finished (no transfer yet), its final figures too."""
    rows = read_metrics(run_dir / "metrics.csv") if (run_dir / "metrics.csv").exists() else []
    planned, note, mode = None, None, "sync"
    if (run_dir / "config.yaml").exists():
        from fedselect.config.load import read_yaml_file

        cfg = read_yaml_file(run_dir / "config.yaml", "run config") or {}
        if not isinstance(cfg, dict):
            raise ValueError(f"{run_dir / 'config.yaml'}: expected a mapping (a run's config), got {type(cfg).__name__}")
        planned = cfg.get("rounds")
        note = round_scores_of(cfg)
        target = cfg.get("metrics", {}).get("target", target) if target is None else target
        metric = cfg.get("metrics", {}).get("metric", metric)
        window = cfg.get("metrics", {}).get("summary_window", window)
        mode = cfg.get("mode") or "sync"
    if window_override is not None:
        if window_override < 1:
            raise ValueError(f"summary window must be >= 1, got {window_override}")
        window = window_override
    s = summarize(rows, target, metric, window) if rows else {"rounds": 0, "summary_window": window}
    timing = run_dir / "timing.csv"
    trows = read_csv_rows(timing) if timing.exists() else []
    s["wall_s"] = float(trows[-1]["cum_wall_s"]) if trows else None
    summary_path = run_dir / "summary.json"
    complete = summary_path.exists()
    extra = {}
    if complete:
        saved = read_json(summary_path)
        if not isinstance(saved, dict):
            raise ValueError(f"{summary_path}: expected a JSON object (a run's summary), got {type(saved).__name__}")
        if isinstance(saved.get("wall_s"), (int, float)):  # includes the method's finish()
            s["wall_s"] = saved["wall_s"]
        # communication: a method may add bytes after the last round (CEFL's transfer to members)
        for key in ("final_accuracy", "final_f1_macro", "communication_mb", "upload_mb", "download_mb"):
            if key in saved:
                s[key] = saved[key]
        note = saved.get("round_scores") if isinstance(saved.get("round_scores"), str) else note
        extra = {k: v for k, v in saved.items() if k not in s}
    if note:  # the rounds scored other models than the clients': no figure is read off them
        s.update({k: None for k in PER_ROUND_KEYS}, summary_window_rounds=None)
        if not complete:  # not finished: the last round's figures are not the clients' models either
            s["final_accuracy"] = s["final_f1_macro"] = None
        for k in PER_ROUND_KEYS:
            extra.pop(k, None)
    extra.pop("selection_eval", None)
    return RunSummary(label, seed, run_dir, rows, s, complete, planned, extra, metric, note, mode, run_selection_eval(run_dir))


def collect(
    directory: Path, window: int | None = None
) -> tuple[str, list[RunSummary], list[str], str | None, dict | None, str | None, list[dict]]:
    """Results of a comparison directory or of a single run directory (``window`` overrides
    each run's metrics.summary_window)."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"{directory} is a file; give a comparison, sweep or run directory")
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such directory (give a comparison, sweep or run directory)")
    if (directory / "compare.json").exists():
        spec = read_json(directory / "compare.json")
        try:
            labels = [m["label"] for m in spec["methods"]]
            runs = [(directory / r["dir"], r["label"], int(r["seed"])) for r in spec["runs"]]
            name = spec["name"]
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(
                f"{directory / 'compare.json'}: not a comparison record fedselect wrote (bad or missing {e}); "
                "was it edited? Restore it or rerun the comparison"
            ) from None
        results = [load_run_summary(d, label, seed, window_override=window) for d, label, seed in runs if d.exists()]
        return (
            name,
            results,
            labels,
            spec.get("baseline"),
            spec.get("paper"),
            spec.get("paper_source"),
            load_federations(directory),
        )
    if (directory / "metrics.csv").exists():
        from fedselect.config.load import read_yaml_file

        cfg = (read_yaml_file(directory / "config.yaml", "run config") or {}) if (directory / "config.yaml").exists() else {}
        if not isinstance(cfg, dict):
            raise ValueError(f"{directory / 'config.yaml'}: expected a mapping (a run's config), got {type(cfg).__name__}")
        label = cfg.get("method", directory.name)
        return (
            cfg.get("name", directory.name),
            [load_run_summary(directory, label, cfg.get("seed", 0), window_override=window)],
            [label],
            None,
            None,
            None,
            [],
        )
    raise FileNotFoundError(
        f"{directory}: neither a comparison directory (compare.json), a sweep directory (sweep.json) nor a run directory "
        "(metrics.csv)"
    )


def missing_runs(directory: str | Path) -> list[dict[str, Any]]:
    """The runs a comparison's ``compare.json`` lists that are not there: no run directory, or
    one without ``metrics.csv`` (never started, deleted, not copied). ``[{"label", "seed",
    "dir"}]`` in compare.json's order; [] for a run or sweep directory."""
    d = Path(directory)
    if not (d / "compare.json").is_file():
        return []
    try:
        runs = read_json(d / "compare.json")["runs"]
        listed = [(r["label"], int(r["seed"]), r["dir"]) for r in runs]
    except (KeyError, TypeError, ValueError):
        return []  # collect() reports a damaged compare.json
    return [{"label": lab, "seed": seed, "dir": rd} for lab, seed, rd in listed if not (d / rd / "metrics.csv").is_file()]
