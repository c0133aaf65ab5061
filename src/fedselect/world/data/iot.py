"""IoT device classification from network flow records (budgeted online selection).

The budgeted-online paper classifies IoT devices from 10 features per device per time window,
computed from flow records (its Phase 2, Table IV, after Sivanathan et al.), min-max scaled
(Phase 3), split 80/20 (Phase 4). The UNSW traces it uses cannot be obtained here, so:

* :func:`flow_features` computes the 10 features from any flow-record table;
* ``iot-flows`` loads flow-record CSV files from a user path, ``iot-features`` loads an
  already-computed feature CSV (10 feature columns then the label, the paper's Phase 2 output);
* ``iot-synthetic`` (the embedded default) uses :func:`synthetic_iot_flows`, a generator of
  **synthetic** flows with per-device-type behaviour. It is not real traffic.

Flow-record table (one row per flow), columns:

==============  ===========================================================================
``device``      device name or id (the class label)
``start``       flow start, seconds (numbers, or date-times which are converted to seconds)
``end``         flow end, seconds (>= start)
``bytes_in``    bytes received by the device (int >= 0)
``bytes_out``   bytes sent by the device (int >= 0)
``packets``     packets in both directions (int >= 0)
``dst_ip``      remote address
``dst_port``    remote port (53 = DNS, 123 = NTP)
``protocol``    IP protocol number (6 TCP, 17 UDP); kept for provenance, not a feature
``dns_query``   queried name for DNS flows, empty otherwise (column optional)
==============  ===========================================================================

The 10 features per (device, window), in this order (:data:`FEATURES`):

1. ``sleep_time`` -- window length minus active time (s).
2. ``active_time`` -- length of the union of the window's flow intervals (s); a flow belongs
   to the window containing its start and is clipped at the window's end.
3. ``volume`` -- total bytes in + out.
4. ``flow_rate`` -- volume / active time (bytes/s); 0 when active time is 0.
5. ``avg_packet_size`` -- volume / packets (bytes); 0 when there are no packets.
6. ``num_servers`` -- distinct remote addresses, excluding flows to port 53 (DNS) or 123 (NTP).
7. ``num_protocols`` -- distinct remote ports (all flows).
8. ``num_dns_queries`` -- distinct non-empty DNS query names.
9. ``dns_interval`` -- mean gap between consecutive DNS flow starts (port 53) in the window (s);
   the window length when the window has fewer than two DNS flows (censored).
10. ``ntp_interval`` -- the same for NTP flows (port 123).

Windows are ``floor((start - origin) / window)`` with ``origin`` the earliest start in the table;
only windows with at least one flow give a row (a *record*).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # imported where used: pandas is slow to import
    import pandas as pd

from fedselect.world.data.datasets import ArrayDataset, DatasetNotFoundError, register_dataset
from fedselect.world.data.files import Col, flag_option, read_csv_checked

__all__ = [
    "FEATURES",
    "FLOW_COLUMNS",
    "SYNTHETIC_DEVICE_TYPES",
    "EXTRA_DEVICE_TYPES",
    "MAX_DEVICE_TYPES",
    "DeviceType",
    "feature_table_to_datasets",
    "flow_features",
    "load_flow_csv",
    "synthetic_iot_flows",
]

FEATURES: tuple[str, ...] = (
    "sleep_time",
    "active_time",
    "volume",
    "flow_rate",
    "avg_packet_size",
    "num_servers",
    "num_protocols",
    "num_dns_queries",
    "dns_interval",
    "ntp_interval",
)
FLOW_COLUMNS: tuple[str, ...] = (
    "device",
    "start",
    "end",
    "bytes_in",
    "bytes_out",
    "packets",
    "dst_ip",
    "dst_port",
    "protocol",
    "dns_query",
)
DNS_PORT, NTP_PORT = 53, 123


def _seconds(col: pd.Series, name: str) -> np.ndarray:
    import pandas as pd

    if pd.api.types.is_numeric_dtype(col):
        return col.to_numpy(dtype=np.float64)
    try:
        t = pd.to_datetime(col, utc=True)
    except (ValueError, TypeError) as e:
        raise ValueError(f"flow column {name!r} must hold seconds or date-times: {e}") from None
    return (t - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy(dtype=np.float64)


def _check_flows(flows: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    required = [c for c in FLOW_COLUMNS if c != "dns_query"]
    missing = [c for c in required if c not in flows.columns]
    if missing:
        raise ValueError(f"flow table lacks columns {missing}; required: {required} (+ optional 'dns_query')")
    df = flows.copy()
    if "dns_query" not in df.columns:
        df["dns_query"] = ""
    df["start"] = _seconds(df["start"], "start")
    df["end"] = _seconds(df["end"], "end")
    for c in ("bytes_in", "bytes_out", "packets", "dst_port"):
        df[c] = pd.to_numeric(df[c], errors="raise")
    bad = ~np.isfinite(df["start"]) | ~np.isfinite(df["end"]) | (df["end"] < df["start"])
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ValueError(f"flow row {i}: need finite start <= end, got start={df['start'].iloc[i]}, end={df['end'].iloc[i]}")
    for c in ("bytes_in", "bytes_out", "packets"):
        if (df[c] < 0).any():
            raise ValueError(f"flow column {c!r} must be >= 0 (found {df[c].min()})")
    df["dns_query"] = df["dns_query"].fillna("").astype(str)
    df["dst_ip"] = df["dst_ip"].astype(str)
    return df


def flow_features(flows: pd.DataFrame, window: float = 3600.0, origin: float | None = None) -> pd.DataFrame:
    """The 10 flow features of the budgeted-online paper's Table IV per device per time window (see the module docstring).

    Args:
        flows: flow-record table with the columns of :data:`FLOW_COLUMNS` (``dns_query``
            optional), one row per flow.
        window: window length in seconds (> 0).
        origin: time (s) where window 0 starts; default the earliest flow start.

    Returns:
        DataFrame with columns ``device``, ``window`` (int index) and the :data:`FEATURES`
        (float64), one row per (device, window) holding at least one flow, sorted by device
        then window. Times in seconds, volumes in bytes.

    Raises:
        ValueError: missing columns, non-positive window, start > end, negative counts.
    """
    import pandas as pd

    if not window > 0:
        raise ValueError(f"window must be > 0 seconds, got {window}")
    df = _check_flows(flows)
    if df.empty:
        return pd.DataFrame(columns=["device", "window", *FEATURES])
    t0 = float(df["start"].min()) if origin is None else float(origin)
    df["window"] = np.floor((df["start"] - t0) / window).astype(np.int64)
    w_end = t0 + (df["window"] + 1) * window
    df["end_c"] = np.minimum(df["end"], w_end)
    df = df.sort_values(["device", "window", "start"], kind="stable").reset_index(drop=True)
    keys = [df["device"], df["window"]]
    # union length of [start, end_c] sorted by start: sum of max(0, end_i - max(start_i, M_{i-1}))
    # where M_{i-1} is the largest end among the earlier flows of the same window
    prev_max = df.groupby(keys)["end_c"].cummax().groupby(keys).shift(1)
    lo = np.maximum(df["start"], prev_max.fillna(-np.inf))
    df["covered"] = np.maximum(0.0, df["end_c"] - lo)
    df["volume"] = df["bytes_in"].astype(np.float64) + df["bytes_out"].astype(np.float64)
    df["server"] = df["dst_ip"].where(~df["dst_port"].isin([DNS_PORT, NTP_PORT]))
    df["query"] = df["dns_query"].where(df["dns_query"].str.len() > 0)

    g = df.groupby(["device", "window"], sort=True)
    out = pd.DataFrame(
        {
            "active_time": g["covered"].sum(),
            "volume": g["volume"].sum(),
            "packets": g["packets"].sum().astype(np.float64),
            "num_servers": g["server"].nunique(),
            "num_protocols": g["dst_port"].nunique(),
            "num_dns_queries": g["query"].nunique(),
        }
    )
    out["sleep_time"] = window - out["active_time"]
    out["flow_rate"] = np.where(
        out["active_time"] > 0, out["volume"] / out["active_time"].where(out["active_time"] > 0, 1.0), 0.0
    )
    out["avg_packet_size"] = np.where(out["packets"] > 0, out["volume"] / out["packets"].where(out["packets"] > 0, 1.0), 0.0)
    for port, name in ((DNS_PORT, "dns_interval"), (NTP_PORT, "ntp_interval")):
        sub = df[df["dst_port"] == port].groupby(["device", "window"])["start"]
        k = sub.count()
        mean_gap = ((sub.max() - sub.min()) / (k - 1)).where(k >= 2)
        out[name] = mean_gap.reindex(out.index).fillna(float(window))
    out = out.reset_index()
    for c in FEATURES:
        out[c] = out[c].astype(np.float64)
    return out[["device", "window", *FEATURES]]


def feature_table_to_datasets(
    table: pd.DataFrame,
    seed: int,
    min_records: int = 100,
    test_fraction: float = 0.2,
    name: str = "iot",
    label_column: str = "device",
    info: dict[str, Any] | None = None,
) -> tuple[ArrayDataset, ArrayDataset]:
    """Feature table -> (train, test) data sets (the paper's Phases 3-4).

    Devices with fewer than ``min_records`` rows are dropped; labels are the remaining devices
    in sorted order; the 10 :data:`FEATURES` are min-max scaled to [0, 1] with scikit-learn's
    ``MinMaxScaler`` fitted on all rows, before the split, as the paper does (Phase 3 then 4);
    a constant feature scales to 0. The split is stratified by label, ``test_fraction`` to the
    test set (the server's), seeded by ``seed``.

    Args:
        table: DataFrame with the :data:`FEATURES` columns and ``label_column``.
        seed: split seed.
        min_records: minimum rows for a device to be kept (paper: 100).
        test_fraction: in (0, 1) (paper: 0.2).

    Returns:
        ``(train, test)`` with ``x`` float32 ``(n, 10)``, ``y`` int64, ``class_names`` = devices.

    Raises:
        ValueError: missing columns, bad fraction, or fewer than two devices left after
            dropping (message gives the record counts).
    """
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import MinMaxScaler

    missing = [c for c in (*FEATURES, label_column) if c not in table.columns]
    if missing:
        raise ValueError(f"feature table lacks columns {missing}")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    counts = table[label_column].astype(str).value_counts()
    keep = sorted(counts[counts >= min_records].index)
    if len(keep) < 2:
        raise ValueError(
            f"{name}: fewer than 2 devices have >= {min_records} records (min_records); "
            f"records per device: {counts.sort_index().to_dict()}"
        )
    t = table[table[label_column].astype(str).isin(keep)]
    labels = t[label_column].astype(str).map({d: i for i, d in enumerate(keep)}).to_numpy(np.int64)
    x = MinMaxScaler().fit_transform(t[list(FEATURES)].to_numpy(np.float64)).astype(np.float32)
    idx = np.arange(len(t))
    tr, te = train_test_split(idx, test_size=test_fraction, stratify=labels, random_state=_split_seed(seed, name))
    meta = {
        "source": name,
        "features": list(FEATURES),
        "dropped_devices": sorted(set(counts.index) - set(keep)),
        "scaling": "MinMaxScaler on all rows before the split (paper Phase 3)",
        **(info or {}),
    }
    return (
        ArrayDataset(x[np.sort(tr)], labels[np.sort(tr)], len(keep), name, list(keep), info=dict(meta, split="train")),
        ArrayDataset(x[np.sort(te)], labels[np.sort(te)], len(keep), name, list(keep), info=dict(meta, split="test")),
    )


def _split_seed(seed: int, name: str) -> int:
    ss = np.random.SeedSequence([int(seed), zlib.crc32(name.encode())])
    return int(ss.generate_state(1)[0] % (2**31 - 1))


#: the checks of a flow-record CSV (by header name; extra columns are ignored)
FLOW_CSV_COLUMNS: tuple[Col, ...] = (
    Col("device", "str", is_label=True),
    Col("start", "time"),
    Col("end", "time"),
    Col("bytes_in", "float", lo=0),
    Col("bytes_out", "float", lo=0),
    Col("packets", "float", lo=0),
    Col("dst_ip", "str"),
    Col("dst_port", "int", lo=0, hi=65535),
    Col("protocol", "int", lo=0, hi=255, required=False),
    Col("dns_query", "str", required=False, present=False),
)


def load_flow_csv(path: str | Path, drop_invalid: bool = False) -> pd.DataFrame:
    """Read flow records from a CSV file, or from every ``*.csv`` in a directory (sorted by name).

    Every file needs a header with the columns of :data:`FLOW_COLUMNS` (``dns_query``
    optional, extra columns ignored). Each row is checked (:data:`FLOW_CSV_COLUMNS`): a device
    name, ``start``/``end`` as numbers of seconds or date-times with ``start <= end``, finite
    ``bytes_in``/``bytes_out``/``packets`` >= 0, a ``dst_ip``, an integer ``dst_port`` in
    0..65535 and ``protocol`` (if given) in 0..255. A defect raises a
    :class:`~fedselect.world.data.files.DataFileError` naming the file, line and column, or with
    ``drop_invalid`` the row is dropped; the counts per file are in
    ``result.attrs["dropped_rows"]`` (``{file: count}``, empty when none).

    Raises:
        DatasetNotFoundError: the path does not exist or the directory holds no CSV file.
        DataFileError: a defective file (missing columns, bad or missing values, malformed rows).
    """
    import pandas as pd

    p = Path(path).expanduser()
    if p.is_dir():
        files = sorted(p.glob("*.csv"))
        if not files:
            raise DatasetNotFoundError(f"no *.csv flow files in directory {str(p)!r}")
    elif p.is_file():
        files = [p]
    else:
        raise DatasetNotFoundError(
            f"flow CSV path {str(p)!r} does not exist; give a CSV file or a directory of CSV files "
            f"with columns {list(FLOW_COLUMNS)}"
        )
    frames, dropped = [], {}
    for f in files:
        table = read_csv_checked(
            f, FLOW_CSV_COLUMNS, header=True, drop_invalid=drop_invalid, what=f"flow-record CSV with columns {list(FLOW_COLUMNS)}"
        )
        fr = table.frame
        table.reject(
            (fr["end"] < fr["start"]).to_numpy(bool),
            "end",
            [f"flow ends before it starts (start {a:g} s, end {b:g} s)" for a, b in zip(fr["start"], fr["end"])],
        )
        dropped.update(table.report_dropped())
        frames.append(table.frame)
    df = pd.concat(frames, ignore_index=True)
    df.attrs["dropped_rows"] = dropped
    return df


# ---------------------------------------------------------------------------------------------
# Synthetic flows (clearly not real traffic)


@dataclass(frozen=True)
class DeviceType:
    """Behaviour of one synthetic IoT device type (per hour of a 3600 s window).

    Attributes:
        name: type name.
        flows_per_hour: mean number of data flows per active hour (Poisson).
        active_prob: probability that an hour has data flows at all (else only DNS/NTP).
        duration: mean data-flow duration, seconds (exponential).
        bytes_per_flow: median bytes per data flow (log-normal, sigma 0.8).
        packet_size: mean bytes per packet.
        servers: number of remote servers it talks to.
        ports: remote ports of its data flows.
        dns_period: seconds between DNS look-ups (jittered), ``0`` = never.
        dns_names: number of distinct names it looks up.
        ntp_period: seconds between NTP syncs (jittered), ``0`` = never.
    """

    name: str
    flows_per_hour: float
    active_prob: float
    duration: float
    bytes_per_flow: float
    packet_size: float
    servers: int
    ports: tuple[int, ...]
    dns_period: float
    dns_names: int
    ntp_period: float


#: Ten synthetic device types loosely modelled on the device classes of the UNSW smart-home
#: testbed (cameras, plugs, sensors, speakers, hubs ...). The numbers are invented.
SYNTHETIC_DEVICE_TYPES: tuple[DeviceType, ...] = (
    DeviceType("camera", 40, 0.95, 60.0, 2e6, 1100, 3, (443, 554), 600, 3, 3600),
    DeviceType("baby-monitor", 25, 0.8, 90.0, 8e5, 900, 2, (443, 8080), 900, 2, 3600),
    DeviceType("smart-plug", 6, 0.9, 2.0, 900, 120, 1, (443,), 1800, 1, 7200),
    DeviceType("smart-bulb", 4, 0.6, 3.0, 1500, 150, 1, (1883,), 1200, 1, 0),
    DeviceType("motion-sensor", 10, 0.5, 1.0, 400, 90, 1, (443,), 3600, 1, 14400),
    DeviceType("smart-speaker", 20, 0.7, 20.0, 1.5e5, 700, 6, (443, 80, 4070), 300, 8, 3600),
    DeviceType("hub", 30, 1.0, 5.0, 6000, 200, 4, (443, 8883, 5683), 450, 4, 1800),
    DeviceType("weather-station", 3, 1.0, 4.0, 3000, 300, 1, (80,), 3600, 1, 3600),
    DeviceType("smoke-alarm", 2, 0.4, 2.0, 1200, 180, 2, (443, 11095), 7200, 2, 7200),
    DeviceType("photo-frame", 8, 0.6, 40.0, 3e5, 1000, 2, (80, 443), 1200, 3, 0),
)

#: Nine more invented types, so that ``iot-synthetic`` can have the 19 device classes of the
#: budgeted-online authors' data (option ``device_types: 19``). Also synthetic.
EXTRA_DEVICE_TYPES: tuple[DeviceType, ...] = (
    DeviceType("doorbell", 12, 0.7, 30.0, 4e5, 950, 2, (443, 9543), 900, 2, 3600),
    DeviceType("thermostat", 5, 1.0, 3.0, 2500, 250, 2, (443, 9443), 1800, 2, 3600),
    DeviceType("smart-lock", 2, 0.5, 1.5, 700, 110, 1, (443, 8443), 3600, 1, 7200),
    DeviceType("smart-tv", 35, 0.5, 120.0, 5e6, 1300, 8, (443, 80, 1935), 240, 10, 3600),
    DeviceType("printer", 3, 0.3, 10.0, 6e4, 600, 1, (631, 443), 1800, 2, 0),
    DeviceType("smart-scale", 1, 0.2, 5.0, 2000, 200, 1, (443,), 7200, 1, 3600),
    DeviceType("sleep-sensor", 15, 0.6, 8.0, 1e4, 350, 1, (443, 8883), 2400, 1, 1800),
    DeviceType("light-switch", 5, 0.7, 1.0, 500, 100, 1, (1883, 443), 1200, 1, 14400),
    DeviceType("air-purifier", 4, 0.9, 6.0, 5000, 280, 2, (443, 5683), 2700, 2, 7200),
)

#: the most device types ``iot-synthetic`` can have (``device_types``)
MAX_DEVICE_TYPES = len(SYNTHETIC_DEVICE_TYPES) + len(EXTRA_DEVICE_TYPES)


def synthetic_iot_flows(
    rng: np.random.Generator,
    windows: int = 200,
    window: float = 3600.0,
    devices_per_type: int = 1,
    types: tuple[DeviceType, ...] = SYNTHETIC_DEVICE_TYPES,
    jitter: float = 0.15,
) -> pd.DataFrame:
    """A **synthetic** flow-record table (columns :data:`FLOW_COLUMNS`) for IoT devices.

    Each device is an instance of a :class:`DeviceType` whose rates are multiplied by a
    per-device factor in ``[1 - jitter, 1 + jitter]``. Per window: with probability
    ``active_prob`` a Poisson number of data flows at uniform times (exponential durations,
    log-normal sizes, packets = bytes / packet size, a random server from its own pool and a
    port from its list); DNS flows every ``dns_period`` (+-20% jitter) asking one of its names;
    NTP flows every ``ntp_period``. Devices are named ``"<type>-<k>"``.

    Args:
        rng: seeded generator (the only randomness).
        windows: number of ``window``-second periods simulated per device.
        window: period length in seconds (features use the same length by default).
        devices_per_type: instances of every type (distinct classes).
        types: the device types.
        jitter: per-device relative spread of the rates, in [0, 1).

    Returns:
        DataFrame, one row per flow, start times in seconds from 0, sorted by start.

    Raises:
        ValueError: non-positive windows/window/devices_per_type, jitter outside [0, 1).
    """
    import pandas as pd

    if windows < 1 or devices_per_type < 1 or not window > 0:
        raise ValueError(f"need windows >= 1, devices_per_type >= 1, window > 0; got {windows}, {devices_per_type}, {window}")
    if not 0 <= jitter < 1:
        raise ValueError(f"jitter must be in [0, 1), got {jitter}")
    horizon = windows * window
    hour = window / 3600.0
    frames = []
    for t_i, dt in enumerate(types):
        for k in range(devices_per_type):
            f = 1.0 + rng.uniform(-jitter, jitter, size=4)
            name = f"{dt.name}-{k}"
            servers = [f"10.{t_i}.{k}.{s + 1}" for s in range(dt.servers)]
            # data flows
            active = rng.random(windows) < dt.active_prob
            n = rng.poisson(dt.flows_per_hour * f[0] * hour, size=windows) * active
            w_idx = np.repeat(np.arange(windows), n)
            start = (w_idx + rng.random(w_idx.size)) * window
            dur = rng.exponential(dt.duration * f[1], size=w_idx.size)
            size = np.maximum(60.0, rng.lognormal(np.log(dt.bytes_per_flow * f[2]), 0.8, size=w_idx.size))
            frac_out = rng.uniform(0.2, 0.8, size=w_idx.size)
            pkts = np.maximum(1, np.round(size / (dt.packet_size * f[3]))).astype(np.int64)
            data = pd.DataFrame(
                {
                    "start": start,
                    "end": start + dur,
                    "bytes_in": np.round(size * (1 - frac_out)).astype(np.int64),
                    "bytes_out": np.round(size * frac_out).astype(np.int64),
                    "packets": pkts,
                    "dst_ip": np.asarray(servers)[rng.integers(0, len(servers), size=w_idx.size)],
                    "dst_port": np.asarray(dt.ports)[rng.integers(0, len(dt.ports), size=w_idx.size)],
                    "protocol": 6,
                    "dns_query": "",
                }
            )
            parts = [data]
            for period, port in ((dt.dns_period, DNS_PORT), (dt.ntp_period, NTP_PORT)):
                if period <= 0:
                    continue
                m = int(horizon / period) + 2
                gaps = period * rng.uniform(0.8, 1.2, size=m)
                t = rng.uniform(0, period) + np.concatenate([[0.0], np.cumsum(gaps[:-1])])
                t = t[t < horizon]
                q = np.asarray([f"svc{j}.{dt.name}.example" for j in range(dt.dns_names)]) if port == DNS_PORT else None
                parts.append(
                    pd.DataFrame(
                        {
                            "start": t,
                            "end": t + rng.uniform(0.01, 0.2, size=t.size),
                            "bytes_in": rng.integers(80, 300, size=t.size),
                            "bytes_out": rng.integers(60, 120, size=t.size),
                            "packets": 2,
                            "dst_ip": "10.255.0.53" if port == DNS_PORT else "10.255.0.123",
                            "dst_port": port,
                            "protocol": 17,
                            "dns_query": q[rng.integers(0, len(q), size=t.size)] if q is not None else "",
                        }
                    )
                )
            dev = pd.concat(parts, ignore_index=True)
            dev.insert(0, "device", name)
            frames.append(dev)
    out = pd.concat(frames, ignore_index=True)
    out = out.sort_values(["start", "device"], kind="stable").reset_index(drop=True)
    return out[list(FLOW_COLUMNS)]


# ---------------------------------------------------------------------------------------------
# Registered loaders


def _rng(seed: int, tag: str) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), zlib.crc32(tag.encode())]))


@register_dataset("iot-synthetic")
def load_iot_synthetic(
    seed: int = 0,
    windows: int = 200,
    window: float = 3600.0,
    devices_per_type: int = 1,
    min_records: int = 100,
    test_fraction: float = 0.2,
    jitter: float = 0.15,
    device_types: int = 10,
    **_: Any,
) -> tuple[ArrayDataset, ArrayDataset]:
    """Embedded default: **synthetic** IoT flows (:func:`synthetic_iot_flows`) -> 10 features
    per device per window -> min-max scaling -> 80/20 split. 10 classes (device types) with
    ``devices_per_type = 1``; 200 windows each -> about 2,000 records (fewer: windows without
    any flow give no record).

    ``device_types`` (1..19, default 10): how many device types, the first of
    :data:`SYNTHETIC_DEVICE_TYPES` then :data:`EXTRA_DEVICE_TYPES`; 19 gives the 19 classes of
    the budgeted-online authors' data (about 3,700 records). With the default 10 the data are
    exactly those of before the option existed.

    Raises:
        ValueError: ``device_types`` not an int in 1..19; bad options (see
        :func:`synthetic_iot_flows`, :func:`feature_table_to_datasets`).
    """
    if (
        isinstance(device_types, bool)
        or not isinstance(device_types, (int, np.integer))
        or not 1 <= device_types <= MAX_DEVICE_TYPES
    ):
        raise ValueError(f"iot-synthetic device_types must be an int in 1..{MAX_DEVICE_TYPES}, got {device_types!r}")
    types = (SYNTHETIC_DEVICE_TYPES + EXTRA_DEVICE_TYPES)[: int(device_types)]
    flows = synthetic_iot_flows(_rng(seed, "iot-synthetic-flows"), windows, window, devices_per_type, types, jitter)
    table = flow_features(flows, window)
    return feature_table_to_datasets(
        table,
        seed,
        min_records,
        test_fraction,
        name="iot-synthetic",
        info={"synthetic": True, "flows": len(flows), "window_s": window},
    )


@register_dataset("iot-flows")
def load_iot_flows(
    seed: int = 0,
    path: str | None = None,
    window: float = 3600.0,
    min_records: int = 100,
    test_fraction: float = 0.2,
    drop_invalid: bool = False,
    **_: Any,
) -> tuple[ArrayDataset, ArrayDataset]:
    """Flow-record CSV file(s) at ``path`` (columns :data:`FLOW_COLUMNS`) -> 10 features per
    device per ``window`` seconds -> min-max scaling -> 80/20 split; devices with fewer than
    ``min_records`` windows are dropped. Every row is checked (:func:`load_flow_csv`);
    ``drop_invalid: true`` drops defective rows (counted in ``info["dropped_rows"]``) instead
    of refusing the file.

    Raises:
        ValueError: no ``path`` option.
        DataFileError: a defective file (names the file, the line and the column).
        DatasetNotFoundError: nothing at ``path``.
    """
    if not path:
        raise ValueError("dataset 'iot-flows' needs the option path=<CSV file or directory of flow CSVs>")
    flows = load_flow_csv(path, flag_option("iot-flows", "drop_invalid", drop_invalid))
    dropped = dict(flows.attrs.get("dropped_rows") or {})
    table = flow_features(flows, window)
    return feature_table_to_datasets(
        table,
        seed,
        min_records,
        test_fraction,
        name="iot-flows",
        info={"path": str(path), "window_s": window, **({"dropped_rows": dropped} if dropped else {})},
    )


#: an ``iot-features`` row: the 10 features (by position) and the device label (last field)
FEATURE_CSV_COLUMNS: tuple[Col, ...] = (
    *(Col(name, "float", at=i) for i, name in enumerate(FEATURES)),
    Col("device", "str", at=-1, is_label=True),
)


@register_dataset("iot-features")
def load_iot_features(
    seed: int = 0,
    path: str | None = None,
    min_records: int = 100,
    test_fraction: float = 0.2,
    drop_invalid: bool = False,
    **_: Any,
) -> tuple[ArrayDataset, ArrayDataset]:
    """An already-computed feature CSV (the paper's Phase 2 output): a header line (names
    ignored), then rows whose first 10 fields are the features in :data:`FEATURES` order
    (finite numbers) and whose last field is the device label (non-empty). Then min-max
    scaling, dropping devices with < ``min_records`` rows, 80/20 split. A missing or
    non-finite feature, an empty label or a row with the wrong number of fields is refused
    naming the file, the line and the column (e.g. ``column 3 (volume)``), or dropped with
    ``drop_invalid: true`` (counted in ``info["dropped_rows"]``).

    Raises:
        ValueError: no ``path``.
        DataFileError: fewer than 11 columns, or a defective row.
        DatasetNotFoundError: no file at ``path``.
    """
    if not path:
        raise ValueError("dataset 'iot-features' needs the option path=<feature CSV file>")
    p = Path(path).expanduser()
    if not p.is_file():
        raise DatasetNotFoundError(f"feature CSV {str(p)!r} does not exist (10 feature columns, then the label)")
    t = read_csv_checked(
        p,
        FEATURE_CSV_COLUMNS,
        header=True,
        drop_invalid=flag_option("iot-features", "drop_invalid", drop_invalid),
        min_columns=11,
        what="feature CSV (header, then 10 features and the device label per row)",
    )
    dropped = t.report_dropped()
    table = t.frame[list(FEATURES)].astype(np.float64)
    table["device"] = t.frame["device"].astype(str).to_numpy()
    return feature_table_to_datasets(
        table,
        seed,
        min_records,
        test_fraction,
        name="iot-features",
        info={"path": str(p), **({"dropped_rows": dropped} if dropped else {})},
    )
