"""Experiment configuration: the schema (pydantic) of one experiment and its validation, nothing else.

Unknown keys and bad values are errors that name the key and what is allowed. Every section
has defaults, so a config only states how it differs from the embedded default experiment
(FedAvg on embedded MNIST, 20 clients, Dirichlet 0.5). The sections are in
:mod:`fedselect.config.sections` and :mod:`fedselect.config.fleet`; reading YAML files is
:mod:`fedselect.config.load`'s job, dotted overrides :mod:`fedselect.config.overrides`'.

This module imports no other part of fedselect but its sections: names that refer to registries
(data sets, partition schemes, models, selectors, algorithms, methods) and each component's options
are checked by one resolve step, :func:`fedselect.experiment.resolve.resolve`, before any data is loaded.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from fedselect.config.fleet import AsyncConfig, AvailabilityConfig, CapacityConfig, DeadlineConfig, StalenessConfig  # noqa: F401
from fedselect.config.sections import (
    ComponentConfig,
    DataConfig,
    FaultsConfig,
    LogConfig,
    MetricsConfig,
    ModelConfig,
    StrictSection,
    SystemConfig,
    TrainSection,
)

#: validation context key: skip the checks across keys (what ``fedselect.experiment.resolve`` asks for when
#: it looks, past the keys in error, for the other problems of a config)
NAMES_ONLY = "names_only"
#: the start of every message about a key no schema or options model allows
UNKNOWN_KEY = "unknown key (not allowed here)"


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


class ExperimentConfig(StrictSection):
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
            msg = UNKNOWN_KEY
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
