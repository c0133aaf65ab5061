"""System heterogeneity: device and network profiles, per-round draws, latency and bytes.

Knows nothing of learning. Source: FLASH-RL Eq. 4 (compute), Eq. 5 (transmission) and Tables
II, III; the authors' code as a second latency model (:data:`LATENCY_MODELS`). A client's
latency (Eq. 3) and a round's are composed from these in one place, the cost model
(:mod:`fedselect.fl.cost`). The standard deviations, the floor of the draws and the latency
bounds are fedselect's (docs/core.md, "System model").

Units: CPU frequency in MHz, bandwidth in Mb/s (1e6 bits per second), time in seconds,
sizes in bits or bytes as named, MB = 1e6 bytes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from fedselect.common.seeding import np_rng

BITS_PER_FLOAT = 32
BYTES_PER_FLOAT = 4


@dataclass(frozen=True)
class DeviceProfile:
    """A device class: CPU frequency ~ N(mean_mhz, std_mhz) per round, ``cores`` cores."""

    name: str
    mean_mhz: float
    std_mhz: float
    cores: int

    def __post_init__(self) -> None:
        if not self.mean_mhz > 0 or self.std_mhz < 0 or self.cores < 1:
            raise ValueError(f"device profile {self.name!r}: need mean_mhz > 0, std_mhz >= 0, cores >= 1, got {asdict(self)}")


@dataclass(frozen=True)
class NetworkProfile:
    """A network class: bandwidth ~ N(mean_mbps, std_mbps) per round."""

    name: str
    mean_mbps: float
    std_mbps: float

    def __post_init__(self) -> None:
        if not self.mean_mbps > 0 or self.std_mbps < 0:
            raise ValueError(f"network profile {self.name!r}: need mean_mbps > 0, std_mbps >= 0, got {asdict(self)}")


#: FLASH-RL Table II (means and cores; the std is fedselect's): name, mean MHz, std MHz, cores.
DEFAULT_DEVICES: tuple[DeviceProfile, ...] = tuple(
    DeviceProfile(*row)
    for row in [
        ("jetson-nano", 921, 20, 128),
        ("jetson-tx2", 1300, 20, 256),
        ("xavier-nx-10w", 800, 20, 384),
        ("xavier-nx-15w", 1100, 20, 384),
        ("jetson-agx-xavier", 1377, 20, 384),
        ("raspberry-pi-3", 350, 20, 4),
        ("fpga-zcu102", 1500, 20, 4),
        ("tpu-v1", 700, 20, 1),
        ("intel-i3", 3950, 10, 2),
        ("intel-i5", 4300, 50, 4),
        ("intel-i7", 4400, 80, 4),
        ("intel-i9", 4400, 100, 8),
    ]
)
#: FLASH-RL Table III (means; the std is fedselect's): name, mean Mb/s, std Mb/s.
DEFAULT_NETWORKS: tuple[NetworkProfile, ...] = tuple(
    NetworkProfile(*row) for row in [("wifi-1", 6, 1), ("wifi-3", 33, 5), ("fast-ethernet", 100, 10), ("wifi-4", 336, 50)]
)


_PROFILE_FIELDS = {"device": ("name", "mean_mhz", "std_mhz", "cores"), "network": ("name", "mean_mbps", "std_mbps")}


def load_profiles(path: str | Path) -> tuple[list[DeviceProfile], list[NetworkProfile]]:
    """Read profile tables from YAML (keys ``devices`` / ``networks``, lists of mappings with
    the dataclass fields) or CSV (a ``kind`` column ``device``/``network`` plus the fields;
    a device row fills ``name, mean_mhz, std_mhz, cores``, a network row ``name, mean_mbps,
    std_mbps``, other cells empty).

    Every row is checked: all its fields present, ``name`` a non-empty text, numbers finite
    (``cores`` an integer), the ranges of :class:`DeviceProfile` / :class:`NetworkProfile`.
    There is no ``drop_invalid`` here: a fleet is never silently changed.

    Raises:
        FileNotFoundError: no such file.
        ValueError: unknown suffix.
        fedselect.world.data.file_errors.DataFileError (a ValueError): invalid YAML, not UTF-8, or a bad row;
            the message names the file, the line and the key or column.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"profile file not found: {p}")
    if p.suffix in (".yaml", ".yml"):
        rows = _yaml_profile_rows(p)
    elif p.suffix == ".csv":
        rows = _csv_profile_rows(p)
    else:
        raise ValueError(f"{p}: profile files must be .yaml, .yml or .csv")
    devices: list[DeviceProfile] = []
    networks: list[NetworkProfile] = []
    for kind, line, row, where in rows:
        devices_or_networks = devices if kind == "device" else networks
        devices_or_networks.append(_profile(p, kind, line, row, where))
    return devices, networks


def _profile(p: Path, kind: str, line: int, row: dict, where) -> DeviceProfile | NetworkProfile:
    """Check one row (``where(key)`` -> (line, description) of a field) and build it."""
    import math

    from fedselect.world.data.file_errors import DataFileError

    fields = _PROFILE_FIELDS[kind]
    unknown = [k for k in row if k not in fields]
    if unknown:
        ln, desc = where(unknown[0])
        raise DataFileError(
            p, f"{unknown[0]!r} does not belong in a {kind} row; a {kind} row has exactly {list(fields)}", ln, desc
        )
    missing = [k for k in fields if row.get(k) is None or (isinstance(row.get(k), str) and not row[k].strip())]
    if missing:
        raise DataFileError(p, f"{kind} row lacks {missing}; a {kind} row has exactly {list(fields)}", line)
    out = {}
    for k in fields:
        v = row[k]
        ln, desc = where(k)
        if k == "name":
            if not isinstance(v, str):
                raise DataFileError(p, f"name must be text, got {v!r}", ln, desc)
            out[k] = v.strip()
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise DataFileError(p, f"not a number: {v!r}", ln, desc)
        if not math.isfinite(v):
            raise DataFileError(p, f"not a finite number: {v!r}", ln, desc)
        if k == "cores":
            if float(v) != int(v):
                raise DataFileError(p, f"not an integer: {v!r}", ln, desc)
            v = int(v)
        out[k] = v
    try:
        return DeviceProfile(**out) if kind == "device" else NetworkProfile(**out)
    except ValueError as e:
        raise DataFileError(p, str(e), line) from None


def _yaml_profile_rows(p: Path) -> list:
    import yaml

    from fedselect.world.data.file_errors import DataFileError, naming_file
    from fedselect.world.data.provenance import note_read

    with naming_file(p, "profile YAML"):
        raw = p.read_bytes()
        note_read(p, raw)
        text = raw.decode("utf-8")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise DataFileError(p, f"invalid YAML: {e}", mark.line + 1 if mark is not None else None) from None
    if not isinstance(doc, dict) or not set(doc) <= {"devices", "networks"}:
        raise DataFileError(
            p,
            "a YAML profile file is a mapping with keys 'devices' and/or 'networks' (lists of rows), "
            f"got {type(doc).__name__}{' with keys ' + str(sorted(doc)) if isinstance(doc, dict) else ''}",
        )
    rows = []
    for key, kind in (("devices", "device"), ("networks", "network")):
        items = doc.get(key) or []
        seq = next((v for k, v in node.value if k.value == key), None)
        if not isinstance(items, list) or not all(isinstance(r, dict) for r in items):
            line = seq.start_mark.line + 1 if seq is not None else None
            raise DataFileError(p, f"'{key}' must be a list of mappings ({', '.join(_PROFILE_FIELDS[kind])})", line)
        for i, (item, row_node) in enumerate(zip(items, seq.value if items else [])):
            line = row_node.start_mark.line + 1
            lines = {k.value: v.start_mark.line + 1 for k, v in row_node.value}

            def where(k, lines=lines, line=line, i=i, key=key):
                return lines.get(k, line), f"key {key}[{i}].{k}"

            rows.append((kind, line, item, where))
    return rows


def _csv_profile_rows(p: Path) -> list:
    from fedselect.world.data.checked_csv import Col, read_csv_checked

    numbers = ("mean_mhz", "std_mhz", "cores", "mean_mbps", "std_mbps")
    cols = (
        Col("kind", "str", choices=("device", "network")),
        Col("name", "str"),
        *(Col(c, "float", required=False, present=False) for c in numbers),
    )
    t = read_csv_checked(p, cols, header=True, what="profile CSV (kind, name, mean_mhz, std_mhz, cores, mean_mbps, std_mbps)")
    rows = []
    for i, line in enumerate(t.lines):
        rec = t.frame.iloc[i]
        kind = rec["kind"]
        fields = _PROFILE_FIELDS[kind]
        row = {
            k: (None if k != "name" and (k not in t.positions or _isnan(rec[k])) else (rec[k] if k == "name" else float(rec[k])))
            for k in fields
        }
        for other in numbers:
            if other not in fields and other in t.positions and not _isnan(rec[other]):
                row[other] = float(rec[other])

        def where(k, line=int(line)):
            return line, t.describe(k)

        rows.append((kind, int(line), row, where))
    return rows


def _isnan(v) -> bool:
    try:
        return v != v
    except TypeError:
        return False


def _counts(weights: Sequence[float], n: int) -> np.ndarray:
    """Largest-remainder integer counts summing to n, proportional to weights."""
    w = np.asarray(weights, dtype=float)
    raw = w / w.sum() * n
    counts = np.floor(raw).astype(int)
    for i in np.argsort(-(raw - counts), kind="stable")[: n - counts.sum()]:
        counts[i] += 1
    return counts


def assign_profiles(items: Sequence, num_clients: int, rng: np.random.Generator, mix: dict[str, float] | None = None) -> list:
    """Assign one profile per client: round-robin over ``items`` (or counts proportional to
    ``mix`` weights by profile name), then a seeded shuffle over clients (the paper does not say how profiles are assigned).

    Raises:
        ValueError: empty table, or a ``mix`` naming an unknown profile / non-positive total.
    """
    if not items:
        raise ValueError("profile table is empty")
    if mix:
        names = [it.name for it in items]
        unknown = sorted(set(mix) - set(names))
        if unknown:
            raise ValueError(f"profile mix names unknown profiles {unknown}; known: {names}")
        if any(v < 0 for v in mix.values()) or sum(mix.values()) <= 0:
            raise ValueError(f"profile mix weights must be >= 0 with a positive sum, got {mix}")
        chosen = [it for it in items if mix.get(it.name, 0) > 0]
        counts = _counts([mix[it.name] for it in chosen], num_clients)
        pool = [it for it, c in zip(chosen, counts) for _ in range(c)]
    else:
        pool = [items[i % len(items)] for i in range(num_clients)]
    return [pool[i] for i in rng.permutation(num_clients)]


@dataclass(frozen=True)
class RoundDraws:
    """Per-client CPU frequency (MHz) and bandwidth (Mb/s) of one round; arrays of shape (N,)."""

    round: int
    freq_mhz: np.ndarray
    bandwidth_mbps: np.ndarray


def truncated_normal(rng: np.random.Generator, mean: np.ndarray, std: np.ndarray, floor_frac: float = 0.05) -> np.ndarray:
    """N(mean, std) draws, floored at ``floor_frac * mean`` (never <= 0)."""
    return np.maximum(rng.normal(mean, std), floor_frac * mean)


class Fleet:
    """The clients' fixed device/network profiles and their per-round draws.

    ``draw(t)`` depends only on ``(seed, t)``: every method compared on one federation sees the
    same f_{t,k} and b_{t,k}, and a resumed run sees the same draws as an uninterrupted one.
    """

    def __init__(self, devices: Sequence[DeviceProfile], networks: Sequence[NetworkProfile], seed: int, floor_frac: float = 0.05):
        if len(devices) != len(networks):
            raise ValueError(f"{len(devices)} device profiles but {len(networks)} network profiles")
        self.devices, self.networks = list(devices), list(networks)
        self.seed, self.floor_frac = int(seed), float(floor_frac)
        self.mean_mhz = np.array([d.mean_mhz for d in devices], dtype=float)
        self.std_mhz = np.array([d.std_mhz for d in devices], dtype=float)
        self.cores = np.array([d.cores for d in devices], dtype=float)
        self.mean_mbps = np.array([n.mean_mbps for n in networks], dtype=float)
        self.std_mbps = np.array([n.std_mbps for n in networks], dtype=float)

    @classmethod
    def create(
        cls,
        num_clients: int,
        seed: int,
        devices: Sequence[DeviceProfile] = DEFAULT_DEVICES,
        networks: Sequence[NetworkProfile] = DEFAULT_NETWORKS,
        device_mix: dict[str, float] | None = None,
        network_mix: dict[str, float] | None = None,
    ) -> "Fleet":
        """Assign profiles to ``num_clients`` clients with the generator of ("fleet-assign", seed)."""
        rng = np_rng(seed, "fleet-assign")
        return cls(
            assign_profiles(list(devices), num_clients, rng, device_mix),
            assign_profiles(list(networks), num_clients, rng, network_mix),
            seed,
        )

    def __len__(self) -> int:
        return len(self.devices)

    def draw(self, t: int) -> RoundDraws:
        """Frequencies and bandwidths of round ``t`` for all clients (seeded by round)."""
        rng = np_rng(self.seed, f"fleet-draw/{int(t)}")
        f = truncated_normal(rng, self.mean_mhz, self.std_mhz, self.floor_frac)
        b = truncated_normal(rng, self.mean_mbps, self.std_mbps, self.floor_frac)
        return RoundDraws(int(t), f, b)

    def describe(self, k: int) -> dict[str, str]:
        return {"device": self.devices[k].name, "network": self.networks[k].name}


def data_bits(num_samples: int, features_per_sample: int, bits_per_value: int = BITS_PER_FLOAT) -> float:
    """|D_k| in bits: samples x features x 32 for float32 inputs (FLASH-RL Section III-A1)."""
    return float(num_samples) * float(features_per_sample) * bits_per_value


def compute_time(epochs: float, bits: float, cycles_per_bit: float, cores: float, freq_mhz: float) -> float:
    """Local computation time in seconds, T_local = E * |D_k|_bits * g / (c_k * f_{t,k} * 1e6)
    (FR-eq 4, charged per local epoch). ``freq_mhz`` in MHz."""
    return epochs * bits * cycles_per_bit / (cores * freq_mhz * 1e6)


def transmit_time(model_bits: float, bandwidth_mbps: float) -> float:
    """Transmission time in seconds, T_tx = model_bits / (b_{t,k} * 1e6) (FR-eq 5). Mb/s input."""
    return model_bits / (bandwidth_mbps * 1e6)


#: bits of one training sample in the FLASH-RL authors' code (``serverFL/Server_FLASHRL.py``,
#: ``Server_FAVOR.py``, ``Server_FedProx.py``: ``get_size() * 64 * 40 * 20``): a MobiAct window of
#: 40 x 20 values of 64 bits, used for every data set (MNIST and CIFAR-10 too)
FLASHRL_CODE_SAMPLE_BITS = 64 * 40 * 20


@dataclass(frozen=True)
class LatencyModel:
    """How FR-eq 3-5 turn a client's data, device and network into seconds
    (``system.latency_model``; docs/flash-rl.md, "Latency models").

    Attributes:
        name: ``paper`` or ``flashrl-code`` (:data:`LATENCY_MODELS`).
        sample_bits: bits of one training sample in |D_k| of FR-eq 4; None: the data set's
            features x 32 (float32 inputs, :func:`data_bits`).
        per_epoch: FR-eq 4 is charged once per local epoch (E |D_k| g / (c f)); False: once per
            round whatever E.
        cycles_per_bit: g of FR-eq 4; None: ``system.cycles_per_bit``.
        bits_per_value: bits of one model value in sigma(m_k) of FR-eq 5. Payloads are counted in
            bytes of float32 values: 32 charges them as they are, 64 as float64 values (twice
            the bytes' time; the bytes reported stay the float32 ones).
    """

    name: str
    sample_bits: float | None = None
    per_epoch: bool = True
    cycles_per_bit: float | None = None
    bits_per_value: int = BITS_PER_FLOAT

    def data_bits(self, num_samples: int, features_per_sample: int) -> float:
        """|D_k| in bits for ``num_samples`` samples of ``features_per_sample`` values."""
        if self.sample_bits is None:
            return data_bits(num_samples, features_per_sample)
        return float(num_samples) * float(self.sample_bits)

    def charged_epochs(self, epochs: float) -> float:
        """The epochs FR-eq 4 is charged for: ``epochs``, or 1 for a model charged per round."""
        return epochs if self.per_epoch else 1

    def g(self, cycles_per_bit: float) -> float:
        """g of FR-eq 4: the model's own, else ``cycles_per_bit`` (``system.cycles_per_bit``)."""
        return cycles_per_bit if self.cycles_per_bit is None else self.cycles_per_bit

    def compute_s(self, epochs: float, bits, cycles_per_bit: float, cores, freq_mhz):
        """FR-eq 4 in seconds for ``bits`` = |D_k| (:meth:`data_bits`); scalars or ``(N,)`` arrays."""
        return compute_time(self.charged_epochs(epochs), bits, self.g(cycles_per_bit), cores, freq_mhz)

    def payload_bits(self, num_bytes: float) -> float:
        """sigma(m_k) of FR-eq 5 in bits for a payload of ``num_bytes`` bytes of float32 values."""
        return num_bytes * 8 * self.bits_per_value / BITS_PER_FLOAT

    def transmit_s(self, num_bytes: float, bandwidth_mbps):
        """FR-eq 5 in seconds: ``num_bytes`` bytes of float32 values at ``bandwidth_mbps`` Mb/s."""
        return transmit_time(self.payload_bits(num_bytes), bandwidth_mbps)


#: ``system.latency_model`` -> its :class:`LatencyModel`. ``paper``: FR-eq 4 as E x |D_k| g / (c f)
#: with |D_k| = samples x features x 32 bits and g = ``system.cycles_per_bit`` (20), FR-eq 5 with
#: the float32 payload. ``flashrl-code``: the authors' code (``serverFL/Server_FLASHRL.py``):
#: n_k x 51,200 bits, g = 1, once per round whatever E; parameters x 64 bits.
LATENCY_MODELS: dict[str, LatencyModel] = {
    "paper": LatencyModel("paper"),
    "flashrl-code": LatencyModel(
        "flashrl-code", sample_bits=FLASHRL_CODE_SAMPLE_BITS, per_epoch=False, cycles_per_bit=1.0, bits_per_value=64
    ),
}


def latency_bounds(
    fleet: Fleet,
    bits_per_client: Sequence[float],
    epochs: float,
    cycles_per_bit: float,
    upload_bits: float,
    download_bits: float = 0.0,
) -> tuple[float, float]:
    """(L_min, L_max) for the min-max normalisation of FR-eq 10 (the paper does not say how the
    bounds are set; fedselect's choice): the fastest client at mean + 3 std
    frequency and bandwidth, the slowest at mean - 3 std (floored at 5% of the mean)."""
    bits = np.asarray(bits_per_client, dtype=float)
    f_hi, b_hi = fleet.mean_mhz + 3 * fleet.std_mhz, fleet.mean_mbps + 3 * fleet.std_mbps
    f_lo = np.maximum(fleet.mean_mhz - 3 * fleet.std_mhz, fleet.floor_frac * fleet.mean_mhz)
    b_lo = np.maximum(fleet.mean_mbps - 3 * fleet.std_mbps, fleet.floor_frac * fleet.mean_mbps)
    tx = upload_bits + download_bits
    fast = epochs * bits * cycles_per_bit / (fleet.cores * f_hi * 1e6) + tx / (b_hi * 1e6)
    slow = epochs * bits * cycles_per_bit / (fleet.cores * f_lo * 1e6) + tx / (b_lo * 1e6)
    return float(fast.min()), float(slow.max())


def to_mb(num_bytes: float) -> float:
    """Bytes to MB (10^6 bytes)."""
    return float(num_bytes) / 1e6
