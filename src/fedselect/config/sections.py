"""The sections of an experiment's config: data, model, components (selector, algorithm),
local training, the system (device and network tables, deadlines), faults, metrics and live logs.

Part of the schema (:class:`fedselect.config.schema.ExperimentConfig` holds one of each; the fleet
sections are in :mod:`fedselect.config.fleet`). Every section is strict: unknown keys, NaN/inf,
booleans given as numbers and floats given as counts are errors naming the key. Imports no other
part of fedselect but the fleet sections.
"""

from __future__ import annotations

import re
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fedselect.config.fleet import CapacityConfig, DeadlineConfig


def _accepts_bool(annotation: Any) -> bool:
    if annotation is bool or annotation is Any:
        return True
    return any(_accepts_bool(a) for a in typing.get_args(annotation))


class StrictSection(BaseModel):
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


class DataConfig(StrictSection):
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


class ModelConfig(StrictSection):
    name: str = Field("mnist_cnn", description="registered model name")
    options: dict[str, Any] = Field(default_factory=dict, description="the model's options (checked by its own schema)")


class ComponentConfig(StrictSection):
    """A pluggable component: a registered ``name`` (or ``"package.module:ClassName"``) and its
    ``options`` (checked by the component's own pydantic model). Without a ``name`` the section
    gives options to the component the ``method`` preset names (``method: fedprox`` with
    ``algorithm: {options: {mu: 0.5}}``; no method: ``random`` / ``fedavg``)."""

    name: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class TrainSection(StrictSection):
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


class ProfileRow(StrictSection):
    name: str
    mean_mhz: float | None = Field(None, gt=0)
    std_mhz: float | None = Field(None, ge=0)
    cores: int | None = Field(None, ge=1)
    mean_mbps: float | None = Field(None, gt=0)
    std_mbps: float | None = Field(None, ge=0)


class SystemConfig(StrictSection):
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


class FaultInjection(StrictSection):
    """An explicit failure (docs/reliability.md): ``kind`` for ``clients`` in ``rounds``
    (a number, a list, or "all"; an injection only hits clients that are selected)."""

    kind: Literal["drop", "raise", "nan", "inf", "timeout"]
    rounds: int | list[int] | Literal["all"] = "all"
    clients: int | list[int] | Literal["all"] = "all"

    def round_set(self) -> list[int] | None:
        return None if self.rounds == "all" else ([self.rounds] if isinstance(self.rounds, int) else list(self.rounds))

    def client_set(self) -> list[int] | None:
        return None if self.clients == "all" else ([self.clients] if isinstance(self.clients, int) else list(self.clients))


class FaultsConfig(StrictSection):
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


class MetricsConfig(StrictSection):
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


class LogConfig(StrictSection):
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
