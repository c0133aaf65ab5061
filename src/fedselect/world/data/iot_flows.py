"""Flow records and the 10 features per IoT device per time window (budgeted-online paper, Phase 2, Table IV).

The budgeted-online paper classifies IoT devices from 10 features per device per time window,
computed from flow records (after Sivanathan et al.). This module reads flow-record CSV files
(:func:`load_flow_csv`, every row checked) and computes the features (:func:`flow_features`);
the data sets built on them are in :mod:`fedselect.world.data.iot`.

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

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where used: pandas is slow to import
    import pandas as pd

from fedselect.world.data.checked_csv import Col, read_csv_checked
from fedselect.world.data.datasets import DatasetNotFoundError

__all__ = ["DNS_PORT", "FEATURES", "FLOW_COLUMNS", "FLOW_CSV_COLUMNS", "NTP_PORT", "flow_features", "load_flow_csv"]

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
    :class:`~fedselect.world.data.file_errors.DataFileError` naming the file, line and column, or with
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
