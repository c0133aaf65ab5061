"""Side-by-side comparisons: several methods and seeds on one shared federation.

For every seed the federation (partition, held-out splits, test set, device/network profiles
and per-round draws) is built once and handed to every method (with ``--backend ray`` every
run is a Ray task that builds the same federation itself: :mod:`fedselect.study.backends`), so differences between methods
come from selection and aggregation alone. Each run keeps its own run directory
under ``<out>/runs/<label>-s<seed>``; the comparison directory gets ``compare.json`` (what was
run), ``federation-s<seed>.json`` (clients' sizes, labels, profiles, expected latency),
``table.md`` / ``table.csv`` / ``paired.csv``, ``plots/*.png`` and ``report.html`` (built by
:mod:`fedselect.report.build`, which ``fedselect report`` re-runs from the saved metrics alone).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fedselect.common.files import read_json, write_json_atomic
from fedselect.config.contenders import (
    BASE_REFUSED,
    SET_REFUSED,
    Layer,
    MethodSpec,
    contender_problems,
    file_name,
    join_set,
    problems_of,
    validate_contenders,
)
from fedselect.config.overrides import apply_overrides
from fedselect.config.schema import ConfigError, ExperimentConfig
from fedselect.experiment.resolve import Resolved, resolve_doc
from fedselect.experiment.resume import check_saved_runs, with_pre_validation_values, with_validation_keys
from fedselect.experiment.run import RoundEvent
from fedselect.report.federations import federation_info
from fedselect.world.federation import Federation

#: keys a method entry may not change: they define the shared federation
FEDERATION_KEYS = ("data", "system", "model", "seed")
#: the embedded default comparison: `fedselect compare` with no argument (`make demo`), a config
#: file like any other (``configs/compare-default.yaml`` in the repository is this file)
DEFAULT_COMPARE = Path(__file__).parents[1] / "config" / "defaults" / "compare-default.yaml"


class MethodEntry(MethodSpec):
    """One contender: a label for tables/plots, what runs (a ``method`` preset and/or a
    ``selector`` and an ``algorithm``), its own ``rounds`` (T; default the base's) and optional
    overrides of the base experiment (any key except those defining the federation: data,
    system, model, seed).

    ``rounds`` lets methods run different budgets side by side, as the papers do (CEFL Table I:
    CEFL 100 rounds among its leaders, Regular FL and FedPer 350). ``overrides: {rounds: N}``
    means the same and is read as ``rounds: N``; giving both is an error. The tables then take
    each method's own last round and own totals (docs/comparisons.md, "Methods with their own
    rounds").

    Raises:
        ValueError: ``rounds`` not an integer >= 1, ``rounds`` given twice, or an override of a
            federation key.
    """

    rounds: int | None = Field(None, strict=True, description="this method's own T (default: the base's rounds)")
    overrides: dict[str, Any] = Field(default_factory=dict, description="dotted keys, e.g. train.lr")

    @model_validator(mode="before")
    @classmethod
    def _rounds_in_overrides(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("overrides"), dict) and "rounds" in data["overrides"]:
            if data.get("rounds") is not None:
                raise ValueError(
                    f"rounds: given twice (rounds: {data['rounds']!r} and overrides.rounds: {data['overrides']['rounds']!r}); "
                    "give the method's rounds once, as `rounds: N`"
                )
            over = dict(data["overrides"])
            data = {**data, "rounds": over.pop("rounds"), "overrides": over}
        return data

    @field_validator("rounds")
    @classmethod
    def _rounds(cls, r: int | None) -> int | None:
        if r is not None and r < 1:
            raise ValueError(f"expected an integer >= 1 (this method's own T), got {r!r}")
        return r

    @model_validator(mode="after")
    def _check(self) -> "MethodEntry":
        bad = [k for k in self.overrides if k.split(".")[0] in FEDERATION_KEYS]
        if bad:
            raise ValueError(f"overrides {bad} would change the shared federation; allowed: any key but {list(FEDERATION_KEYS)}")
        return self

    def layers(self, i: int) -> list[Layer]:
        """Where this entry (``methods.<i>``) gives keys of its experiments, highest first."""
        own = {"rounds": "rounds"} if self.rounds is not None else {}
        return [
            Layer(f"methods.{i}", own),
            Layer.of(f"methods.{i}", self.overrides, "overrides."),
            Layer(f"methods.{i}", self.given()),
        ]


class CompareConfig(BaseModel):
    """A comparison: ``base`` experiment, ``methods`` to run on it, ``seeds``, the ``baseline``
    label for relative changes, optional ``paper`` figures to print beside ours, and ``set``:
    dotted keys set in every run, over the methods' own values (what ``--set`` adds)."""

    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)
    name: str = "comparison"
    base: dict[str, Any] = Field(default_factory=dict)
    methods: list[MethodEntry]
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    baseline: str | None = None
    paper: dict[str, dict[str, Any]] | None = Field(None, description="label -> reported figures (same keys as the table)")
    paper_source: str | None = None
    comment: str | None = None
    set_: dict[str, Any] = Field(
        default_factory=dict, alias="set", description="dotted keys set in every run, over the methods' own (--set)"
    )

    @model_validator(mode="after")
    def _check(self) -> "CompareConfig":
        labels = [m.label for m in self.methods]
        if not labels:
            raise ValueError("methods: at least one method is needed")
        if self.baseline is None:
            self.baseline = labels[0]
        if self.baseline not in labels:
            raise ValueError(f"baseline {self.baseline!r} is not one of the method labels {labels}")
        if len(set(self.seeds)) != len(self.seeds) or any(s < 0 for s in self.seeds):
            raise ValueError(f"seeds must be distinct and >= 0, got {self.seeds}")
        return self

    def experiment_doc(self, entry: MethodEntry, seed: int) -> dict[str, Any]:
        """The experiment mapping of ``entry`` with ``seed``, in layers: the base, the entry
        (what runs, its overrides, its rounds), then ``set``."""
        doc = entry.apply(copy.deepcopy(self.base))
        doc.update(seed=seed, name=f"{self.name}/{entry.label}")
        doc = apply_overrides(doc, entry.overrides)
        if entry.rounds is not None:
            doc["rounds"] = entry.rounds
        return apply_overrides(doc, self.set_)

    def resolved(self, entry: MethodEntry, seed: int) -> Resolved:
        """The resolved experiment of ``entry`` with ``seed``: what its run is planned from.

        Raises:
            ConfigError: the entry's experiment is invalid (names the entry)."""
        return resolve_doc(self.experiment_doc(entry, seed), f"{self.name}: method {entry.label!r}, seed {seed}")

    def experiment(self, entry: MethodEntry, seed: int) -> ExperimentConfig:
        """The resolved config of ``entry`` with ``seed`` (:meth:`resolved`'s, every default written out).

        Raises:
            ConfigError: the entry's experiment is invalid (names the entry)."""
        return self.resolved(entry, seed).config

    def rounds_of(self) -> dict[str, int]:
        """label -> the rounds T that method runs (its own ``rounds``, else the base's)."""
        return {e.label: self.experiment(e, self.seeds[0]).rounds for e in self.methods}

    def with_rounds(self, rounds: int) -> "CompareConfig":
        """This comparison with every method at ``rounds`` (``set: {rounds: N}``, over the base's
        and each method's own ``rounds``): ``fedselect compare --rounds N`` and the quick variants
        of ``fedselect reproduce``.

        Raises:
            ConfigError: ``rounds`` is not an integer >= 1 (names the key)."""
        doc = self.model_dump(mode="json")
        doc["set"] = {**doc["set"], "rounds": rounds}
        return parse_compare(doc, f"{self.name} (with rounds={rounds!r} for every method)")


def parse_compare(doc: dict[str, Any], source: str = "<dict>") -> CompareConfig:
    """Validate a comparison mapping and every method's experiment, all problems in one pass:
    each named by where it was given (``base.trian``, ``methods.1.method``, ``set.train.lr``),
    once however many methods share it.

    Raises:
        ConfigError: naming every key that is wrong and what is allowed.
    """
    cc, entries, problems, seed = validate_contenders(
        CompareConfig, MethodEntry, doc, source, "comparison", SET_REFUSED, "in the run directories runs/LABEL-s<seed>"
    )
    problems += _experiment_problems(cc, entries, seed)
    if problems:
        raise ConfigError.listing(source, problems, "comparison")
    return cc


def _experiment_problems(cc: CompareConfig, entries: list[tuple[int, MethodEntry]], seed: int) -> list[tuple[str, str]]:
    base = Layer.of("base", cc.base)
    return contender_problems(
        [
            (
                f"methods.{i} ({e.label!r})",
                [Layer.of("set", cc.set_), *e.layers(i), base],
                problems_of(lambda e=e: cc.experiment(e, seed)),
            )
            for i, e in entries
        ]
    )


def load_compare(path: str | Path | None, overrides: dict[str, Any] | None = None) -> CompareConfig:
    """Read a comparison YAML (None: the embedded default, :data:`DEFAULT_COMPARE`). A plain
    experiment YAML (no ``methods:``) is accepted too: it becomes a one-method comparison (its
    ``name`` the comparison's, its ``seed`` the seeds). ``overrides`` (dotted keys, the command
    line's ``--set``) join the comparison's ``set``: they apply to every run, over the methods'
    own values.

    Raises:
        FileNotFoundError, ConfigError.
    """
    from fedselect.config.load import config_kind, read_yaml_file

    p = Path(path) if path is not None else DEFAULT_COMPARE
    source = str(p) if path is not None else "the embedded default comparison (configs/compare-default.yaml)"
    doc = read_yaml_file(p, "comparison") or {}

    if config_kind(doc) == "sweep":
        raise ConfigError(f"{p} is a sweep config (it has a grid): run it with `fedselect sweep {p}`")
    if isinstance(doc, dict) and "methods" not in doc:
        entry = {k: doc[k] for k in ("method", "selector", "algorithm") if doc.get(k) is not None} or {"method": "fedavg"}
        base = {k: v for k, v in doc.items() if k not in ("name", "seed")}
        doc = {"name": doc.get("name", p.stem), "base": base, "methods": [entry], "seeds": [doc.get("seed", 0)]}
    return parse_compare(join_set(doc, overrides, source, "comparison"), source)


def check_comparison_runs(directory: str | Path) -> None:
    """Before reporting on a comparison directory: every run's saved config must be the one its
    ``compare.json`` would run now (defaults included; a finished run's round budget too).

    Raises:
        ValueError: naming every differing run and key. ConfigError: compare.json is invalid.
    """

    d = Path(directory)
    if not (d / "compare.json").is_file():
        return
    cc = saved_compare(d)
    check_saved_runs(
        [(d / run_dir_name(e.label, s), cc.experiment(e, s)) for s in cc.seeds for e in cc.methods],
        f"comparison {d}",
        "The table would mix results of different configs: re-run the comparison into another --out",
        inputs=False,  # a report reads saved metrics only (the data may not even be on this machine)
    )


def saved_compare(directory: str | Path) -> CompareConfig:
    """The comparison a directory's ``compare.json`` records (what ``--resume`` finishes).

    Raises:
        FileNotFoundError: no compare.json there. ConfigError: compare.json is invalid.
    """
    d = Path(directory)
    if not (d / "compare.json").is_file():
        raise FileNotFoundError(f"--resume {d}: no compare.json there (not a comparison directory)")
    spec = read_json(d / "compare.json")
    spec.pop("runs", None)
    if isinstance(spec.get("base"), dict):  # saved before they were refused: they were not used then either
        spec["base"] = {k: v for k, v in spec["base"].items() if k not in BASE_REFUSED}
    spec["base"] = with_pre_validation_values(spec.get("base") or {})  # one saved before them lacks them
    return parse_compare(spec, str(d / "compare.json"))


def run_dir_name(label: str, seed: int) -> str:
    """A run's directory inside a comparison directory (labels whose names would clash are
    refused by :func:`parse_compare`)."""
    return f"runs/{file_name(label)}-s{seed}"


def run_comparison(
    cc: CompareConfig,
    out_dir: str | Path,
    on_start: Callable[[str, int, int], None] | None = None,
    on_round: Callable[[str, int, RoundEvent], None] | None = None,
    resume: bool = False,
    backend: Any = None,
    on_done: Callable[[str, int, dict[str, Any]], None] | None = None,
) -> Path:
    """Run every method for every seed on the shared federation; then write the report.

    With ``resume=True`` (an interrupted comparison in ``out_dir``): finished runs (those with a
    ``summary.json``) are kept, interrupted ones continue from their checkpoint, and runs that
    never started are run. ``backend``: :class:`fedselect.study.backends.LocalBackend` (default: one
    federation per seed, shared by every method) or :class:`fedselect.study.backends.RayBackend`
    (one Ray task per run, each building the same federation); the results are the same.
    ``on_start(label, seed, rounds)`` is called when a run starts (Ray: is submitted),
    ``on_round(label, seed, event)`` after each round (local backend only) and
    ``on_done(label, seed, summary)`` when a run has finished. Returns the comparison directory.
    """
    from fedselect.report.build import build_report
    from fedselect.study.backends import LocalBackend, RunCallbacks, RunSpec

    out = Path(out_dir)
    if resume:  # every kept or continued run must come from the config that would run now
        check_saved_runs(
            [(out / run_dir_name(e.label, s), cc.experiment(e, s)) for s in cc.seeds for e in cc.methods],
            f"comparison {out}",
            "Restore its config (compare.json and the runs' config.yaml) or run the comparison into another --out",
        )
    out.mkdir(parents=True, exist_ok=True)
    runs = [
        {
            "label": e.label,
            "method": e.method,
            "selector": None if e.selector is None else e.selector.name,
            "algorithm": None if e.algorithm is None else e.algorithm.name,
            "seed": s,
            "dir": run_dir_name(e.label, s),
        }
        for s in cc.seeds
        for e in cc.methods
    ]
    spec = cc.model_dump(mode="json")
    write_json_atomic(out / "compare.json", {**spec, "base": with_validation_keys(spec["base"]), "runs": runs})
    specs = []
    for seed in cc.seeds:
        group = f"seed={seed}"  # every method of a seed shares the federation (FEDERATION_KEYS are fixed)
        for entry in cc.methods:
            specs.append(
                RunSpec(
                    cc.resolved(entry, seed),
                    out / run_dir_name(entry.label, seed),
                    f"{entry.label} seed {seed}",
                    group,
                    tag=(entry.label, seed),
                )
            )

    def write_info(group: str, fed: Federation) -> None:
        first = cc.experiment(cc.methods[0], fed.seed)
        write_json_atomic(out / f"federation-s{fed.seed}.json", federation_info(fed, first.train.local_epochs))

    cb = RunCallbacks(
        on_start=(lambda s, i, n: on_start(s.tag[0], s.tag[1], s.cfg.rounds)) if on_start else None,
        on_round=(lambda s, ev: on_round(s.tag[0], s.tag[1], ev)) if on_round else None,
        on_done=(lambda s, summary: on_done(s.tag[0], s.tag[1], summary)) if on_done else None,
        on_federation=write_info,
    )
    (backend or LocalBackend()).run(specs, cb, resume=resume, out_dir=out, marker="compare.json")
    build_report(out)
    return out
