"""Experiment configuration: the schema (pydantic) and the YAML file helpers, nothing else.

Unknown keys and bad values are errors that name the key and what is allowed. Every section
has defaults, so a config only states how it differs from the embedded default experiment
(FedAvg on embedded MNIST, 20 clients, Dirichlet 0.5).

This module imports no other part of fedselect: names that refer to registries (data sets,
partition schemes, models, selectors, algorithms, methods) and each component's options are
checked by one resolve step, :func:`fedselect.experiment.resolve.resolve`, before any data is loaded.
"""

from __future__ import annotations

import math
import re
import typing
from pathlib import Path
from typing import Any, Literal, Sequence

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from fedselect.config.fleet import AsyncConfig, AvailabilityConfig, CapacityConfig, DeadlineConfig, StalenessConfig  # noqa: F401

#: validation context key: skip the checks across keys (what ``fedselect.experiment.resolve`` asks for when
#: it looks, past the keys in error, for the other problems of a config)
NAMES_ONLY = "names_only"


class ConfigError(ValueError):
    """A config file or value is invalid; the message names the key and what is allowed.

    Attributes:
        problems: ``(dotted key, what is wrong)`` pairs, one per problem (key ``""`` when the
            problem concerns several keys and its text names them); empty when the error was
            raised with a message only.
    """

    def __init__(self, message: str, problems: Sequence[tuple[str, str]] = ()):
        super().__init__(message)
        self.problems = list(problems)

    @classmethod
    def listing(cls, source: str, problems: Sequence[tuple[str, str]], what: str = "config") -> "ConfigError":
        """``invalid WHAT SOURCE:`` and one line per problem, ``key: what is wrong``."""
        return cls("\n".join([f"invalid {what} {source}:"] + [f"  {problem_line(k, m)}" for k, m in problems]), problems)


def problem_line(key: str, message: str) -> str:
    """One problem as printed: ``key: message`` (the message alone when it names its keys)."""
    return f"{key}: {message}" if key else message


def _accepts_bool(annotation: Any) -> bool:
    if annotation is bool or annotation is Any:
        return True
    return any(_accepts_bool(a) for a in typing.get_args(annotation))


class _Strict(BaseModel):
    # no NaN/inf numbers anywhere; booleans are not numbers (YAML `rounds: yes` is an error);
    # strict types: a count is an integer (`rounds: 3.0` and `num_clients: "4"` are errors), a
    # number is a number (an integer is accepted where a float is expected)
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False, strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_as_number(cls, v: Any, info) -> Any:
        if (
            isinstance(v, bool)
            and info.field_name in cls.model_fields
            and not _accepts_bool(cls.model_fields[info.field_name].annotation)
        ):
            raise ValueError(
                f"expected {cls.model_fields[info.field_name].annotation!s}, got the boolean {v}".replace("<class '", "").replace(
                    "'>", ""
                )
            )
        return v


class PartitionConfig(BaseModel):
    """``scheme`` plus the scheme's own parameters (e.g. ``alpha``, ``min_size`` for dirichlet;
    ``shards_per_client``; ``labels_per_client``); see ``fedselect.world.data.partition``. The scheme
    and its parameters are checked by the resolve step."""

    model_config = ConfigDict(extra="allow")
    scheme: str = "dirichlet"

    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class DataConfig(_Strict):
    dataset: str = Field("mnist-embedded", description="registered data set name")
    options: dict[str, Any] = Field(default_factory=dict, description="loader options, e.g. path")
    num_clients: int = Field(20, ge=1, description="N, the number of clients")
    partition: PartitionConfig = Field(default_factory=PartitionConfig)
    holdout_fraction: float = Field(
        0.2, ge=0.0, lt=1.0, description="share of each client's data held out for per-client evaluation"
    )
    validation: int | float = Field(
        0.1,
        description="the server's validation set, carved from the training set before partitioning (stratified by "
        "label): a fraction in [0, 1) of the training rows, or a count of rows; 0 = none. Every decision that reads "
        "model quality reads it (selection_eval: validation); the test set is only reported",
    )

    @field_validator("validation")
    @classmethod
    def _validation(cls, v: int | float) -> int | float:
        if isinstance(v, float) and not 0.0 <= v < 1.0:
            raise ValueError(f"a fraction of the training rows must be in [0, 1), got {v}; or give a count of rows (an integer)")
        if isinstance(v, int) and v < 0:
            raise ValueError(f"a count of training rows must be >= 0 (0 = no validation set), got {v}")
        return v


class ModelConfig(_Strict):
    name: str = Field("mnist_cnn", description="registered model name")
    options: dict[str, Any] = Field(default_factory=dict, description="the model's options (checked by its own schema)")


class ComponentConfig(_Strict):
    """A pluggable component: a registered ``name`` (or ``"package.module:ClassName"``) and its
    ``options`` (checked by the component's own pydantic model). Without a ``name`` the section
    gives options to the component the ``method`` preset names (``method: fedprox`` with
    ``algorithm: {options: {mu: 0.5}}``; no method: ``random`` / ``fedavg``)."""

    name: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class TrainSection(_Strict):
    local_epochs: int = Field(2, ge=0, description="E")
    batch_size: int = Field(20, ge=1, description="B")
    lr: float = Field(0.05, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    optimizer: Literal["sgd", "adam"] = "sgd"
    weight_decay: float = Field(0.0, ge=0)
    workers: int | None = Field(
        None,
        ge=0,
        description="worker processes training the clients of a round in parallel (one torch "
        "thread each); null = the FEDSELECT_WORKERS environment variable, else the usable cores where the run's "
        "work repays starting them (none where it does not: docs/performance.md, Start-up); 0 = in "
        "this process. Results are identical for any value",
    )
    device: str = Field("auto", description="where clients train: auto (a GPU when one is available), cpu, cuda or cuda:N")

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", v):
            raise ValueError(f"expected 'auto', 'cpu', 'cuda' or 'cuda:N', got {v!r}")
        return v


class ProfileRow(_Strict):
    name: str
    mean_mhz: float | None = Field(None, gt=0)
    std_mhz: float | None = Field(None, ge=0)
    cores: int | None = Field(None, ge=1)
    mean_mbps: float | None = Field(None, gt=0)
    std_mbps: float | None = Field(None, ge=0)


class SystemConfig(_Strict):
    latency_model: Literal["paper", "flashrl-code"] = Field(
        "paper",
        description="paper: FR-eq 4 as E x samples x features x 32 bits x g / (cores f), FR-eq 5 with the float32 "
        "payload; flashrl-code: the FLASH-RL authors' code, samples x 51,200 bits / (cores f) once a round, "
        "parameters x 64 bits (docs/flash-rl.md)",
    )
    profiles: Literal["paper", "flashrl-code"] = Field(
        "paper",
        description="the device and network tables and their shares: paper (FR Tables II and III, round-robin) or "
        "flashrl-code (the fleet pickled in the FLASH-RL authors' clients_info/)",
    )
    cycles_per_bit: float = Field(20.0, gt=0, description="g, CPU cycles per bit of training data (latency_model paper)")
    count_download: bool = Field(False, description="add the model broadcast to each client's latency")
    profiles_file: str | None = Field(None, description="YAML/CSV with device and network tables")
    devices: list[ProfileRow] | None = None
    networks: list[ProfileRow] | None = None
    device_mix: dict[str, float] | None = None
    network_mix: dict[str, float] | None = None
    round_deadline_s: float | None = Field(
        None,
        gt=0,
        description="round deadline in seconds of simulated latency: later updates are discarded (code timeout) "
        "and the round lasts the deadline; null = wait for every participant",
    )
    adaptive_deadline: DeadlineConfig | None = Field(
        None,
        description="{percentile, window}: each round's deadline is that percentile of the participants' latencies in the "
        "last `window` rounds, those cut off censored at their cut (Kaplan-Meier; round_deadline_s, if set, until then)",
    )
    capacity: CapacityConfig = Field(
        default_factory=CapacityConfig,
        description="clients' fixed capacities: profiles (the device/network tables), file, lognormal or pareto",
    )

    @model_validator(mode="after")
    def _latency_model_keys(self) -> "SystemConfig":
        if self.latency_model == "flashrl-code":
            if "cycles_per_bit" in self.model_fields_set and self.cycles_per_bit != 20.0:
                raise ValueError(
                    "system.cycles_per_bit applies only to latency_model 'paper'; 'flashrl-code' uses the authors' "
                    f"g = 1 cycle per bit (got cycles_per_bit {self.cycles_per_bit})"
                )
            if self.capacity.model == "file":
                raise ValueError(
                    "system.capacity.model 'file' gives compute speeds in training samples per second of latency_model "
                    "'paper'; with latency_model 'flashrl-code' use capacity model profiles, lognormal or pareto"
                )
        return self

    @model_validator(mode="after")
    def _complete_rows(self) -> "SystemConfig":
        need = {"devices": ("mean_mhz", "std_mhz", "cores"), "networks": ("mean_mbps", "std_mbps")}
        for table, fields in need.items():
            other = [f for f in ("mean_mhz", "std_mhz", "cores", "mean_mbps", "std_mbps") if f not in fields]
            for i, row in enumerate(getattr(self, table) or []):
                missing = [f for f in fields if getattr(row, f) is None]
                wrong = [f for f in other if getattr(row, f) is not None]
                if missing or wrong:
                    raise ValueError(
                        f"system.{table}[{i}] ({row.name!r}): "
                        + "; ".join(
                            ([f"missing {missing}"] if missing else [])
                            + ([f"{wrong} do not belong in a {table[:-1]} row"] if wrong else [])
                        )
                        + f"; a {table[:-1]} row has exactly name, {', '.join(fields)}"
                    )
        return self


class FaultInjection(_Strict):
    """An explicit failure (docs/reliability.md): ``kind`` for ``clients`` in ``rounds``
    (a number, a list, or "all"; an injection only hits clients that are selected)."""

    kind: Literal["drop", "raise", "nan", "inf", "timeout"]
    rounds: int | list[int] | Literal["all"] = "all"
    clients: int | list[int] | Literal["all"] = "all"

    def round_set(self) -> list[int] | None:
        return None if self.rounds == "all" else ([self.rounds] if isinstance(self.rounds, int) else list(self.rounds))

    def client_set(self) -> list[int] | None:
        return None if self.clients == "all" else ([self.clients] if isinstance(self.clients, int) else list(self.clients))


class FaultsConfig(_Strict):
    """Client faults (docs/reliability.md). Dropout sources combine independently: a client is
    reachable in a round with probability (1 - dropout)(1 - dropout_by_device[d])(1 - dropout_by_network[n])."""

    dropout: float = Field(0.0, ge=0, le=1, description="per-round probability that any client is unreachable")
    dropout_by_device: dict[str, float] = Field(
        default_factory=dict, description="per-round dropout probability by device profile name"
    )
    dropout_by_network: dict[str, float] = Field(
        default_factory=dict, description="per-round dropout probability by network profile name"
    )
    inject: list[FaultInjection] = Field(default_factory=list, description="explicit failures at given rounds/clients")

    @field_validator("dropout_by_device", "dropout_by_network")
    @classmethod
    def _probabilities(cls, v: dict[str, float], info) -> dict[str, float]:
        for name, p in v.items():
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
                raise ValueError(f"{name}: dropout probability must be in [0, 1], got {p!r}")
        return v


class MetricsConfig(_Strict):
    target: float | None = Field(None, description="target value of `metric` for rounds-to-target")
    metric: Literal["accuracy", "f1_macro"] = "accuracy"
    summary_window: int = Field(
        10,
        ge=1,
        description="k: tables also give the mean of `metric` over the last k evaluated rounds (all of them if fewer), "
        "a figure that one noisy round does not move; the 'vs baseline' lines and paired intervals use it",
    )


#: how to install the optional TensorBoard writer (``log.tensorboard``)
TENSORBOARD_INSTALL = "pip install 'fedselect[tensorboard]' (or: pip install -r requirements-tensorboard.txt)"


class LogConfig(_Strict):
    """Live logs written beside the run's files while it runs (they never change its results)."""

    tensorboard: bool = Field(
        False,
        description="write TensorBoard event files into <run dir>/tb every round: accuracy, F1, losses, latencies, "
        "bytes and the selector's numeric columns (`tensorboard --logdir <run or comparison dir>`)",
    )

    @field_validator("tensorboard")
    @classmethod
    def _installed(cls, v: bool) -> bool:
        import importlib.util

        if v and importlib.util.find_spec("tensorboard") is None:
            raise ValueError(
                f"the TensorBoard writer needs the tensorboard package, which is not installed here: {TENSORBOARD_INSTALL}; "
                "or set log.tensorboard: false"
            )
        return v


class ExperimentConfig(_Strict):
    """One experiment.

    Who trains and what happens to their updates: ``selector`` and ``algorithm``, or ``method``,
    a preset naming both for the papers' methods (``flashrl`` = selector flashrl + algorithm
    fedavg, ``cefl`` = cefl_leaders + cefl, ...; explicit ``selector`` / ``algorithm`` override the
    preset's part). ``method_options`` go to whichever of the two declares each key.
    """

    # ``async`` is a Python keyword: the field is ``async_``, read and written as ``async``
    model_config = ConfigDict(
        extra="forbid",
        validate_assignment=True,
        allow_inf_nan=False,
        strict=True,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )

    name: str = "experiment"
    seed: int = Field(0, ge=0)
    method: str | None = Field(
        None,
        description="a preset: fedavg, full, regular_fl, flashrl, favor, cefl, fedper, individual, budgeted_online, online_random, offline_best, oort, power_of_choice, fastest",
    )
    selector: ComponentConfig | None = Field(None, description="whom to train: {name, options}")
    algorithm: ComponentConfig | None = Field(None, description="what happens to their updates: {name, options}")
    rounds: int = Field(30, ge=1, description="T, communication rounds")
    clients_per_round: int = Field(5, ge=1, description="U, clients selected per round")
    participation: float | None = Field(
        None, gt=0, le=1, description="U as a fraction f of N: U = max(1, ceil(f N)); exclusive with clients_per_round"
    )
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainSection = Field(default_factory=TrainSection)
    system: SystemConfig = Field(default_factory=SystemConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    faults: FaultsConfig = Field(default_factory=FaultsConfig)
    method_options: dict[str, Any] = Field(
        default_factory=dict, description="options of the method preset's selector and algorithm"
    )
    eval_every: int = Field(1, ge=1, description="evaluate the global model every k rounds (and at the last)")
    checkpoint_every: int = Field(1, ge=0, description="checkpoint every k rounds; 0 = never")
    engine: str = Field(
        "simulator",
        description="where the rounds run, a registered engine (fedselect.registry.ENGINES, checked by the resolve "
        "step): 'simulator' (this process and its worker pool), 'flower' (Flower's simulation engine, one SuperNode "
        "per client), or your own as 'package.module:ClassName' (docs/architecture.md); results are identical",
    )
    log: LogConfig = Field(default_factory=LogConfig, description="live logs (log.tensorboard); results do not depend on it")
    availability: AvailabilityConfig = Field(
        default_factory=AvailabilityConfig, description="who is online when (model: always, bernoulli, markov, diurnal, trace)"
    )
    overselect: float = Field(
        1.0,
        ge=1.0,
        le=10.0,
        description="select ceil(overselect x U) clients; the first U to finish are aggregated, the rest cancelled",
    )
    straggler: Literal["drop", "partial"] = Field(
        "drop",
        description="a participant past the round deadline: drop (its update is discarded, code timeout) or partial "
        "(it uploads the local steps done by the deadline, aggregated with FedNova's normalisation)",
    )
    mode: Literal["sync", "async"] = Field(
        "sync",
        description="sync: rounds of U clients (the default); async: buffered asynchronous aggregation (FedBuff) on the "
        "fleet clock, see the async section and docs/async.md",
    )
    async_: AsyncConfig = Field(
        default_factory=AsyncConfig,
        alias="async",
        description="mode: async only: concurrency, buffer_size, server_lr, staleness {function, a, b}",
    )
    selection_eval: Literal["validation", "test"] = Field(
        "validation",
        description="the set every decision that reads model quality scores on (selector rewards and scores, "
        "budgeted-online candidates, any selector through its context): 'validation' (data.validation, disjoint from "
        "the test set) or 'test' (the papers' protocol: the reported test set also steers the selection; tables then "
        "carry a caution line)",
    )
    comment: str | None = None

    @field_validator("log", mode="before")
    @classmethod
    def _log_shorthand(cls, v: Any) -> Any:
        """``log: tensorboard`` and ``log: [tensorboard]`` mean ``log: {tensorboard: true}``
        (so ``--set log=tensorboard`` works as well as ``--set log.tensorboard=true``)."""
        names = [v] if isinstance(v, str) else v if isinstance(v, list) and all(isinstance(x, str) for x in v) else None
        if names is None:
            return v
        unknown = sorted(set(names) - set(LogConfig.model_fields))
        if unknown:
            raise ValueError(f"log: unknown log(s) {unknown}; allowed: {sorted(LogConfig.model_fields)}")
        return {n: True for n in names}

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> "ExperimentConfig":
        if (info.context or {}).get(NAMES_ONLY):  # experiment/resolve.py's second look at a config with errors
            return self
        if self.participation is not None:
            u = max(1, math.ceil(self.participation * self.data.num_clients - 1e-9))
            if "clients_per_round" in self.model_fields_set and self.clients_per_round != u:
                raise ValueError(
                    f"participation and clients_per_round are exclusive: participation {self.participation} of N = "
                    f"{self.data.num_clients} gives U = {u}, clients_per_round says {self.clients_per_round}; give one of them"
                )
            if self.clients_per_round != u:
                object.__setattr__(self, "clients_per_round", u)  # U from the fraction (written out in config.yaml)
        if self.clients_per_round > self.data.num_clients:
            raise ValueError(
                f"clients_per_round (U = {self.clients_per_round}) must be <= data.num_clients (N = {self.data.num_clients})"
            )
        if self.straggler == "partial" and self.system.round_deadline_s is None and self.system.adaptive_deadline is None:
            raise ValueError(
                "straggler: 'partial' keeps the work done by the round deadline, but there is none; set "
                "system.round_deadline_s or system.adaptive_deadline (or straggler: drop)"
            )
        self._check_async()
        for i, inj in enumerate(self.faults.inject):
            bad_rounds = [r for r in inj.round_set() or [] if not 1 <= r <= self.rounds]
            if bad_rounds:
                raise ValueError(f"faults.inject[{i}].rounds: {bad_rounds} outside the rounds 1..{self.rounds} of this run")
            bad_clients = [k for k in inj.client_set() or [] if not 0 <= k < self.data.num_clients]
            if bad_clients:
                raise ValueError(f"faults.inject[{i}].clients: {bad_clients} are not client ids 0..{self.data.num_clients - 1}")
            if inj.kind == "timeout" and self.system.round_deadline_s is None and self.system.adaptive_deadline is None:
                raise ValueError(
                    f"faults.inject[{i}].kind 'timeout' needs system.round_deadline_s (a deadline in seconds); "
                    f"without one the server waits for every client"
                )
        return self

    def _check_async(self) -> None:
        """``mode: async``: the async section's defaults filled in, and the settings that have no
        meaning there refused (each named with what to do); ``mode: sync`` with async keys set is
        an error too (they would be ignored)."""
        a = self.async_
        if self.mode == "sync":
            if "async_" in self.model_fields_set and a != AsyncConfig():
                raise ValueError("async: applies only to mode: async (set mode: async, or remove the async section)")
            return
        n = self.data.num_clients
        if a.concurrency is None:
            object.__setattr__(a, "concurrency", self.clients_per_round)  # written out in config.yaml
        if a.concurrency > n:
            raise ValueError(f"async.concurrency ({a.concurrency}) must be <= data.num_clients (N = {n})")
        if a.buffer_size is None:
            object.__setattr__(a, "buffer_size", max(1, a.concurrency // 2))
        problems = []
        if self.overselect != 1.0:
            problems.append(
                f"overselect ({self.overselect}): mode: async has no rounds to over-select for; use async.concurrency"
            )
        if self.straggler != "drop":
            problems.append("straggler: 'partial' needs a synchronous round deadline; mode: async allows only straggler: drop")
        if self.system.adaptive_deadline is not None:
            problems.append(
                "system.adaptive_deadline: not supported with mode: async (use system.round_deadline_s, a per-job limit)"
            )
        if "checkpoint_every" in self.model_fields_set and self.checkpoint_every != 0:
            problems.append(
                f"checkpoint_every ({self.checkpoint_every}): mode: async writes no checkpoints (its in-flight jobs and "
                f"buffer are not saved, so it could not resume exactly); set checkpoint_every: 0 or leave it out"
            )
        if problems:
            raise ValueError("; ".join(problems))
        object.__setattr__(self, "checkpoint_every", 0)


def schema_problems(e: ValidationError) -> list[tuple[str, str]]:
    """The ``(dotted key, what is wrong)`` pairs of a pydantic error (key ``""`` for a
    message about several keys, which names them itself)."""
    out = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (not allowed here)"
        if not loc or msg.startswith((f"{loc}.", f"{loc}:", f"{loc}[")):
            out.append(("", msg))  # model-level messages name their keys themselves
        else:
            out.append((loc, msg))
    return out


def parse_config(doc: dict[str, Any] | None, source: str = "<dict>") -> ExperimentConfig:
    """Validate a mapping against the schema (registries are checked by
    :func:`fedselect.experiment.resolve.resolve`, which :func:`fedselect.experiment.resolve.parse_experiment` adds).

    Raises:
        ConfigError: with one line per problem, ``key.path: what is wrong / allowed``.
    """
    if doc is None:
        doc = {}
    return validate_model(ExperimentConfig, doc, source, "config")


def validate_model(model: type[BaseModel], doc: Any, source: str, what: str = "config", context: dict | None = None) -> Any:
    """``model.model_validate(doc, context=context)`` with errors as one :class:`ConfigError`
    naming each key.

    Raises:
        ConfigError: ``doc`` is not a mapping, or a key is unknown / has a bad value.
    """
    if not isinstance(doc, dict):
        raise ConfigError(f"invalid {what} {source}: the top level must be a mapping, got {type(doc).__name__}")
    try:
        return model.model_validate(doc, context=context)
    except ValidationError as e:
        raise ConfigError.listing(source, schema_problems(e), what) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last
    one silently, so ``rounds: 10`` then ``rounds: 100`` would run 100 rounds without a word)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class reports it
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key!r} is given twice (line {first.start_mark.line + 1} and line "
                    f"{key_node.start_mark.line + 1}); keep one",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def safe_load_unique(text: str) -> Any:
    """``yaml.safe_load`` that refuses duplicate keys.

    Raises:
        yaml.YAMLError: invalid YAML or a key given twice in one mapping (line numbers named).
    """
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)


def read_yaml_file(path: str | Path, what: str = "config") -> Any:
    """The parsed YAML of a file (None when empty).

    Raises:
        FileNotFoundError: no such file. ConfigError: a directory, invalid YAML or not UTF-8 text.
    """
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{what} {p} is a directory; give a YAML file (to continue a run directory use --resume)")
    if not p.is_file():
        raise FileNotFoundError(f"{what} file not found: {p}")
    try:
        return safe_load_unique(p.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"invalid YAML in {p}: {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what} {p} is not a UTF-8 text file ({e.reason} at byte {e.start}); give a YAML file") from None


def read_experiment(path: str | Path, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The mapping of an experiment YAML with ``overrides`` (dotted keys) applied, before any
    validation (:func:`load_config` validates it; :func:`fedselect.experiment.resolve.resolve_doc` also
    resolves it, every problem in one pass).

    Raises:
        FileNotFoundError: no such file. ConfigError: bad YAML, an empty file, not a mapping, a
            comparison or sweep config, or overrides that cannot be set.
    """
    p = Path(path)
    doc = read_yaml_file(p)
    if doc is None:
        raise ConfigError(
            f"config file {p} is empty (no settings); write at least one key (e.g. `name: my-run`), "
            f"or omit CONFIG to run the embedded default"
        )
    if not isinstance(doc, dict):
        raise ConfigError(f"invalid config {p}: the top level must be a mapping of keys to values, got {type(doc).__name__}")
    if overrides:
        doc = apply_overrides(doc, overrides)
    kind = config_kind(doc)
    if kind != "experiment":
        raise ConfigError(f"{p} is a {kind} config, not a single experiment: run it with `fedselect {kind} {p}`")
    return doc


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> ExperimentConfig:
    """Read and validate a YAML config; ``overrides`` (dotted keys) are applied first.

    Raises:
        FileNotFoundError: no such file. ConfigError: bad YAML or invalid values.
    """
    return parse_config(read_experiment(path, overrides), str(path))


def config_kind(doc: Any) -> str:
    """``"compare"`` (base + methods), ``"sweep"`` (grid) or ``"experiment"``: lets each command
    point a user who passed the wrong kind of file to the right command."""
    if isinstance(doc, dict):
        if "grid" in doc or "grid_keys" in doc or "columns" in doc:  # columns: a sweep's table, even without a grid
            return "sweep"
        if "methods" in doc and "base" in doc:
            return "compare"
    return "experiment"


def apply_overrides(doc: dict[str, Any] | None, overrides: dict[str, Any], source: str = "overrides") -> dict[str, Any]:
    """Set dotted keys (``"train.lr": 0.1``) in a copy of ``doc`` (``source`` names them in errors).

    Shallower keys are set first, so a section given whole (``"selector": {"name": "oort"}``)
    and keys inside it (``"selector.options.exploration_factor": 0.5``) combine whatever their
    order; a section missing or null on the way is created.

    Raises:
        ConfigError: naming every key that cannot be set: a key inside a value that is not a
            section (``rounds.x``), or a key given twice (a section given whole already sets it).
    """
    import copy

    out = copy.deepcopy(doc) if doc else {}
    problems = []
    for key in sorted(overrides, key=lambda k: k.count(".")):
        parts = key.split(".")
        if not all(parts):
            problems.append((key, "not a dotted key (an empty part between dots)"))
            continue
        twice = next(
            (".".join(parts[:i]) for i in range(1, len(parts)) if _holds(overrides.get(".".join(parts[:i])), parts[i:])), None
        )
        if twice is not None:
            problems.append((key, f"given twice: {twice} = {overrides[twice]!r} sets it too; give it once"))
            continue
        node = out
        for i, part in enumerate(parts[:-1]):
            if node.get(part) is None:
                node[part] = {}
            elif not isinstance(node[part], dict):
                problems.append((key, f"{'.'.join(parts[: i + 1])} is {node[part]!r}, a value, not a section with keys"))
                break
            node = node[part]
        else:
            node[parts[-1]] = copy.deepcopy(overrides[key])
    if problems:
        raise ConfigError.listing(source, problems)
    return out


def _holds(section: Any, parts: list[str]) -> bool:
    """Whether the mapping ``section`` (a value given whole) has a value at ``parts``."""
    for part in parts:
        if not isinstance(section, dict) or part not in section:
            return False
        section = section[part]
    return True


def dump_config(cfg: ExperimentConfig) -> str:
    """The fully resolved config as YAML (every default written out)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
