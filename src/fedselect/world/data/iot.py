"""IoT device classification from network flow records (budgeted online selection): the data sets.

The budgeted-online paper classifies IoT devices from 10 features per device per time window,
computed from flow records (its Phase 2, Table IV, after Sivanathan et al.), min-max scaled
(Phase 3), split 80/20 (Phase 4). The UNSW traces it uses cannot be obtained here, so:

* :func:`~fedselect.world.data.iot_flows.flow_features` computes the 10 features from any
  flow-record table (the table's columns and the features: :mod:`fedselect.world.data.iot_flows`);
* ``iot-flows`` loads flow-record CSV files from a user path, ``iot-features`` loads an
  already-computed feature CSV (10 feature columns then the label, the paper's Phase 2 output);
* ``iot-synthetic`` (the embedded default) uses
  :func:`~fedselect.world.data.iot_synthetic.synthetic_iot_flows`, a generator of **synthetic**
  flows with per-device-type behaviour. It is not real traffic.

This module holds the registered loaders of the three data sets and their common last step,
:func:`feature_table_to_datasets` (Phases 3-4).
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # imported where used: pandas is slow to import
    import pandas as pd

from fedselect.world.data.checked_csv import Col, read_csv_checked
from fedselect.world.data.datasets import ArrayDataset, DatasetNotFoundError, register_dataset
from fedselect.world.data.file_errors import flag_option
from fedselect.world.data.iot_flows import FEATURES, flow_features, load_flow_csv
from fedselect.world.data.iot_synthetic import EXTRA_DEVICE_TYPES, MAX_DEVICE_TYPES, SYNTHETIC_DEVICE_TYPES, synthetic_iot_flows

__all__ = ["FEATURE_CSV_COLUMNS", "feature_table_to_datasets", "load_iot_features", "load_iot_flows", "load_iot_synthetic"]


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
    in sorted order; the 10 :data:`~fedselect.world.data.iot_flows.FEATURES` are min-max scaled to [0, 1] with scikit-learn's
    ``MinMaxScaler`` fitted on all rows, before the split, as the paper does (Phase 3 then 4);
    a constant feature scales to 0. The split is stratified by label, ``test_fraction`` to the
    test set (the server's), seeded by ``seed``.

    Args:
        table: DataFrame with the :data:`~fedselect.world.data.iot_flows.FEATURES` columns and ``label_column``.
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
    """Embedded default: **synthetic** IoT flows
    (:func:`~fedselect.world.data.iot_synthetic.synthetic_iot_flows`) -> 10 features per device
    per window -> min-max scaling -> 80/20 split. 10 classes (device types) with
    ``devices_per_type = 1``; 200 windows each -> about 2,000 records (fewer: windows without
    any flow give no record).

    ``device_types`` (1..19, default 10): how many device types, the first of
    :data:`~fedselect.world.data.iot_synthetic.SYNTHETIC_DEVICE_TYPES` then
    :data:`~fedselect.world.data.iot_synthetic.EXTRA_DEVICE_TYPES`; 19 gives the 19 classes of
    the budgeted-online authors' data (about 3,700 records). With the default 10 the data are
    exactly those of before the option existed.

    Raises:
        ValueError: ``device_types`` not an int in 1..19; bad options (see
        :func:`~fedselect.world.data.iot_synthetic.synthetic_iot_flows`, :func:`feature_table_to_datasets`).
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
    """Flow-record CSV file(s) at ``path`` (columns :data:`~fedselect.world.data.iot_flows.FLOW_COLUMNS`) -> 10 features per
    device per ``window`` seconds -> min-max scaling -> 80/20 split; devices with fewer than
    ``min_records`` windows are dropped. Every row is checked (:func:`~fedselect.world.data.iot_flows.load_flow_csv`);
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
    ignored), then rows whose first 10 fields are the features in :data:`~fedselect.world.data.iot_flows.FEATURES` order
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
