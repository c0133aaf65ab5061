"""Side-by-side comparisons: several methods and seeds on one shared federation.

For every seed the federation (partition, held-out splits, test set, device/network profiles
and per-round draws) is built once and handed to every method (with ``--backend ray`` every
run is a Ray task that builds the same federation itself: :mod:`fedselect.backends`), so differences between methods
come from selection and aggregation alone (SPEC 0.2). Each run keeps its own run directory
under ``<out>/runs/<label>-s<seed>``; the comparison directory gets ``compare.json`` (what was
run), ``federation-s<seed>.json`` (clients' sizes, labels, profiles, expected latency),
``table.md`` / ``table.csv`` / ``paired.csv``, ``plots/*.png`` and ``report.html`` (built by
:mod:`fedselect.report`, which ``fedselect report`` re-runs from the saved metrics alone).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fedselect.config import ConfigError, ExperimentConfig, MethodSpec, apply_overrides, validate_model
from fedselect.experiment import RoundEvent, check_saved_runs, with_pre_validation_values, with_validation_keys
from fedselect.federation import Federation
from fedselect.fl.metrics import read_json, write_json_atomic
from fedselect.resolve import parse_experiment
from fedselect.system import BITS_PER_FLOAT, compute_time, transmit_time

#: keys a method entry may not change: they define the shared federation
FEDERATION_KEYS = ("data", "system", "model", "seed")


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


class CompareConfig(BaseModel):
    """A comparison: ``base`` experiment, ``methods`` to run on it, ``seeds``, the ``baseline``
    label for relative changes, and optional ``paper`` figures to print beside ours."""

    model_config = ConfigDict(extra="forbid")
    name: str = "comparison"
    base: dict[str, Any] = Field(default_factory=dict)
    methods: list[MethodEntry]
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    baseline: str | None = None
    paper: dict[str, dict[str, Any]] | None = Field(None, description="label -> reported figures (same keys as the table)")
    paper_source: str | None = None
    comment: str | None = None

    @model_validator(mode="after")
    def _check(self) -> "CompareConfig":
        labels = [m.label for m in self.methods]
        if not labels:
            raise ValueError("methods: at least one method is needed")
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise ValueError(f"methods: duplicate labels {dup}; give each entry a distinct `label`")
        if self.baseline is None:
            self.baseline = labels[0]
        if self.baseline not in labels:
            raise ValueError(f"baseline {self.baseline!r} is not one of the method labels {labels}")
        if len(set(self.seeds)) != len(self.seeds) or any(s < 0 for s in self.seeds):
            raise ValueError(f"seeds must be distinct and >= 0, got {self.seeds}")
        return self

    def experiment(self, entry: MethodEntry, seed: int) -> ExperimentConfig:
        """The resolved experiment of ``entry`` with ``seed``.

        Raises:
            ConfigError: the entry's experiment is invalid (names the entry)."""
        doc = entry.apply(copy.deepcopy(self.base))
        doc.update(seed=seed, name=f"{self.name}/{entry.label}")
        doc = apply_overrides(doc, entry.overrides)
        if entry.rounds is not None:
            doc["rounds"] = entry.rounds
        return parse_experiment(doc, f"{self.name}: method {entry.label!r}, seed {seed}")

    def rounds_of(self) -> dict[str, int]:
        """label -> the rounds T that method runs (its own ``rounds``, else the base's)."""
        return {e.label: self.experiment(e, self.seeds[0]).rounds for e in self.methods}

    def with_rounds(self, rounds: int) -> "CompareConfig":
        """This comparison with every method at ``rounds`` (the base's and each method's own
        ``rounds`` replaced): ``fedselect compare --rounds N`` and the quick variants of
        ``fedselect reproduce``.

        Raises:
            ConfigError: ``rounds`` is not an integer >= 1 (names the key)."""
        doc = self.model_dump(mode="json")
        doc["base"] = {**doc["base"], "rounds": rounds}
        for m in doc["methods"]:
            m["rounds"] = None
        return parse_compare(doc, f"{self.name} (with rounds={rounds!r} for every method)")


#: agent settings of the default comparison: 30 rounds are short for a DDQN, so learning starts
#: after 10 transitions, takes 10 Adam steps (lr 1e-3) per round, and epsilon falls 0.9 -> 0.2 by
#: round 15 (the exploration bound of docs/flash-rl.md; the paper's schedule is in configs/paper/)
_DEFAULT_AGENT = {"eps_end": 0.2, "eps_decay_rounds": 15, "rl_batch_size": 10, "rl_lr": 0.001, "rl_learn_steps": 10}

#: the embedded default comparison (`fedselect compare` with no argument; configs/compare-default.yaml)
DEFAULT_COMPARE: dict[str, Any] = {
    "name": "default-compare",
    "seeds": [0],
    "baseline": "FedAvg",
    "base": {"name": "default", "rounds": 30, "clients_per_round": 5, "metrics": {"target": 0.9}},
    "methods": [
        {"label": "FedAvg", "method": "fedavg"},
        {"label": "FLASH-RL", "method": "flashrl", "method_options": dict(_DEFAULT_AGENT)},
        {"label": "FAVOR", "method": "favor", "method_options": dict(_DEFAULT_AGENT)},
    ],
}


def parse_compare(doc: dict[str, Any], source: str = "<dict>") -> CompareConfig:
    """Validate a comparison mapping; each method's experiment is validated too.

    Raises:
        ConfigError: naming the key and what is allowed.
    """
    cc = validate_model(CompareConfig, doc, source, "comparison")
    for entry in cc.methods:  # fail before anything runs
        cc.experiment(entry, cc.seeds[0])
    return cc


def load_compare(path: str | Path | None, overrides: dict[str, Any] | None = None) -> CompareConfig:
    """Read a comparison YAML (None: the embedded default, :data:`DEFAULT_COMPARE`). A plain
    experiment YAML (no ``methods:``) is accepted too: it becomes a one-method comparison.
    ``overrides`` (dotted keys) apply to ``base``.

    Raises:
        FileNotFoundError, ConfigError.
    """
    from fedselect.config import config_kind, read_yaml_file

    if path is None:
        doc = {**DEFAULT_COMPARE, "base": apply_overrides(DEFAULT_COMPARE["base"], overrides or {})}
        return parse_compare(doc, "<embedded default comparison>")
    p = Path(path)
    doc = read_yaml_file(p, "comparison") or {}

    if config_kind(doc) == "sweep":
        raise ConfigError(f"{p} is a sweep config (it has a grid): run it with `fedselect sweep {p}`")
    if isinstance(doc, dict) and "methods" not in doc:
        entry = {k: doc[k] for k in ("method", "selector", "algorithm") if doc.get(k) is not None} or {"method": "fedavg"}
        doc = {"name": doc.get("name", p.stem), "base": doc, "methods": [entry], "seeds": [doc.get("seed", 0)]}
    if overrides:
        doc = dict(doc)
        doc["base"] = apply_overrides(doc.get("base", {}), overrides)
    return parse_compare(doc, str(p))


def partition_params(fed: Federation) -> dict[str, Any]:
    """The partition scheme with every parameter in effect (the resolved config writes the
    defaults out; the partitioner's bounds on retries, ``max_*``, are left out)."""
    params = {k: v for k, v in fed.data.partition.params().items() if not k.startswith(("max_", "_"))}
    return {"scheme": fed.data.partition.scheme, **params}


def federation_info(fed: Federation, local_epochs: int) -> dict[str, Any]:
    """Per-client facts for reports: samples, label counts, profiles and the expected latency
    (s) at the profiles' mean frequency and bandwidth for ``local_epochs`` epochs, uploading the
    whole model (also split into its compute and upload parts)."""
    model = fed.new_model()
    model_bits = sum(v.numel() for v in model.state_dict().values()) * BITS_PER_FLOAT
    fl = fed.fleet
    compute = [
        compute_time(local_epochs, fed.client_bits(k), fed.system.cycles_per_bit, fl.cores[k], fl.mean_mhz[k])
        for k in range(fed.num_clients)
    ]
    upload = [transmit_time(model_bits, fl.mean_mbps[k]) for k in range(fed.num_clients)]
    expected = [c + u for c, u in zip(compute, upload)]
    return {
        "num_clients": fed.num_clients,
        "num_classes": fed.num_classes,
        "class_names": fed.train_set.class_names,
        "dataset": fed.data.dataset,
        "partition": partition_params(fed),
        "num_samples": [c.num_samples for c in fed.clients],
        "label_counts": fed.label_counts().tolist(),
        "device": [d.name for d in fl.devices],
        "network": [n.name for n in fl.networks],
        "expected_latency_s": [float(x) for x in expected],
        "expected_compute_s": [float(x) for x in compute],
        "expected_upload_s": [float(x) for x in upload],
        "train_indices_hash": [
            int(np.bitwise_xor.reduce(c.train_indices * 2654435761 % (2**31))) if len(c.train_indices) else 0 for c in fed.clients
        ],
    }


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
    spec = {**spec, "base": with_pre_validation_values(spec.get("base") or {})}  # one saved before them lacks them
    return parse_compare({k: v for k, v in spec.items() if k != "runs"}, str(d / "compare.json"))


def run_dir_name(label: str, seed: int) -> str:
    """A run's directory inside a comparison directory."""
    return f"runs/{label.replace(' ', '_')}-s{seed}"


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
    never started are run. ``backend``: :class:`fedselect.backends.LocalBackend` (default: one
    federation per seed, shared by every method) or :class:`fedselect.backends.RayBackend`
    (one Ray task per run, each building the same federation); the results are the same.
    ``on_start(label, seed, rounds)`` is called when a run starts (Ray: is submitted),
    ``on_round(label, seed, event)`` after each round (local backend only) and
    ``on_done(label, seed, summary)`` when a run has finished. Returns the comparison directory.
    """
    from fedselect.backends import LocalBackend, RunCallbacks, RunSpec
    from fedselect.report import build_report

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
                    cc.experiment(entry, seed),
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
