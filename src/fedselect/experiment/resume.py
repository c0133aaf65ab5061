"""The resume policy: when saved results may be continued or kept.

A run is continued (``fedselect run --resume``) only from a checkpoint written with the same
resolved config (only ``rounds`` may change, and only where a longer budget gives the same
results as a fresh run: :func:`budget_problems`), on the same input files and with the same
metrics columns (:func:`load_resume_point`). A comparison or a sweep keeps its finished runs only
when their saved config is the one it would run now and their inputs are unchanged
(:func:`check_saved_runs`). Settings of how a run executes (:data:`EXECUTION_KEYS`) and keys that
cannot change its results are left out of these comparisons; configs saved before an option
existed are read with the values they were made with (:data:`PRE_VALIDATION_VALUES`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from fedselect.config.schema import ExperimentConfig, parse_config
from fedselect.experiment.checkpoint import FORMAT_VERSION, NoCheckpointError, load_checkpoint
from fedselect.experiment.inputs import check_resume, saved_inputs_changed
from fedselect.experiment.metrics import LATER_CORE_COLUMNS
from fedselect.experiment.resolve import Resolved, resolve
from fedselect.experiment.simulation import Simulation

log = logging.getLogger("fedselect")


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


_MISSING = object()
#: settings of how a run is executed, not of what it computes: results are identical for any
#: value, so comparisons of saved and current configs leave them out
EXECUTION_KEYS = ("train.workers", "engine", "log.tensorboard")
#: the options that came with the server's validation set, and the values a run saved before
#: them was made with: no validation set, decisions reading the test set. Their defaults change
#: the results, so a saved config (or a saved comparison's / sweep's base) that lacks them is
#: read with these values, never with the defaults
PRE_VALIDATION_VALUES = {"data.validation": 0, "selection_eval": "test"}


def _with_keys(doc: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` with each dotted key of ``values`` it lacks set to its value."""
    import copy

    out = copy.deepcopy(doc)
    for key, value in values.items():
        *parents, leaf = key.split(".")
        node = out
        for k in parents:
            node = node.setdefault(k, {}) if isinstance(node.get(k, {}), dict) else {}
        node.setdefault(leaf, value)
    return out


def with_pre_validation_values(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` (a saved config, or a saved comparison's / sweep's ``base``) with each
    key of :data:`PRE_VALIDATION_VALUES` it lacks set to the value it was made with."""
    return _with_keys(doc, PRE_VALIDATION_VALUES)


def with_validation_keys(base: dict[str, Any]) -> dict[str, Any]:
    """A comparison's / sweep's ``base`` as it is saved (compare.json, sweep.json): the keys of
    :data:`PRE_VALIDATION_VALUES` stated, their default where ``base`` leaves them out, so that
    reading it back (:func:`with_pre_validation_values`) never takes it for one saved before them."""
    from fedselect.config.sections import DataConfig

    defaults = {
        "data.validation": DataConfig.model_fields["validation"].default,
        "selection_eval": ExperimentConfig.model_fields["selection_eval"].default,
    }
    return _with_keys(base, defaults)


def no_effect_keys(cfg: ExperimentConfig, selector: type | None = None) -> tuple[str, ...]:
    """Keys that cannot change the results of ``cfg``'s run, which comparisons of saved and
    current configs leave out: ``selection_eval`` when none of its selector's decisions reads
    model quality (:func:`fedselect.selectors.base.reads_quality`). ``selector``: the run's
    selector class when known (else ``cfg`` is resolved to find it)."""
    from fedselect.selectors.base import reads_quality

    try:
        sel = selector if selector is not None else resolve(cfg).selector
    except (ValueError, TypeError):
        return ()
    return () if reads_quality(sel) else ("selection_eval",)


def with_current_defaults(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved resolved config resolved again by this fedselect: options added since the run was
    made appear with their defaults (by the project's rule a new option's default keeps the
    earlier results), so only real differences remain; the options of the validation set, whose
    defaults do change results, with the values the run was made with
    (:data:`PRE_VALIDATION_VALUES`). A saved config this version cannot read (a removed key, say)
    is returned unchanged, and its differences show."""
    try:
        source = "<saved run>"
        return resolve(parse_config(with_pre_validation_values(saved), source), source).config.model_dump(mode="json")
    except (ValueError, TypeError):  # ConfigError is a ValueError
        return saved


def config_differences(saved: dict[str, Any], now: dict[str, Any], ignore: tuple[str, ...] = ()) -> list[str]:
    """Every dotted key whose value differs between two resolved configs (defaults included;
    a key present on one side only differs too), as ``"key (old in the saved run, new now)"``.
    ``saved`` is first resolved again (:func:`with_current_defaults`): an option the saved run
    lacks counts only when ``now`` sets it to other than its default."""
    a, b = _flatten(with_current_defaults(saved)), _flatten(now)
    out = []
    for k in sorted(set(a) | set(b)):
        if k in ignore:
            continue
        x, y = a.get(k, _MISSING), b.get(k, _MISSING)
        if x != y:
            show = lambda v: "absent" if v is _MISSING else repr(v)  # noqa: E731
            out.append(f"{k} ({show(x)} in the saved run, {show(y)} now)")
    return out


def saved_run_differences(run_dir: str | Path, cfg: ExperimentConfig, finished: bool) -> list[str]:
    """How the resolved config saved in ``run_dir`` differs from ``cfg`` (resolved), every key
    and default included; the round budget counts only for a finished run (an interrupted one
    may still be extended). [] when the directory holds no run."""
    import yaml

    p = Path(run_dir) / "config.yaml"
    if not p.is_file():
        return []
    saved = yaml.safe_load(p.read_text()) or {}
    ignore = (*EXECUTION_KEYS, *no_effect_keys(cfg))
    return config_differences(saved, cfg.model_dump(mode="json"), ignore=ignore if finished else ("rounds", *ignore))


def check_saved_runs(items: list[tuple[Path, ExperimentConfig]], where: str, how: str, inputs: bool = True) -> None:
    """Refuse to reuse results whose config differs from the one that would produce them now,
    or (``inputs``) whose input data files changed since they ran (``inputs.json``:
    :func:`fedselect.experiment.inputs.saved_inputs_changed`).

    Args:
        items: (run directory, the resolved config it should hold) pairs.
        where: what reuses them (for the message). how: what the user can do instead.
        inputs: also check the runs' input files (off for reports, which only read saved metrics).
            Runs made before an option was added are accepted while the option keeps its default
            (:func:`config_differences`).

    Raises:
        ValueError: naming every run directory and every differing key or changed file.
    """
    bad, changed = [], []
    for run_dir, cfg in items:
        diff = saved_run_differences(run_dir, cfg, finished=(Path(run_dir) / "summary.json").exists())
        if diff:
            bad.append(f"{run_dir}: " + "; ".join(diff))
        files = saved_inputs_changed(run_dir) if inputs else []
        if files:
            changed.append(f"{run_dir}: " + "; ".join(files))
    if bad:
        raise ValueError(
            f"{where} holds runs made with another config than the one it would run now, which would mix old and new "
            f"results: " + " | ".join(bad) + f". {how}"
        )
    if changed:
        raise ValueError(
            f"{where} holds runs made on input data that changed since they ran, which would mix results on old and new "
            f"data: " + " | ".join(changed) + ". Restore the data file(s), or run into another --out (nothing was changed)"
        )


def budget_problems(sim: Simulation, old_rounds: int, new_rounds: int, done: int) -> list[str]:
    """Why continuing a run planned for ``old_rounds`` (``done`` of them played) to
    ``new_rounds`` would not equal a fresh ``new_rounds``-round run ([] when it would)."""
    out = []
    every = sim.settings.eval_every
    if done >= old_rounds and old_rounds % every:
        out.append(
            f"round {old_rounds} was evaluated because it was the last, while a {new_rounds}-round run evaluates every "
            f"{every} rounds only (eval_every)"
        )
    out += [f"selector {sim.selector.name!r}: {p}" for p in sim.selector.budget_problems(old_rounds, new_rounds, done)]
    out += [f"algorithm {sim.algorithm.name!r}: {p}" for p in sim.algorithm.budget_problems(old_rounds, new_rounds, done)]
    return out


def earlier_columns(saved: list[str] | None, now: list[str]) -> bool:
    """``saved`` (a checkpoint's metrics.csv header) is ``now`` without some of the core columns
    added since (:data:`~fedselect.experiment.metrics.LATER_CORE_COLUMNS`, e.g. ``latency_sum_s``): a run
    started before them, which resumes with the columns it started with."""
    if not saved:
        return False
    missing = [c for c in now if c not in saved]
    return bool(missing) and set(missing) <= set(LATER_CORE_COLUMNS) and [c for c in now if c in saved] == list(saved)


def load_resume_point(run_dir: Path, r: Resolved, sim: Simulation) -> dict[str, Any] | None:
    """The checkpoint to resume from (None: no checkpoint file at all, start again), checked
    against the resolved config and the run's columns."""
    try:
        ck = load_checkpoint(run_dir)
    except NoCheckpointError:
        log.warning("%s holds no checkpoint yet (stopped before its first one): starting again from round 0", run_dir)
        return None
    if ck.get("format_version", 1) < FORMAT_VERSION or "snapshot" not in ck:
        raise ValueError(
            f"cannot resume {run_dir}: its checkpoint was written by an older fedselect (checkpoint format "
            f"{ck.get('format_version', 1)}; this one needs {FORMAT_VERSION}); start the run again with --overwrite"
        )
    cfg = r.config
    ignore = ("rounds", *EXECUTION_KEYS, *no_effect_keys(cfg, r.selector))
    diff = config_differences(ck.get("config") or {}, cfg.model_dump(mode="json"), ignore=ignore)
    if diff:
        raise ValueError(
            f"cannot resume {run_dir}: the config differs from the one the checkpoint was written with at "
            f"{'; '.join(diff)}; only `rounds` may change on resume. Restore config.yaml or start a new run"
        )
    check_resume(run_dir, sim.fed)  # the same input files and the same federation as when the run started
    if cfg.rounds < ck["round"]:
        raise ValueError(
            f"cannot resume {run_dir} with rounds={cfg.rounds}: the checkpoint already holds {ck['round']} rounds; "
            f"rounds must be >= {ck['round']}"
        )
    saved_rounds = int((ck.get("config") or {}).get("rounds", cfg.rounds))
    if cfg.rounds != saved_rounds:
        problems = budget_problems(sim, saved_rounds, cfg.rounds, ck["round"])
        if problems:
            raise ValueError(
                f"cannot resume {run_dir} with rounds={cfg.rounds} (it was planned for {saved_rounds}): the result would "
                f"differ from a fresh {cfg.rounds}-round run because "
                + "; ".join(problems)
                + ". Start a new run with the longer budget (docs/reliability.md)"
            )
    if "metrics_rows" not in ck:
        raise ValueError(
            f"cannot resume {run_dir}: its checkpoint was written by an older fedselect without the metrics rows; "
            f"start the run again with --overwrite"
        )
    if ck.get("columns") != sim.columns and not earlier_columns(ck.get("columns"), sim.columns):
        raise ValueError(
            f"cannot resume {run_dir}: metrics.csv columns {ck.get('columns')} differ from the run's current "
            f"columns {sim.columns} (the selector's or algorithm's code changed); start the run again with --overwrite"
        )
    return ck
