"""The fleet sections of the experiment schema: availability, capacities, deadlines, stragglers.

Part of :mod:`fedselect.config.schema` (which re-exports these models); like it, this module imports
no other part of fedselect. Semantics: docs/fleets.md; the models that read these settings:
:mod:`fedselect.fl.availability` and :mod:`fedselect.world.system`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: keys of ``availability`` that each model reads (every other key set explicitly is an error)
AVAILABILITY_KEYS: dict[str, tuple[str, ...]] = {
    "always": (),
    "bernoulli": ("p_online",),
    "markov": ("mean_on_s", "mean_off_s", "spread"),
    "diurnal": ("day_s", "p_peak", "p_trough", "peak_hour"),
    "trace": ("trace_file",),
}

#: keys of ``system.capacity`` that each model reads
CAPACITY_KEYS: dict[str, tuple[str, ...]] = {
    "profiles": (),
    "file": ("file",),
    "lognormal": ("compute_mhz", "compute_sigma", "bandwidth_mbps", "bandwidth_sigma", "jitter"),
    "pareto": ("compute_mhz", "compute_shape", "bandwidth_mbps", "bandwidth_shape", "jitter"),
}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False, strict=True)
    _keys: ClassVar[dict[str, tuple[str, ...]]] = {}
    _label: ClassVar[str] = ""

    @model_validator(mode="after")
    def _only_the_models_keys(self) -> Any:
        allowed = set(self._keys[self.model])
        # a key of another model is an error unless it holds the default (a resolved config writes every key)
        stray = sorted(
            k
            for k in self.model_fields_set
            if k != "model" and k not in allowed and getattr(self, k) != type(self).model_fields[k].default
        )
        if stray:
            users = {k: [m for m, ks in self._keys.items() if k in ks] for k in stray}
            raise ValueError(
                f"{self._label}: {', '.join(f'{k} applies only to model {users[k]}' for k in stray)}; "
                f"model {self.model!r} reads {sorted(allowed) or 'no other key'}"
            )
        return self


class AvailabilityConfig(_Section):
    """Which clients are online, on the simulated clock (docs/fleets.md). The selector sees only
    the clients online when a round starts; a participant whose online interval ends before its
    work is done fails as ``dropout`` at that moment."""

    _keys: ClassVar[dict[str, tuple[str, ...]]] = AVAILABILITY_KEYS
    _label: ClassVar[str] = "availability"
    model: Literal["always", "bernoulli", "markov", "diurnal", "trace"] = Field(
        "always", description="always (every client online: the default), bernoulli, markov, diurnal or trace"
    )
    p_online: float = Field(0.5, gt=0, le=1, description="bernoulli: probability that a client is online in a round")
    mean_on_s: float = Field(3600.0, gt=0, description="markov: mean length of an online period (simulated seconds)")
    mean_off_s: float = Field(3600.0, gt=0, description="markov: mean length of an offline period (simulated seconds)")
    spread: float = Field(
        0.0, ge=0, le=3, description="markov: sigma of a lognormal factor drawn per client for its two means (0: shared)"
    )
    day_s: float = Field(86400.0, gt=0, description="diurnal: length of a day in simulated seconds (24 hour slots)")
    p_peak: float = Field(0.9, ge=0, le=1, description="diurnal: online probability at the local peak hour")
    p_trough: float = Field(0.1, ge=0, le=1, description="diurnal: online probability 12 hours from the peak")
    peak_hour: float = Field(20.0, ge=0, lt=24, description="diurnal: local hour of the peak (0-24)")
    trace_file: str | None = Field(
        None,
        description="trace: CSV with columns client,start_s,end_s[,period_s], one row per online interval (period_s: they repeat)",
    )

    @model_validator(mode="after")
    def _trace_needs_file(self) -> "AvailabilityConfig":
        if self.model == "trace" and not self.trace_file:
            raise ValueError("availability.trace_file: model 'trace' needs a CSV file (columns client,start_s,end_s)")
        return self


class CapacityConfig(_Section):
    """Each client's fixed compute and network capacity (docs/fleets.md): ``profiles`` (the
    device/network tables, FLASH-RL Tables II and III: the default), ``file`` (a CSV
    ``client,compute_speed,bandwidth_kbps``), or heavy-tailed draws (``lognormal``, ``pareto``)."""

    _keys: ClassVar[dict[str, tuple[str, ...]]] = CAPACITY_KEYS
    _label: ClassVar[str] = "system.capacity"
    model: Literal["profiles", "file", "lognormal", "pareto"] = Field(
        "profiles", description="profiles (device/network tables), file, lognormal or pareto"
    )
    file: str | None = Field(
        None, description="file: CSV client,compute_speed,bandwidth_kbps (compute_speed in training samples per second)"
    )
    compute_mhz: float = Field(
        1000.0, gt=0, description="lognormal: median, pareto: minimum of the per-client CPU frequency (MHz, one core)"
    )
    compute_sigma: float = Field(1.0, gt=0, le=5, description="lognormal: sigma of log(frequency)")
    compute_shape: float = Field(1.5, gt=0, description="pareto: shape (tail index) of the frequency")
    bandwidth_mbps: float = Field(10.0, gt=0, description="lognormal: median, pareto: minimum of the per-client bandwidth (Mb/s)")
    bandwidth_sigma: float = Field(1.0, gt=0, le=5, description="lognormal: sigma of log(bandwidth)")
    bandwidth_shape: float = Field(1.5, gt=0, description="pareto: shape (tail index) of the bandwidth")
    jitter: float = Field(
        0.0, ge=0, lt=1, description="per-round std of a client's frequency and bandwidth, as a share of its own value"
    )

    @model_validator(mode="after")
    def _file_needs_path(self) -> "CapacityConfig":
        if self.model == "file" and not self.file:
            raise ValueError("system.capacity.file: model 'file' needs a CSV file (columns client,compute_speed,bandwidth_kbps)")
        return self


class DeadlineConfig(BaseModel):
    """An adaptive round deadline: the ``percentile`` of the participants' latencies in the last
    ``window`` rounds, those cut off censored at their cut (the Kaplan-Meier estimate;
    docs/fleets.md), until the first observation ``system.round_deadline_s`` or no deadline."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False, strict=True)
    percentile: float = Field(
        ..., gt=0, le=100, description="percentile (0-100] of recent participants' latencies, the cut-off ones censored"
    )
    window: int = Field(5, ge=1, description="rounds of history")


#: keys of ``async.staleness`` that each staleness function reads
STALENESS_KEYS: dict[str, tuple[str, ...]] = {"constant": (), "polynomial": ("a",), "hinge": ("a", "b")}


class StalenessConfig(BaseModel):
    """How much an update of staleness s (server versions since its client downloaded the
    model) counts in asynchronous buffered aggregation (docs/async.md): ``constant`` 1,
    ``polynomial`` (1 + s)^-a, ``hinge`` 1 if s <= b else 1 / (a (s - b) + 1) (Xie et al.,
    FedAsync)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False, strict=True)
    function: Literal["constant", "polynomial", "hinge"] = Field(
        "polynomial", description="constant (1), polynomial ((1 + s)^-a, FedBuff's with a = 0.5) or hinge"
    )
    a: float = Field(0.5, ge=0, le=100, description="polynomial: exponent a; hinge: slope a past b")
    b: float = Field(4.0, ge=0, description="hinge: staleness b up to which an update counts fully")

    @model_validator(mode="after")
    def _only_the_functions_keys(self) -> "StalenessConfig":
        allowed = STALENESS_KEYS[self.function]
        stray = sorted(
            k
            for k in self.model_fields_set
            if k != "function" and k not in allowed and getattr(self, k) != type(self).model_fields[k].default
        )
        if stray:
            users = {k: [f for f, ks in STALENESS_KEYS.items() if k in ks] for k in stray}
            raise ValueError(
                f"async.staleness: {', '.join(f'{k} applies only to function {users[k]}' for k in stray)}; "
                f"function {self.function!r} reads {list(allowed) or 'no other key'}"
            )
        return self


#: keys of ``async`` that only some rules read (every other key applies to every rule)
RULE_KEYS: dict[str, tuple[str, ...]] = {
    "fedbuff": ("server_lr", "weighting"),
    "normalised": ("server_lr", "weighting"),
    "fedasync": ("mixing",),
}


class AsyncConfig(BaseModel):
    """Asynchronous buffered aggregation (``mode: async``; FedBuff, Nguyen et al. 2022;
    docs/async.md): ``concurrency`` clients train at once on the fleet clock, the server
    aggregates every ``buffer_size`` arrivals; ``rounds`` counts aggregations (server versions).

    ``rule`` is the server step (S the staleness function, Delta_i = y_i - x^{v_i} the update
    of client i, m the updates aggregated): ``fedbuff`` (FedBuff Algorithm 1) x + eta_g
    sum_i c_i S(s_i) Delta_i with c_i = 1 / m (``weighting: uniform``, the paper's) or n_i /
    sum n (``samples``); ``fedasync`` (Xie et al. 2019, Algorithm 1; needs ``buffer_size: 1``)
    x + alpha S(s) (y - x), alpha = ``mixing``; ``normalised`` x + eta_g sum_i c_i S(s_i)
    Delta_i / sum_i c_i S(s_i) (the normalisation of FedScale's async aggregator, under which a
    buffer of one update is applied in full whatever its staleness)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False, strict=True)
    rule: Literal["fedbuff", "fedasync", "normalised"] = Field(
        "fedbuff",
        description="server step: fedbuff (x + eta_g sum_i c_i S(s_i) Delta_i, FedBuff Alg. 1), fedasync "
        "(x + mixing S(s) (y - x), FedAsync; buffer_size 1) or normalised (the weights divided by their sum, FedScale's)",
    )
    weighting: Literal["uniform", "samples"] = Field(
        "uniform",
        description="fedbuff / normalised: c_i = 1 / m (uniform, FedBuff's mean of the buffer) or n_i / sum n (samples)",
    )
    mixing: float = Field(0.9, gt=0, le=1, description="fedasync: alpha, the mixing weight of a fresh update")
    concurrency: int | None = Field(
        None, ge=1, description="clients training at once (default: clients_per_round); at most data.num_clients"
    )
    buffer_size: int | None = Field(
        None,
        ge=1,
        description="K: the server aggregates every K arrivals (default: concurrency // 2, at least 1; 1 with rule fedasync)",
    )
    server_lr: float = Field(1.0, gt=0, le=100, description="fedbuff / normalised: eta_g, the server step on the buffer's deltas")
    staleness: StalenessConfig = Field(
        default_factory=StalenessConfig, description="weight of an update of staleness s: {function, a, b}"
    )

    @model_validator(mode="after")
    def _rule_keys(self) -> "AsyncConfig":
        used = {k for ks in RULE_KEYS.values() for k in ks}
        stray = sorted(
            k
            for k in self.model_fields_set
            if k in used and k not in RULE_KEYS[self.rule] and getattr(self, k) != type(self).model_fields[k].default
        )
        if stray:
            users = {k: [r for r, ks in RULE_KEYS.items() if k in ks] for k in stray}
            raise ValueError(
                f"async: {', '.join(f'{k} applies only to rule {users[k]}' for k in stray)}; "
                f"rule {self.rule!r} reads {list(RULE_KEYS[self.rule])}"
            )
        if self.rule == "fedasync":
            if self.buffer_size is None:
                object.__setattr__(self, "buffer_size", 1)  # FedAsync mixes every update as it arrives
            elif self.buffer_size != 1:
                raise ValueError(
                    f"async.buffer_size ({self.buffer_size}): rule 'fedasync' mixes each update into the model as it "
                    f"arrives (buffer_size 1); use rule 'fedbuff' to aggregate a buffer"
                )
        return self
